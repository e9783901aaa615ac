"""Passing many ids to one statement, and building hot statements once.

A list of ids travels as ONE bind parameter: a JSON array read with
``json_each`` on SQLite, an array compared with ``= ANY`` on PostgreSQL. One
parameter instead of hundreds keeps SQLAlchemy's per-execution work (expanding
and processing every element) off the hot path, needs no chunking under the
databases' parameter limits, and turns a thousand ids into one statement.

Statements on the hot path are built once per shape and reused: SQLAlchemy
memoizes a statement object's cache key, so a reused object skips the
traversal a freshly built one costs on every execution.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

__all__ = ["CHUNK", "chunked", "ids_in", "ids_param", "ids_value", "statement"]

T = TypeVar("T")

#: Ids per IN list where a statement still takes lists: far below bind limits.
CHUNK = 500

_IDS = postgresql.ARRAY(sa.String())
_STATEMENTS: dict[Hashable, Any] = {}


def ids_param(column: sa.ColumnElement[Any], name: str, postgres: bool) -> sa.ColumnElement[bool]:
    """``column IN (:name)`` where ``:name`` is bound to :func:`ids_value` of the ids."""
    if postgres:
        return column == sa.any_(sa.bindparam(name, type_=_IDS))
    values = sa.func.json_each(sa.bindparam(name, type_=sa.Text)).table_valued("value")
    return column.in_(sa.select(values.c.value))


def ids_value(ids: Sequence[str], postgres: bool) -> Any:
    """The value to bind to an :func:`ids_param` parameter."""
    return list(ids) if postgres else json.dumps(list(ids))


def ids_in(
    column: sa.ColumnElement[Any], ids: Sequence[str], postgres: bool
) -> sa.ColumnElement[bool]:
    """``column IN (ids)`` with the ids bound as one parameter (for statements built per call)."""
    if postgres:
        return column == sa.any_(sa.literal(list(ids), _IDS))
    values = sa.func.json_each(sa.literal(json.dumps(list(ids)), sa.Text)).table_valued("value")
    return column.in_(sa.select(values.c.value))


def statement(key: Hashable, build: Callable[[], T]) -> T:
    """The statement built by ``build`` for ``key``, built once per process."""
    found = _STATEMENTS.get(key)
    if found is None:
        found = _STATEMENTS[key] = build()
    return found


def chunked(items: Sequence[T], size: int = CHUNK) -> Iterator[list[T]]:
    """Yield ``items`` in lists of at most ``size``."""
    for start in range(0, len(items), size):
        yield list(items[start : start + size])
