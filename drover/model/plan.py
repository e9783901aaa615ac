"""What the coordinator asks storage to apply: one :class:`Change` per entity per tick."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

import attrs

from drover.model.status import SchedulingResult
from drover.model.values import Claim, NewEntity, StatusInfoRule

__all__ = [
    "FENCED",
    "INVALID_MOVE",
    "MOVED",
    "REPORT_SOURCE",
    "STALE_STATUS",
    "AppliedChange",
    "ApplyOutcome",
    "Change",
    "Claim",
    "Move",
    "TryCount",
]

#: Error code of a change lost to a concurrent status change (reported, never written).
STALE_STATUS = "stale-status"
#: Error code of a change lost because the tick's claim expired or was taken over.
FENCED = "fenced"


class TryCount(Enum):
    """What a change does to the applying handler's tries when the status is kept."""

    KEEP = "keep"
    INCREMENT = "increment"
    RESET = "reset"


@attrs.frozen(kw_only=True)
class Change:
    """One entity's outcome in one tick, decided by the coordinator. Keyword-only: several
    fields share a type (two ``str | None`` in a row would swap silently by position).

    ``to_status``/``to_children`` of ``None`` keep that side's status; an
    entity moving into a terminal status never keeps live children (storage
    ends them, see :meth:`drover.model.kinds.EntityKind.end_status_for`). A
    change of status always resets every handler's tries, the resetting
    budgets and ``status_changed_at``; ``requeue`` also counts it as a
    requeue. ``result`` is a :class:`SchedulingResult` or a named outcome.
    ``budget`` is the named budget the failure spends; ``data`` a
    merge-patch of the entity's data; ``creates`` the entities created with
    it. All of them are written only if the compare-and-set holds.
    """

    entity_id: str
    kind: str
    from_status: str
    result: SchedulingResult | str
    to_status: str | None = None
    to_children: str | None = None
    #: ``status_info`` of the children (and descendants) this change moves.
    children_info: str | None = None
    try_count: TryCount = TryCount.KEEP
    message: str | None = None
    error_code: str | None = None
    status_info: StatusInfoRule | None = None
    requeue: bool = False
    budget: str | None = None
    #: ``(kernel_id, agent_id)`` of this session's kernels to place, if applied.
    placements: tuple[tuple[str, str], ...] = ()
    data: Mapping[str, Any] | None = None
    creates: tuple[NewEntity, ...] = ()
    #: Other entities to ask to end, by their kinds' termination rules, if applied.
    terminates: tuple[str, ...] = ()
    #: The result the handler set (``HandlerResult.results``), if the entity ends up terminal.
    sets_result: str | None = None
    #: Claims on the kind's ``claimed`` pools decided for this move
    #: (``HandlerResult.claims``): counted instead of ``spec["pools"]``, written there if
    #: admitted. ``None``: the entity's spec decides.
    claims: Mapping[str, int] | None = None

    @property
    def changes_status(self) -> bool:
        """Whether this change moves the entity to another status."""
        return self.to_status is not None and self.to_status != self.from_status


#: ``result`` (and history) of a targeted move (:class:`Move`).
MOVED = "MOVED"
#: ``source`` of the reports pushed through the API (``drover report``, ``/api/report``).
REPORT_SOURCE = "report"
#: Error code of a targeted move the apply refused (a status its kind lacks, or leaving
#: a terminal status): reported, never written.
INVALID_MOVE = "invalid-move"


@attrs.frozen
class Move:
    """A handler's targeted move: ``entity_id`` (any kind, not a target of the tick)
    goes from ``expected`` to ``to``, if it is still in ``expected`` (compare-and-set),
    and gets ``status_info`` (``None``: keeps its own); ``fails``: a move for a fault
    (:attr:`drover.model.values.MoveTo.fails`)."""

    entity_id: str
    expected: str
    to: str
    status_info: str | None = None
    fails: bool = False


@attrs.frozen
class AppliedChange:
    """What was actually written for one entity (after compare-and-set).

    A change that lost the compare-and-set is reported with result SKIPPED and
    error code :data:`STALE_STATUS`; nothing of it is written.
    """

    entity_id: str
    result: SchedulingResult | str
    from_status: str
    to_status: str
    error_code: str | None
    message: str | None
    kind: str = attrs.field(kw_only=True)

    @property
    def session_id(self) -> str:
        """The session kind's spelling of :attr:`entity_id`."""
        return self.entity_id


@attrs.frozen
class ApplyOutcome:
    """Everything one apply wrote, in one transaction."""

    changes: tuple[AppliedChange, ...]
    kernel_changes: int = 0
    #: The ``(kind, status)`` pairs the moved children (and their descendants) entered.
    children_entered: frozenset[tuple[str, str]] = frozenset()

    @property
    def stale(self) -> tuple[AppliedChange, ...]:
        """The changes lost to a concurrent status change (not written)."""
        return tuple(c for c in self.changes if c.error_code == STALE_STATUS)

    @property
    def fenced(self) -> tuple[AppliedChange, ...]:
        """The changes lost because the tick's claim lapsed (a ``fenced`` history row each)."""
        return tuple(c for c in self.changes if c.error_code == FENCED)
