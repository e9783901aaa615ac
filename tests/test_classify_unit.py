"""``classify`` on its own: a pure function from targets and a result to changes. No database."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum

import pytest
from attrs import evolve as attrs_evolve

from drover import (
    Budget,
    BudgetUse,
    Entity,
    EntityKind,
    HandlerOptions,
    HandlerResult,
    KernelInfo,
    KernelStatus,
    SchedulingResult,
    SessionStatus,
    SessionWithKernels,
    StatusInfoRule,
    StatusTransitions,
    Transition,
    TransitionStatus,
)
from drover.coordinator.classify import Rules, classify, decide
from drover.kinds.sessions import SESSION
from drover.model.outcomes import UNMENTIONED, Reported, TargetOutcome
from drover.model.plan import Change, TryCount

R = SchedulingResult
S = SessionStatus
K = KernelStatus
NOW = 1_000_000.0

TRANSITIONS = StatusTransitions(
    success=TransitionStatus(S.PREPARING, K.PREPARING),
    need_retry=None,
    expired=TransitionStatus(S.PENDING, K.PENDING),
    give_up=TransitionStatus(S.PENDING, K.PENDING),
)


def session(
    sid: str = "s1",
    *,
    status: S = S.SCHEDULED,
    tries: int = 0,
    held: float = 0.0,
    requeues: int = 0,
    spec: dict[str, object] | None = None,
) -> SessionWithKernels:
    at = datetime.fromtimestamp(NOW - held, UTC)
    return SessionWithKernels(
        id=sid,
        name=sid,
        status=status,
        status_changed_at=at,
        try_count=tries,
        priority=0,
        created_at=at,
        spec=spec or {},
        status_info=None,
        result=None,
        requeues=requeues,
    )


def run(
    targets: list[SessionWithKernels],
    result: HandlerResult,
    options: HandlerOptions = HandlerOptions(max_retries=2, timeout=60.0),  # noqa: B008
    max_requeues: int | None = 3,
):
    rules = Rules(
        kind=SESSION,
        transitions=TRANSITIONS,
        now=NOW,
        options_for=lambda s: options,
        max_requeues_for=lambda s: max_requeues,
    )
    return classify(targets, result.per_target(), rules)


def test_success_takes_the_success_transition_and_resets_tries():
    (change,) = run([session(tries=1)], HandlerResult(successes=["s1"]))
    assert (change.result, change.to_status, change.to_children, change.try_count) == (
        R.SUCCESS,
        S.PREPARING,
        K.PREPARING,
        TryCount.RESET,
    )


@pytest.mark.parametrize(
    ("tries", "held", "expected"),
    [
        (0, 0.0, R.NEED_RETRY),
        (1, 0.0, R.NEED_RETRY),
        (2, 0.0, R.GIVE_UP),  # the third failure is past max_retries=2
        (0, 61.0, R.EXPIRED),
        (2, 61.0, R.GIVE_UP),  # exhausted retries win over the timeout
    ],
)
def test_failures_are_judged_on_tries_then_timeout(tries, held, expected):
    (change,) = run([session(tries=tries, held=held)], HandlerResult(failures=["s1"]))
    assert (change.result, change.try_count) == (expected, TryCount.INCREMENT)


def test_the_timeout_is_exclusive_to_the_microsecond():
    at_limit = run([session(held=60.0)], HandlerResult(skipped=["s1"]))
    past = run([session(held=60.000001)], HandlerResult(skipped=["s1"]))
    assert [c.result for c in at_limit] == [R.SKIPPED]
    assert [(c.result, c.error_code) for c in past] == [(R.EXPIRED, "timeout")]


def test_unmentioned_targets_produce_nothing_until_they_expire():
    assert run([session()], HandlerResult()) == []
    (change,) = run([session(held=120.0)], HandlerResult())
    assert change.result == R.EXPIRED
    assert "in SCHEDULED for 120s (timeout=60s)" in (change.message or "")


def test_skips_keep_tries_and_status():
    (change,) = run([session(tries=1)], HandlerResult(skipped=["s1"], messages={"s1": "busy"}))
    assert (change.result, change.to_status, change.try_count, change.message) == (
        R.SKIPPED,
        None,
        TryCount.KEEP,
        "busy",
    )


def test_a_requeue_is_counted():
    (change,) = run([session(held=61.0, requeues=1)], HandlerResult())
    assert (change.to_status, change.requeue) == (S.PENDING, True)


def test_past_the_requeue_budget_the_session_ends_in_error():
    (change,) = run([session(tries=2, requeues=3)], HandlerResult(failures=["s1"]))
    assert change.result == R.GIVE_UP
    assert (change.to_status, change.to_children, change.requeue) == (S.ERROR, None, False)
    assert change.status_info == StatusInfoRule(default="REQUEUE_LIMIT")
    assert "sent back to PENDING 3 time(s) already (max_requeues=3): ERROR instead" in (
        change.message or ""
    )


def test_no_requeue_budget_never_ends_a_session():
    (change,) = run([session(held=61.0, requeues=50)], HandlerResult(), max_requeues=None)
    assert (change.to_status, change.requeue) == (S.PENDING, True)


def test_status_infos_apply_only_to_status_changes():
    result = HandlerResult(successes=["a"], skipped=["b"], status_infos={"a": "FAST", "b": "SLOW"})
    changes = {c.entity_id: c for c in run([session("a"), session("b")], result)}
    assert changes["a"].status_info == StatusInfoRule(default="FAST")
    assert changes["b"].status_info is None


def test_per_session_options_are_used():
    slow = HandlerOptions(max_retries=None, timeout=None)
    rules = Rules(kind=SESSION, transitions=TRANSITIONS, now=NOW, options_for=lambda s: slow)
    (change,) = classify(
        [session(tries=99, held=1e6)], HandlerResult(failures=["s1"]).per_target(), rules
    )
    assert change.result == R.NEED_RETRY


def test_a_change_is_built_by_keyword_only():
    """Two ``str | None`` fields side by side must never swap silently by position."""
    with pytest.raises(TypeError):
        Change("s1", "session", S.SCHEDULED, R.SUCCESS)  # type: ignore[misc]
    change = Change(entity_id="s1", kind="session", from_status=S.SCHEDULED, result=R.SUCCESS)
    assert (change.message, change.error_code, change.to_status) == (None, None, None)


# decide() on its own: one target, one outcome, the tick's rules.


class Attempt(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PREEMPTED = "PREEMPTED"


ATTEMPT = EntityKind(
    "attempt",
    Attempt,
    terminal={Attempt.SUCCEEDED, Attempt.FAILED, Attempt.PREEMPTED},
    budgets=(
        Budget("failure", 1),
        Budget("preemption", 2, give_up=Transition(Attempt.PREEMPTED)),
    ),
)
ATTEMPT_RULES = Rules(
    kind=ATTEMPT,
    transitions=StatusTransitions(
        success=Transition(Attempt.SUCCEEDED),
        give_up=Transition(Attempt.FAILED),
        outcomes={"lost": Transition(Attempt.QUEUED)},
    ),
    now=NOW,
    options_for=lambda t: HandlerOptions(max_retries=1, timeout=60.0),
    budget_limit_for=lambda t, name: {"failure": 1, "preemption": 2}[name],
)


def attempt(*, tries: int = 0, held: float = 0.0, used: dict[str, int] | None = None) -> Entity:
    at = datetime.fromtimestamp(NOW - held, UTC)
    limits = {"failure": 1, "preemption": 2}
    return Entity(
        id="a1",
        kind="attempt",
        status=Attempt.RUNNING,
        status_changed_at=at,
        try_count=tries,
        priority=0,
        created_at=at,
        spec={},
        data=None,
        status_info=None,
        result=None,
        budgets={n: BudgetUse(used=(used or {}).get(n, 0), limit=v) for n, v in limits.items()},
    )


def decided(outcome: TargetOutcome, target: Entity | None = None) -> Change | None:
    return decide(target or attempt(), outcome, ATTEMPT_RULES)


def test_decide_a_success():
    change = decided(TargetOutcome(reported=Reported.SUCCESS, data={"k": 1}, status_info="OK"))
    assert change is not None
    assert (change.result, change.to_status, change.try_count, change.data) == (
        R.SUCCESS,
        Attempt.SUCCEEDED,
        TryCount.RESET,
        {"k": 1},
    )
    assert (change.kind, change.from_status, change.status_info) == (
        "attempt",
        Attempt.RUNNING,
        StatusInfoRule(default="OK"),
    )


def test_decide_a_retry_and_a_give_up_by_tries():
    failure = TargetOutcome(reported=Reported.FAILURE, message="boom", error_code="E")
    retry = decided(failure)
    assert retry is not None
    assert (retry.result, retry.to_status, retry.try_count, retry.message, retry.error_code) == (
        R.NEED_RETRY,
        None,
        TryCount.INCREMENT,
        "boom",
        "E",
    )
    given_up = decided(failure, attempt(tries=1))
    assert given_up is not None
    assert (given_up.result, given_up.to_status, given_up.message) == (
        R.GIVE_UP,
        Attempt.FAILED,
        "boom; failed 2 times (max_retries=1)",
    )


def test_decide_a_give_up_by_a_budget_with_its_own_give_up():
    """Past its limit, the preemption budget ends the attempt PREEMPTED, not FAILED."""
    charged = TargetOutcome(reported=Reported.FAILURE, budget="preemption")
    spent = decided(charged, attempt(tries=5, used={"preemption": 1}))
    assert spent is not None
    assert (spent.result, spent.budget, spent.try_count) == (
        R.NEED_RETRY,
        "preemption",
        TryCount.KEEP,
    )
    over = decided(charged, attempt(used={"preemption": 2}))
    assert over is not None
    assert (over.result, over.to_status, over.budget, over.message) == (
        R.GIVE_UP,
        Attempt.PREEMPTED,
        "preemption",
        "spent budget 'preemption' 3 times (limit=2)",
    )
    # A budget without a give_up of its own takes the handler's.
    failure = TargetOutcome(reported=Reported.FAILURE, budget="failure")
    failed = decided(failure, attempt(used={"failure": 1}))
    assert failed is not None
    assert (failed.result, failed.to_status) == (R.GIVE_UP, Attempt.FAILED)


def test_decide_expired_skipped_and_unmentioned():
    skipped = TargetOutcome(reported=Reported.SKIPPED, message="busy")
    kept = decided(skipped)
    assert kept is not None
    assert (kept.result, kept.to_status, kept.message) == (R.SKIPPED, None, "busy")
    assert decided(UNMENTIONED) is None
    expired = decided(skipped, attempt(held=61.0))
    assert expired is not None
    assert (expired.result, expired.error_code, expired.message) == (
        R.EXPIRED,
        "timeout",
        "busy; in RUNNING for 61s (timeout=60s)",
    )
    late = decided(UNMENTIONED, attempt(held=61.0))
    assert late is not None
    assert (late.result, late.error_code) == (R.EXPIRED, "timeout")


def test_decide_a_named_outcome_sends_back_and_counts_a_requeue():
    named = TargetOutcome(reported=Reported.NAMED, name="lost", terminates=("r1",))
    change = decided(named)
    assert change is not None
    assert (change.result, change.to_status, change.requeue, change.terminates) == (
        "lost",
        Attempt.QUEUED,
        False,  # only EXPIRED and GIVE_UP transitions spend requeues
        ("r1",),
    )


def test_decide_a_requeue_past_the_limit_goes_to_the_limit_status():
    rules = Rules(
        kind=SESSION,
        transitions=TRANSITIONS,
        now=NOW,
        options_for=lambda s: HandlerOptions(timeout=60.0),
        max_requeues_for=lambda s: 3,
    )
    change = decide(session(held=61.0, requeues=3), UNMENTIONED, rules)
    assert change is not None
    assert (change.result, change.to_status, change.to_children, change.requeue) == (
        R.EXPIRED,
        S.ERROR,
        None,
        False,
    )
    assert change.status_info == StatusInfoRule(default="REQUEUE_LIMIT")
    assert change.message == (
        "in SCHEDULED for 61s (timeout=60s); "
        "sent back to PENDING 3 time(s) already (max_requeues=3): ERROR instead"
    )
    below = decide(session(held=61.0, requeues=2), UNMENTIONED, rules)
    assert below is not None
    assert (below.to_status, below.requeue) == (S.PENDING, True)


def _kernel_of(sid: str, n: int) -> KernelInfo:
    at = datetime.fromtimestamp(NOW, UTC)
    return KernelInfo(f"{sid}-k{n}", sid, K.PENDING, at, None, {})


@pytest.mark.parametrize(
    "success",
    [
        TransitionStatus(S.PREPARING, K.PREPARING),
        Transition("PREPARING", "PREPARING", status_info="READY"),
        Transition("SCHEDULED"),
        None,
    ],
    ids=["plain", "with-status-info", "into-its-own-status", "no-transition"],
)
def test_plain_successes_are_the_changes_decide_makes(success):
    """classify builds a plain success's change itself; it is exactly decide()'s, with the
    placements, whatever the success transition sets."""
    targets = [
        attrs_evolve(session(f"s{i}"), kernels=(_kernel_of(f"s{i}", 0), _kernel_of(f"s{i}", 1)))
        for i in range(3)
    ]
    result = HandlerResult(
        successes=["s0", "s1"],
        failures=["s2"],
        messages={"s1": "noted"},
        placements={"s0-k1": "agent-a", "s1-k0": "agent-b"},
    )
    rules = Rules(
        kind=SESSION,
        transitions=StatusTransitions(success=success, need_retry=None),
        now=NOW,
        options_for=lambda s: HandlerOptions(max_retries=2, timeout=60.0),
    )
    outcomes = result.per_target()
    expected = [
        decide(t, outcomes.get(t.id), rules, p)
        for t, p in zip(
            targets, [(("s0-k1", "agent-a"),), (("s1-k0", "agent-b"),), ()], strict=True
        )
    ]
    assert classify(targets, outcomes, rules) == [c for c in expected if c is not None]
