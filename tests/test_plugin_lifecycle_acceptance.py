"""Issue 19's acceptance: one plugin lifecycle defined only in tests uses every new mechanism.

The plugin (``tests/acceptance_kinds.py``: Iris-like job -> task -> attempt on a
pool of workers) is loaded through its hooks as a third-party plugin is, and
each scenario runs on SQLite and PostgreSQL: hierarchy, targeted moves, pushed
reports, a budget with its own give-up, every new filter (each before the
fetch's LIMIT), a pool (two coordinators on PostgreSQL) and result derivation.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from acceptance_kinds import Attempt, Cluster, IrisPlugin, Job, Task
from conftest import SKIP_PG, Database
from pool_race import tick_b_inside_a_apply

from drover import BudgetUse, SchedulingResult
from drover.coordinator.tick import Coordinator
from drover.model.pools import POOL_FULL
from drover.testing import CoordinatorHarness


def _harness(make_harness: Any, plugin: IrisPlugin) -> Any:
    return make_harness(plugins=[plugin], include_builtin_handlers=False)


async def _task_with_attempt(
    h: Any, job: str, attempt: str = Attempt.RUNNING, priority: int = 0
) -> tuple[str, str]:
    task = await h.create(
        "task", status=Task.RUNNING, parent=job, spec={"queue": "cpu"}, priority=priority
    )
    return task, await h.create("attempt", status=attempt, parent=task, spec={"n": 1})


async def _statuses(h: Any, ids: list[str]) -> list[str]:
    return [str((await h.get(i)).status) for i in ids]


def _rows(history: list[Any]) -> list[tuple[str, str, str, str]]:
    return [(r.handler, str(r.result), str(r.from_status), str(r.to_status)) for r in history]


# -- hierarchy ----------------------------------------------------------------------------------


async def test_a_cancelled_job_ends_its_tasks_and_their_attempts_freeing_workers(make_harness):
    plugin = IrisPlugin()
    async with _harness(make_harness, plugin) as h:
        job = await h.create("job", status=Job.RUNNING)
        trees = [await _task_with_attempt(h, job) for _ in range(2)]
        tasks, attempts = [t for t, _ in trees], [a for _, a in trees]
        other = await h.create("job", status=Job.RUNNING)
        other_task, waiting = await _task_with_attempt(h, other, attempt=Attempt.QUEUED)
        # Both workers are held by the first job's attempts: the other one waits.
        report = await h.tick("start-attempts")
        assert [c.error_code for c in report.changes] == [POOL_FULL]
        h.clock.advance(1)
        await h.repository.update_spec(job, {"cancel": True})
        report = await h.tick("cancel-jobs")
        assert [(c.entity_id, c.result) for c in report.changes if c.entity_id == job] == [
            (job, SchedulingResult.SUCCESS)
        ]
        found = await h.get(job)
        assert (found.status, found.result) == (Job.CANCELLED, "FAILURE")
        # Grandchildren too: an attempt has no CANCELLED, it ends FAILED.
        assert await _statuses(h, tasks) == [Task.CANCELLED, Task.CANCELLED]
        assert await _statuses(h, attempts) == [Attempt.FAILED, Attempt.FAILED]
        assert {(await h.get(x)).status_info for x in tasks + attempts} == {"JOB_CANCELLED"}
        assert {(await h.get(x)).result for x in tasks + attempts} == {"FAILURE"}
        # Each child and grandchild has the move in its own history, by the job's handler.
        for task in tasks:
            assert _rows(await h.history(task))[-1] == (
                "cancel-jobs",
                "MOVED",
                Task.RUNNING,
                Task.CANCELLED,
            )
        for attempt in attempts:
            assert _rows(await h.history(attempt))[-1] == (
                "cancel-jobs",
                "MOVED",
                Attempt.RUNNING,
                Attempt.FAILED,
            )
        # The other tree is untouched, and its attempt now gets a freed worker.
        assert await _statuses(h, [other, other_task]) == [Job.RUNNING, Task.RUNNING]
        report = await h.tick("start-attempts")
        assert [(c.entity_id, c.to_status) for c in report.changes] == [(waiting, Attempt.RUNNING)]


async def test_a_termination_request_ends_the_whole_tree_with_the_rules_info(make_harness):
    async with _harness(make_harness, IrisPlugin()) as h:
        job = await h.create("job", status=Job.RUNNING)
        task, attempt = await _task_with_attempt(h, job)
        (outcome,) = await h.repository.request_termination([job], reason="user quit")
        assert outcome.to_status == Job.CANCELLED
        assert (await h.get(job)).status_info == "ABORTED"
        assert await _statuses(h, [task, attempt]) == [Task.CANCELLED, Attempt.FAILED]
        assert _rows(await h.history(attempt))[-1] == (
            "api",
            "MOVED",
            Attempt.RUNNING,
            Attempt.FAILED,
        )


async def test_a_job_failed_by_a_promotion_ends_its_other_tasks_attempts(make_harness):
    """The promotion (any task FAILED) ends the job; its running sibling and that one's
    attempt end too, each with a row by the promotion, and the worker is free again."""
    async with _harness(make_harness, IrisPlugin()) as h:
        job = await h.create("job", status=Job.RUNNING)
        await h.create("task", status=Task.FAILED, parent=job, spec={"queue": "cpu"})
        sibling, attempt = await _task_with_attempt(h, job)
        h.clock.advance(1)
        await h.tick("fail-jobs")
        assert await _statuses(h, [job, sibling, attempt]) == [
            Job.FAILED,
            Task.FAILED,
            Attempt.FAILED,
        ]
        assert _rows(await h.history(sibling))[-1] == (
            "fail-jobs",
            "MOVED",
            Task.RUNNING,
            Task.FAILED,
        )
        assert _rows(await h.history(attempt))[-1] == (
            "fail-jobs",
            "MOVED",
            Attempt.RUNNING,
            Attempt.FAILED,
        )
        waiting = await _queued_attempts(h, 2)
        report = await h.tick("start-attempts")
        assert sorted(c.entity_id for c in report.changes if c.to_status == Attempt.RUNNING) == (
            sorted(waiting)
        )


# -- targeted moves -----------------------------------------------------------------------------


async def test_an_urgent_task_preempts_another_by_moves_on_entities_it_did_not_fetch(
    make_harness,
):
    cluster = Cluster()
    plugin = IrisPlugin(cluster)
    async with _harness(make_harness, plugin) as h:
        job = await h.create("job", status=Job.RUNNING)
        low, low_attempt = await _task_with_attempt(h, job, priority=1)
        high, high_attempt = await _task_with_attempt(h, job, priority=5)
        cluster.running = {low_attempt: (low, 1), high_attempt: (high, 5)}
        urgent = await h.create(
            "task",
            status=Task.PENDING,
            parent=job,
            priority=20,
            spec={"queue": "gpu", "urgent": True},
        )
        h.clock.advance(1)
        report = await h.tick("preempt")
        # It fetched only the urgent task; the victims were moved all the same.
        assert plugin.handler("preempt").seen == [[urgent]]
        moved = {c.entity_id: (c.result, c.from_status, c.to_status) for c in report.changes}
        assert moved[low] == ("MOVED", Task.RUNNING, Task.PENDING)
        assert moved[low_attempt] == ("MOVED", Attempt.RUNNING, Attempt.PREEMPTED)
        assert moved[urgent][0] == SchedulingResult.SKIPPED
        assert await _statuses(h, [low, low_attempt, high, high_attempt]) == [
            Task.PENDING,
            Attempt.PREEMPTED,
            Task.RUNNING,
            Attempt.RUNNING,
        ]
        assert (await h.get(low_attempt)).result == "FAILURE"
        assert _rows(await h.history(low_attempt))[-1] == (
            "preempt",
            "MOVED",
            Attempt.RUNNING,
            Attempt.PREEMPTED,
        )
        # The urgent task starts on the freed worker, before the preempted one (priority).
        await h.tick("start-tasks")
        assert await _statuses(h, [urgent, low]) == [Task.RUNNING, Task.PENDING]
        (new_attempt,) = (await h.get(urgent)).children
        await h.tick("start-attempts")
        assert (await h.get(new_attempt.id)).status == Attempt.RUNNING
        # The scheduler's stale view (the victim already moved): the moves lose their race.
        h.clock.advance(1)
        await h.create(
            "task",
            status=Task.PENDING,
            parent=job,
            priority=30,
            spec={"queue": "gpu", "urgent": True},
        )
        report = await h.tick("preempt")
        lost = [c for c in report.changes if c.entity_id in (low, low_attempt)]
        assert {(c.result, c.error_code) for c in lost} == {
            (SchedulingResult.SKIPPED, "stale-status")
        }
        assert await _statuses(h, [low, low_attempt]) == [Task.PENDING, Attempt.PREEMPTED]
        assert len(await h.history(low_attempt)) == 2


# -- pushed reports -----------------------------------------------------------------------------


async def test_a_worker_heartbeat_moves_an_attempt_and_a_stale_one_does_not(make_harness):
    async with _harness(make_harness, IrisPlugin()) as h:
        job = await h.create("job", status=Job.RUNNING)
        task, attempt = await _task_with_attempt(h, job)
        h.clock.advance(1)
        # A beat that keeps the status only patches data.
        assert await h.repository.report(
            attempt, Attempt.RUNNING, expected=[Attempt.RUNNING], data={"beat": 1}
        )
        assert (await h.get(attempt)).data == {"beat": 1}
        assert len(await h.history(attempt)) == 1
        h.clock.advance(1)
        assert await h.repository.report(
            attempt,
            Attempt.SUCCEEDED,
            expected=[Attempt.RUNNING],
            status_info="EXIT_0",
            data={"worker": "w1"},
            message="worker w1: exit 0",
            source="heartbeats",
        )
        found = await h.get(attempt)
        assert (found.status, found.status_info, found.result, found.data) == (
            Attempt.SUCCEEDED,
            "EXIT_0",
            "SUCCESS",
            {"beat": 1, "worker": "w1"},
        )
        last = (await h.history(attempt))[-1]
        assert (last.handler, str(last.result), last.to_status, last.message) == (
            "heartbeats",
            "MOVED",
            Attempt.SUCCEEDED,
            "worker w1: exit 0",
        )
        # A late beat from a worker that thinks it still runs, then one that says it failed.
        assert not await h.repository.report(attempt, Attempt.FAILED, expected=[Attempt.RUNNING])
        assert not await h.repository.report(attempt, Attempt.FAILED)
        assert (await h.get(attempt)).status == Attempt.SUCCEEDED
        assert len(await h.history(attempt)) == 2
        # The handlers carry on from the reported status.
        await h.tick("run-tasks")
        await h.tick("finish-jobs")
        assert await _statuses(h, [task, job]) == [Task.DONE, Job.DONE]


async def test_a_silent_worker_loses_its_attempt_and_its_late_report_is_stale(make_harness):
    async with _harness(make_harness, IrisPlugin()) as h:
        job = await h.create("job", status=Job.RUNNING)
        task = await h.create("task", status=Task.RUNNING, parent=job, spec={"queue": "cpu"})
        spec = {"n": 1, "timeout": 60}
        silent = await h.create("attempt", status=Attempt.RUNNING, parent=task, spec=spec)
        h.clock.advance(30)
        assert (await h.tick("lose-silent-attempts")).changes == ()
        h.clock.advance(31)
        await h.tick("lose-silent-attempts")
        found = await h.get(silent)
        assert (found.status, found.status_info, found.result) == (
            Attempt.FAILED,
            "WORKER_LOST",
            "FAILURE",
        )
        # The worker comes back and says it succeeded: too late, nothing is written.
        assert not await h.repository.report(
            silent, Attempt.SUCCEEDED, expected=[Attempt.RUNNING], source="heartbeats"
        )
        assert (await h.get(silent)).status == Attempt.FAILED
        assert [r.handler for r in await h.history(silent)] == ["api", "lose-silent-attempts"]
        # Its task retries it (the failure budget's first charge).
        await h.tick("run-tasks")
        assert (await h.get(task)).status == Task.BACKOFF


def test_plugins_check_strict_accepts_the_plugin(monkeypatch, tmp_path):
    """Every status is reachable and has a way out, counting the budget's own give-up and
    the statuses the job's transitions move tasks and attempts to."""
    import json

    from click.testing import CliRunner

    import drover.app
    from drover.cli.group import main

    plugin = IrisPlugin()
    real = drover.app.make_plugin_manager
    monkeypatch.setattr(
        drover.app, "make_plugin_manager", lambda **kw: real(**kw, plugins=[plugin])
    )
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(
        main, ["plugins", "check", "--strict", "--json"], env={"DROVER_LOAD_PLUGINS": ""}
    )
    report = json.loads(done.output)
    assert (report["errors"], report["warnings"], done.exit_code) == ([], [], 0)


