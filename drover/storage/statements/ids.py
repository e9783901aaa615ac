"""A list of ids as ONE bind parameter: the SQL side (the value to bind is
:func:`drover.storage._sql.ids_value`).

On SQLite the parameter is a JSON array read with ``json_each``; on
PostgreSQL an array compared with ``= ANY``. One parameter instead of
hundreds keeps SQLAlchemy's per-execution work (expanding and processing
every element) off the hot path, needs no chunking under the databases'
parameter limits, and turns a thousand ids into one statement.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

__all__ = ["IDS_TYPE", "checked_only", "ids_in", "ids_param"]

#: The PostgreSQL type of an id list.
IDS_TYPE = sa.ARRAY(sa.String())


def ids_param(column: sa.ColumnElement[Any], name: str, postgres: bool) -> sa.ColumnElement[bool]:
    """``column IN (:name)`` where ``:name`` is bound to
    :func:`~drover.storage._sql.ids_value` of the ids."""
    if postgres:
        return column == sa.any_(sa.bindparam(name, type_=IDS_TYPE))
    values = sa.func.json_each(sa.bindparam(name, type_=sa.Text)).table_valued("value")
    return column.in_(sa.select(values.c.value))


def checked_only(column: sa.ColumnElement[Any], postgres: bool = False) -> sa.ColumnElement[Any]:
    """``column`` for a condition checked on rows found otherwise, never used to find them.

    Beside ``id IN (:ids)``, SQLite's planner (which keeps no statistics) would
    rather scan the ``(kind, status)`` index for ``status = :from_status``: a
    compare-and-set of 1,000 sessions then reads every session in that status,
    100,000 behind a backlog. An expression (``status || ''``) is served by no
    index, so the rows are found by primary key (or, in a correlated subquery,
    by the parent index). With ``postgres``, which plans by its statistics,
    the column itself; a statement shared by both databases takes the
    expression on both, which PostgreSQL applies as the same filter.
    """
    return column if postgres else column.concat("")


def ids_in(
    column: sa.ColumnElement[Any], ids: Sequence[str], postgres: bool
) -> sa.ColumnElement[bool]:
    """``column IN (ids)`` with the ids bound as one parameter (for statements built per call)."""
    if postgres:
        return column == sa.any_(sa.literal(list(ids), IDS_TYPE))
    values = sa.func.json_each(sa.literal(json.dumps(list(ids)), sa.Text)).table_valued("value")
    return column.in_(sa.select(values.c.value))
