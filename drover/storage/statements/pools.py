"""How full a pool is, in SQL: the apply's admission (:mod:`drover.storage.pools`), the
fetch's :class:`~drover.model.filters.PoolHasRoom` filter, ``drover doctor`` and the
read of a pool's holders (:class:`~drover.storage.entity_reads.EntityReads`).

Each takes the table to read (``entities`` or an alias of it): a filter counts a
pool's holders in a subquery of the fetch, which reads ``entities`` itself.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from drover.model.pools import POOLS_KEY, PoolHolders
from drover.storage.schema import entities, pool_capacities

__all__ = [
    "capacity_of",
    "claimed_units",
    "claims_json",
    "count_holders",
    "family_names",
    "holder_rows",
    "holds",
    "units",
    "usage",
]


def claimed_units(name: str, postgres: bool, table: Any = entities) -> sa.ColumnElement[Any]:
    """The units of pool ``name`` the row's ``spec["pools"]`` claims; 0 for none (or not a
    number: creation refuses that, so only a hand-written row could hold one)."""
    if postgres:
        path = sa.literal([POOLS_KEY, name], sa.ARRAY(sa.Text))
        value = table.c.spec.op("#>")(path)
        number = sa.cast(table.c.spec.op("#>>")(path), sa.Numeric)
        return sa.case((sa.func.jsonb_typeof(value) == "number", number), else_=0)
    where = f"$.{POOLS_KEY}.{json.dumps(name)}"
    return sa.case(
        (
            sa.func.json_type(table.c.spec, where).in_(["integer", "real"]),
            sa.func.json_extract(table.c.spec, where),
        ),
        else_=0,
    )


def holds(pool: PoolHolders, table: Any = entities) -> sa.ColumnElement[bool]:
    """The row holds ``pool``: of a kind declaring it, in one of its holding statuses."""
    return sa.or_(
        *(
            sa.and_(table.c.kind == kind, table.c.status.in_(sorted(statuses)))
            for kind, statuses in pool.holders
        )
    )


def units(pool: PoolHolders, postgres: bool, table: Any = entities) -> sa.ColumnElement[Any]:
    """The units of ``pool`` the row holds while holding it: its claim for a kind that
    declares the pool ``claimed``, else one."""
    if not pool.claimed_by:
        return sa.literal(1)
    return sa.case(
        (table.c.kind.in_(sorted(pool.claimed_by)), claimed_units(pool.name, postgres, table)),
        else_=1,
    )


def count_holders(pool: PoolHolders, postgres: bool, table: Any = entities) -> sa.Select[Any]:
    """How many units of ``pool`` are held now (served by the ``(kind, status)`` index).

    One per holder of a kind that declares the pool plain; the claimed units
    (``spec["pools"]``) of a holder of a kind that declares it ``claimed``.
    """
    if not pool.claimed_by:
        return sa.select(sa.func.count()).select_from(table).where(holds(pool, table))
    total = sa.func.coalesce(sa.func.sum(units(pool, postgres, table)), 0)
    return sa.select(total).select_from(table).where(holds(pool, table))


def holder_rows(pool: PoolHolders, postgres: bool) -> sa.Select[Any]:
    """Id, kind, status and units held of every holder of ``pool``, oldest first."""
    e = entities
    return (
        sa.select(e.c.id, e.c.kind, e.c.status, units(pool, postgres).label("units"))
        .where(holds(pool))
        .order_by(e.c.status_changed_at, e.c.id)
    )


def capacity_of(pool: PoolHolders, declared: Any = None) -> sa.ColumnElement[Any]:
    """``pool``'s capacity now: the one changed at run time (``pool_capacities``), else
    (for a family's member) its family's changed at run time, else ``declared``
    (default: the capacity the kinds and the configuration give it)."""
    pc = pool_capacities
    changed = sa.select(pc.c.capacity).where(pc.c.name == pool.name).scalar_subquery()
    fallback = sa.literal(pool.capacity) if declared is None else declared
    if pool.family is None:
        return sa.func.coalesce(changed, fallback)
    # A family member: its own capacity, else the one its family was given at run time.
    family = sa.select(pc.c.capacity).where(pc.c.name == pool.family).scalar_subquery()
    return sa.func.coalesce(changed, family, fallback)


def claims_json(postgres: bool, table: Any = entities) -> sa.ColumnElement[Any]:
    """The row's ``spec["pools"]`` as JSON text (NULL without one): a pool family's members
    are its keys."""
    if postgres:
        key = sa.literal(POOLS_KEY, sa.Text)
        return sa.cast(table.c.spec.op("->")(key), sa.Text)
    return sa.func.json_extract(table.c.spec, f"$.{POOLS_KEY}")


def family_names(family: PoolHolders, postgres: bool) -> sa.CompoundSelect[Any]:
    """``spec["pools"]`` (JSON text) of every holder of the pool ``family``, and the names of
    the pools given a capacity at run time (``name`` NULL): where its members' names are."""
    pc = pool_capacities
    held = sa.select(claims_json(postgres).label("claims"), sa.null().label("name"))
    held = held.where(holds(family))
    changed = sa.select(sa.null(), pc.c.name)
    return held.union_all(changed)


def usage(pool: PoolHolders, postgres: bool) -> sa.Select[Any]:
    """``(units held, capacity now)`` of ``pool``, in one statement."""
    held = count_holders(pool, postgres).scalar_subquery()
    return sa.select(held, capacity_of(pool))