# -- budgets and results ------------------------------------------------------------------------


async def _run_attempt(h: Any, task: str, outcome: Attempt) -> str:
    """Start the task's QUEUED attempt and report how it ended; return its id."""
    await h.tick("start-attempts")
    attempt = max((await h.get(task)).children, key=lambda c: int(c.spec["n"]))
    assert attempt.status == Attempt.RUNNING
    h.clock.advance(1)
    assert await h.repository.report(attempt.id, outcome, expected=[Attempt.RUNNING])
    return attempt.id


async def _started_job(h: Any) -> tuple[str, str]:
    job = await h.create("job", spec={"gang": 1}, children=[{"spec": {"queue": "cpu"}}])
    await h.tick("start-jobs")
    (task,) = (await h.get(job)).children
    await h.tick("start-tasks")
    return job, task.id


async def test_a_task_retried_after_a_failed_attempt_succeeds_and_so_does_its_job(make_harness):
    """result_from="latest-child": the failed first attempt is superseded by the second."""
    async with _harness(make_harness, IrisPlugin()) as h:
        job, task = await _started_job(h)
        first = await _run_attempt(h, task, Attempt.FAILED)
        report = await h.tick("run-tasks")
        assert [c.result for c in report.changes] == [SchedulingResult.NEED_RETRY]
        found = await h.get(task)
        assert (found.status, found.data) == (Task.BACKOFF, {"retry_after": 30})
        assert found.budgets == {"failure": BudgetUse(1, 1)}
        # Not before the back-off is over.
        h.clock.advance(10)
        assert (await h.tick("resume-tasks")).changes == ()
        h.clock.advance(30)
        await h.tick("resume-tasks")
        second = await _run_attempt(h, task, Attempt.SUCCEEDED)
        await h.tick("run-tasks")
        await h.tick("finish-jobs")
        assert [(await h.get(a)).result for a in (first, second)] == ["FAILURE", "SUCCESS"]
        found = await h.get(task)
        assert (found.status, found.result) == (Task.DONE, "SUCCESS")
        found = await h.get(job)
        assert (found.status, found.result) == (Job.DONE, "SUCCESS")
        assert [str(r.result) for r in await h.history(task)] == [
            "CREATED",
            "SUCCESS",
            "NEED_RETRY",
            "SUCCESS",
            "SUCCESS",
        ]


