"""What ``drover doctor`` reads: the facts its rules judge, generic over kinds.

:class:`DoctorReads` is one of the read-only services
:class:`~drover.storage.queries.Queries` is made of; its statements are
here. Each read is built from the kinds' declarations (terminal and live
statuses, parent kinds, pools and their capacities, which kinds have exit
codes); the rules themselves, their names and messages, are
:mod:`drover.inspection.doctor`'s.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import attrs
import sqlalchemy as sa

from drover.model.kinds import EntityKind, Kinds
from drover.model.pools import PoolHolders, in_family
from drover.storage._service import Service
from drover.storage.inserts import CREATED
from drover.storage.schema import entities, scheduling_history, status_changes
from drover.storage.statements.pools import claimed_units, family_names, usage

__all__ = [
    "ClaimRow",
    "DoctorReads",
    "EndRecord",
    "LiveChild",
    "OversizedClaim",
    "PoolUse",
    "RecordedMoves",
]

e = entities
h = scheduling_history
c = status_changes


@attrs.frozen
class LiveChild:
    """A live child of an ended entity."""

    parent_id: str
    parent_kind: str
    parent_status: str
    child_id: str
    child_kind: str
    child_status: str


@attrs.frozen
class RecordedMoves:
    """The status changes recorded of one entity (both history tables, each once)."""

    entity_id: str
    kind: str
    #: Its status now.
    status: str
    #: The status its ``CREATED`` row records (``None``: none, pruned with old history).
    created: str | None
    #: ``(from, to, times)``.
    moves: tuple[tuple[str, str, int], ...]


@attrs.frozen
class EndRecord:
    """An ended entity of a kind with exit codes, ended without an exit code or a
    ``status_info``, and the latest change that ended it."""

    entity_id: str
    kind: str
    status: str
    #: Whether a change into its status is recorded at all (history may be pruned).
    found: bool
    #: That change's message.
    message: str | None
    #: Whether its parent moved in the same write: it ended with its parent.
    with_parent: bool


@attrs.frozen
class PoolUse:
    """A pool, its (configured) capacity, and how many units are held now."""

    name: str
    capacity: int
    held: int


@attrs.frozen
class OversizedClaim:
    """A live entity claiming more units of a pool than the pool has."""

    entity_id: str
    kind: str
    pool: str
    units: int
    capacity: int


@attrs.frozen
class ClaimRow:
    """A tick's claim on an entity that is incomplete or lasts past the claim TTL."""

    entity_id: str
    kind: str
    owner: str | None
    token: bool
    expires: float | None


def _live_children(kind: EntityKind, child: EntityKind) -> sa.Select[Any]:
    parent = e.alias("parent")
    return (
        sa.select(parent.c.id, parent.c.kind, parent.c.status, e.c.id, e.c.kind, e.c.status)
        .join(parent, parent.c.id == e.c.parent_id)
        .where(
            parent.c.kind == kind.name,
            parent.c.status.in_(sorted(kind.terminal)),
            e.c.kind == child.name,
            e.c.status.in_(sorted(child.live)),
        )
        .order_by(parent.c.id, e.c.id)
    )


def _moves() -> sa.Subquery:
    """Every status change, once: the scheduling history's, and the status changes its rows
    do not already hold (a child moved by a handler of its own kind is in both)."""
    same = sa.exists().where(
        h.c.entity_id == c.c.entity_id,
        h.c.handler == c.c.source,
        h.c.created_at == c.c.created_at,
        h.c.from_status == c.c.from_status,
        h.c.to_status == c.c.to_status,
    )
    own = sa.select(h.c.entity_id, h.c.from_status, h.c.to_status).where(
        h.c.from_status != h.c.to_status
    )
    changes = sa.select(c.c.entity_id, c.c.from_status, c.c.to_status).where(
        c.c.from_status != c.c.to_status, ~same
    )
    return sa.union_all(own, changes).subquery("moves")


def _grouped_moves(moves: sa.Subquery) -> sa.Select[Any]:
    return (
        sa.select(
            e.c.id, e.c.kind, e.c.status, moves.c.from_status, moves.c.to_status, sa.func.count()
        )
        .join(moves, moves.c.entity_id == e.c.id)
        .group_by(e.c.id, e.c.kind, e.c.status, moves.c.from_status, moves.c.to_status)
    )


def _created(moves: sa.Subquery) -> sa.Select[Any]:
    """The CREATED rows of the entities that moved, or that are not where they started."""
    return (
        sa.select(e.c.id, e.c.kind, e.c.status, h.c.to_status)
        .join(h, h.c.entity_id == e.c.id)
        .where(
            h.c.result == CREATED,
            sa.or_(h.c.to_status != e.c.status, e.c.id.in_(sa.select(moves.c.entity_id))),
        )
    )


def _silent(kind: EntityKind) -> sa.ColumnElement[bool]:
    return sa.and_(
        e.c.kind == kind.name,
        e.c.status.in_(sorted(kind.terminal)),
        e.c.exit_code.is_(None),
        e.c.status_info.is_(None),
    )


