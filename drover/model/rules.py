"""The lifecycle's rules, each defined once, in Python.

Storage turns some of them into SQL (the promotion match, the kernels a
transition may move), ``drover why`` evaluates them on values it has read, and
the coordinator and the API decide with them; none of them is written twice.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from drover.model.status import (
    KERNEL_STATUS_ORDER,
    TERMINAL_KERNEL_STATUSES,
    TERMINAL_SESSION_STATUSES,
    KernelMatchType,
    KernelStatus,
    SessionStatus,
)

__all__ = [
    "DEFAULT_MAX_REQUEUES",
    "HOLDING_KERNEL_STATUSES",
    "MATCH_CONDITIONS",
    "NON_TERMINAL_KERNEL_STATUSES",
    "REQUEUE_LIMIT",
    "REQUEUE_LIMIT_STATUS",
    "MatchCondition",
    "Termination",
    "eligible_kernel_statuses",
    "is_requeue",
    "kernel_end_status",
    "promotion_matches",
    "termination_of",
]

NON_TERMINAL_KERNEL_STATUSES: frozenset[KernelStatus] = frozenset(
    s for s in KernelStatus if s not in TERMINAL_KERNEL_STATUSES
)
#: Kernel statuses that hold an agent's resources: placed, and neither PENDING nor ended.
HOLDING_KERNEL_STATUSES: frozenset[KernelStatus] = NON_TERMINAL_KERNEL_STATUSES - {
    KernelStatus.PENDING
}

#: Requeues allowed before a session is ended instead (configuration and spec override it).
DEFAULT_MAX_REQUEUES = 3
#: Where a session past its requeue budget goes, and the ``status_info`` it gets.
REQUEUE_LIMIT_STATUS = SessionStatus.ERROR
REQUEUE_LIMIT = "REQUEUE_LIMIT"

_SESSION_ORDER = {s: i for i, s in enumerate(SessionStatus)}


def eligible_kernel_statuses(target: KernelStatus) -> frozenset[KernelStatus]:
    """The kernel statuses a transition to ``target`` may move.

    Terminal kernels never move. A transition back to PENDING (rescheduling)
    moves every other live kernel. Any other transition moves only kernels that
    are *behind* ``target`` in lifecycle order, so a backend report that arrived
    first (say PREPARED, before the tick's PREPARING) is never lost.
    """
    if target in TERMINAL_KERNEL_STATUSES:
        return NON_TERMINAL_KERNEL_STATUSES
    if target == KernelStatus.PENDING:
        return NON_TERMINAL_KERNEL_STATUSES - {KernelStatus.PENDING}
    rank = KERNEL_STATUS_ORDER[target]
    return frozenset(s for s in NON_TERMINAL_KERNEL_STATUSES if KERNEL_STATUS_ORDER[s] < rank)


def kernel_end_status(session_status: SessionStatus) -> KernelStatus:
    """What the live kernels of a session that ends in ``session_status`` become.

    A session never ends with live kernels: a transition into a terminal
    session status that does not say what its kernels become ends them with
    the kernel status of the same name.
    """
    return KernelStatus(session_status.value)


def is_requeue(from_status: SessionStatus, to_status: SessionStatus) -> bool:
    """Whether moving ``from_status`` -> ``to_status`` sends a session back in its lifecycle."""
    return (
        to_status not in TERMINAL_SESSION_STATUSES
        and _SESSION_ORDER[to_status] < _SESSION_ORDER[from_status]
    )


@attrs.frozen
class Termination:
    """What a termination request does to a session in a given status."""

    to_session: SessionStatus
    to_kernel: KernelStatus | None
    message: str


def termination_of(status: SessionStatus, has_kernels: bool) -> Termination | None:
    """How a termination request moves a session in ``status``; ``None``: nothing to do.

    A PENDING session (and its kernels) is cancelled; any other live session
    goes to TERMINATING, where ``terminate-sessions`` stops its kernels, or
    straight to TERMINATED when it has none (nothing would ever promote it).
    An ended or already terminating session is left as it is.
    """
    if status in TERMINAL_SESSION_STATUSES or status == SessionStatus.TERMINATING:
        return None
    if status == SessionStatus.PENDING:
        return Termination(
            SessionStatus.CANCELLED,
            KernelStatus.CANCELLED,
            "termination requested: cancelled before it was scheduled",
        )
    if not has_kernels:
        return Termination(
            SessionStatus.TERMINATED, None, "termination requested: no kernels to stop"
        )
    return Termination(SessionStatus.TERMINATING, None, "termination requested")


@attrs.frozen
class MatchCondition:
    """A promotion match as conditions on a session's kernels; all that are set must hold."""

    #: The session has at least one kernel.
    needs_kernels: bool = False
    #: Some kernel is in the checked statuses.
    some_in: bool = False
    #: No kernel is in the checked statuses.
    none_in: bool = False
    #: No kernel is outside the checked statuses.
    none_outside: bool = False


#: ALL, ANY and NOT_ANY, defined once. A session without kernels never matches.
MATCH_CONDITIONS: dict[KernelMatchType, MatchCondition] = {
    KernelMatchType.ALL: MatchCondition(needs_kernels=True, none_outside=True),
    KernelMatchType.ANY: MatchCondition(some_in=True),
    KernelMatchType.NOT_ANY: MatchCondition(needs_kernels=True, none_in=True),
}


def promotion_matches(
    match: KernelMatchType, kernel_statuses: Iterable[KernelStatus], check: Iterable[KernelStatus]
) -> bool:
    """Whether a session whose kernels are in ``kernel_statuses`` meets the match."""
    statuses = list(kernel_statuses)
    checked = frozenset(check)
    condition = MATCH_CONDITIONS[match]
    inside = sum(1 for s in statuses if s in checked)
    return (
        (not condition.needs_kernels or bool(statuses))
        and (not condition.some_in or inside > 0)
        and (not condition.none_in or inside == 0)
        and (not condition.none_outside or inside == len(statuses))
    )
