"""The statements of :mod:`drover.storage.pools`: a pool's lock and its holders' count."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from drover.model.pools import PoolHolders
from drover.storage.schema import entities

__all__ = ["count_holders", "lock_pool"]

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


def count_holders(pool: PoolHolders) -> sa.Select[Any]:
    """How many entities hold ``pool`` now (served by the ``(kind, status)`` index)."""
    held = [
        sa.and_(e.c.kind == kind, e.c.status.in_(sorted(statuses)))
        for kind, statuses in pool.holders
    ]
    return sa.select(sa.func.count()).select_from(e).where(sa.or_(*held))
