"""The generic result classes of history and the promotion matches.

A kind's statuses are its own ``StrEnum``, declared with the kind (the
session kind's in :mod:`drover.kinds.sessions.values`).
"""

from __future__ import annotations

from enum import Enum, StrEnum

from drover.model.deprecation import moved_names

__all__ = ["KernelMatchType", "SchedulingResult"]

# The built-in kinds' statuses moved to their packages: the deployments' during 0.1 (they
# are back here, deprecated, in 0.2), the sessions' in 0.2.
__getattr__ = moved_names(
    __name__,
    {
        **{
            name: "drover.kinds.sessions.values"
            for name in (
                "SessionStatus",
                "KernelStatus",
                "TERMINAL_SESSION_STATUSES",
                "TERMINAL_KERNEL_STATUSES",
            )
        },
        "EndpointLifecycle": "drover.kinds.deployments.status",
        "RouteStatus": "drover.kinds.deployments.status",
    },
)


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
