"""Pools of counter tokens (:mod:`drover.model.pools`) enforced inside the apply.

Before an apply moves entities into a status that holds a pool, it counts
the pool's holders and admits only as many as there are free tokens; the
others are refused (SKIPPED, :data:`~drover.model.pools.POOL_FULL`, with the
count in the message). Atomic on both databases: on SQLite every write
transaction is the only one (``BEGIN IMMEDIATE``); on PostgreSQL the apply
first takes each pool's transaction-level lock, in name order (so two applies
never wait on each other in a cycle), and counts after it: a second
coordinator's apply waits until the first has committed, then counts its
moves.

Only the applies of kinds that declare pools pay: one dictionary lookup per
group otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import sqlalchemy as sa

from drover.model.kinds import Kinds
from drover.model.plan import Change
from drover.model.pools import PoolHolders
from drover.storage._sql import statement
from drover.storage.statements.pools import count_holders, lock_pool

__all__ = ["PoolGate"]


class PoolGate:
    """The pools of one apply's transaction: locks taken, and what each group may enter."""

    def __init__(self, conn: sa.Connection, kinds: Kinds, postgres: bool) -> None:
        self._conn = conn
        self._kinds = kinds
        self._postgres = postgres
        self._locked: set[str] = set()

    def entered(self, kind: str, from_status: str, to_status: str) -> tuple[PoolHolders, ...]:
        """The pools a move enters (none for kinds without pools)."""
        return self._kinds.pools_entered(kind, from_status, to_status)

    def lock(self, names: Iterable[str]) -> None:
        """Take the pools' locks (PostgreSQL), in name order, once per transaction."""
        if not self._postgres:
            return
        stmt = statement(("lock-pool",), lock_pool)
        for name in sorted(set(names) - self._locked):
            self._conn.execute(stmt, {"pool_key": f"drover-pool:{name}"})
            self._locked.add(name)

    def lock_for(self, changes: Sequence[Change]) -> None:
        """Lock every pool any of ``changes`` would enter, before the apply writes anything."""
        names = {
            pool.name
            for c in changes
            if c.changes_status
            for pool in self.entered(c.kind, c.from_status, str(c.to_status))
        }
        self.lock(names)

    def free(self, pool: PoolHolders) -> tuple[int, int]:
        """``(free tokens, holders)`` of ``pool`` now (its lock taken first)."""
        self.lock([pool.name])
        query = statement(("pool-holders", pool), lambda: count_holders(pool))
        held = int(self._conn.execute(query).scalar() or 0)
        return max(pool.capacity - held, 0), held

    def admit(self, group: Sequence[Change]) -> tuple[list[Change], list[tuple[Change, str]]]:
        """Split a group of alike changes into those admitted and those refused (with why).

        The group's order (the fetch order: priority, then age) decides who
        gets the free tokens.
        """
        first = group[0]
        admitted = list(group)
        refused: list[tuple[Change, str]] = []
        if not first.changes_status:
            return admitted, refused
        for pool in self.entered(first.kind, first.from_status, str(first.to_status)):
            free, held = self.free(pool)
            if len(admitted) <= free:
                continue
            # Counted with the moves this group is about to make.
            reason = (
                f"pool {pool.name!r} is full ({held + free}/{pool.capacity} held); "
                f"stays {first.from_status}, not moved to {first.to_status}"
            )
            refused.extend((c, reason) for c in admitted[free:])
            admitted = admitted[:free]
        return admitted, refused
