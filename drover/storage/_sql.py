"""Passing many ids to one statement, and building hot statements once.

A list of ids travels as ONE bind parameter: a JSON array read with
``json_each`` on SQLite, an array compared with ``= ANY`` on PostgreSQL
(the condition is :func:`drover.storage.statements.ids.ids_param`; the
value to bind is :func:`ids_value`). One parameter instead of hundreds keeps
SQLAlchemy's per-execution work (expanding and processing every element) off
the hot path, needs no chunking under the databases' parameter limits, and
turns a thousand ids into one statement.

Statements on the hot path are built once per shape and reused: SQLAlchemy
memoizes a statement object's cache key, so a reused object skips the
traversal a freshly built one costs on every execution. Keys that a plugin's
values shape (a handler's candidate filters) go through
:func:`bounded_statement`, which keeps only the most recently used ones: a
daemon's cache never grows for its whole life.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, TypeVar

__all__ = [
    "BOUNDED_STATEMENTS",
    "CHUNK",
    "bounded_statement",
    "cached_statements",
    "chunked",
    "ids_value",
    "statement",
]

T = TypeVar("T")

#: Ids per IN list where a statement still takes lists: far below bind limits.
CHUNK = 500

#: Statements kept by :func:`bounded_statement` (the least recently used goes first).
BOUNDED_STATEMENTS = 256

_STATEMENTS: dict[Hashable, Any] = {}
_BOUNDED: OrderedDict[Hashable, Any] = OrderedDict()


def ids_value(ids: Sequence[str], postgres: bool) -> Any:
    """The value to bind to an :func:`~drover.storage.statements.ids.ids_param` parameter."""
    return list(ids) if postgres else json.dumps(list(ids))


def statement(key: Hashable, build: Callable[[], T]) -> T:
    """The statement built by ``build`` for ``key``, built once per process."""
    found = _STATEMENTS.get(key)
    if found is None:
        found = _STATEMENTS[key] = build()
    return found


def bounded_statement(key: Hashable, build: Callable[[], T]) -> T:
    """Like :func:`statement`, keeping only the :data:`BOUNDED_STATEMENTS` most recently used."""
    found = _BOUNDED.get(key)
    if found is None:
        found = _BOUNDED[key] = build()
        while len(_BOUNDED) > BOUNDED_STATEMENTS:
            _BOUNDED.popitem(last=False)
    else:
        _BOUNDED.move_to_end(key)
    return found


def cached_statements() -> int:
    """How many statements this process keeps built."""
    return len(_STATEMENTS) + len(_BOUNDED)


def chunked(items: Sequence[T], size: int = CHUNK) -> Iterator[list[T]]:
    """Yield ``items`` in lists of at most ``size``."""
    for start in range(0, len(items), size):
        yield list(items[start : start + size])
