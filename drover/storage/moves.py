"""Targeted moves (``HandlerResult.moves``): entities other than a tick's targets, moved
in the tick's apply.

A move becomes a :class:`~drover.model.plan.Change` of its entity's kind (read
here, in the apply's transaction) from the status the handler expected, so it
takes the one path every change takes: compare-and-set, children and
descendants, result, history (result ``MOVED``, the handler as source). A move
that loses its race is dropped and reported ``stale-status``, like any stale
transition; one its kind cannot make (an unknown status, or out of a terminal
status: that is ``reopen``'s) is reported ``invalid-move``. Neither is written.
A move's ``status_info`` is set by the same statement that moves the entity and
named in its history row's message. A move for a fault (``fails``) also records
it in the entity's ``data`` (:data:`~drover.model.kinds.FAILED_BECAUSE`), which
makes its result FAILURE once it ends.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from drover.model.kinds import FAILED_BECAUSE, Kinds
from drover.model.plan import INVALID_MOVE, MOVED, STALE_STATUS, AppliedChange, Change, Move
from drover.model.status import SchedulingResult
from drover.model.values import StatusInfoRule
from drover.storage._sql import chunked, statement
from drover.storage.ending import entity_states

__all__ = ["move_changes"]


def move_changes(
    conn: sa.Connection, moves: Sequence[Move], source: str, *, kinds: Kinds, postgres: bool
) -> tuple[list[Change], list[AppliedChange]]:
    """The changes that make ``moves``, and the moves refused before any write."""
    kind_of: dict[str, str] = {}
    states = statement(("entity-states", postgres), lambda: entity_states(postgres))
    for chunk in chunked([m.entity_id for m in moves]):
        for eid, kind, _status in conn.execute(states, {"ids": chunk}):
            kind_of[eid] = kind
    changes: list[Change] = []
    refused: list[AppliedChange] = []
    for move in moves:
        name = kind_of.get(move.entity_id)
        if name is None:
            refused.append(
                AppliedChange(
                    move.entity_id, SchedulingResult.SKIPPED, move.expected, move.expected,
                    STALE_STATUS, f"no such entity; move by {source} not applied", kind="",
                )
            )  # fmt: skip
            continue
        kind = kinds[name]
        problem = None
        unknown = [s for s in (move.expected, move.to) if s not in kind.status_names]
        if unknown:
            problem = f"kind {kind.name!r} has no status {unknown[0]!r}"
        elif move.expected in kind.terminal and move.to != move.expected:
            problem = f"{move.expected} is terminal (reopen takes an entity out of it)"
        if problem is not None:
            refused.append(
                AppliedChange(
                    move.entity_id, SchedulingResult.SKIPPED, move.expected, move.expected,
                    INVALID_MOVE, f"{problem}; move by {source} not applied", kind=kind.name,
                )
            )  # fmt: skip
            continue
        info = move.status_info
        message = f"moved by {source}" if info is None else f"moved by {source}: {info}"
        changes.append(
            Change(
                entity_id=move.entity_id,
                from_status=kind.status(move.expected),
                result=MOVED,
                to_status=kind.status(move.to),
                message=f"{message} (a failure)" if move.fails else message,
                status_info=None if info is None else StatusInfoRule(default=info),
                kind=kind.name,
                # Read by the result once it ends: FAILURE, whoever asks it to stop.
                data={FAILED_BECAUSE: info or source} if move.fails else None,
            )
        )
    return changes, refused