def _ending_rows(kind: EntityKind) -> list[sa.Select[Any]]:
    """Per silent end of ``kind``: each change into its status, its time and message, and
    whether its parent moved in the same write (the same instant, in either table)."""
    found = []
    for table, entering in (
        (h, sa.or_(h.c.from_status != h.c.to_status, h.c.result == CREATED)),
        (c, c.c.from_status != c.c.to_status),
    ):
        ph, pc = h.alias("ph"), c.alias("pc")
        with_parent = sa.or_(
            sa.exists().where(
                ph.c.entity_id == e.c.parent_id, ph.c.created_at == table.c.created_at
            ),
            sa.exists().where(
                pc.c.entity_id == e.c.parent_id, pc.c.created_at == table.c.created_at
            ),
        )
        found.append(
            sa.select(e.c.id, table.c.created_at, table.c.message, with_parent)
            .join(table, table.c.entity_id == e.c.id)
            .where(_silent(kind), table.c.to_status == e.c.status, entering)
        )
    return found


def _odd_claims() -> sa.Select[Any]:
    """Claims missing one of owner, token and expiry, or expiring after ``:latest``."""
    held = sum(
        (
            sa.case((col.is_not(None), 1), else_=0)
            for col in (e.c.claim_owner, e.c.claim_token, e.c.claim_expires)
        ),
        sa.literal(0),
    )
    latest = sa.bindparam("latest", type_=sa.Double)
    return (
        sa.select(
            e.c.id, e.c.kind, e.c.claim_owner, e.c.claim_token.is_not(None), e.c.claim_expires
        )
        .where(sa.or_(held.in_([1, 2]), e.c.claim_expires > latest))
        .order_by(e.c.id)
    )


class DoctorReads(Service):
    """The facts ``drover doctor`` checks, read from a live database."""

    async def ended_with_live_children(self) -> list[LiveChild]:
        """Every live child of an ended entity (each parent kind's terminal statuses, its
        child kind's live ones)."""
        kinds = self._db.kinds
        queries = [
            _live_children(kind, child)
            for kind in kinds.values()
            if (child := kinds.child_of(kind.name)) is not None
        ]
        return await self._db.read(
            lambda conn: [LiveChild(*row) for q in queries for row in conn.execute(q)]
        )

    async def recorded_moves(self) -> list[RecordedMoves]:
        """Per entity with a recorded move, or not in the status it was created in: its
        status, its CREATED row's, and its moves."""
        moves = _moves()
        grouped, created = _grouped_moves(moves), _created(moves)

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
                RecordedMoves(eid, kind, status, starts.get(eid), tuple(sorted(edges[eid])))
                for eid, (kind, status) in sorted(found.items())
            ]

        return await self._db.read(work)

    async def silent_ends(self) -> list[EndRecord]:
        """The ended entities of kinds with exit codes that have neither an exit code nor a
        ``status_info``, each with the latest change into its status."""
        kinds = [k for k in self._db.kinds.values() if k.exit_codes]
        if not kinds:
            return []

        def work(conn: sa.Connection) -> list[EndRecord]:
            records = []
            for kind in kinds:
                latest: dict[str, tuple[float, bool, str | None, bool]] = {}
                for query in _ending_rows(kind):
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
                candidates = sa.select(e.c.id, e.c.status).where(_silent(kind)).order_by(e.c.id)
                for eid, status in conn.execute(candidates):
                    end = latest.get(eid)
                    found = end is not None
                    message, parent = (end[2], end[3]) if end is not None else (None, False)
                    records.append(EndRecord(eid, kind.name, status, found, message, parent))
            return records

        return await self._db.read(work)

    async def pool_use(self) -> list[PoolUse]:
        """Each pool the kinds declare (of a pool family, each known member): its capacity
        now (as changed at run time, if it was) and the units held now."""
        kinds, pg = self._db.kinds, self._db.postgres

        def work(conn: sa.Connection) -> list[PoolUse]:
            found = []
            for p in kinds.pools.values():
                # A pool family: each member it has now (claimed or given a capacity).
                for pool in _members(conn, kinds, p, pg) if p.name.endswith("*") else [p]:
                    held, capacity = conn.execute(usage(pool, pg)).one()
                    found.append(PoolUse(pool.name, int(capacity), int(held or 0)))
            return found

        return await self._db.read(work)

    async def oversized_claims(self) -> list[OversizedClaim]:
        """Live entities claiming more units of a claimed pool than its capacity: they
        could never hold it."""
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
                OversizedClaim(eid, kind, pool.name, int(n), pool.capacity)
                for pool, query in queries
                for eid, kind, n in conn.execute(query)
            ]
        )

    async def odd_claims(self, latest: float) -> list[ClaimRow]:
        """Ticks' claims missing an owner, a token or an expiry, or expiring after
        ``latest`` (now plus the claim TTL: no claim is taken or renewed for longer)."""
        query = _odd_claims()
        return await self._db.read(
            lambda conn: [
                ClaimRow(eid, kind, owner, bool(token), None if until is None else float(until))
                for eid, kind, owner, token, until in conn.execute(query, {"latest": latest})
            ]
        )


def _members(conn: sa.Connection, kinds: Kinds, family: PoolHolders, pg: bool) -> list[PoolHolders]:
    """The members of the pool ``family`` that its holders claim or that were given a
    capacity at run time, in name order."""
    names: set[str] = set()
    for claims, name in conn.execute(family_names(family, pg)):
        held = json.loads(claims) if isinstance(claims, str) else claims
        names.update([name] if name is not None else held if isinstance(held, dict) else ())
    members = (kinds.pool(n) for n in sorted(names) if in_family(family.name, n))
    return [m for m in members if m is not None]
