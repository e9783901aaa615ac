"""What ``drover doctor`` reads: the facts its rules judge, generic over kinds.

:class:`DoctorReads` is one of the read-only services
:class:`~drover.storage.queries.Queries` is made of. Its records and
statements are :mod:`drover.storage.doctor_facts`', imported when a read
runs: every command's ``Queries`` has these reads, and only ``drover doctor``
runs them. The rules themselves, their names and messages, are
:mod:`drover.inspection.doctor`'s.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import sqlalchemy as sa

from drover.storage._service import Service
from drover.storage.schema import entities as e
from drover.storage.statements.pools import claimed_units, usage

if TYPE_CHECKING:
    from drover.storage.doctor_facts import (
        ClaimRow,
        EndRecord,
        LiveChild,
        OversizedClaim,
        PoolUse,
        RecordedMoves,
    )

__all__ = ["DoctorReads"]


class DoctorReads(Service):
    """The facts ``drover doctor`` checks, read from a live database."""

    async def ended_with_live_children(self) -> list[LiveChild]:
        """Every live child of an ended entity (each parent kind's terminal statuses, its
        child kind's live ones)."""
        import drover.storage.doctor_facts as f

        kinds = self._db.kinds
        queries = [
            f.live_children(kind, child)
            for kind in kinds.values()
            if (child := kinds.child_of(kind.name)) is not None
        ]
        return await self._db.read(
            lambda conn: [f.LiveChild(*row) for q in queries for row in conn.execute(q)]
        )

    async def recorded_moves(self) -> list[RecordedMoves]:
        """Per entity with a recorded move, or not in the status it was created in: its
        status, its CREATED row's, and its moves."""
        import drover.storage.doctor_facts as f

        moves = f.moves()
        grouped, created = f.grouped_moves(moves), f.created(moves)

        def work(conn: sa.Connection) -> list[RecordedMoves]:
            found: dict[str, tuple[str, str]] = {}
            edges: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
            for eid, kind, status, source, target, times in conn.execute(grouped):
                found[eid] = (kind, status)
                edges[eid].append((source, target, int(times)))
            starts: dict[str, str] = {}
            for eid, kind, status, start in conn.execute(created):
                found[eid] = (kind, status)
                starts[eid] = start
            return [
                f.RecordedMoves(eid, kind, status, starts.get(eid), tuple(sorted(edges[eid])))
                for eid, (kind, status) in sorted(found.items())
            ]

        return await self._db.read(work)

    async def silent_ends(self) -> list[EndRecord]:
        """The ended entities of kinds with exit codes that have neither an exit code nor a
        ``status_info``, each with the latest change into its status."""
        import drover.storage.doctor_facts as f

        kinds = [k for k in self._db.kinds.values() if k.exit_codes]
        if not kinds:
            return []

        def work(conn: sa.Connection) -> list[EndRecord]:
            records = []
            for kind in kinds:
                latest: dict[str, tuple[float, bool, str | None, bool]] = {}
                for query in f.ending_rows(kind):
                    for eid, at, message, parent in conn.execute(query):
                        # The latest end counts; of two at one instant, an explained one.
                        row = (
                            float(at),
                            message is not None or bool(parent),
                            message,
                            bool(parent),
                        )
                        if eid not in latest or row[:2] > latest[eid][:2]:
                            latest[eid] = row
                candidates = sa.select(e.c.id, e.c.status).where(f.silent(kind)).order_by(e.c.id)
                for eid, status in conn.execute(candidates):
                    end = latest.get(eid)
                    found = end is not None
                    message, parent = (end[2], end[3]) if end is not None else (None, False)
                    records.append(f.EndRecord(eid, kind.name, status, found, message, parent))
            return records

        return await self._db.read(work)

    async def pool_use(self) -> list[PoolUse]:
        """Each pool the kinds declare (of a pool family, each known member): its capacity
        now (as changed at run time, if it was) and the units held now."""
        import drover.storage.doctor_facts as f

        kinds, pg = self._db.kinds, self._db.postgres

        def work(conn: sa.Connection) -> list[PoolUse]:
            found = []
            for p in kinds.pools.values():
                # A pool family: each member it has now (claimed or given a capacity).
                for pool in f.members(conn, kinds, p, pg) if p.name.endswith("*") else [p]:
                    held, capacity = conn.execute(usage(pool, pg)).one()
                    found.append(f.PoolUse(pool.name, int(capacity), int(held or 0)))
            return found

        return await self._db.read(work)

    async def oversized_claims(self) -> list[OversizedClaim]:
        """Live entities claiming more units of a claimed pool than its capacity: they
        could never hold it."""
        import drover.storage.doctor_facts as f

        kinds, pg = self._db.kinds, self._db.postgres
        queries = []
        for pool in kinds.pools.values():
            if pool.name.endswith("*"):
                continue  # a family: its members are checked by the apply, one by one
            units = claimed_units(pool.name, pg)
            for name in sorted(pool.claimed_by):
                live = sorted(kinds[name].live)
                queries.append(
                    (
                        pool,
                        sa.select(e.c.id, e.c.kind, units)
                        .where(e.c.kind == name, e.c.status.in_(live), units > pool.capacity)
                        .order_by(e.c.id),
                    )
                )
        return await self._db.read(
            lambda conn: [
                f.OversizedClaim(eid, kind, pool.name, int(n), pool.capacity)
                for pool, query in queries
                for eid, kind, n in conn.execute(query)
            ]
        )

    async def odd_claims(self, latest: float) -> list[ClaimRow]:
        """Ticks' claims missing an owner, a token or an expiry, or expiring after
        ``latest`` (now plus the claim TTL: no claim is taken or renewed for longer)."""
        import drover.storage.doctor_facts as f

        query = f.odd_claims()
        return await self._db.read(
            lambda conn: [
                f.ClaimRow(eid, kind, owner, bool(token), None if until is None else float(until))
                for eid, kind, owner, token, until in conn.execute(query, {"latest": latest})
            ]
        )
