"""Turning a handler's result into one :class:`Change` per target. Pure: no I/O.

The rules, in order, for each target of a lifecycle handler:

* listed in ``successes``: SUCCESS, with the ``success`` transition;
* listed in ``outcomes``: that named outcome, with its declared transition;
  if it charges a budget (``budgets``), GIVE_UP instead when the charge
  goes past the budget's limit;
* listed in ``failures``: if the failure names a budget (``budgets``), that
  budget's spending + 1, else the handler's ``try_count + 1``; GIVE_UP if
  that exceeds the budget's limit (``max_retries`` for tries); else EXPIRED
  if the timeout has passed; else NEED_RETRY;
* a GIVE_UP of a spent budget takes the budget's own ``give_up`` transition
  when it declares one, else the handler's;
* listed in ``skipped`` or not mentioned: EXPIRED if the timeout has passed;
  otherwise a skipped target gets a SKIPPED row and an unmentioned one nothing.
  Neither changes ``try_count``.

``try_count`` is the running handler's own count (tries are per handler).
An EXPIRED or GIVE_UP transition that sends an entity back to an earlier
status of its kind is a *requeue*; past the entity's requeue budget it goes
to its kind's :attr:`~drover.model.kinds.EntityKind.limit_status` instead,
with ``status_info`` :data:`~drover.model.rules.REQUEUE_LIMIT`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from drover.model.kinds import EntityKind
from drover.model.plan import Change, TryCount
from drover.model.rules import REQUEUE_LIMIT
from drover.model.status import SchedulingResult
from drover.model.values import (
    HandlerOptions,
    HandlerResult,
    NewEntity,
    StatusInfoRule,
    StatusTransitions,
    Target,
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


def expired(session: Target, options: HandlerOptions, now: float) -> bool:
    """Whether ``session`` has held its status longer than ``options.timeout``."""
    if options.timeout is None:
        return False
    # Whole microseconds: the datetime round-trip must not turn "exactly the
    # timeout" into "just past it".
    changed: float = session.status_changed_at.timestamp()
    elapsed_us = round(now * 1_000_000) - round(changed * 1_000_000)
    return elapsed_us > round(options.timeout * 1_000_000)


def _elapsed(session: Target, now: float) -> str:
    return f"{now - session.status_changed_at.timestamp():.0f}s"


def classify(
    targets: Sequence[Target],
    result: HandlerResult,
    transitions: StatusTransitions,
    options_for: Callable[[Target], HandlerOptions],
    now: float,
    max_requeues_for: Callable[[Target], int | None] = lambda _s: None,
    *,
    kind: EntityKind,
    budget_limit_for: Callable[[Target, str], int | None] = lambda _s, _b: None,
) -> list[Change]:
    """Decide each target's result class and transition from a (valid) handler result.

    ``targets`` are :class:`~drover.kinds.sessions.values.SessionWithKernels` or
    :class:`~drover.model.values.Entity` values of ``kind``.
    ``max_requeues_for`` gives an entity's requeue budget (``None``: no
    limit); ``budget_limit_for(entity, name)`` a named budget's limit.
    """
    successes = set(result.successes)
    failures = set(result.failures)
    skipped = set(result.skipped)
    named = result.outcomes
    charged = result.budgets
    patches = result.data
    ends = result.terminate
    results = result.results
    messages, codes = result.messages, result.error_codes
    infos, placements = result.status_infos, result.placements
    creating: dict[str, list[NewEntity]] = {}
    for new in result.create:
        creator = new.creator
        if creator is not None:
            creating.setdefault(creator, []).append(new)
    creates = {k: tuple(v) for k, v in creating.items()}
    none: tuple[NewEntity, ...] = ()
    by_outcome: dict[Any, Any] = {
        _SUCCESS: transitions.success,
        _NEED_RETRY: transitions.need_retry,
        _EXPIRED: transitions.expired,
        _GIVE_UP: transitions.give_up,
    }
    by_outcome.update(transitions.outcomes)
    own_give_up = {b.name: b.give_up for b in kind.budgets if b.give_up is not None}
    kind_name = kind.name
    changes: list[Change] = []
    for session in targets:
        sid = session.id
        options = options_for(session)
        message = messages.get(sid)
        code = codes.get(sid)
        budget: str | None = None
        spent_budget: str | None = None
        outcome: SchedulingResult | str
        if sid in successes:
            outcome, tries = _SUCCESS, _RESET
        elif sid in named:
            outcome, tries = named[sid], _KEEP
            budget = charged.get(sid)
            if budget is not None:
                over, note, budget = _charge(session, budget, budget_limit_for)
                if over:
                    spent_budget = charged[sid]
                    outcome = _GIVE_UP
                    message = _join(message, note)
        elif sid in failures:
            budget = charged.get(sid)
            if budget is not None:
                tries = _KEEP
                over, note, budget = _charge(session, budget, budget_limit_for)
                if over:
                    spent_budget = charged[sid]
            else:
                tries = _INCREMENT
                count = session.try_count + 1
                over = options.max_retries is not None and count > options.max_retries
                note = f"failed {count} times (max_retries={options.max_retries})"
            if over:
                outcome = _GIVE_UP
                message = _join(message, note)
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
        if spent_budget is not None and spent_budget in own_give_up:
            transition = own_give_up[spent_budget]
        to_status = transition.to if transition is not None else None
        to_children = transition.children if transition is not None else None
        moves = to_status is not None and to_status != session.status
        info = StatusInfoRule(default=infos[sid]) if moves and sid in infos else None
        requeue = False
        if (
            to_status is not None
            and moves
            and outcome in _SENDS_BACK
            and kind.is_requeue(session.status, to_status)
        ):
            limit = max_requeues_for(session)
            if limit is None or session.requeues < limit:
                requeue = True
            else:
                end = kind.limit_status
                message = _join(
                    message,
                    f"sent back to {to_status} {session.requeues} time(s) already "
                    f"(max_requeues={limit}): {end} instead",
                )
                to_status, to_children = end, None
                info = StatusInfoRule(default=REQUEUE_LIMIT)
        placed: tuple[tuple[str, str], ...] = ()
        if placements:
            placed = tuple((k.id, placements[k.id]) for k in session.children if k.id in placements)
        # A change of status resets every try count in storage.
        changes.append(
            Change(
                sid,
                session.status,
                outcome,
                to_status,
                to_children,
                tries,
                message,
                code,
                info,
                requeue,
                placed,
                budget,
                patches.get(sid),
                creates.get(sid, none),
                tuple(ends[sid]) if sid in ends else (),
                results.get(sid),
                transition.children_info if transition is not None else None,
                result.claims.get(sid) if moves else None,
                kind=kind_name,
            )
        )
    return changes


def _charge(
    target: Target, budget: str, budget_limit_for: Callable[[Target, str], int | None]
) -> tuple[bool, str, str | None]:
    """Charge ``budget`` once: (past its limit?, the note for history, the budget to spend).

    A budget already past its limit is not spent again (the row just repeats).
    """
    use = (target.budgets or {}).get(budget)
    count = (use.used if use is not None else 0) + 1
    limit = budget_limit_for(target, budget)
    over = limit is not None and count > limit
    if over and limit is not None and count > limit + 1:
        return True, f"budget {budget!r} is spent (limit={limit})", None
    bound = "no limit" if limit is None else f"limit={limit}"
    return over, f"spent budget {budget!r} {count} times ({bound})", budget


def _timeout_note(session: Target, options: HandlerOptions, now: float) -> str:
    return f"in {session.status} for {_elapsed(session, now)} (timeout={options.timeout:g}s)"


def _join(first: str | None, second: str) -> str:
    return f"{first}; {second}" if first else second
