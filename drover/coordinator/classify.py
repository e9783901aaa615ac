"""Turning a handler's result into one :class:`Change` per target. Pure: no I/O.

The rules, in order, for each target of a lifecycle handler:

* listed in ``successes``: SUCCESS, with the ``success`` transition;
* listed in ``failures``: ``try_count + 1``; GIVE_UP if that exceeds
  ``max_retries``; else EXPIRED if the timeout has passed; else NEED_RETRY;
* listed in ``skipped`` or not mentioned: EXPIRED if the timeout has passed;
  otherwise a skipped target gets a SKIPPED row and an unmentioned one nothing.
  Neither changes ``try_count``.

``try_count`` is the running handler's own count (tries are per handler).
An EXPIRED or GIVE_UP transition that sends a session back to an earlier
status is a *requeue*; past the session's requeue budget the session goes to
:data:`~drover.model.rules.REQUEUE_LIMIT_STATUS` instead, with ``status_info``
:data:`~drover.model.rules.REQUEUE_LIMIT`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from drover.model.plan import Change, TryCount
from drover.model.rules import REQUEUE_LIMIT, REQUEUE_LIMIT_STATUS, is_requeue
from drover.model.status import SchedulingResult
from drover.model.values import (
    HandlerOptions,
    HandlerResult,
    SessionWithKernels,
    StatusInfoRule,
    StatusTransitions,
)

__all__ = ["classify", "expired"]

#: The outcomes whose transition may send a session back (and spend a requeue).
_SENDS_BACK = frozenset({SchedulingResult.EXPIRED, SchedulingResult.GIVE_UP})


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
    max_requeues_for: Callable[[SessionWithKernels], int | None] = lambda _s: None,
) -> list[Change]:
    """Decide each target's result class and transition from a (valid) handler result.

    ``max_requeues_for`` gives a session's requeue budget (``None``: no limit).
    """
    successes = set(result.successes)
    failures = set(result.failures)
    skipped = set(result.skipped)
    changes: list[Change] = []
    by_id = {t.id: t for t in targets}
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
    return [
        _judge_requeue(c, by_id[c.session_id], max_requeues_for)
        if c.result in _SENDS_BACK and c.changes_session
        else c
        for c in changes
    ]


def _judge_requeue(
    change: Change,
    session: SessionWithKernels,
    max_requeues_for: Callable[[SessionWithKernels], int | None],
) -> Change:
    """Count a requeue, or end the session when its requeue budget is spent."""
    if change.to_session is None or not is_requeue(change.from_status, change.to_session):
        return change
    limit = max_requeues_for(session)
    if limit is None or session.requeues < limit:
        return attrs.evolve(change, requeue=True)
    note = (
        f"sent back to {change.to_session} {session.requeues} time(s) already "
        f"(max_requeues={limit}): {REQUEUE_LIMIT_STATUS} instead"
    )
    return attrs.evolve(
        change,
        to_session=REQUEUE_LIMIT_STATUS,
        to_kernel=None,
        status_info=StatusInfoRule(default=REQUEUE_LIMIT),
        message=_join(change.message, note),
    )


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
