"""The statements of :mod:`drover.storage.pools`: a pool's lock, its holders' count and
the units entities claim (``spec["pools"]``)."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from drover.model.pools import POOLS_KEY, PoolHolders
from drover.storage.schema import entities
from drover.storage.statements.ids import ids_param

__all__ = ["claims_of", "count_holders", "lock_pool", "set_claims"]

e = entities


def lock_pool() -> sa.Select[Any]:
    """PostgreSQL: take the pool ``:pool_key``'s lock until the transaction ends.

    A transaction-level advisory lock: every apply that may move entities into
    the pool takes it before counting, so two coordinators never both see room
    for the same token. (SQLite needs none: ``BEGIN IMMEDIATE`` already makes
    every write transaction the only one.)
    """
    key = sa.func.hashtextextended(sa.bindparam("pool_key", type_=sa.String), 0)
    return sa.select(sa.func.pg_advisory_xact_lock(key))


def _claim(name: str, postgres: bool) -> sa.ColumnElement[Any]:
    """The units of pool ``name`` the row's ``spec["pools"]`` claims; 0 for none (or not a
    number: creation refuses that, so only a hand-written row could hold one)."""
    if postgres:
        path = sa.literal([POOLS_KEY, name], postgresql.ARRAY(sa.Text))
        value = e.c.spec.op("#>")(path)
        number = sa.cast(e.c.spec.op("#>>")(path), sa.Numeric)
        return sa.case((sa.func.jsonb_typeof(value) == "number", number), else_=0)
    where = f"$.{POOLS_KEY}.{json.dumps(name)}"
    return sa.case(
        (
            sa.func.json_type(e.c.spec, where).in_(["integer", "real"]),
            sa.func.json_extract(e.c.spec, where),
        ),
        else_=0,
    )


def count_holders(pool: PoolHolders, postgres: bool) -> sa.Select[Any]:
    """How many units of ``pool`` are held now (served by the ``(kind, status)`` index).

    One per holder of a kind that declares the pool plain; the claimed units
    (``spec["pools"]``) of a holder of a kind that declares it ``claimed``.
    """
    held = [
        sa.and_(e.c.kind == kind, e.c.status.in_(sorted(statuses)))
        for kind, statuses in pool.holders
    ]
    if not pool.claimed_by:
        return sa.select(sa.func.count()).select_from(e).where(sa.or_(*held))
    units = sa.case((e.c.kind.in_(sorted(pool.claimed_by)), _claim(pool.name, postgres)), else_=1)
    return sa.select(sa.func.coalesce(sa.func.sum(units), 0)).select_from(e).where(sa.or_(*held))


def claims_of(names: tuple[str, ...], postgres: bool) -> sa.Select[Any]:
    """Id and the units of each pool of ``names`` claimed by the entities ``:ids``."""
    columns = [_claim(name, postgres).label(f"c{i}") for i, name in enumerate(names)]
    return sa.select(e.c.id, *columns).where(ids_param(e.c.id, "ids", postgres))


def set_claims(postgres: bool) -> sa.Update:
    """``spec["pools"] = :claims`` (JSON text) of the entity ``:eid`` (executed with many rows).

    The claims a handler decided for a move replace the entity's earlier ones:
    a task placed on another worker than last time no longer claims the old one.
    """
    claims = sa.bindparam("claims", type_=sa.String)
    value: sa.ColumnElement[Any]
    if postgres:
        path = sa.literal([POOLS_KEY], postgresql.ARRAY(sa.Text))
        value = sa.func.jsonb_set(e.c.spec, path, sa.cast(claims, postgresql.JSONB))
    else:
        value = sa.func.json_set(e.c.spec, f"$.{POOLS_KEY}", sa.func.json(claims))
    return sa.update(e).where(e.c.id == sa.bindparam("eid")).values(spec=value)
