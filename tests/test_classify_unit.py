"""``classify`` on its own: a pure function from targets and a result to changes. No database."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from drover import (
    HandlerOptions,
    HandlerResult,
    KernelStatus,
    SchedulingResult,
    SessionStatus,
    SessionWithKernels,
    StatusInfoRule,
    StatusTransitions,
    TransitionStatus,
)
from drover.coordinator.classify import Rules, classify
from drover.kinds.sessions import SESSION
from drover.model.plan import TryCount

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
    from drover.model.plan import Change

    with pytest.raises(TypeError):
        Change("s1", "session", S.SCHEDULED, R.SUCCESS)  # type: ignore[misc]
    change = Change(entity_id="s1", kind="session", from_status=S.SCHEDULED, result=R.SUCCESS)
    assert (change.message, change.error_code, change.to_status) == (None, None, None)