async def test_a_spent_failure_budget_sends_the_task_to_its_own_give_up(make_harness):
    async with _harness(make_harness, IrisPlugin()) as h:
        job, task = await _started_job(h)
        await _run_attempt(h, task, Attempt.FAILED)
        await h.tick("run-tasks")
        h.clock.advance(60)
        await h.tick("resume-tasks")
        await _run_attempt(h, task, Attempt.FAILED)
        report = await h.tick("run-tasks")
        assert [c.result for c in report.changes] == [SchedulingResult.GIVE_UP]
        found = await h.get(task)
        # The budget's FAILED, not the handler's give-up (WORKER_FAILED).
        assert (found.status, found.result) == (Task.FAILED, "FAILURE")
        assert found.budgets == {"failure": BudgetUse(2, 1)}
        last = (await h.history(task))[-1]
        assert (str(last.result), last.to_status) == ("GIVE_UP", Task.FAILED)
        assert "spent budget 'failure' 2 times (limit=1)" in (last.message or "")
        await h.tick("fail-jobs")
        found = await h.get(job)
        assert (found.status, found.result) == (Job.FAILED, "FAILURE")


# -- filters: each one before the LIMIT (batch_size 1, decoys ahead in the fetch order) ---------


async def test_start_tasks_filters_by_parent_and_queue_in_sql(make_harness):
    """AllOf(Parent(RUNNING), Field(queue, "in", …)): the decoys come first by priority."""
    plugin = IrisPlugin()
    async with _harness(make_harness, plugin) as h:
        running = await h.create("job", status=Job.RUNNING)
        queued = await h.create("job", status=Job.QUEUED)
        decoys = [
            await h.create("task", parent=queued, priority=9, spec={"queue": "gpu"}),
            await h.create("task", parent=running, priority=8, spec={"queue": "tpu"}),
            await h.create("task", parent=running, priority=7),
        ]
        match = await h.create("task", parent=running, spec={"queue": "cpu"})
        await h.tick("start-tasks")
        await h.tick("start-tasks")
        assert plugin.handler("start-tasks").seen == [[match]]
        assert (await h.get(match)).status == Task.RUNNING
        assert [c.status for c in (await h.get(match)).children] == [Attempt.QUEUED]
        assert set(await _statuses(h, decoys)) == {Task.PENDING}


