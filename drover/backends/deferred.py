"""A backend built when it is first used, for apps that load handlers only to read them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from drover.backends.base import AgentBackend

__all__ = ["built_on_first_use"]


class _Deferred:
    """Stands for the backend ``build`` makes, and makes it when an attribute is read.

    ``drover why`` loads every handler to say what acts next: the built-in ones
    keep the backend they are given and call it only in ``execute``, which a
    read never runs. Building the configured backend there (the local one
    imports its process and retry machinery) would cost a read a fifth of its
    time for nothing.
    """

    def __init__(self, build: Callable[[], AgentBackend]) -> None:
        self._build = build

    def __getattr__(self, name: str) -> Any:
        # Dunder lookups (copy, pickle) find nothing here rather than build the backend,
        # and never recurse through a half-made stand-in (one copy.copy made).
        if name.startswith("__"):
            raise AttributeError(name)
        build = object.__getattribute__(self, "_build")
        return getattr(build(), name)


def built_on_first_use(build: Callable[[], AgentBackend]) -> AgentBackend:
    """What ``build()`` returns, built the first time one of its attributes is read.

    ``build`` must return the same backend every time (the app's ``backend``
    property does). An ``isinstance`` check sees the stand-in, not the backend.
    """
    return cast("AgentBackend", _Deferred(build))
