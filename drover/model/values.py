"""Frozen value types shared by handlers, the coordinator and storage."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

from drover.model.status import KernelStatus, SchedulingResult, SessionStatus

__all__ = [
    "CoordinatorInfo",
    "HandlerOptions",
    "HandlerResult",
    "HistoryRecord",
    "KernelHistoryRecord",
    "KernelInfo",
    "KernelReport",
    "SessionWithKernels",
    "StatusInfoRule",
    "StatusTransitions",
    "TerminationOutcome",
    "TransitionStatus",
]


def _str_list(value: Any) -> list[str]:
    return [str(v) for v in value]


def _str_map(value: Mapping[str, str] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value or {}).items()}


@attrs.frozen
class TransitionStatus:
    """Target statuses for one outcome. ``None`` on a side keeps that side's status."""

    session: SessionStatus | None = None
    kernel: KernelStatus | None = None


@attrs.frozen
class StatusTransitions:
    """A lifecycle handler's transitions per outcome. ``None`` keeps both statuses."""

    success: TransitionStatus | None = None
    need_retry: TransitionStatus | None = None
    expired: TransitionStatus | None = None
    give_up: TransitionStatus | None = None

    def for_result(self, result: SchedulingResult) -> TransitionStatus | None:
        """Return the transition declared for ``result`` (SKIPPED never transitions)."""
        return {
            SchedulingResult.SUCCESS: self.success,
            SchedulingResult.NEED_RETRY: self.need_retry,
            SchedulingResult.EXPIRED: self.expired,
            SchedulingResult.GIVE_UP: self.give_up,
        }.get(result)


@attrs.frozen
class HandlerResult:
    """What a handler says about the sessions it was given.

    ``successes``, ``failures`` and ``skipped`` hold session ids. ``messages``
    and ``error_codes`` map a session id to the reason, which the coordinator
    copies into the history row. ``status_infos`` (optional, a drover
    addition) maps a session id to the ``status_info`` it gets *if* this tick
    changes its status (say ``MAX_DURATION_EXCEEDED``). ``placements`` maps a
    kernel id to the agent it was placed on: it is written in the same
    transaction as the outcome, and only for sessions whose outcome was
    applied (a scheduler's decisions).
    """

    successes: list[str] = attrs.field(factory=list, converter=_str_list)
    failures: list[str] = attrs.field(factory=list, converter=_str_list)
    skipped: list[str] = attrs.field(factory=list, converter=_str_list)
    messages: dict[str, str] = attrs.field(factory=dict, converter=_str_map)
    error_codes: dict[str, str] = attrs.field(factory=dict, converter=_str_map)
    status_infos: dict[str, str] = attrs.field(factory=dict, converter=_str_map)
    placements: dict[str, str] = attrs.field(factory=dict, converter=_str_map)


@attrs.frozen
class HandlerOptions:
    """How the coordinator judges a handler's outcomes.

    ``max_retries``: consecutive failures allowed before GIVE_UP (``None``: no limit).
    ``timeout``: seconds a session may stay in a status this handler owns before
    EXPIRED (``None``: never). ``batch_size``: sessions fetched per tick.
    """

    max_retries: int | None = 5
    timeout: float | None = None
    batch_size: int = 1000


@attrs.frozen
class StatusInfoRule:
    """How a promotion handler sets ``status_info`` on the sessions it promotes.

    The first ``(kernel_statuses, text)`` pair for which any kernel of the
    session is in ``kernel_statuses`` wins; otherwise ``default`` is used.
    """

    default: str | None = None
    if_any_kernel: tuple[tuple[frozenset[KernelStatus], str], ...] = ()


@attrs.frozen
class KernelInfo:
    """One kernel as a handler sees it.

    Like every value drover hands out, treat ``spec`` and ``runtime`` as
    read-only: kernels read together with identical specs share one object.
    """

    id: str
    session_id: str
    status: KernelStatus
    status_changed_at: datetime
    agent_id: str | None
    spec: dict[str, Any]
    exit_code: int | None = None
    status_info: str | None = None
    #: Backend bookkeeping (pid, process identity, log paths); ``None`` if none.
    runtime: dict[str, Any] | None = None


@attrs.frozen
class SessionWithKernels:
    """One session with all of its kernels, as a handler sees it.

    ``try_count`` is the number of failures of the handler being run on this
    session in its current status (tries are counted per handler and reset by
    a status change). Read outside a tick (``get_session``, listings), it is
    the highest count of any handler; ``tries`` has every handler's count.
    ``requeues`` counts the times the session was sent back to an earlier
    status by expiry or give-up.
    """

    id: str
    name: str
    status: SessionStatus
    status_changed_at: datetime
    try_count: int
    priority: int
    created_at: datetime
    spec: dict[str, Any]
    status_info: str | None
    result: str | None
    kernels: tuple[KernelInfo, ...] = ()
    tries: dict[str, int] = attrs.field(factory=dict)
    requeues: int = 0


@attrs.frozen
class HistoryRecord:
    """One row of ``scheduling_history``."""

    id: int
    session_id: str
    handler: str
    result: SchedulingResult
    from_status: SessionStatus
    to_status: SessionStatus
    error_code: str | None
    message: str | None
    attempts: int
    created_at: datetime
    updated_at: datetime


@attrs.frozen
class KernelHistoryRecord:
    """One row of ``kernel_history``: a single kernel status change."""

    id: int
    kernel_id: str
    session_id: str
    source: str
    from_status: KernelStatus
    to_status: KernelStatus
    message: str | None
    created_at: datetime


@attrs.frozen
class KernelReport:
    """A backend's report of one kernel's new status.

    ``expected``: apply only if the kernel is currently in one of these statuses
    (compare-and-set); ``None`` applies to any non-terminal kernel. A terminal
    kernel never changes again.
    """

    kernel_id: str
    status: KernelStatus
    expected: frozenset[KernelStatus] | None = None
    exit_code: int | None = None
    message: str | None = None
    #: Replaces the kernel's ``runtime`` bookkeeping when given.
    runtime: dict[str, Any] | None = None


@attrs.frozen
class CoordinatorInfo:
    """One coordinator process, as its heartbeat row records it."""

    id: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    version: str
    stopped_at: datetime | None


@attrs.frozen
class TerminationOutcome:
    """What a termination request did to one session."""

    session_id: str
    from_status: SessionStatus
    to_status: SessionStatus
    changed: bool
