"""drover-max-duration: stop RUNNING sessions once ``spec["max_duration"]`` seconds have passed.

The plugin registers one lifecycle handler, ``enforce-max-duration``. It
targets RUNNING sessions and reports as a success every session that has been
RUNNING for longer than its spec's ``max_duration`` (seconds). The coordinator
then moves it to TERMINATING, with ``status_info`` ``MAX_DURATION_EXCEEDED``,
and the built-in ``terminate-sessions`` destroys its kernels.

The handler declares a candidate filter that drover compiles into the fetch's
SQL: only RUNNING sessions whose ``max_duration`` has passed (or whose value
is not a number, to report it) are fetched, so sessions still within their
limit never take the places of those past it, however many run at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from drover import (
    AnyOf,
    Clock,
    Field,
    HandlerOptions,
    HandlerRegistry,
    HandlerResult,
    KernelStatus,
    LifecycleHandler,
    SessionStatus,
    SessionWithKernels,
    StatusAge,
    StatusTransitions,
    TransitionStatus,
    hookimpl,
)

__all__ = [
    "HANDLER_NAME",
    "INVALID_MAX_DURATION",
    "SPEC_KEY",
    "STATUS_INFO",
    "STATUS_INFO_MEANINGS",
    "EnforceMaxDuration",
    "drover_register_handlers",
    "grace_of",
    "max_duration_of",
]

#: The handler's name: its key in ``[handlers.<name>]`` and in history rows.
HANDLER_NAME = "enforce-max-duration"
#: The session spec key holding the limit, in seconds.
SPEC_KEY = "max_duration"
#: ``status_info`` of a session this handler stopped.
STATUS_INFO = "MAX_DURATION_EXCEEDED"
#: Error code of the history row written for a session whose limit is not valid.
INVALID_MAX_DURATION = "invalid-max-duration"
#: What STATUS_INFO means, shown by ``drover why`` for a session this handler stopped.
STATUS_INFO_MEANINGS = {STATUS_INFO: f"it ran longer than its spec's {SPEC_KEY}"}


def max_duration_of(spec: Mapping[str, Any]) -> float | None:
    """Return the spec's ``max_duration`` in seconds, or ``None`` if it sets none.

    Raises ``ValueError`` if the value is not a finite number greater than 0.
    ``bool`` is refused although it is an ``int`` subclass: ``max_duration =
    true`` is a mistake, not one second.
    """
    value = spec.get(SPEC_KEY)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{SPEC_KEY} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{SPEC_KEY} must be a finite number of seconds > 0, not {value!r}")
    return float(value)


def grace_of(settings: Mapping[str, Any]) -> float:
    """``[handlers.enforce-max-duration.settings] grace``: extra seconds past every limit.

    0 when unset. Raises ``ValueError`` (which stops the daemon at start-up,
    naming the problem) if it is not a finite number >= 0.
    """
    value = settings.get("grace", 0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{HANDLER_NAME} setting grace must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{HANDLER_NAME} setting grace must be >= 0, not {value!r}")
    return float(value)


def _micros(seconds: float) -> int:
    # Compare in whole microseconds, as the coordinator does for timeouts:
    # status_changed_at round-trips through a datetime, and float noise must
    # not turn "exactly the limit" into "just past it".
    return round(seconds * 1_000_000)


class EnforceMaxDuration(LifecycleHandler):
    """RUNNING sessions past ``spec["max_duration"]`` seconds: SUCCESS, so TERMINATING.

    Nothing is done to the kernels here: ``terminate-sessions`` destroys the
    kernels of TERMINATING sessions. The handler only decides *when*, so it
    cannot fail except on a bad spec value.
    """

    #: ``drover why`` explains the status_info this handler writes with these words.
    status_info_meanings = STATUS_INFO_MEANINGS

    def __init__(self, clock: Clock, grace: float = 0.0) -> None:
        # The coordinator's clock, not time.time(): tests move it with
        # h.clock.advance(), and it is the clock status_changed_at was set by.
        self.clock = clock
        self.grace = grace

    @classmethod
    def name(cls) -> str:
        """``enforce-max-duration``."""
        return HANDLER_NAME

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        """RUNNING: the only status in which a session's run time is counted."""
        return frozenset({SessionStatus.RUNNING})

    @property
    def target_kernel_statuses(self) -> list[KernelStatus] | None:
        """No kernel filter: a session's run time does not depend on its kernels."""
        return None

    @property
    def candidate_filters(self) -> tuple[AnyOf]:
        """Only sessions past their ``max_duration``, or whose value is not a number."""
        return (AnyOf(StatusAge(spec_key=SPEC_KEY), Field("spec", (SPEC_KEY,), "not_number")),)

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """Success moves the session to TERMINATING; kernels are left to terminate-sessions."""
        return StatusTransitions(
            success=TransitionStatus(session=SessionStatus.TERMINATING),
            need_retry=None,
            expired=None,
            give_up=None,
        )

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """No retry limit and, above all, no timeout.

        A timeout would expire every RUNNING session this handler leaves
        unmentioned, that is every session still within its limit.
        """
        return HandlerOptions(max_retries=None, timeout=None)

    async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult:
        """Report the sessions whose ``max_duration`` has passed as successes."""
        now = _micros(self.clock.time())
        successes: list[str] = []
        failures: list[str] = []
        messages: dict[str, str] = {}
        codes: dict[str, str] = {}
        infos: dict[str, str] = {}
        for session in targets:
            try:
                limit = max_duration_of(session.spec)
            except ValueError as error:
                # Report a bad value once, as a failure with its reason in
                # history. The failure raises try_count above 0, where it
                # stays until the status changes (with only the built-in
                # handlers, nothing else resets it in RUNNING), so later ticks
                # leave the session unmentioned instead of writing every tick.
                if session.try_count == 0:
                    failures.append(session.id)
                    messages[session.id] = str(error)
                    codes[session.id] = INVALID_MAX_DURATION
                continue
            if limit is None:
                continue  # no limit: never ours to act on
            elapsed = now - _micros(session.status_changed_at.timestamp())
            if elapsed <= _micros(limit + self.grace):
                continue  # within its limit: unmentioned, so no row and no write
            successes.append(session.id)
            # Two decimals: whole seconds would print "RUNNING for 3s, longer
            # than max_duration=3s" for a session stopped 0.03 s past its limit.
            messages[session.id] = (
                f"RUNNING for {elapsed / 1_000_000:.2f}s, longer than {SPEC_KEY}={limit:g}s"
            )
            infos[session.id] = STATUS_INFO
        return HandlerResult(
            successes=successes,
            failures=failures,
            messages=messages,
            error_codes=codes,
            # Written into sessions.status_info by the coordinator, only for
            # sessions whose status this tick actually changes.
            status_infos=infos,
        )


@hookimpl
def drover_register_handlers(register: HandlerRegistry) -> None:
    """Register ``enforce-max-duration`` with the coordinator's clock and its own settings."""
    settings = register.context.settings_for(HANDLER_NAME)
    register(EnforceMaxDuration(register.context.clock, grace=grace_of(settings)))