async def test_start_jobs_counts_a_gangs_tasks_in_sql(make_harness):
    """ChildCount(ge, PENDING, spec_key="gang")."""
    plugin = IrisPlugin()
    async with _harness(make_harness, plugin) as h:
        short = await h.create("job", priority=9, spec={"gang": 3}, children=[{}, {}])
        no_gang = await h.create("job", priority=8, children=[{}, {}, {}])
        match = await h.create("job", spec={"gang": 2}, children=[{}, {"status": Task.DONE}, {}])
        await h.tick("start-jobs")
        await h.tick("start-jobs")
        assert plugin.handler("start-jobs").seen == [[match]]
        assert await _statuses(h, [short, no_gang, match]) == [Job.QUEUED, Job.QUEUED, Job.RUNNING]


async def test_resume_tasks_waits_each_tasks_own_back_off_in_sql(make_harness):
    """StatusAge(data_key="retry_after"): the back-off each task's data says."""
    plugin = IrisPlugin()
    async with _harness(make_harness, plugin) as h:
        job = await h.create("job", status=Job.RUNNING)
        long = await h.create(
            "task", status=Task.RUNNING, parent=job, priority=9, spec={"backoff": 300}
        )
        short = await h.create("task", status=Task.RUNNING, parent=job, spec={"backoff": 10})
        bare = await h.create("task", status=Task.BACKOFF, parent=job, priority=8)
        for task in (long, short):
            await h.create("attempt", status=Attempt.FAILED, parent=task, spec={"n": 1})
        await h.tick("run-tasks")
        assert [(await h.get(t)).data for t in (long, short)] == [
            {"retry_after": 300},
            {"retry_after": 10},
        ]
        h.clock.advance(60)
        await h.tick("resume-tasks")
        await h.tick("resume-tasks")
        assert plugin.handler("resume-tasks").seen == [[short]]
        assert await _statuses(h, [long, short, bare]) == [Task.BACKOFF, Task.RUNNING, Task.BACKOFF]
        assert sorted(int(c.spec["n"]) for c in (await h.get(short)).children) == [1, 2]
        h.clock.advance(300)
        await h.tick("resume-tasks")
        assert plugin.handler("resume-tasks").seen[-1] == [long]


