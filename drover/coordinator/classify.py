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

# Enum members read once: attribute access on an enum class is a descriptor call.
_SUCCESS, _NEED_RETRY = SchedulingResult.SUCCESS, SchedulingResult.NEED_RETRY
_EXPIRED, _GIVE_UP, _SKIPPED = (
    SchedulingResult.EXPIRED,
    SchedulingResult.GIVE_UP,
    SchedulingResult.SKIPPED,
)
_RESET, _INCREMENT, _KEEP = TryCount.RESET, TryCount.INCREMENT, TryCount.KEEP

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
    messages, codes = result.messages, result.error_codes
    infos, placements = result.status_infos, result.placements
    by_outcome = {
        _SUCCESS: transitions.success,
        _NEED_RETRY: transitions.need_retry,
        _EXPIRED: transitions.expired,
        _GIVE_UP: transitions.give_up,
    }
    changes: list[Change] = []
    for session in targets:
        sid = session.id
        options = options_for(session)
        message = messages.get(sid)
        code = codes.get(sid)
        if sid in successes:
            outcome, tries = _SUCCESS, _RESET
        elif sid in failures:
            tries = _INCREMENT
            count = session.try_count + 1
            if options.max_retries is not None and count > options.max_retries:
                outcome = _GIVE_UP
                message = _join(
                    message, f"failed {count} times (max_retries={options.max_retries})"
                )
            elif expired(session, options, now):
                outcome = _EXPIRED
                message = _join(message, _timeout_note(session, options, now))
            else:
                outcome = _NEED_RETRY
        elif expired(session, options, now):
            outcome, tries = _EXPIRED, _KEEP
            message = _join(message, _timeout_note(session, options, now))
            code = code or "timeout"
        elif sid in skipped:
            outcome, tries = _SKIPPED, _KEEP
        else:
            continue
        transition = by_outcome.get(outcome)
        to_session = transition.session if transition is not None else None
        to_kernel = transition.kernel if transition is not None else None
        moves = to_session is not None and to_session != session.status
        info = StatusInfoRule(default=infos[sid]) if moves and sid in infos else None
        requeue = False
        if (
            to_session is not None
            and moves
            and outcome in _SENDS_BACK
            and is_requeue(session.status, to_session)
        ):
            limit = max_requeues_for(session)
            if limit is None or session.requeues < limit:
                requeue = True
            else:
                message = _join(
                    message,
                    f"sent back to {to_session} {session.requeues} time(s) already "
                    f"(max_requeues={limit}): {REQUEUE_LIMIT_STATUS} instead",
                )
                to_session, to_kernel = REQUEUE_LIMIT_STATUS, None
                info = StatusInfoRule(default=REQUEUE_LIMIT)
        placed: tuple[tuple[str, str], ...] = ()
        if placements:
            placed = tuple((k.id, placements[k.id]) for k in session.kernels if k.id in placements)
        # A change of session status resets every try count in storage.
        changes.append(
            Change(
                sid,
                session.status,
                outcome,
                to_session,
                to_kernel,
                tries,
                message,
                code,
                info,
                requeue,
                placed,
            )
        )
    return changes


def _timeout_note(session: SessionWithKernels, options: HandlerOptions, now: float) -> str:
    return f"in {session.status} for {_elapsed(session, now)} (timeout={options.timeout:g}s)"


def _join(first: str | None, second: str) -> str:
    return f"{first}; {second}" if first else second
