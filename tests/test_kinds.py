"""Entity kinds: a plugin's own lifecycle runs on the same engine as sessions.

Two kinds are defined only here, ``job`` and its child ``task``: if the
engine had a session-only path, these tests would find it. Every test runs
on SQLite and PostgreSQL, through real ticks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any, ClassVar

import pytest

from drover import (
    Budget,
    ChildCount,
    DeclaredHandler,
    DependenciesSucceeded,
    Entity,
    EntityKind,
    Field,
    HandlerOptions,
    HandlerResult,
    InvalidHandlerError,
    KernelMatchType,
    NewEntity,
    PromotionRule,
    SchedulingResult,
    StatusAge,
    StatusTransitions,
    TerminationRule,
    Transition,
    hookimpl,
)
from drover.model.budgets import BudgetUse


class Job(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    CANCELLING = "CANCELLING"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class Task(StrEnum):
    PENDING = "PENDING"
    WORKING = "WORKING"
    DONE = "DONE"
    FAILED = "FAILED"


JOB = EntityKind(
    "job",
    Job,
    terminal={Job.DONE, Job.FAILED, Job.CANCELLED},
    success={Job.DONE},
    budgets=(Budget("failure", 2), Budget("preemption", 3)),
    termination=(
        TerminationRule(Job.CANCELLED, {Job.QUEUED}, children=Task.FAILED),
        TerminationRule(Job.CANCELLING, {Job.RUNNING}),
    ),
)
TASK = EntityKind("task", Task, terminal={Task.DONE, Task.FAILED}, parent="job")

Script = Callable[[Sequence[Entity]], HandlerResult]


class _Scripted(DeclaredHandler):
    """A job (or task) handler whose result the test scripts."""

    handler: ClassVar[str]
    statuses: ClassVar[frozenset[str]]
    transitions: ClassVar[StatusTransitions]
    filters: ClassVar[tuple[Any, ...]] = ()
    batch: ClassVar[int] = 1000

    def __init__(self, script: Script | None = None) -> None:
        self.script: Script = script or (lambda targets: HandlerResult())
        self.seen: list[list[Entity]] = []

    @classmethod
    def default_options(cls) -> HandlerOptions:
        return HandlerOptions(max_retries=1, batch_size=cls.batch)

    async def execute(self, targets: Sequence[Any]) -> HandlerResult:
        self.seen.append(list(targets))
        return self.script(targets)


class StartJobs(_Scripted):
    kind = "job"
    handler = "start-jobs"
    statuses = frozenset({Job.QUEUED})
    transitions = StatusTransitions(
        success=Transition(Job.RUNNING),
        give_up=Transition(Job.FAILED),
        outcomes={"stale": Transition(Job.CANCELLED)},
    )


class RunJobs(_Scripted):
    kind = "job"
    handler = "run-jobs"
    statuses = frozenset({Job.RUNNING})
    transitions = StatusTransitions(
        success=Transition(Job.DONE),
        need_retry=Transition(Job.QUEUED),
        give_up=Transition(Job.FAILED),
    )


class RunTasks(_Scripted):
    kind = "task"
    handler = "run-tasks"
    statuses = frozenset({Task.PENDING})
    transitions = StatusTransitions(success=Transition(Task.DONE), give_up=Transition(Task.FAILED))


FINISH_JOBS = PromotionRule(
    "finish-jobs", {Job.RUNNING}, {Task.DONE}, KernelMatchType.ALL, Job.DONE, kind="job"
)


def plugin(*handlers: object) -> object:
    class _Plugin:
        @hookimpl
        def drover_register_kinds(self, register: Any) -> None:
            register(JOB, TASK)

        @hookimpl
        def drover_register_handlers(self, register: Any) -> None:
            register(*handlers)

    return _Plugin()


def harness(make_harness: Any, *handlers: object, **kwargs: Any) -> Any:
    return make_harness(plugins=[plugin(*handlers)], include_builtin_handlers=False, **kwargs)


async def test_a_plugin_kind_runs_its_lifecycle_with_history(make_harness):
    start = StartJobs(lambda ts: HandlerResult(successes=[t.id for t in ts]))
    run = RunJobs(lambda ts: HandlerResult(successes=[t.id for t in ts]))
    async with harness(make_harness, start, run) as h:
        job = await h.create("job", spec={"cmd": "x"})
        assert (await h.get(job)).status == Job.QUEUED
        await h.run_until_settled()
        found = await h.get(job)
        assert (found.kind, found.status, found.result) == ("job", "DONE", "SUCCESS")
        rows = [
            (r.handler, str(r.result), r.from_status, r.to_status) for r in await h.history(job)
        ]
        assert rows == [
            ("api", "CREATED", "QUEUED", "QUEUED"),
            ("start-jobs", "SUCCESS", "QUEUED", "RUNNING"),
            ("run-jobs", "SUCCESS", "RUNNING", "DONE"),
        ]
        assert all(r.kind == "job" for r in await h.history(job))
        # The targets were Entity values of the kind, not sessions.
        (target,) = start.seen[0]
        assert isinstance(target, Entity)
        assert target.kind == "job"
        assert target.spec == {"cmd": "x"}


async def test_named_outcome_takes_its_transition_and_history_records_its_name(make_harness):
    start = StartJobs(lambda ts: HandlerResult(outcomes={t.id: "stale" for t in ts}))
    async with harness(make_harness, start) as h:
        job = await h.create("job")
        report = await h.tick("start-jobs")
        assert report.counts == {"stale": 1}
        assert (await h.get(job)).status == Job.CANCELLED
        last = (await h.history(job))[-1]
        assert (last.result, last.from_status, last.to_status) == ("stale", "QUEUED", "CANCELLED")


async def test_an_undeclared_outcome_is_an_invalid_result_and_skips(make_harness):
    start = StartJobs(lambda ts: HandlerResult(outcomes={t.id: "vanished" for t in ts}))
    async with harness(make_harness, start) as h:
        job = await h.create("job")
        report = await h.tick("start-jobs")
        assert report.error is not None
        assert "outcome 'vanished'" in report.error
        assert "is not declared" in report.error
        assert (await h.get(job)).status == Job.QUEUED
        assert (await h.history(job))[-1].result == SchedulingResult.SKIPPED


async def test_two_named_budgets_are_counted_apart_and_give_up_when_spent(make_harness):
    """Iris: preemptions and failures have budgets of their own; spending one spares the other."""
    plan: list[str] = []

    def script(ts: Sequence[Entity]) -> HandlerResult:
        budget = plan.pop(0)
        ids = [t.id for t in ts]
        return HandlerResult(failures=ids, budgets=dict.fromkeys(ids, budget))

    start = StartJobs(lambda ts: HandlerResult(successes=[t.id for t in ts]))
    run = RunJobs(script)
    async with harness(make_harness, start, run) as h:
        job = await h.create("job")
        plan[:] = ["preemption", "preemption", "failure", "preemption", "failure", "failure"]
        results = []
        for _ in range(6):
            await h.tick("start-jobs")
            report = await h.tick("run-jobs")
            results.append(report.changes[0].result)
        # 3 preemptions and 2 failures are within budget; the third failure is not.
        assert results == [SchedulingResult.NEED_RETRY] * 5 + [SchedulingResult.GIVE_UP]
        found = await h.get(job)
        assert found.status == Job.FAILED
        assert found.result == "FAILURE"
        assert found.budgets == {"preemption": BudgetUse(3, 3), "failure": BudgetUse(3, 2)}
        # Per-handler tries were never charged: the budgets took the failures.
        assert found.tries == {}
        last = (await h.history(job))[-1]
        assert "spent budget 'failure' 3 times (limit=2)" in (last.message or "")


async def test_a_budget_limit_comes_from_the_spec_before_the_configuration(make_harness):
    run = RunJobs(
        lambda ts: HandlerResult(
            failures=[t.id for t in ts], budgets={t.id: "preemption" for t in ts}
        )
    )
    async with harness(make_harness, run) as h:
        h.coordinator.kinds = h.coordinator.kinds.configured({"job": {"preemption": 1}})
        job = await h.create("job", status=Job.RUNNING, spec={"budgets": {"preemption": 0}})
        report = await h.tick("run-jobs")
        assert report.changes[0].result == SchedulingResult.GIVE_UP
        assert (await h.get(job)).status == Job.FAILED
        # Without a spec limit, the configured 1 (not the kind's 3) applies.
        other = await h.create("job", status=Job.RUNNING)
        assert (await h.tick("run-jobs")).changes[0].result == SchedulingResult.NEED_RETRY
        await _force_status(h, other, Job.QUEUED, Job.RUNNING)
        assert (await h.tick("run-jobs")).changes[0].result == SchedulingResult.GIVE_UP


async def _force_status(h: Any, entity_id: str, old: str, new: str) -> None:
    """Move an entity as a one-off handler of its kind would (through the apply)."""
    from drover.model.plan import Change

    change = Change(
        entity_id=entity_id,
        from_status=old,
        result=SchedulingResult.SUCCESS,
        to_status=new,
        kind="job",
    )
    await h.repository.apply("test", [change], now=h.clock.time())


async def test_children_created_in_the_apply_and_moved_by_their_own_handlers(make_harness):
    def split(ts: Sequence[Entity]) -> HandlerResult:
        made = [
            NewEntity("task", {"n": n}, parent_id=t.id) for t in ts for n in range(t.spec["tasks"])
        ]
        return HandlerResult(successes=[t.id for t in ts], create=made)

    start = StartJobs(split)
    tasks = RunTasks(lambda ts: HandlerResult(successes=[t.id for t in ts]))
    async with harness(make_harness, start, tasks, FINISH_JOBS) as h:
        job = await h.create("job", spec={"tasks": 3})
        await h.tick("start-jobs")
        found = await h.get(job)
        assert found.status == Job.RUNNING
        assert [(c.kind, c.status, c.spec) for c in found.children] == [
            ("task", "PENDING", {"n": 0}),
            ("task", "PENDING", {"n": 1}),
            ("task", "PENDING", {"n": 2}),
        ]
        created = await h.history(found.children[0].id)
        assert [(r.handler, r.result) for r in created] == [("start-jobs", "CREATED")]
        await h.run_until_settled()
        found = await h.get(job)
        assert found.status == Job.DONE
        assert found.result == "SUCCESS"
        assert {c.status for c in found.children} == {"DONE"}
        # The tasks' moves are recorded with their own handler as the source.
        changes = await h.repository.kernel_history(session_id=job)
        assert [(c.source, c.from_status, c.to_status) for c in changes] == [
            ("run-tasks", "PENDING", "DONE")
        ] * 3
        rows = await h.history(found.children[0].id)
        assert [(r.handler, str(r.result), r.to_status) for r in rows][-1] == (
            "run-tasks",
            "SUCCESS",
            "DONE",
        )


async def test_nothing_is_created_when_the_creator_lost_its_compare_and_set(make_harness):
    holder: dict[str, Any] = {}

    def racing(ts: Sequence[Entity]) -> HandlerResult:
        return HandlerResult(
            successes=[t.id for t in ts],
            create=[NewEntity("task", parent_id=t.id) for t in ts],
            data={t.id: {"seen": True} for t in ts},
        )

    class Racing(StartJobs):
        async def execute(self, targets: Sequence[Any]) -> HandlerResult:
            # The job is cancelled while the handler works.
            await holder["h"].request_termination(targets[0].id)
            return racing(targets)

    async with harness(make_harness, Racing()) as h:
        holder["h"] = h
        job = await h.create("job")
        report = await h.tick("start-jobs")
        assert report.changes[0].error_code == "stale-status"
        found = await h.get(job)
        assert found.status == Job.CANCELLED
        assert found.children == ()
        # The termination's own record only: the losing handler's patch was not merged.
        assert found.data == {"stop_requested_by": "api"}


async def test_data_is_merge_patched_only_with_an_applied_outcome(make_harness):
    patches = [
        {"attempt": 1, "nested": {"a": 1, "keep": "x"}},
        {"attempt": 2, "nested": {"a": None, "b": 2}},
    ]
    run = RunJobs(
        lambda ts: HandlerResult(
            skipped=[t.id for t in ts], data={t.id: patches.pop(0) for t in ts}
        )
    )
    async with harness(make_harness, run) as h:
        job = await h.create("job", status=Job.RUNNING)
        await h.tick("run-jobs")
        assert (await h.get(job)).data == {"attempt": 1, "nested": {"a": 1, "keep": "x"}}
        await h.tick("run-jobs")
        assert (await h.get(job)).data == {"attempt": 2, "nested": {"keep": "x", "b": 2}}


async def test_filters_apply_before_the_limit_so_ready_work_is_not_starved(make_harness):
    """batch_size 1: the oldest job waits on an unfinished dependency; the ready one still runs."""

    class StartReady(StartJobs):
        filters = (DependenciesSucceeded(), Field("spec", ("enabled",), "ne", False))
        batch = 1

    start = StartReady(lambda ts: HandlerResult(successes=[t.id for t in ts]))
    async with harness(make_harness, start) as h:
        blocker = await h.create("job", status=Job.RUNNING)
        waiting = await h.create("job", links=[("depends_on", blocker)])
        disabled = await h.create("job", spec={"enabled": False})
        ready = await h.create("job", spec={"enabled": True})
        report = await h.tick("start-jobs")
        assert [c.entity_id for c in report.changes] == [ready]
        assert (await h.get(waiting)).status == Job.QUEUED
        assert (await h.get(disabled)).status == Job.QUEUED
        # Once the dependency has ended with SUCCESS, the waiting job is ready too.
        await _force_status(h, blocker, Job.RUNNING, Job.DONE)
        assert (await h.get(blocker)).result == "SUCCESS"
        report = await h.tick("start-jobs")
        assert [c.entity_id for c in report.changes] == [waiting]


async def test_child_count_and_status_age_filters(make_harness):
    class Crowded(RunJobs):
        handler = "crowded"
        filters = (ChildCount("ge", 2, {Task.PENDING}),)
        transitions = StatusTransitions()

    class Overdue(RunJobs):
        handler = "overdue"
        filters = (StatusAge(spec_key="max_seconds"),)
        transitions = StatusTransitions()

    crowded = Crowded(lambda ts: HandlerResult(skipped=[t.id for t in ts]))
    overdue = Overdue(lambda ts: HandlerResult(skipped=[t.id for t in ts]))
    async with harness(make_harness, crowded, overdue) as h:
        two = await h.create("job", status=Job.RUNNING, children=[{}, {}])
        await h.create("job", status=Job.RUNNING, children=[{}, {"status": Task.DONE}])
        slow = await h.create("job", status=Job.RUNNING, spec={"max_seconds": 10})
        await h.create("job", status=Job.RUNNING, spec={"max_seconds": "ten"})
        assert [c.entity_id for c in (await h.tick("crowded")).changes] == [two]
        assert (await h.tick("overdue")).changes == ()
        h.clock.advance(11)
        assert [c.entity_id for c in (await h.tick("overdue")).changes] == [slow]


async def test_termination_follows_each_kinds_own_rule(make_harness):
    async with harness(make_harness) as h:
        queued = await h.create("job", children=[{}])
        running = await h.create("job", status=Job.RUNNING)
        done = await h.create("job", status=Job.DONE)
        outcomes = await h.repository.request_termination([queued, running, done])
        assert [(o.kind, o.to_status, o.changed) for o in outcomes] == [
            ("job", "CANCELLED", True),
            # Its cleanup status, never straight to an end.
            ("job", "CANCELLING", True),
            ("job", "DONE", False),
        ]
        found = await h.get(queued)
        assert [c.status for c in found.children] == ["FAILED"]
        assert found.status_info == "USER_REQUESTED"
        assert (await h.history(running))[-1].handler == "api"


async def test_spec_changes_through_the_api_are_recorded(make_harness):
    async with harness(make_harness) as h:
        job = await h.create("job", spec={"replicas": 1, "image": "a"})
        found = await h.repository.update_spec(job, {"replicas": 3})
        assert found.spec == {"replicas": 3, "image": "a"}
        last = (await h.history(job))[-1]
        assert (last.handler, last.message) == ("api", "spec changed: replicas")


async def test_run_until_settled_sees_writes_made_inside_execute(make_harness):
    """A handler that keeps the status but writes data each round is not settled until it stops."""

    def count(ts: Sequence[Entity]) -> HandlerResult:
        done = [t.id for t in ts if (t.data or {}).get("n", 0) >= 3]
        going = [t.id for t in ts if t.id not in done]
        return HandlerResult(
            successes=done,
            skipped=going,
            data={t.id: {"n": (t.data or {}).get("n", 0) + 1} for t in ts if t.id in going},
        )

    run = RunJobs(count)
    async with harness(make_harness, run) as h:
        job = await h.create("job", status=Job.RUNNING)
        await h.run_until_settled()
        found = await h.get(job)
        assert (found.status, found.data) == (Job.DONE, {"n": 3})


async def test_creating_an_entity_checks_its_kind(make_harness):
    async with harness(make_harness) as h:
        with pytest.raises(Exception, match="no kind named 'nope'"):
            await h.create("nope")
        with pytest.raises(Exception, match="is a child of 'job': give parent"):
            await h.create("task")
        with pytest.raises(Exception, match="unknown job status 'LOST'"):
            await h.create("job", status="LOST")
        assert await h.repository.list_entities("job") == []


async def test_handlers_are_validated_against_their_kind(make_harness):
    class WrongStatus(StartJobs):
        transitions = StatusTransitions(success=Transition(Task.DONE))

    class NoKind(StartJobs):
        kind = "ghost"

    with pytest.raises(InvalidHandlerError, match=r"success.to is <Task.DONE.*not a Job"):
        async with harness(make_harness, WrongStatus()):
            pass
    with pytest.raises(InvalidHandlerError, match="no kind named 'ghost'"):
        async with harness(make_harness, NoKind()):
            pass


def test_kind_rules_come_from_the_declaration():
    assert JOB.is_requeue(Job.RUNNING, Job.QUEUED)
    assert not JOB.is_requeue(Job.RUNNING, Job.FAILED)
    assert TASK.movable_to(Task.WORKING) == {"PENDING"}
    assert TASK.end_status_for(Job.CANCELLED) == "FAILED"
    assert TASK.end_status_for(Job.DONE) == "DONE"
    assert JOB.limit_status == "CANCELLED"
    with pytest.raises(InvalidHandlerError, match="terminal names unknown status"):
        EntityKind("bad", Job, terminal={"GONE"})


def test_the_cli_shows_lists_explains_and_terminates_a_plugin_kind(database, monkeypatch, tmp_path):
    """show, why, history --kind, entities, graph --kind and terminate all take a job."""
    import asyncio
    import json

    from click.testing import CliRunner

    import drover.app
    from drover.cli.group import main
    from drover.testing import CoordinatorHarness

    start = StartJobs(lambda ts: HandlerResult(successes=[t.id for t in ts]))
    the_plugin = plugin(start, RunJobs())
    real = drover.app.make_plugin_manager

    def with_jobs(**kwargs: Any) -> Any:
        return real(**kwargs, plugins=[the_plugin])

    monkeypatch.setattr(drover.app, "make_plugin_manager", with_jobs)

    async def setup() -> tuple[str, str]:
        async with CoordinatorHarness(
            plugins=[the_plugin],
            include_builtin_handlers=False,
            database_url=database.url,
            database_schema=database.schema,
        ) as h:
            running = await h.create("job", spec={"replicas": 2}, name="alpha")
            await h.tick("start-jobs")
            queued = await h.create("job", name="beta", children=[{}])
            return running, queued

    running, queued = asyncio.run(setup())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DROVER_DATABASE_URL", database.url)
    monkeypatch.setenv("DROVER_LOAD_PLUGINS", "")
    if database.schema:
        monkeypatch.setenv("DROVER_DATABASE_SCHEMA", database.schema)
    runner = CliRunner()

    def cli(*args: str) -> Any:
        return runner.invoke(main, list(args), catch_exceptions=False)

    shown = json.loads(cli("show", running[:20], "--json").output)
    assert (shown["kind"], shown["status"], shown["spec"]) == ("job", "RUNNING", {"replicas": 2})
    assert [(r["handler"], r["result"]) for r in shown["history"]] == [
        ("api", "CREATED"),
        ("start-jobs", "SUCCESS"),
    ]
    text = cli("show", queued).output
    assert f"job          {queued}  (beta)" in text
    why = cli("why", running).output
    assert f"job {running} is RUNNING" in why
    assert "run-jobs (lifecycle) acts on jobs in RUNNING" in why
    rows = json.loads(cli("history", "--kind", "job", "--json").output)
    assert {r["kind"] for r in rows} == {"job"}
    assert len(rows) == 3
    listed = json.loads(cli("entities", "job", "--status", "queued", "--json").output)
    assert [(x["id"], len(x["children"])) for x in listed] == [(queued, 1)]
    bad = cli("entities", "job", "--status", "LOST")
    assert bad.exit_code != 0
    assert "not a status of kind 'job'" in bad.output
    graph = cli("graph", "--kind", "job").output
    assert "QUEUED      -> RUNNING      [start-jobs: success]" in graph
    assert "QUEUED      -> CANCELLED    [start-jobs: stale]" in graph
    assert "RUNNING     -> CANCELLING   [api: terminate]" in graph
    out = json.loads(cli("terminate", running, queued, "--json").output)
    assert [(o["kind"], o["to_status"]) for o in out] == [
        ("job", "CANCELLING"),
        ("job", "CANCELLED"),
    ]
    check = cli("plugins", "check", "--json")
    warnings = json.loads(check.output)["warnings"]
    assert {(w["entity_kind"], w["kind"], w["status"]) for w in warnings} >= {
        ("job", "untargeted", "CANCELLING")
    }


async def test_a_kernel_cannot_be_terminated_on_its_own(make_harness):
    async with make_harness() as h:
        sid = await h.create_session()
        kernel = (await h.session(sid)).kernels[0].id
        with pytest.raises(Exception, match="a kernel ends with its session"):
            await h.repository.request_termination([kernel])
        assert (await h.session(sid)).status == "PENDING"


async def test_metrics_count_every_kind(make_harness):
    from drover.web.metrics import render_metrics

    async with harness(make_harness) as h:
        await h.create("job", children=[{}, {}])
        text = render_metrics(await h.repository.metrics_snapshot()).decode()
        assert 'drover_entities{kind="job",status="QUEUED"} 1.0' in text
        assert 'drover_entities{kind="task",status="PENDING"} 2.0' in text
        assert 'drover_entities{kind="session",status="PENDING"} 0.0' in text


async def test_a_handler_ends_other_entities_through_its_result(make_harness):
    """``HandlerResult.terminate``: the other job ends by its kind's rule, in the tick's apply,
    recorded under the handler's name; a target whose outcome is not applied ends nothing."""

    def script(ts):
        first, second = sorted(ts, key=lambda t: t.spec["n"])
        # The first job ends the second one (QUEUED -> CANCELLED by JOB's rule).
        return HandlerResult(successes=[first.id], terminate={first.id: [second.id, "gone"]})

    start = StartJobs(script)
    async with harness(make_harness, start) as h:
        one = await h.create("job", spec={"n": 1})
        two = await h.create("job", spec={"n": 2})
        report = await h.tick("start-jobs")
        assert report.error is None
        assert (await h.get(one)).status == Job.RUNNING
        ended = await h.get(two)
        assert (ended.status, ended.status_info) == (Job.CANCELLED, "REQUESTED_BY_START_JOBS")
        rows = [(r.handler, r.result, r.from_status, r.to_status) for r in await h.history(two)]
        assert rows == [
            ("api", "CREATED", Job.QUEUED, Job.QUEUED),
            ("start-jobs", "SUCCESS", Job.QUEUED, Job.CANCELLED),
        ]


async def test_terminations_asked_for_a_non_target_make_the_result_invalid(make_harness):
    start = StartJobs(lambda ts: HandlerResult(terminate={"elsewhere": [ts[0].id]}))
    async with harness(make_harness, start) as h:
        job = await h.create("job")
        report = await h.tick("start-jobs")
        assert "terminations asked for elsewhere" in (report.error or "")
        assert (await h.get(job)).status == Job.QUEUED
