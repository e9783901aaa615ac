"""Turning a handler's result into one :class:`Change` per target. Pure: no I/O.

:func:`classify` takes each target's outcome from the result's per-target view
(:meth:`~drover.model.values.HandlerResult.per_target`) and hands it to
:func:`decide`, with the tick's :class:`Rules`. The rules, in order, for each
target of a lifecycle handler:

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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from drover.model.kinds import EntityKind
from drover.model.outcomes import SUCCEEDED, UNMENTIONED, Reported, TargetOutcome, TargetOutcomes
from drover.model.plan import Change, TryCount
from drover.model.rules import REQUEUE_LIMIT
from drover.model.status import SchedulingResult
from drover.model.values import (
    HandlerOptions,
    StatusInfoRule,
    StatusTransitions,
    Target,
    Transition,
)

__all__ = ["Rules", "classify", "decide", "expired"]

# Enum members read once: attribute access on an enum class is a descriptor call.
_SUCCESS, _NEED_RETRY = SchedulingResult.SUCCESS, SchedulingResult.NEED_RETRY
_EXPIRED, _GIVE_UP, _SKIPPED = (
    SchedulingResult.EXPIRED,
    SchedulingResult.GIVE_UP,
    SchedulingResult.SKIPPED,
)
_RESET, _INCREMENT, _KEEP = TryCount.RESET, TryCount.INCREMENT, TryCount.KEEP
_SUCCEEDED, _FAILED, _NAMED = Reported.SUCCESS, Reported.FAILURE, Reported.NAMED
_WAS_SKIPPED = Reported.SKIPPED

#: The outcomes whose transition may send a session back (and spend a requeue).
_SENDS_BACK = frozenset({SchedulingResult.EXPIRED, SchedulingResult.GIVE_UP})


#: What a child without a placement maps to (a placement's agent is never this object).
_UNPLACED: Any = object()


def _no_limit(_target: Target) -> int | None:
    return None


def _no_budget_limit(_target: Target, _budget: str) -> int | None:
    return None


@attrs.frozen(kw_only=True)
class Rules:
    """Everything one tick judges its targets' outcomes by, built once per tick.

    ``transitions`` are the handler's, ``options_for`` gives a target's
    options (the handler's, with its spec's overrides), ``now`` the tick's
    clock reading, ``max_requeues_for`` a target's requeue budget (``None``:
    no limit) and ``budget_limit_for(target, name)`` a named budget's limit.
    """

    kind: EntityKind
    transitions: StatusTransitions
    now: float
    options_for: Callable[[Target], HandlerOptions]
    max_requeues_for: Callable[[Target], int | None] = _no_limit
    budget_limit_for: Callable[[Target, str], int | None] = _no_budget_limit
    #: The transition of each result class and named outcome.
    by_result: Mapping[SchedulingResult | str, Transition | None] = attrs.field(init=False)
    #: The ``give_up`` transition of each budget that declares its own.
    own_give_up: Mapping[str, Transition] = attrs.field(init=False)

    @by_result.default
    def _by_result(self) -> Mapping[SchedulingResult | str, Transition | None]:
        found: dict[SchedulingResult | str, Transition | None] = {
            _SUCCESS: self.transitions.success,
            _NEED_RETRY: self.transitions.need_retry,
            _EXPIRED: self.transitions.expired,
            _GIVE_UP: self.transitions.give_up,
        }
        found.update(self.transitions.outcomes)
        return found

    @own_give_up.default
    def _own_give_up(self) -> Mapping[str, Transition]:
        return {b.name: b.give_up for b in self.kind.budgets if b.give_up is not None}


def expired(session: Target, options: HandlerOptions, now: float) -> bool:
    """Whether ``session`` has held its status longer than ``options.timeout``."""
    if options.timeout is None:
        return False
    # Whole microseconds: the datetime round-trip must not turn "exactly the
    # timeout" into "just past it".
    changed: float = session.status_changed_at.timestamp()
    elapsed_us = round(now * 1_000_000) - round(changed * 1_000_000)
    return elapsed_us > round(options.timeout * 1_000_000)


def classify(targets: Sequence[Target], outcomes: TargetOutcomes, rules: Rules) -> list[Change]:
    """One :class:`Change` per target whose outcome changes anything, from a valid result.

    ``targets`` are :class:`~drover.kinds.sessions.values.SessionWithKernels` or
    :class:`~drover.model.values.Entity` values of ``rules.kind``.
    """
    found = outcomes.by_id.get
    placements = outcomes.placements
    agent_of = placements.get
    # A plain success is the change decide() makes of it, built without its checks:
    # the success transition, tries reset, nothing else (unless the transition sets
    # status_info, which then depends on the target: decide() does it).
    success = rules.by_result.get(_SUCCESS)
    plain = success is None or success.status_info is None
    to_status = to_children = children_info = None
    if success is not None:
        to_status, to_children = success.to, success.children
        children_info = success.children_info
    kind = rules.kind.name
    changes: list[Change] = []
    for target in targets:
        placed: tuple[tuple[str, str], ...] = ()
        if placements:
            # A list built in place, one lookup per child: a generator costs a frame
            # resume per item, for every target of a scheduler's tick.
            placed = tuple(
                [
                    (k.id, a)
                    for k in target.children
                    if (a := agent_of(k.id, _UNPLACED)) is not _UNPLACED
                ]
            )
        outcome = found(target.id, UNMENTIONED)
        if outcome is SUCCEEDED and plain:
            changes.append(
                _plain_change(
                    target, kind, _SUCCESS, to_status, to_children, children_info, _RESET, placed
                )
            )
            continue
        change = decide(target, outcome, rules, placed)
        if change is not None:
            changes.append(change)
    return changes


def _plain_change(
    target: Target,
    kind: str,
    result: SchedulingResult | str,
    to_status: str | None,
    to_children: str | None,
    children_info: str | None,
    tries: TryCount,
    placements: tuple[tuple[str, str], ...],
) -> Change:
    # The common change, a plain one (classify's plain successes, decide()'s plain
    # outcomes), passes only the fields it sets: CPython 3.11 spends about 45 ns per
    # keyword argument, and this runs for every target.
    return Change(
        entity_id=target.id,
        kind=kind,
        from_status=target.status,
        result=result,
        to_status=to_status,
        to_children=to_children,
        children_info=children_info,
        try_count=tries,
        placements=placements,
    )


def decide(
    target: Target,
    outcome: TargetOutcome,
    rules: Rules,
    placements: tuple[tuple[str, str], ...] = (),
) -> Change | None:
    """The change ``outcome`` makes to ``target`` under ``rules`` (``None``: nothing at all).

    ``placements`` are the ``(child id, agent id)`` pairs the result placed
    among the target's children. Pure: it reads nothing but its arguments.
    """
    reported = outcome.reported
    message, code = outcome.message, outcome.error_code
    tries, budget, spent = _KEEP, None, None
    result: SchedulingResult | str
    if reported is _SUCCEEDED:
        result, tries = _SUCCESS, _RESET
    elif reported is _NAMED and outcome.name is not None:
        result, message, budget, spent = _named(target, outcome.name, outcome, rules)
    elif reported is _FAILED:
        result, tries, message, budget, spent = _failed(target, outcome, rules)
    else:
        options = rules.options_for(target)
        if expired(target, options, rules.now):
            result, code = _EXPIRED, code or "timeout"
            message = _join(message, _timeout_note(target, options, rules.now))
        elif reported is _WAS_SKIPPED:
            result = _SKIPPED
        else:
            return None
    transition = rules.by_result.get(result)
    if spent is not None:
        transition = rules.own_give_up.get(spent, transition)
    to_status = to_children = children_info = info = None
    if transition is not None:
        to_status, to_children = transition.to, transition.children
        children_info = transition.children_info
    moves = to_status is not None and to_status != target.status
    # A named outcome into the status the entity is already in re-enters it: its
    # status_info is rewritten (what changed within the status: a DEGRADED
    # deployment's healthy count, say). No other outcome sets it without a move.
    if outcome.status_info is not None and (
        moves or (to_status is not None and reported is _NAMED)
    ):
        info = StatusInfoRule(default=outcome.status_info)
    elif moves and transition is not None and transition.status_info is not None:
        info = StatusInfoRule(default=transition.status_info)
    requeue = False
    if to_status is not None and moves and result in _SENDS_BACK:
        requeue, to_status, to_children, info, message = _requeue(
            target, to_status, to_children, info, message, rules
        )
    # A change of status resets every try count in storage.
    if (
        message is None
        and code is None
        and info is None
        and budget is None
        and not requeue
        and outcome.data is None
        and not outcome.creates
        and outcome.terminates is None
        and outcome.result is None
        and outcome.claims is None
    ):
        return _plain_change(
            target,
            rules.kind.name,
            result,
            to_status,
            to_children,
            children_info,
            tries,
            placements,
        )
    return Change(
        entity_id=target.id,
        kind=rules.kind.name,
        from_status=target.status,
        result=result,
        to_status=to_status,
        to_children=to_children,
        children_info=children_info,
        try_count=tries,
        message=message,
        error_code=code,
        status_info=info,
        requeue=requeue,
        budget=budget,
        placements=placements,
        data=outcome.data,
        creates=outcome.creates,
        terminates=outcome.terminates or (),
        sets_result=outcome.result,
        claims=outcome.claims if moves else None,
    )


def _named(
    target: Target, name: str, outcome: TargetOutcome, rules: Rules
) -> tuple[SchedulingResult | str, str | None, str | None, str | None]:
    """A named outcome's (result, message, budget spent, budget spent past its limit): past
    the limit of the budget it charges, GIVE_UP instead."""
    if outcome.budget is None:
        return name, outcome.message, None, None
    over, note, budget = _charge(target, outcome.budget, rules)
    if over:
        return _GIVE_UP, _join(outcome.message, note), budget, outcome.budget
    return name, outcome.message, budget, None


def _failed(
    target: Target, outcome: TargetOutcome, rules: Rules
) -> tuple[SchedulingResult, TryCount, str | None, str | None, str | None]:
    """A failure's (result, tries, message, budget spent, budget spent past its limit)."""
    options = rules.options_for(target)
    message, budget = outcome.message, outcome.budget
    if budget is not None:
        tries, spent = _KEEP, budget
        over, note, budget = _charge(target, budget, rules)
    else:
        tries, spent = _INCREMENT, None
        count = target.try_count + 1
        over = options.max_retries is not None and count > options.max_retries
        note = f"failed {count} times (max_retries={options.max_retries})"
    if over:
        return _GIVE_UP, tries, _join(message, note), budget, spent
    if expired(target, options, rules.now):
        message = _join(message, _timeout_note(target, options, rules.now))
        return _EXPIRED, tries, message, budget, None
    return _NEED_RETRY, tries, message, budget, None


