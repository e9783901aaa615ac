"""Candidate filters (:mod:`drover.model.filters`) compiled to SQL on the ``entities`` row.

The fetch puts them in its ``WHERE`` clause, before the ``LIMIT``. Time
conditions compare with the ``:now`` parameter the fetch binds.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from drover.model.filters import (
    AnyOf,
    CandidateFilter,
    ChildCount,
    Children,
    DependenciesSucceeded,
    Field,
    StatusAge,
)
from drover.storage.schema import entities, relations
from drover.storage.statements.children import K, kernel_status_in, match_condition

__all__ = ["compile_filters"]

e = entities
_T = entities.alias("t")
_COMPARE: dict[str, Callable[[Any, Any], sa.ColumnElement[bool]]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}


def compile_filters(
    filters: Sequence[CandidateFilter], postgres: bool
) -> list[sa.ColumnElement[bool]]:
    """One SQL condition per filter."""
    return [_compile(f, postgres) for f in filters]


def _compile(f: CandidateFilter, postgres: bool) -> sa.ColumnElement[bool]:
    if isinstance(f, AnyOf):
        return sa.or_(*(_compile(inner, postgres) for inner in f.filters))
    if isinstance(f, Children):
        return match_condition(f.match, f.statuses)
    if isinstance(f, Field):
        return _field(f, postgres)
    if isinstance(f, ChildCount):
        count = sa.select(sa.func.count()).where(K.c.parent_id == e.c.id)
        if f.statuses is not None:
            count = count.where(kernel_status_in(f.statuses))
        compare = _COMPARE[f.op]
        result: sa.ColumnElement[bool] = compare(count.scalar_subquery(), f.value)
        return result
    if isinstance(f, DependenciesSucceeded):
        r = relations
        succeeded = sa.exists().where(_T.c.id == r.c.target_id, _T.c.result == "SUCCESS")
        pending = sa.exists().where(r.c.source_id == e.c.id, r.c.name == f.relation, ~succeeded)
        return ~pending
    if isinstance(f, StatusAge):
        now = sa.bindparam("now", type_=sa.Double)
        if f.seconds is not None:
            return e.c.status_changed_at + float(f.seconds) < now
        assert f.spec_key is not None
        if postgres:
            value = e.c.spec.op("->")(sa.literal(f.spec_key))
            number = sa.cast(e.c.spec.op("->>")(sa.literal(f.spec_key)), sa.Double)
            return sa.and_(
                sa.func.jsonb_typeof(value) == "number", e.c.status_changed_at + number < now
            )
        path = _sqlite_path((f.spec_key,))
        extracted = sa.func.json_extract(e.c.spec, path)
        return sa.and_(
            sa.func.json_type(e.c.spec, path).in_(["integer", "real"]),
            e.c.status_changed_at + extracted < now,
        )
    raise TypeError(f"not a candidate filter: {f!r}")


def _sqlite_path(path: Sequence[str]) -> str:
    return "$" + "".join("." + json.dumps(key) for key in path)


def _field(f: Field, postgres: bool) -> sa.ColumnElement[bool]:
    column = e.c.spec if f.source == "spec" else e.c.data
    extracted: sa.ColumnElement[Any]
    if postgres:
        extracted = column.op("#>")(sa.literal(list(f.path), postgresql.ARRAY(sa.Text)))
        value: Any = sa.cast(sa.literal(json.dumps(f.value)), postgresql.JSONB)
    else:
        extracted = sa.func.json_extract(column, _sqlite_path(f.path))
        value = sa.literal(f.value)
    if f.op == "exists":
        return extracted.is_not(None)
    if f.op == "missing":
        return extracted.is_(None)
    if f.op == "not_number":
        if postgres:
            return sa.func.jsonb_typeof(extracted) != "number"
        kind = sa.func.json_type(column, _sqlite_path(f.path))
        return sa.and_(kind.is_not(None), kind.not_in(["integer", "real"]))
    compared: sa.ColumnElement[bool] = _COMPARE[f.op](extracted, value)
    if f.op == "ne":
        return sa.or_(extracted.is_(None), compared)
    return compared
