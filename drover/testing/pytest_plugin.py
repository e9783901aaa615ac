"""drover's pytest plugin (entry point ``pytest11``): the ``drover_harness`` and
``drover_database`` fixtures.

By default the harness loads the built-in handlers and every installed plugin
(entry-point group ``drover``), on a temporary SQLite database. Choose
otherwise with the ``drover`` marker::

    @pytest.mark.drover(plugins=[my_plugin], builtins=False, entrypoints=False,
                        handler_options={"my-handler": {"timeout": 5}})
    async def test_it(drover_harness):
        sid = await drover_harness.create_session(kernels=[{"cpu": 1}])
        await drover_harness.tick("my-handler")

``drover_database`` runs a test on SQLite and on PostgreSQL (a fresh
:class:`~drover.testing.TestDatabase` each); a test that asks for both fixtures
gets a harness on that database::

    async def test_both(drover_harness, drover_database):
        sid = await drover_harness.create_session(kernels=[{"cpu": 1}])  # on this database
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from drover.testing.databases import TestDatabase, database_kinds, fresh_database
from drover.testing.harness import CoordinatorHarness

__all__ = ["drover_database", "drover_harness"]

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


@pytest.fixture(params=database_kinds())
async def drover_database(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[TestDatabase]:
    """A fresh, empty database, once on SQLite and once on PostgreSQL (``DROVER_TEST_PG_URL``;
    a server that cannot be reached fails the test; ``DROVER_TEST_SKIP_PG=1`` deselects it).
    """
    async with fresh_database(request.param, tmp_path) as database:
        yield database


@pytest.fixture
def _drover_harness_database(request: pytest.FixtureRequest) -> TestDatabase | None:
    # Synchronous, so that it may set ``drover_database`` up (an async fixture cannot be
    # started from inside another one's running event loop).
    if "drover_database" not in request.fixturenames:
        return None
    database: TestDatabase = request.getfixturevalue("drover_database")
    return database


@pytest.fixture
async def drover_harness(
    request: pytest.FixtureRequest, _drover_harness_database: TestDatabase | None
) -> AsyncIterator[CoordinatorHarness]:
    """A :class:`CoordinatorHarness` on a temporary SQLite database, or on
    ``drover_database`` when the test asks for that fixture too."""
    database = _drover_harness_database
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
        database_url=database.url if database else None,
        database_schema=database.schema if database else None,
    ) as harness:
        yield harness
