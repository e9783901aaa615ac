"""Budgets: a spent budget's own give-up, named outcomes that charge a budget, and what a
handler sees of its targets' budgets. A kind defined only here; both databases."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import pytest
from peers import Scripted, harness, succeed

from drover import (
    Budget,
    EntityKind,
    HandlerOptions,
    HandlerResult,
    InvalidHandlerError,
    NewEntity,
    SchedulingResult,
    StatusTransitions,
    Transition,
)
from drover.model.budgets import BudgetUse


class Attempt(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PREEMPTED = "PREEMPTED"


#: Iris-like: a failure budget that gives the handler's give-up, and a preemption budget
#: whose exhaustion ends the attempt PREEMPTED, whatever the handler declared.
ATTEMPT = EntityKind(
    "attempt",
    Attempt,
    terminal={Attempt.SUCCEEDED, Attempt.FAILED, Attempt.PREEMPTED},
    budgets=(
        Budget("failure", 1),
        Budget("preemption", 2, give_up=Transition(Attempt.PREEMPTED)),
    ),
)


class StartAttempts(Scripted):
    kind = "attempt"
    handler = "start-attempts"
    statuses = frozenset({Attempt.QUEUED})
    transitions = StatusTransitions(success=Transition(Attempt.RUNNING))


class RunAttempts(Scripted):
    kind = "attempt"
    handler = "run-attempts"
    statuses = frozenset({Attempt.RUNNING})
    transitions = StatusTransitions(
        success=Transition(Attempt.SUCCEEDED),
        need_retry=Transition(Attempt.QUEUED),
        give_up=Transition(Attempt.FAILED),
        outcomes={"preempted": Transition(Attempt.QUEUED)},
    )
    options = HandlerOptions(max_retries=None)


def preempt(targets: Sequence[Any]) -> HandlerResult:
    ids = [t.id for t in targets]
    return HandlerResult(
        outcomes=dict.fromkeys(ids, "preempted"), budgets=dict.fromkeys(ids, "preemption")
    )


def fail(targets: Sequence[Any]) -> HandlerResult:
    ids = [t.id for t in targets]
    return HandlerResult(failures=ids, budgets=dict.fromkeys(ids, "failure"))


def _run(make_harness: Any, run: RunAttempts, **kwargs: Any) -> Any:
    return harness(make_harness, StartAttempts(succeed), run, kinds=(ATTEMPT,), **kwargs)


async def test_a_named_outcome_charges_a_budget_whose_own_give_up_ends_the_entity(make_harness):
    run = RunAttempts(preempt)
    async with _run(make_harness, run) as h:
        attempt = await h.create("attempt")
        results = []
        for _ in range(3):
            await h.tick("start-attempts")
            results.append((await h.tick("run-attempts")).changes[0].result)
        # Two preemptions are within the budget and take the outcome's transition;
        # the third spends it and takes the budget's own give-up, not the handler's.
        assert results == ["preempted", "preempted", SchedulingResult.GIVE_UP]
        found = await h.get(attempt)
        assert (found.status, found.result) == (Attempt.PREEMPTED, "FAILURE")
        assert found.budgets == {"failure": BudgetUse(0, 1), "preemption": BudgetUse(3, 2)}
        rows = [(str(r.result), r.to_status) for r in await h.history(attempt)]
        assert rows[-3:] == [
            ("preempted", "QUEUED"),
            ("SUCCESS", "RUNNING"),
            ("GIVE_UP", "PREEMPTED"),
        ]
        last = (await h.history(attempt))[-1]
        assert "spent budget 'preemption' 3 times (limit=2)" in (last.message or "")


async def test_a_budget_without_its_own_give_up_takes_the_handlers(make_harness):
    run = RunAttempts(fail)
    async with _run(make_harness, run) as h:
        attempt = await h.create("attempt")
        results = []
        for _ in range(2):
            await h.tick("start-attempts")
            results.append((await h.tick("run-attempts")).changes[0].result)
        assert results == [SchedulingResult.NEED_RETRY, SchedulingResult.GIVE_UP]
        assert (await h.get(attempt)).status == Attempt.FAILED


async def test_a_handler_sees_each_budget_used_and_its_limit(make_harness):
    run = RunAttempts(preempt)
    async with _run(make_harness, run) as h:
        h.coordinator.kinds = h.coordinator.kinds.configured({"attempt": {"preemption": 5}})
        plain = await h.create("attempt", status=Attempt.RUNNING)
        own = await h.create("attempt", status=Attempt.RUNNING, spec={"budgets": {"failure": 4}})
        await h.tick("run-attempts")
        await h.tick("start-attempts")
        await h.tick("run-attempts")
        seen = {t.id: t.budgets for t in run.seen[-1]}
        # The storage read knows the kinds' own limits and the spec's.
        assert seen[plain] == {"failure": BudgetUse(0, 1), "preemption": BudgetUse(1, 2)}
        assert seen[own] == {"failure": BudgetUse(0, 4), "preemption": BudgetUse(1, 2)}
        assert seen[own]["failure"].left == 4
        assert str(seen[own]["preemption"]) == "1/2"


async def test_configured_limits_reach_what_handlers_see(database):
    """``[budgets.attempt]``: the coordinator judges, and handlers see, the same limit."""
    from peers import plugin

    from drover.app import App
    from drover.config import Config
    from drover.model.clock import ManualClock
    from drover.plugins.manager import make_plugin_manager

    run = RunAttempts(preempt)
    config = Config(
        database_url=database.url,
        database_schema=database.schema or "",
        budgets={"attempt": {"preemption": 7}},
    )
    pm = make_plugin_manager(plugins=[plugin(run, kinds=(ATTEMPT,))], include_builtins=False)
    app = App(config, clock=ManualClock(), plugin_manager=pm)
    await app.start(auto_upgrade=True)
    try:
        coordinator = app.coordinator
        assert coordinator is not None
        (attempt,) = await app.repository.seed_entities(
            [NewEntity("attempt", status=Attempt.RUNNING)]
        )
        await coordinator.tick("run-attempts")
        assert run.seen[0][0].budgets["preemption"] == BudgetUse(0, 7)
        found = await app.repository.get_entity(attempt)
        assert found.budgets == {"failure": BudgetUse(0, 1), "preemption": BudgetUse(1, 7)}
    finally:
        await app.close()
    with pytest.raises(InvalidHandlerError, match=r"unknown budget\(s\) \['retries'\]"):
        app.kinds.configured({"attempt": {"retries": 1}})


async def test_a_budget_charged_for_a_skipped_target_is_an_invalid_result(make_harness):
    run = RunAttempts(
        lambda ts: HandlerResult(skipped=[t.id for t in ts], budgets={t.id: "failure" for t in ts})
    )
    async with _run(make_harness, run) as h:
        attempt = await h.create("attempt", status=Attempt.RUNNING)
        report = await h.tick("run-attempts")
        assert report.error is not None
        assert "neither among the failures nor given a named outcome" in report.error
        assert (await h.get(attempt)).budgets == {
            "failure": BudgetUse(0, 1),
            "preemption": BudgetUse(0, 2),
        }


def test_a_budgets_give_up_must_name_a_status_of_its_kind():
    with pytest.raises(InvalidHandlerError, match="budget 'preemption' give_up names unknown"):
        EntityKind(
            "attempt",
            Attempt,
            terminal={Attempt.FAILED},
            budgets=(Budget("preemption", 2, give_up=Transition("EVICTED")),),
        )
