"""The facts ``drover doctor`` judges and the statements that read them, generic over kinds.

:class:`~drover.storage.doctor.DoctorReads` runs them. Each statement is built
from the kinds' declarations (terminal and live statuses, parent kinds, pools
and their capacities, which kinds have exit codes); the rules themselves, their
names and messages, are :mod:`drover.inspection.doctor`'s. A module of its own:
every read command's ``Queries`` has the doctor's reads, and only ``drover
doctor`` pays for importing what they need.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import sqlalchemy as sa

from drover.model.kinds import EntityKind, Kinds
from drover.model.pools import PoolHolders, in_family
from drover.storage.inserts import CREATED
from drover.storage.schema import entities, scheduling_history, status_changes
from drover.storage.statements.pools import family_names

__all__ = [
    "ClaimRow",
    "EndRecord",
    "LiveChild",
    "OversizedClaim",
    "PoolUse",
    "RecordedMoves",
    "created",
    "ending_rows",
    "grouped_moves",
    "live_children",
    "members",
    "moves",
    "odd_claims",
    "silent",
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


def live_children(kind: EntityKind, child: EntityKind) -> sa.Select[Any]:
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


def moves() -> sa.Subquery:
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


def grouped_moves(moves: sa.Subquery) -> sa.Select[Any]:
    return (
        sa.select(
            e.c.id, e.c.kind, e.c.status, moves.c.from_status, moves.c.to_status, sa.func.count()
        )
        .join(moves, moves.c.entity_id == e.c.id)
        .group_by(e.c.id, e.c.kind, e.c.status, moves.c.from_status, moves.c.to_status)
    )


def created(moves: sa.Subquery) -> sa.Select[Any]:
    """The CREATED rows of the entities that moved, or that are not where they started."""
    return (
        sa.select(e.c.id, e.c.kind, e.c.status, h.c.to_status)
        .join(h, h.c.entity_id == e.c.id)
        .where(
            h.c.result == CREATED,
            sa.or_(h.c.to_status != e.c.status, e.c.id.in_(sa.select(moves.c.entity_id))),
        )
    )


def silent(kind: EntityKind) -> sa.ColumnElement[bool]:
    return sa.and_(
        e.c.kind == kind.name,
        e.c.status.in_(sorted(kind.terminal)),
        e.c.exit_code.is_(None),
        e.c.status_info.is_(None),
    )


def ending_rows(kind: EntityKind) -> list[sa.Select[Any]]:
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
            .where(silent(kind), table.c.to_status == e.c.status, entering)
        )
    return found


def odd_claims() -> sa.Select[Any]:
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


def members(conn: sa.Connection, kinds: Kinds, family: PoolHolders, pg: bool) -> list[PoolHolders]:
    """The members of the pool ``family`` that its holders claim or that were given a
    capacity at run time, in name order."""
    names: set[str] = set()
    for claims, name in conn.execute(family_names(family, pg)):
        held = json.loads(claims) if isinstance(claims, str) else claims
        names.update([name] if name is not None else held if isinstance(held, dict) else ())
    members = (kinds.pool(n) for n in sorted(names) if in_family(family.name, n))
    return [m for m in members if m is not None]
