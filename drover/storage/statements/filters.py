"""Candidate filters (:mod:`drover.model.filters`) compiled to SQL on the ``entities`` row.

The fetch puts them in its ``WHERE`` clause, before the ``LIMIT``. Time
conditions compare with the ``:now`` parameter the fetch binds.

A statement is compiled from the filters' *shape* only: every value a filter
compares with (``Field.value``, ``ChildCount.value``, ``StatusAge.seconds``)
is a bind parameter, ``:fv0``, ``:fv1``… in the order :func:`filter_shape`
and :func:`compile_filters` both walk the filters. :func:`filter_shape` gives
the key the fetch caches its statement under and the values to bind, so a
handler whose values change every tick reuses one statement instead of
compiling (and keeping) one per value.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from itertools import count
from typing import Any

import sqlalchemy as sa

from drover.model.filters import (
    AllOf,
    AnyOf,
    CandidateFilter,
    ChildCount,
    Children,
    DependenciesFailed,
    DependenciesSucceeded,
    Dependents,
    Field,
    LatestChild,
    Not,
    Parent,
    PoolHasRoom,
    StatusAge,
    TimedOut,
    slot_keys,
)
from drover.model.pools import PoolHolders
from drover.storage.schema import entities, relations
from drover.storage.statements.children import (
    K,
    kernel_exists,
    kernel_status_in,
    latest_of_slot,
    match_condition,
)
from drover.storage.statements.pools import capacity_of, count_holders, units

__all__ = ["compile_filters", "filter_shape"]

e = entities
_T = entities.alias("t")
_P = entities.alias("p")
_D = entities.alias("d")
#: The holders of a pool a :class:`PoolHasRoom` filter counts.
_HOLDER = entities.alias("holder")
_COMPARE: dict[str, Callable[[Any, Any], sa.ColumnElement[bool]]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}
_NO_VALUE = frozenset({"exists", "missing", "not_number"})


_NO_POOLS: Mapping[str, PoolHolders] = {}


def filter_shape(
    filters: Sequence[CandidateFilter], pools: Mapping[str, PoolHolders] = _NO_POOLS
) -> tuple[Hashable, dict[str, Any]]:
    """The filters' shape (what their statement is cached under) and their values to bind.

    ``pools`` are the registered pools (:attr:`Kinds.pools`) a :class:`PoolHasRoom` reads.
    """
    values: list[Any] = []
    shape = tuple(_shape(f, values, pools) for f in filters)
    return shape, {f"fv{i}": value for i, value in enumerate(values)}


def _room_pools(f: PoolHasRoom, pools: Mapping[str, PoolHolders]) -> list[PoolHolders]:
    """The pools a :class:`PoolHasRoom` checks, in name order (unknown names: none).

    Never a pool family's (``gpu-node-*``): which member a row would take is in its
    claims, which the filter does not read (registration refuses naming one)."""
    return [
        pools[n] for n in sorted(pools) if not n.endswith("*") and (f.pools is None or n in f.pools)
    ]


def _shape(f: CandidateFilter, values: list[Any], pools: Mapping[str, PoolHolders]) -> Hashable:
    # Must visit the values in the order _compile binds them.
    if isinstance(f, AnyOf | AllOf):
        return (type(f).__name__, tuple(_shape(inner, values, pools) for inner in f.filters))
    if isinstance(f, Not):
        return ("Not", _shape(f.filter, values, pools))
    if isinstance(f, PoolHasRoom):
        checked = _room_pools(f, pools)
        # Capacities are bound: a capacity changed at run time reuses the statement.
        values.extend(pool.capacity for pool in checked)
        return ("PoolHasRoom", tuple((p.name, p.holders, p.claimed_by) for p in checked))
    if isinstance(f, Field):
        if f.op not in _NO_VALUE:
            values.append(json.dumps(list(f.value) if f.op == "in" else f.value))
        return ("Field", f.source, f.path, f.op)
    if isinstance(f, ChildCount):
        if f.value is not None:
            values.append(int(f.value))
        return ("ChildCount", f.op, f.statuses, f.spec_key)
    if isinstance(f, StatusAge):
        if f.seconds is not None:
            values.append(float(f.seconds))
        return ("StatusAge", f.seconds is None, f.spec_key, f.data_key)
    if isinstance(f, TimedOut):
        if f.seconds is not None:
            values.append(float(f.seconds))
        return ("TimedOut", f.statuses, f.handler, f.seconds is None)
    return f


def compile_filters(
    filters: Sequence[CandidateFilter],
    postgres: bool,
    pools: Mapping[str, PoolHolders] = _NO_POOLS,
) -> list[sa.ColumnElement[bool]]:
    """One SQL condition per filter, its values bound as ``:fv0``, ``:fv1``…"""
    slots = count()
    return [_compile(f, postgres, slots, pools) for f in filters]


def _slot(slots: Iterator[int], type_: Any) -> sa.BindParameter[Any]:
    return sa.bindparam(f"fv{next(slots)}", type_=type_)


def _compile(
    f: CandidateFilter, postgres: bool, slots: Iterator[int], pools: Mapping[str, PoolHolders]
) -> sa.ColumnElement[bool]:
    if isinstance(f, AnyOf):
        return sa.or_(*(_compile(inner, postgres, slots, pools) for inner in f.filters))
    if isinstance(f, AllOf):
        return sa.and_(*(_compile(inner, postgres, slots, pools) for inner in f.filters))
    if isinstance(f, Not):
        # SQL leaves some conditions unknown (a missing field compared): unknown is "not held".
        inner = _compile(f.filter, postgres, slots, pools)
        return sa.not_(sa.func.coalesce(inner, sa.false()))
    if isinstance(f, PoolHasRoom):
        return _pool_has_room(_room_pools(f, pools), postgres, slots)
    if isinstance(f, Children):
        return match_condition(f.match, f.statuses)
    if isinstance(f, LatestChild):
        return _latest_child(f)
    if isinstance(f, Field):
        return _field(f, postgres, slots)
    if isinstance(f, ChildCount):
        return _child_count(f, postgres, slots)
    if isinstance(f, DependenciesSucceeded):
        r = relations
        succeeded = sa.exists().where(_T.c.id == r.c.target_id, _T.c.result == "SUCCESS")
        pending = sa.exists().where(r.c.source_id == e.c.id, r.c.name == f.relation, ~succeeded)
        return ~pending
    if isinstance(f, DependenciesFailed):
        r = relations
        # A result is set when an entity ends: NULL (still live) is not a failure.
        failed = sa.exists().where(_T.c.id == r.c.target_id, _T.c.result != "SUCCESS")
        return sa.exists().where(r.c.source_id == e.c.id, r.c.name == f.relation, failed)
    if isinstance(f, Dependents):
        # The reverse relation, served by the relations' (target_id, name) index.
        r = relations
        dependent = sa.exists().where(r.c.target_id == e.c.id, r.c.name == f.relation)
        if f.statuses is None:
            return dependent
        return dependent.where(
            _D.c.id == r.c.source_id, _D.c.status.in_(sorted(str(s) for s in f.statuses))
        )
    if isinstance(f, Parent):
        return sa.exists().where(
            _P.c.id == e.c.parent_id, _P.c.status.in_(sorted(str(s) for s in f.statuses))
        )
    if isinstance(f, StatusAge):
        now = sa.bindparam("now", type_=sa.Double)
        if f.seconds is not None:
            # Inclusive: an entity exactly n seconds in its status has waited n seconds.
            return e.c.status_changed_at + _slot(slots, sa.Double) <= now
        column, key = (e.c.spec, f.spec_key) if f.spec_key is not None else (e.c.data, f.data_key)
        assert key is not None
        is_number, number = _number(column, key, postgres)
        return sa.and_(is_number, e.c.status_changed_at + number <= now)
    if isinstance(f, TimedOut):
        return _timed_out(f, postgres, slots)
    raise TypeError(f"not a candidate filter: {f!r}")


def _timed_out(f: TimedOut, postgres: bool, slots: Iterator[int]) -> sa.ColumnElement[bool]:
    """Outside the statuses, or past the entity's own timeout, else the handler's."""
    now = sa.bindparam("now", type_=sa.Double)
    is_number, own = _number_at(e.c.spec, ("options", f.handler, "timeout"), postgres)
    past: list[sa.ColumnElement[bool]] = [sa.and_(is_number, e.c.status_changed_at + own < now)]
    if f.seconds is not None:
        default = _slot(slots, sa.Double)
        past.append(
            sa.and_(
                sa.not_(sa.func.coalesce(is_number, sa.false())),
                e.c.status_changed_at + default < now,
            )
        )
    return sa.or_(e.c.status.not_in(sorted(f.statuses)), *past)


def _number(
    column: sa.Column[Any], key: str, postgres: bool
) -> tuple[sa.ColumnElement[bool], sa.ColumnElement[Any]]:
    """Whether ``column[key]`` is a JSON number, and that number."""
    return _number_at(column, (key,), postgres)


def _number_at(
    column: sa.Column[Any], keys: Sequence[str], postgres: bool
) -> tuple[sa.ColumnElement[bool], sa.ColumnElement[Any]]:
    """Whether the JSON value at ``keys`` in ``column`` is a number, and that number."""
    if postgres:
        parent: sa.ColumnElement[Any] = column
        for key in keys[:-1]:
            parent = parent.op("->")(sa.literal(key))
        value = parent.op("->")(sa.literal(keys[-1]))
        number = sa.cast(parent.op("->>")(sa.literal(keys[-1])), sa.Double)
        return sa.func.jsonb_typeof(value) == "number", number
    path = _sqlite_path(keys)
    return (
        sa.func.json_type(column, path).in_(["integer", "real"]),
        sa.func.json_extract(column, path),
    )


def _child_count(f: ChildCount, postgres: bool, slots: Iterator[int]) -> sa.ColumnElement[bool]:
    counted = sa.select(sa.func.count()).where(K.c.parent_id == e.c.id)
    if f.statuses is not None:
        counted = counted.where(kernel_status_in(f.statuses))
    compare = _COMPARE[f.op]
    if f.value is not None:
        result: sa.ColumnElement[bool] = compare(
            counted.scalar_subquery(), _slot(slots, sa.Integer)
        )
        return result
    assert f.spec_key is not None
    is_number, number = _number(e.c.spec, f.spec_key, postgres)
    return sa.and_(is_number, compare(counted.scalar_subquery(), number))


def _latest_child(f: LatestChild) -> sa.ColumnElement[bool]:
    """Some child in the statuses that no later sibling (of its slot) supersedes."""
    return kernel_exists(kernel_status_in(f.statuses), latest_of_slot(slot_keys(f.slot_key)))


def _pool_has_room(
    checked: Sequence[PoolHolders], postgres: bool, slots: Iterator[int]
) -> sa.ColumnElement[bool]:
    """Each pool the row's kind holds has room for what the row would take."""
    conditions: list[sa.ColumnElement[bool]] = []
    for pool in checked:
        capacity = capacity_of(pool, _slot(slots, sa.Integer))
        held = count_holders(pool, postgres, _HOLDER).scalar_subquery()
        need = units(pool, postgres)
        declares = e.c.kind.in_(sorted({kind for kind, _ in pool.holders}))
        conditions.append(sa.or_(~declares, need == 0, held + need <= capacity))
    return sa.and_(sa.true(), *conditions)