async def test_jobs_of_a_failed_dependency_fail_found_in_sql(make_harness):
    """DependenciesFailed(): a dependency that ended without success; links read back."""
    plugin = IrisPlugin()
    async with _harness(make_harness, plugin) as h:
        ok = await h.create("job", status=Job.DONE)
        bad = await h.create("job", status=Job.FAILED)
        live = await h.create("job", status=Job.RUNNING)
        decoys = [
            await h.create("job", priority=9, links=[("depends_on", ok)]),
            await h.create("job", priority=8, links=[("depends_on", live)]),
            await h.create("job", priority=7),
        ]
        match = await h.create(
            "job", links=[("depends_on", ok), ("depends_on", bad)], children=[{}, {}]
        )
        await h.tick("fail-doomed-jobs")
        await h.tick("fail-doomed-jobs")
        assert plugin.handler("fail-doomed-jobs").seen == [[match]]
        found = await h.get(match)
        assert (found.status, found.result) == (Job.FAILED, "FAILURE")
        assert found.linked("depends_on") == tuple(sorted([ok, bad]))
        assert {(c.status, c.status_info) for c in found.children} == {
            (Task.FAILED, "DEPENDENCY_FAILED")
        }
        assert set(await _statuses(h, decoys)) == {Job.QUEUED}


