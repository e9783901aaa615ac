"""What the coordinator asks storage to apply: one :class:`Change` per session per tick."""

from __future__ import annotations

from enum import Enum

import attrs

from drover.model.status import KernelStatus, SchedulingResult, SessionStatus
from drover.model.values import StatusInfoRule

__all__ = ["STALE_STATUS", "AppliedChange", "ApplyOutcome", "Change", "TryCount"]

#: Error code of a change lost to a concurrent status change (reported, never written).
STALE_STATUS = "stale-status"


class TryCount(Enum):
    """What a change does to the applying handler's tries when the status is kept."""

    KEEP = "keep"
    INCREMENT = "increment"
    RESET = "reset"


@attrs.frozen
class Change:
    """One session's outcome in one tick, decided by the coordinator.

    ``to_session``/``to_kernel`` of ``None`` keep that side's status; a session
    moving into a terminal status never keeps live kernels (storage ends them,
    see :func:`drover.model.rules.kernel_end_status`). A change of session
    status always resets every handler's tries and ``status_changed_at``;
    ``requeue`` also counts it as a requeue.
    """

    session_id: str
    from_status: SessionStatus
    result: SchedulingResult
    to_session: SessionStatus | None = None
    to_kernel: KernelStatus | None = None
    try_count: TryCount = TryCount.KEEP
    message: str | None = None
    error_code: str | None = None
    status_info: StatusInfoRule | None = None
    requeue: bool = False
    #: ``(kernel_id, agent_id)`` of this session's kernels to place, if applied.
    placements: tuple[tuple[str, str], ...] = ()

    @property
    def changes_session(self) -> bool:
        """Whether this change moves the session to another status."""
        return self.to_session is not None and self.to_session != self.from_status


@attrs.frozen
class AppliedChange:
    """What was actually written for one session (after compare-and-set).

    A change that lost the compare-and-set is reported with result SKIPPED and
    error code :data:`STALE_STATUS`; nothing of it is written.
    """

    session_id: str
    result: SchedulingResult
    from_status: SessionStatus
    to_status: SessionStatus
    error_code: str | None
    message: str | None


@attrs.frozen
class ApplyOutcome:
    """Everything one apply wrote, in one transaction."""

    changes: tuple[AppliedChange, ...]
    kernel_changes: int = 0

    @property
    def stale(self) -> tuple[AppliedChange, ...]:
        """The changes lost to a concurrent status change (not written)."""
        return tuple(c for c in self.changes if c.error_code == STALE_STATUS)