def _charge(target: Target, budget: str, rules: Rules) -> tuple[bool, str, str | None]:
    """Charge ``budget`` once: (past its limit?, the note for history, the budget to spend).

    A budget already past its limit is not spent again (the row just repeats).
    """
    use = (target.budgets or {}).get(budget)
    count = (use.used if use is not None else 0) + 1
    limit = rules.budget_limit_for(target, budget)
    over = limit is not None and count > limit
    if over and limit is not None and count > limit + 1:
        return True, f"budget {budget!r} is spent (limit={limit})", None
    bound = "no limit" if limit is None else f"limit={limit}"
    return over, f"spent budget {budget!r} {count} times ({bound})", budget


def _requeue(
    target: Target,
    to_status: str,
    to_children: str | None,
    info: StatusInfoRule | None,
    message: str | None,
    rules: Rules,
) -> tuple[bool, str | None, str | None, StatusInfoRule | None, str | None]:
    """A move of an EXPIRED or GIVE_UP outcome, as ``(requeue, to_status, to_children,
    status_info, message)``: sending ``target`` back in its lifecycle is a requeue, or, past
    its requeue budget, a move to its kind's limit status instead."""
    if not rules.kind.is_requeue(target.status, to_status):
        return False, to_status, to_children, info, message
    limit = rules.max_requeues_for(target)
    if limit is None or target.requeues < limit:
        return True, to_status, to_children, info, message
    end = rules.kind.limit_status
    past = (
        f"sent back to {to_status} {target.requeues} time(s) already "
        f"(max_requeues={limit}): {end} instead"
    )
    return False, end, None, StatusInfoRule(default=REQUEUE_LIMIT), _join(message, past)


def _timeout_note(session: Target, options: HandlerOptions, now: float) -> str:
    elapsed = f"{now - session.status_changed_at.timestamp():.0f}s"
    return f"in {session.status} for {elapsed} (timeout={options.timeout:g}s)"


def _join(first: str | None, second: str) -> str:
    return f"{first}; {second}" if first else second
