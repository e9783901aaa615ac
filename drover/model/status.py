"""Status enums for sessions, kernels and scheduling results."""

from __future__ import annotations

from enum import Enum, StrEnum

__all__ = [
    "TERMINAL_KERNEL_STATUSES",
    "TERMINAL_SESSION_STATUSES",
    "KernelMatchType",
    "KernelStatus",
    "SchedulingResult",
    "SessionStatus",
]


class SessionStatus(StrEnum):
    """The lifecycle status of a session. Values equal names."""

    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    PREPARING = "PREPARING"
    PREPARED = "PREPARED"
    CREATING = "CREATING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    CANCELLED = "CANCELLED"
    ERROR = "ERROR"


class KernelStatus(StrEnum):
    """The lifecycle status of one kernel of a session. Values equal names."""

    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    PREPARING = "PREPARING"
    PULLING = "PULLING"
    PREPARED = "PREPARED"
    CREATING = "CREATING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    CANCELLED = "CANCELLED"
    ERROR = "ERROR"


class SchedulingResult(StrEnum):
    """What the coordinator concluded about one session in one tick."""

    SUCCESS = "SUCCESS"
    NEED_RETRY = "NEED_RETRY"
    EXPIRED = "EXPIRED"
    GIVE_UP = "GIVE_UP"
    SKIPPED = "SKIPPED"


class KernelMatchType(Enum):
    """How a promotion handler's kernel condition is matched."""

    ALL = "all"
    ANY = "any"
    NOT_ANY = "not_any"


TERMINAL_SESSION_STATUSES: frozenset[SessionStatus] = frozenset(
    {SessionStatus.TERMINATED, SessionStatus.CANCELLED, SessionStatus.ERROR}
)
TERMINAL_KERNEL_STATUSES: frozenset[KernelStatus] = frozenset(
    {KernelStatus.TERMINATED, KernelStatus.CANCELLED, KernelStatus.ERROR}
)
