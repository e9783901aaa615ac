"""drover's pytest plugin (entry point ``pytest11``): the ``drover_harness`` fixture.

By default the harness loads the built-in handlers and every installed plugin
(entry-point group ``drover``), on a temporary SQLite database. Choose
otherwise with the ``drover`` marker::

    @pytest.mark.drover(plugins=[my_plugin], builtins=False, entrypoints=False,
                        handler_options={"my-handler": {"timeout": 5}})
    async def test_it(drover_harness):
        sid = await drover_harness.create_session(kernels=[{"cpu": 1}])
        await drover_harness.tick("my-handler")
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from drover.testing.harness import CoordinatorHarness

__all__ = ["drover_harness"]

_MARKER_KEYS = {
    "plugins",
    "builtins",
    "entrypoints",
    "handler_options",
    "handler_settings",
    "backend",
}


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``drover`` marker."""
    config.addinivalue_line(
        "markers",
        "drover(plugins=[], builtins=True, entrypoints=True, handler_options={}, "
        "handler_settings={}, backend=None): "
        "configure the drover_harness fixture",
    )


@pytest.fixture
async def drover_harness(request: pytest.FixtureRequest) -> AsyncIterator[CoordinatorHarness]:
    """A :class:`CoordinatorHarness` on a temporary SQLite database."""
    marker = request.node.get_closest_marker("drover")
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    unknown = set(options) - _MARKER_KEYS
    if unknown:
        raise pytest.UsageError(
            f"@pytest.mark.drover got unknown option(s) {sorted(unknown)}; "
            f"known: {sorted(_MARKER_KEYS)}"
        )
    async with CoordinatorHarness(
        plugins=list(options.get("plugins", ())),
        include_builtin_handlers=options.get("builtins", True),
        handler_options=options.get("handler_options"),
        handler_settings=options.get("handler_settings"),
        backend=options.get("backend"),
        load_entrypoints=options.get("entrypoints", True),
    ) as harness:
        yield harness
