"""Turning a handler's result into one :class:`Change` per target. Pure: no I/O.

The rules, in order, for each target of a lifecycle handler:

* listed in ``successes``: SUCCESS, with the ``success`` transition;
* listed in ``failures``: ``try_count + 1``; GIVE_UP if that exceeds
  ``max_retries``; else EXPIRED if the timeout has passed; else NEED_RETRY;
* listed in ``skipped`` or not mentioned: EXPIRED if the timeout has passed;
  otherwise a skipped target gets a SKIPPED row and an unmentioned one nothing.
  Neither changes ``try_count``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from drover.model.plan import Change, TryCount
from drover.model.status import SchedulingResult
from drover.model.values import (
    HandlerOptions,
    HandlerResult,
    SessionWithKernels,
    StatusInfoRule,
    StatusTransitions,
)

__all__ = ["classify", "expired"]


def expired(session: SessionWithKernels, options: HandlerOptions, now: float) -> bool:
    """Whether ``session`` has held its status longer than ``options.timeout``."""
    if options.timeout is None:
        return False
    # Whole microseconds: the datetime round-trip must not turn "exactly the
    # timeout" into "just past it".
    elapsed_us = round(now * 1_000_000) - round(session.status_changed_at.timestamp() * 1_000_000)
    return elapsed_us > round(options.timeout * 1_000_000)


def _elapsed(session: SessionWithKernels, now: float) -> str:
    return f"{now - session.status_changed_at.timestamp():.0f}s"


def classify(
    targets: Sequence[SessionWithKernels],
    result: HandlerResult,
    transitions: StatusTransitions,
    options_for: Callable[[SessionWithKernels], HandlerOptions],
    now: float,
) -> list[Change]:
    """Decide each target's result class and transition from a (valid) handler result."""
    successes = set(result.successes)
    failures = set(result.failures)
    skipped = set(result.skipped)
    changes: list[Change] = []
    infos = {sid: StatusInfoRule(default=text) for sid, text in result.status_infos.items()}
    for session in targets:
        sid = session.id
        options = options_for(session)
        message = result.messages.get(sid)
        code = result.error_codes.get(sid)
        if sid in successes:
            changes.append(
                _change(
                    session, SchedulingResult.SUCCESS, transitions, TryCount.RESET, message, code
                )
            )
        elif sid in failures:
            tries = session.try_count + 1
            if options.max_retries is not None and tries > options.max_retries:
                outcome = SchedulingResult.GIVE_UP
                message = _join(
                    message, f"failed {tries} times (max_retries={options.max_retries})"
                )
            elif expired(session, options, now):
                outcome = SchedulingResult.EXPIRED
                message = _join(
                    message,
                    f"in {session.status} for {_elapsed(session, now)} "
                    f"(timeout={options.timeout:g}s)",
                )
            else:
                outcome = SchedulingResult.NEED_RETRY
            changes.append(
                _change(session, outcome, transitions, TryCount.INCREMENT, message, code)
            )
        elif expired(session, options, now):
            assert options.timeout is not None
            note = (
                f"in {session.status} for {_elapsed(session, now)} (timeout={options.timeout:g}s)"
            )
            changes.append(
                _change(
                    session,
                    SchedulingResult.EXPIRED,
                    transitions,
                    TryCount.KEEP,
                    _join(message, note),
                    code or "timeout",
                )
            )
        elif sid in skipped:
            changes.append(
                _change(session, SchedulingResult.SKIPPED, None, TryCount.KEEP, message, code)
            )
    if infos:
        changes = [
            attrs.evolve(c, status_info=infos[c.session_id])
            if c.session_id in infos and c.changes_session
            else c
            for c in changes
        ]
    return changes


def _join(first: str | None, second: str) -> str:
    return f"{first}; {second}" if first else second


def _change(
    session: SessionWithKernels,
    outcome: SchedulingResult,
    transitions: StatusTransitions | None,
    try_count: TryCount,
    message: str | None,
    code: str | None,
) -> Change:
    transition = transitions.for_result(outcome) if transitions is not None else None
    to_session = transition.session if transition is not None else None
    to_kernel = transition.kernel if transition is not None else None
    # A change of session status resets try_count in storage whatever we ask here.
    return Change(
        session_id=session.id,
        from_status=session.status,
        result=outcome,
        to_session=to_session,
        to_kernel=to_kernel,
        try_count=try_count,
        message=message,
        error_code=code,
    )