# -- the pool of workers ------------------------------------------------------------------------


async def _queued_attempts(h: Any, n: int) -> list[str]:
    job = await h.create("job", status=Job.RUNNING)
    return [(await _task_with_attempt(h, job, attempt=Attempt.QUEUED))[1] for _ in range(n)]


async def _drain(h: Any, coordinators: list[Coordinator], attempts: list[str]) -> int:
    """Tick start-attempts on every coordinator at once, round after round, finishing the
    running attempts between rounds; return the most attempts ever seen RUNNING."""
    most = 0
    for _ in range(3 * len(attempts)):
        await asyncio.gather(*(c.tick("start-attempts") for c in coordinators))
        statuses = await _statuses(h, attempts)
        running = [a for a, s in zip(attempts, statuses, strict=True) if s == Attempt.RUNNING]
        most = max(most, len(running))
        if set(statuses) == {Attempt.SUCCEEDED}:
            return most
        h.clock.advance(1)
        for attempt in running:
            assert await h.repository.report(attempt, Attempt.SUCCEEDED, expected=[Attempt.RUNNING])
    raise AssertionError("the attempts never all ran")


async def test_the_workers_pool_is_never_exceeded_by_one_coordinator(make_harness):
    async with _harness(make_harness, IrisPlugin()) as h:
        attempts = await _queued_attempts(h, 5)
        report = await h.tick("start-attempts")
        assert [c.to_status for c in report.changes] == [Attempt.RUNNING, Attempt.RUNNING]
        await h.tick("start-attempts")
        refused = (await h.history(attempts[2]))[-1]
        assert (str(refused.result), refused.error_code) == ("SKIPPED", POOL_FULL)
        assert "pool 'workers' is full (2/2 held)" in (refused.message or "")
        assert await _drain(h, [h.coordinator], attempts) == 2


pg_only = pytest.mark.skipif(SKIP_PG, reason="DROVER_TEST_SKIP_PG=1")