def _sqlite_path(path: Sequence[str]) -> str:
    return "$" + "".join("." + json.dumps(key) for key in path)


def _sqlite_type(json_type: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """SQLite's ``json_type`` named as PostgreSQL's ``jsonb_typeof`` names it.

    SQLite reads JSON true as 1: the type keeps a boolean from equalling a number.
    """
    return sa.case(
        (json_type.in_(["true", "false"]), "boolean"),
        (json_type.in_(["integer", "real"]), "number"),
        (json_type == "text", "string"),
        else_=json_type,
    )


def _field(f: Field, postgres: bool, slots: Iterator[int]) -> sa.ColumnElement[bool]:
    """A JSON field compared as JSON, alike on both databases: equality is JSON's (true is
    not 1), an ordering compares only a field of the value's type, and a field holding
    null exists."""
    column = e.c.spec if f.source == "spec" else e.c.data
    if postgres:
        return _field_postgres(f, column, slots)
    path = _sqlite_path(f.path)
    extracted = sa.func.json_extract(column, path)
    kind = sa.func.json_type(column, path)  # NULL: no such field; 'null': a JSON null
    if f.op == "exists":
        return kind.is_not(None)
    if f.op == "missing":
        return kind.is_(None)
    if f.op == "not_number":
        return sa.and_(kind.is_not(None), kind.not_in(["integer", "real"]))
    # The value is bound as JSON text: both databases read it as they read the field.
    text = _slot(slots, sa.String)
    field_type = _sqlite_type(kind)
    if f.op == "in":
        each = sa.func.json_each(text).table_valued("value", "type")
        return sa.exists(
            sa.select(sa.literal(1))
            .select_from(each)
            .where(
                _sqlite_type(each.c.type) == field_type,
                sa.or_(field_type == "null", each.c.value == extracted),
            )
        )
    value_type = _sqlite_type(sa.func.json_type(text, "$"))
    value = sa.func.json_extract(text, "$")
    if f.op in ("eq", "ne"):
        equal = sa.and_(field_type == value_type, sa.or_(field_type == "null", extracted == value))
        return equal if f.op == "eq" else sa.or_(kind.is_(None), sa.not_(equal))
    return sa.and_(field_type == value_type, _COMPARE[f.op](extracted, value))


def _field_postgres(
    f: Field, column: sa.Column[Any], slots: Iterator[int]
) -> sa.ColumnElement[bool]:
    extracted = column.op("#>")(sa.literal(list(f.path), sa.ARRAY(sa.Text)))
    if f.op == "exists":
        return extracted.is_not(None)
    if f.op == "missing":
        return extracted.is_(None)
    if f.op == "not_number":
        return sa.func.jsonb_typeof(extracted) != "number"
    from sqlalchemy.dialects.postgresql import JSONB

    value = sa.cast(_slot(slots, sa.String), JSONB)
    if f.op == "in":
        members = sa.func.jsonb_array_elements(value)
        return extracted.in_(sa.select(members.column_valued()))
    compared: sa.ColumnElement[bool] = _COMPARE[f.op](extracted, value)
    if f.op == "ne":
        return sa.or_(extracted.is_(None), compared)
    if f.op != "eq":
        # jsonb orders values of different types (a string is "less" than any number).
        same_type = sa.func.jsonb_typeof(extracted) == sa.func.jsonb_typeof(value)
        return sa.and_(same_type, compared)
    return compared
