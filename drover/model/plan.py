"""What the coordinator asks storage to apply: one :class:`Change` per session per tick."""

from __future__ import annotations

from enum import Enum

import attrs

from drover.model.status import KernelStatus, SchedulingResult, SessionStatus
from drover.model.values import StatusInfoRule

__all__ = ["STALE_STATUS", "AppliedChange", "ApplyOutcome", "Change", "TryCount"]

#: Error code of the SKIPPED row written when a session's status changed underneath a tick.
STALE_STATUS = "stale-status"


class TryCount(Enum):
    """What a change does to the session's ``try_count`` when its status is kept."""

    KEEP = "keep"
    INCREMENT = "increment"
    RESET = "reset"


@attrs.frozen
class Change:
    """One session's outcome in one tick, decided by the coordinator.

    ``to_session``/``to_kernel`` of ``None`` keep that side's status. A change of
    session status always resets ``try_count`` and ``status_changed_at``.
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
    write_history: bool = True

    @property
    def changes_session(self) -> bool:
        """Whether this change moves the session to another status."""
        return self.to_session is not None and self.to_session != self.from_status


@attrs.frozen
class AppliedChange:
    """What was actually written for one session (after compare-and-set)."""

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
        """The changes lost to a concurrent status change (``stale-status`` rows)."""
        return tuple(c for c in self.changes if c.error_code == STALE_STATUS)