@pg_only
async def test_two_postgresql_coordinators_never_exceed_the_workers_pool(pg: Database):
    """B applies while A's moves into the pool are written but not committed: B waits for
    A's pool lock, then finds the pool full; then both drain the queue together."""
    plugin = IrisPlugin()
    async with CoordinatorHarness(
        plugins=[plugin],
        include_builtin_handlers=False,
        database_url=pg.url,
        database_schema=pg.schema,
    ) as h:
        attempts = await _queued_attempts(h, 6)
        handlers = dict(h.coordinator.handlers)
        a, b = (
            Coordinator(h.repository, handlers, clock=h.clock, kinds=h.app.kinds, claim_owner=o)
            for o in ("a", "b")
        )
        report_a, report_b = await tick_b_inside_a_apply(a, b, "start-attempts")
        assert [c.to_status for c in report_a.changes] == [Attempt.RUNNING, Attempt.RUNNING]
        assert [c.error_code for c in report_b.changes] == [POOL_FULL, POOL_FULL]
        assert (await _statuses(h, attempts)).count(Attempt.RUNNING) == 2
        assert await _drain(h, [a, b], attempts) == 2


# -- the whole lifecycle, run by the coordinator with workers reporting -------------------------


class _Workers:
    """The cluster's workers: each round, every RUNNING attempt reports how it ended (the
    first ``spec["fail_attempts"]`` attempts of a task fail), and time passes."""

    def __init__(self, jobs: list[str]) -> None:
        self.jobs = jobs
        self.most_running = 0

    async def step(self, h: Any) -> bool:
        running = []
        ended = True
        for job in self.jobs:
            found = await h.get(job)
            ended = ended and found.result is not None
            for task in found.children:
                for attempt in (await h.get(task.id)).children:
                    if attempt.status == Attempt.RUNNING:
                        running.append((attempt, task))
        self.most_running = max(self.most_running, len(running))
        for attempt, task in running:
            fails = int(attempt.spec["n"]) <= int(task.spec.get("fail_attempts", 0))
            status = Attempt.FAILED if fails else Attempt.SUCCEEDED
            assert await h.repository.report(
                attempt.id, status, expected=[Attempt.RUNNING], source="heartbeats"
            )
        # Past every back-off: a round that writes nothing ends run_until_settled.
        h.clock.advance(31)
        return ended


async def test_the_whole_lifecycle_runs_to_its_end(make_harness):
    """Gangs, dependencies, retries with back-off, a spent budget, a doomed dependent and
    the workers pool, all driven by ticks and the workers' reports."""
    async with _harness(make_harness, IrisPlugin()) as h:

        def tasks(*fails: int) -> list[dict[str, Any]]:
            return [{"spec": {"queue": "cpu", "fail_attempts": f}} for f in fails]

        a = await h.create("job", spec={"gang": 3}, children=tasks(1, 0, 0))
        c = await h.create("job", spec={"gang": 1}, children=tasks(2))
        d = await h.create("job", spec={"gang": 2}, children=tasks(0, 1), links=[("depends_on", a)])
        b = await h.create("job", spec={"gang": 1}, children=tasks(0), links=[("depends_on", c)])
        workers = _Workers([a, b, c, d])
        await h.run_until_settled(until=workers.step)
        found = {j: await h.get(j) for j in (a, b, c, d)}
        assert {j: (e.status, e.result) for j, e in found.items()} == {
            a: (Job.DONE, "SUCCESS"),
            b: (Job.FAILED, "FAILURE"),
            c: (Job.FAILED, "FAILURE"),
            d: (Job.DONE, "SUCCESS"),
        }
        # A's retried task succeeded on its second attempt.
        retried = next(t for t in found[a].children if t.spec["fail_attempts"] == 1)
        assert [(x.status, x.result) for x in (await h.get(retried.id)).children] == [
            (Attempt.FAILED, "FAILURE"),
            (Attempt.SUCCEEDED, "SUCCESS"),
        ]
        assert retried.result == "SUCCESS"
        # C's task spent its budget; B never ran, its task failed with it.
        (spent,) = found[c].children
        assert (spent.status, spent.budgets) == (Task.FAILED, {"failure": BudgetUse(2, 1)})
        (doomed,) = found[b].children
        assert (doomed.status, doomed.status_info, doomed.children) == (
            Task.FAILED,
            "DEPENDENCY_FAILED",
            (),
        )
        # Four tasks could run at once at times; two workers never ran more than two.
        assert workers.most_running == 2
