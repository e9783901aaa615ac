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
from drover.inspection.why import diagnose_entity
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

    from drover import make_plugin_manager
    from drover.app import App
    from drover.config import Config
    from drover.model.clock import ManualClock

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


def test_a_budgets_own_give_up_is_an_edge_of_the_state_machine():
    from drover.plugins.graph import check_graph, edges_of

    handlers = {"start-attempts": StartAttempts(), "run-attempts": RunAttempts()}
    edges = edges_of(handlers, kind=ATTEMPT)
    assert ("RUNNING", "PREEMPTED", "run-attempts", "budget:preemption") in {
        (e.source, e.target, e.handler, e.outcome) for e in edges
    }
    # PREEMPTED is reached only through the budget: no "unreachable" warning for it.
    assert not [w for w in check_graph(handlers, ATTEMPT) if w.status == "PREEMPTED"]


# -- budgets that refill on entering given statuses, and budgets without a limit -----------


class Trial(StrEnum):
    QUEUED = "QUEUED"
    PROVISIONING = "PROVISIONING"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"


#: dstack-like: ``attempts`` counts requeues without a limit and starts over once a trial
#: reaches PROVISIONING; ``strikes`` is limited and refilled there too.
TRIAL = EntityKind(
    "trial",
    Trial,
    terminal={Trial.DONE, Trial.FAILED},
    budgets=(
        Budget("attempts", None, resets_on={Trial.PROVISIONING}),
        Budget("strikes", 2, resets_on={Trial.PROVISIONING}),
    ),
)


class ProvisionTrials(Scripted):
    kind = "trial"
    handler = "provision-trials"
    statuses = frozenset({Trial.QUEUED})
    transitions = StatusTransitions(
        success=Transition(Trial.PROVISIONING), outcomes={"requeued": Transition()}
    )


class RunTrials(Scripted):
    kind = "trial"
    handler = "run-trials"
    statuses = frozenset({Trial.PROVISIONING, Trial.RUNNING})
    transitions = StatusTransitions(
        success=Transition(Trial.RUNNING),
        give_up=Transition(Trial.FAILED),
        outcomes={"lost": Transition(Trial.QUEUED)},
    )
    options = HandlerOptions(max_retries=None)


class RestartTrials(Scripted):
    """QUEUED -> RUNNING without PROVISIONING (nothing refills on the way)."""

    kind = "trial"
    handler = "restart-trials"
    statuses = frozenset({Trial.QUEUED})
    transitions = StatusTransitions(success=Transition(Trial.RUNNING))


class RetryIntoProvisioning(Scripted):
    kind = "trial"
    handler = "retry-trials"
    statuses = frozenset({Trial.QUEUED})
    transitions = StatusTransitions(need_retry=Transition(Trial.PROVISIONING))
    options = HandlerOptions(max_retries=None)


def charge(outcome: str, *budgets: str) -> Any:
    def result(targets: Sequence[Any]) -> HandlerResult:
        ids = [t.id for t in targets]
        return HandlerResult(
            outcomes=dict.fromkeys(ids, outcome),
            budgets={i: b for i in ids for b in budgets},
        )

    return result


def _trials(make_harness: Any, *handlers: object) -> Any:
    return harness(make_harness, *handlers, kinds=(TRIAL,))


async def test_a_budget_without_a_limit_counts_and_never_gives_up(make_harness):
    requeue = ProvisionTrials(charge("requeued", "attempts"))
    async with _trials(make_harness, requeue) as h:
        trial = await h.create("trial")
        for _ in range(6):
            report = await h.tick("provision-trials")
            assert [c.result for c in report.changes] == ["requeued"]
        found = await h.get(trial)
        assert found.status == Trial.QUEUED
        assert found.budgets == {"attempts": BudgetUse(6, None), "strikes": BudgetUse(0, 2)}
        assert (str(found.budgets["attempts"]), found.budgets["attempts"].left) == ("6/∞", None)
        last = (await h.history(trial))[-1]
        assert (str(last.result), last.attempts) == ("requeued", 6)
        # drover why prints it the same way.
        why = diagnose_entity(found, await h.history(trial), h.coordinator.handlers, TRIAL, 0)
        assert "budgets spent (used/limit): attempts 6/∞, strikes 0/2" in why.lines


async def test_a_budget_refills_on_entering_its_resets_on_statuses(make_harness):
    """Charged by each loss (RUNNING -> QUEUED) and each requeue, refilled once
    PROVISIONING is reached: a limited budget then gives up only after more losses in a
    row than its limit."""
    lose = RunTrials(charge("lost", "strikes"))
    steps = [charge("requeued", "attempts"), charge("requeued", "attempts"), succeed]
    provision = ProvisionTrials(lambda ts: steps.pop(0)(ts))
    async with _trials(make_harness, provision, lose) as h:
        trial = await h.create("trial", status=Trial.RUNNING)
        await h.tick("run-trials")
        await h.tick("provision-trials")
        await h.tick("provision-trials")
        found = await h.get(trial)
        assert (found.status, found.budgets) == (
            Trial.QUEUED,
            {"attempts": BudgetUse(2, None), "strikes": BudgetUse(1, 2)},
        )
        await h.tick("provision-trials")  # QUEUED -> PROVISIONING: both start over
        found = await h.get(trial)
        assert (found.status, found.budgets) == (
            Trial.PROVISIONING,
            {"attempts": BudgetUse(0, None), "strikes": BudgetUse(0, 2)},
        )
    # Lost three times without reaching PROVISIONING: the third loss spends 'strikes'.
    async with _trials(make_harness, RestartTrials(succeed), lose) as h:
        trial = await h.create("trial", status=Trial.RUNNING)
        results = []
        for _ in range(3):
            results.append(str((await h.tick("run-trials")).changes[0].result))
            await h.tick("restart-trials")
        assert results == ["lost", "lost", "GIVE_UP"]
        found = await h.get(trial)
        assert (found.status, found.budgets["strikes"]) == (Trial.FAILED, BudgetUse(3, 2))


async def test_a_charge_that_enters_a_refilling_status_is_not_spent(make_harness):
    # Charged and refilled by the same move: the move wins, the budget is full.
    retry = RetryIntoProvisioning(
        lambda ts: HandlerResult(
            failures=[t.id for t in ts], budgets={t.id: "attempts" for t in ts}
        )
    )
    async with _trials(make_harness, retry) as h:
        trial = await h.create("trial")
        await h.tick("retry-trials")
        found = await h.get(trial)
        assert (found.status, found.budgets["attempts"]) == (
            Trial.PROVISIONING,
            BudgetUse(0, None),
        )


def test_resets_on_must_name_statuses_of_its_kind_and_not_go_with_resets():
    with pytest.raises(InvalidHandlerError, match="budget 'attempts' resets_on names unknown"):
        EntityKind(
            "trial",
            Trial,
            terminal={Trial.DONE},
            budgets=(Budget("attempts", None, resets_on={"STARTED"}),),
        )
    with pytest.raises(InvalidHandlerError, match="has resets=True and resets_on"):
        EntityKind(
            "trial",
            Trial,
            terminal={Trial.DONE},
            budgets=(Budget("attempts", 3, resets=True, resets_on={Trial.RUNNING}),),
        )
    with pytest.raises(InvalidHandlerError, match="limit must be a whole number or None"):
        EntityKind(
            "trial",
            Trial,
            terminal={Trial.DONE},
            budgets=(Budget("attempts", "3"),),  # type: ignore[arg-type]
        )
