"""Acceptance tests of the Iris pack, from the seed's task-state semantics, on SQLite and
PostgreSQL.

Every test builds its own plugin (a fresh simulated cluster) and gives it to
drover's ``CoordinatorHarness``; entry points stay off, so the tests mean the
same whether or not the pack is installed. Workers are the test: it pushes
their heartbeats (``heartbeat``) and kills them (``worker_died``).
"""

from __future__ import annotations

import asyncio
import importlib
import tomllib
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from drover_iris import (
    ATTEMPT_KIND,
    FAILURE,
    JOB_KIND,
    PREEMPTION,
    TASK_KIND,
    AttemptState,
    Band,
    IrisPlugin,
    JobRequest,
    JobState,
    SimulatedCluster,
    TaskState,
    heartbeat,
    submit_job,
)
from drover_iris.handlers import JOB_HANDLERS

from drover import BudgetUse, Entity
from drover.coordinator.tick import Coordinator, TickReport
from drover.model.pools import POOL_FULL
from drover.testing import CoordinatorHarness, TestDatabase

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
A = AttemptState
T = TaskState
J = JobState


Harness = Callable[..., CoordinatorHarness]


@pytest.fixture
def iris(drover_database: TestDatabase) -> Harness:
    """A harness with only this pack loaded, on a cluster of ``workers`` (name → slots)."""

    def make(workers: dict[str, int] | None = None) -> CoordinatorHarness:
        plugin = IrisPlugin(SimulatedCluster(workers or {"w1": 2, "w2": 2}))
        h = CoordinatorHarness(
            plugins=[plugin],
            include_builtin_handlers=False,
            database_url=drover_database.url,
            database_schema=drover_database.schema,
        )
        h.cluster = plugin.cluster
        return h

    return make


# -- helpers ------------------------------------------------------------------------------------


async def _submit(h: CoordinatorHarness, request: JobRequest) -> str:
    return await submit_job(h.repository, request, now=h.clock.time())


async def _tasks(h: CoordinatorHarness, job: str) -> list[Entity]:
    children = (await h.get(job)).children
    return [await h.get(t.id) for t in sorted(children, key=lambda t: int(t.spec["index"]))]


async def _attempts(h: CoordinatorHarness, task: str) -> list[Entity]:
    return sorted((await h.get(task)).children, key=lambda a: int(a.spec["n"]))


async def _latest(h: CoordinatorHarness, task: str) -> Entity:
    return (await _attempts(h, task))[-1]


async def _status(h: CoordinatorHarness, entity: str) -> str:
    return str((await h.get(entity)).status)


async def _run(h: CoordinatorHarness, task: str, *states: AttemptState, exit_code: int = 0) -> str:
    """The worker of the task's latest attempt reports ``states`` in turn (handlers settle
    between reports); return the attempt's id."""
    attempt = (await _latest(h, task)).id
    for state in states:
        code = exit_code if state in (A.SUCCEEDED, A.FAILED) else None
        h.clock.advance(1)
        assert await heartbeat(h.repository, attempt, state, exit_code=code)
        await h.run_until_settled()
    return attempt


async def _kill(h: CoordinatorHarness, worker: str) -> list[str]:
    """The worker dies; the attempts it had."""
    cluster: SimulatedCluster = h.cluster  # type: ignore[attr-defined]
    return await cluster.worker_died(h.repository, h.app.queries, worker)


def _rows(history: list[Any]) -> list[tuple[str, str, str, str]]:
    return [(r.handler, str(r.result), str(r.from_status), str(r.to_status)) for r in history]


async def _budgets(h: CoordinatorHarness, task: str) -> dict[str, BudgetUse]:
    return dict((await h.get(task)).budgets or {})


# -- the states of one task --------------------------------------------------------------------


async def test_a_task_walks_pending_assigned_building_running_succeeded(iris: Harness) -> None:
    async with iris() as h:
        job = await _submit(h, JobRequest("hello"))
        await h.run_until_settled()
        (task,) = await _tasks(h, job)
        (attempt,) = await _attempts(h, task.id)
        assert (task.status, attempt.status, await _status(h, job)) == (
            T.ASSIGNED,
            A.ASSIGNED,
            J.RUNNING,
        )
        assert attempt.spec["worker"] in ("w1", "w2")
        await _run(h, task.id, A.BUILDING)
        assert await _status(h, task.id) == T.BUILDING
        await _run(h, task.id, A.RUNNING)
        assert await _status(h, task.id) == T.RUNNING
        await _run(h, task.id, A.SUCCEEDED, exit_code=0)
        found = await h.get(task.id)
        assert (found.status, found.result) == (T.SUCCEEDED, "SUCCESS")
        found = await h.get(job)
        assert (found.status, found.result) == (J.SUCCEEDED, "SUCCESS")
        done = await h.get(attempt.id)
        assert (done.status, done.status_info, done.data) == (
            A.SUCCEEDED,
            "EXIT_0",
            {"exit_code": 0},
        )
        assert _rows(await h.history(task.id)) == [
            ("api", "CREATED", T.PENDING, T.PENDING),
            ("iris-schedule", "SUCCESS", T.PENDING, T.ASSIGNED),
            ("iris-task-building", "SUCCESS", T.ASSIGNED, T.BUILDING),
            ("iris-task-running", "SUCCESS", T.BUILDING, T.RUNNING),
            ("iris-task-succeeded", "SUCCESS", T.RUNNING, T.SUCCEEDED),
        ]
        assert _rows(await h.history(job)) == [
            ("api", "CREATED", J.PENDING, J.PENDING),
            ("iris-job-running", "SUCCESS", J.PENDING, J.RUNNING),
            ("iris-job-succeeded", "SUCCESS", J.RUNNING, J.SUCCEEDED),
        ]
        assert [r.handler for r in await h.history(attempt.id)] == [
            "iris-schedule",
            "iris-worker",
            "iris-worker",
            "iris-worker",
        ]
        assert await _budgets(h, task.id) == {
            FAILURE: BudgetUse(0, 0),
            PREEMPTION: BudgetUse(0, 100),
        }


# -- the failure budget -------------------------------------------------------------------------


async def test_the_failure_budget_defaults_to_zero_one_failed_attempt_ends_the_task(
    iris: Harness,
) -> None:
    async with iris() as h:
        job = await _submit(h, JobRequest("once"))
        await h.run_until_settled()
        (task,) = await _tasks(h, job)
        await _run(h, task.id, A.BUILDING, A.RUNNING, A.FAILED, exit_code=3)
        found = await h.get(task.id)
        assert (found.status, found.result) == (T.FAILED, "FAILURE")
        assert found.budgets == {FAILURE: BudgetUse(1, 0), PREEMPTION: BudgetUse(0, 100)}
        last = (await h.history(task.id))[-1]
        assert (last.handler, str(last.result), last.to_status) == (
            "iris-settle",
            "GIVE_UP",
            T.FAILED,
        )
        assert "spent budget 'failure' 1 times (limit=0)" in (last.message or "")
        assert len(await _attempts(h, task.id)) == 1  # never retried
        assert await _status(h, job) == J.FAILED


async def test_a_task_retries_while_failures_are_within_its_budget_keeping_each_attempt(
    iris: Harness,
) -> None:
    """max_retries_failure=2: the first two failures retry (count <= limit), the third ends
    the task FAILED; every attempt is kept, each on its own row."""
    async with iris() as h:
        job = await _submit(h, JobRequest("flaky", max_retries_failure=2))
        await h.run_until_settled()
        (task,) = await _tasks(h, job)
        for n in (1, 2):
            await _run(h, task.id, A.RUNNING, A.FAILED, exit_code=1)
            found = await h.get(task.id)
            assert (found.status, found.budgets[FAILURE]) == (T.ASSIGNED, BudgetUse(n, 2))
            assert len(found.children) == n + 1  # the next attempt, ASSIGNED
        await _run(h, task.id, A.RUNNING, A.FAILED, exit_code=1)
        found = await h.get(task.id)
        assert (found.status, found.budgets[FAILURE]) == (T.FAILED, BudgetUse(3, 2))
        attempts = await _attempts(h, task.id)
        assert [(a.spec["n"], a.status, a.result) for a in attempts] == [
            (1, A.FAILED, "FAILURE"),
            (2, A.FAILED, "FAILURE"),
            (3, A.FAILED, "FAILURE"),
        ]
        assert [
            (r.handler, str(r.result), r.from_status, r.to_status)
            for r in await h.history(task.id)
            if r.handler == "iris-settle"
        ] == [
            ("iris-settle", "failed", T.RUNNING, T.PENDING),
            ("iris-settle", "failed", T.RUNNING, T.PENDING),
            ("iris-settle", "GIVE_UP", T.RUNNING, T.FAILED),
        ]
        assert await _status(h, job) == J.FAILED


async def test_a_retried_task_that_then_succeeds_succeeds_and_so_does_its_job(
    iris: Harness,
) -> None:
    """result_from="latest-child": the failed first attempt is superseded by the second."""
    async with iris() as h:
        job = await _submit(h, JobRequest("second-time", max_retries_failure=1))
        await h.run_until_settled()
        (task,) = await _tasks(h, job)
        first = await _run(h, task.id, A.RUNNING, A.FAILED, exit_code=1)
        second = await _run(h, task.id, A.RUNNING, A.SUCCEEDED)
        assert first != second
        found = await h.get(task.id)
        assert (found.status, found.result, found.budgets[FAILURE]) == (
            T.SUCCEEDED,
            "SUCCESS",
            BudgetUse(1, 1),
        )
        assert [(await h.get(a)).status for a in (first, second)] == [A.FAILED, A.SUCCEEDED]
        found = await h.get(job)
        assert (found.status, found.result) == (J.SUCCEEDED, "SUCCESS")


# -- the preemption budget: worker failures -----------------------------------------------------


async def test_a_dead_workers_attempts_end_worker_failed_and_retry_on_the_preemption_budget(
    iris: Harness,
) -> None:
    async with iris({"w1": 1, "w2": 1, "w3": 1}) as h:
        job = await _submit(h, JobRequest("survivor", max_retries_preemption=1))
        await h.run_until_settled()
        (task,) = await _tasks(h, job)
        first = await _run(h, task.id, A.BUILDING, A.RUNNING)
        worker = (await h.get(first)).spec["worker"]
        lost = await _kill(h, worker)
        assert lost == [first]
        await h.run_until_settled()
        gone = await h.get(first)
        assert (gone.status, gone.status_info) == (A.WORKER_FAILED, "WORKER_DIED")
        found = await h.get(task.id)
        # Retried (1 <= 1) on a live worker, the failure budget untouched.
        assert (found.status, found.budgets) == (
            T.ASSIGNED,
            {FAILURE: BudgetUse(0, 0), PREEMPTION: BudgetUse(1, 1)},
        )
        second = await _latest(h, task.id)
        assert (second.spec["n"], second.spec["worker"] == worker) == (2, False)
        await _run(h, task.id, A.RUNNING)
        await _kill(h, second.spec["worker"])
        await h.run_until_settled()
        found = await h.get(task.id)
        assert (found.status, found.budgets[PREEMPTION]) == (T.WORKER_FAILED, BudgetUse(2, 1))
        assert [str(r.result) for r in await h.history(task.id) if r.handler == "iris-settle"] == [
            "worker-failed",
            "GIVE_UP",
        ]
        assert len(await _attempts(h, task.id)) == 2
        found = await h.get(job)
        assert (found.status, found.result) == (J.WORKER_FAILED, "FAILURE")


async def test_worker_failures_do_not_count_toward_max_task_failures(iris: Harness) -> None:
    """Only FAILED tasks count for the job: a worker failure within the default budget of 100
    is a retry, and the job still succeeds."""
    async with iris({"w1": 2, "w2": 2}) as h:
        job = await _submit(h, JobRequest("steady", replicas=2))
        await h.run_until_settled()
        tasks = await _tasks(h, job)
        for task in tasks:
            await _run(h, task.id, A.RUNNING)
        worker = (await _latest(h, tasks[0].id)).spec["worker"]
        await _kill(h, worker)
        await h.run_until_settled()
        assert [await _status(h, t.id) for t in tasks] == [T.ASSIGNED, T.RUNNING]
        await _run(h, tasks[0].id, A.RUNNING, A.SUCCEEDED)
        await _run(h, tasks[1].id, A.SUCCEEDED)
        assert str((await h.get(tasks[0].id)).budgets[PREEMPTION]) == "1/100"
        found = await h.get(job)
        assert (found.status, found.result) == (J.SUCCEEDED, "SUCCESS")


# -- priority bands and preemption --------------------------------------------------------------


async def _fill(h: CoordinatorHarness, band: Band, n: int, **kw: Any) -> list[str]:
    """``n`` one-task jobs of ``band``, each task RUNNING on the cluster; their task ids."""
    tasks = []
    for i in range(n):
        job = await _submit(h, JobRequest(f"{band.name.lower()}-{i}", band=band, **kw))
        await h.run_until_settled()
        (task,) = await _tasks(h, job)
        await _run(h, task.id, A.BUILDING, A.RUNNING)
        tasks.append(task.id)
    return tasks


async def test_a_production_task_waiting_for_capacity_preempts_the_newest_batch_task(
    iris: Harness,
) -> None:
    async with iris({"w1": 2}) as h:
        old, new = await _fill(h, Band.BATCH, 2)
        victim = (await _latest(h, new)).id
        prod = await _submit(h, JobRequest("prod", band=Band.PRODUCTION))
        h.clock.advance(1)
        await h.run_until_settled()
        # The newest batch attempt was preempted; its task retried on its preemption budget.
        assert _rows(await h.history(victim))[-1] == (
            "iris-schedule",
            "MOVED",
            A.RUNNING,
            A.PREEMPTED,
        )
        found = await h.get(new)
        assert (found.status, found.budgets[PREEMPTION]) == (T.PENDING, BudgetUse(1, 100))
        assert await _status(h, old) == T.RUNNING
        (prod_task,) = await _tasks(h, prod)
        assert prod_task.status == T.ASSIGNED
        assert await _status(h, prod) == J.RUNNING
        # No room at first: the scheduler preempted for it, then placed it on the freed slot.
        rows = await h.history(prod_task.id)
        assert [(r.handler, str(r.result), r.to_status) for r in rows] == [
            ("api", "CREATED", T.PENDING),
            ("iris-schedule", "SKIPPED", T.PENDING),
            ("iris-schedule", "SUCCESS", T.ASSIGNED),
        ]
        assert rows[1].message == (
            "pending: no live worker has a free slot; "
            f"preempting attempt {victim} (BATCH) of task {new}"
        )
        # The batch task waits (no room, and a batch task preempts nobody) until prod ends.
        await _run(h, prod_task.id, A.RUNNING, A.SUCCEEDED)
        assert await _status(h, new) == T.ASSIGNED
        await _run(h, new, A.RUNNING, A.SUCCEEDED)
        assert [a.status for a in await _attempts(h, new)] == [A.PREEMPTED, A.SUCCEEDED]
        found = await h.get(new)
        assert (found.status, found.result) == (T.SUCCEEDED, "SUCCESS")
        assert str(found.budgets[PREEMPTION]) == "1/100"


async def test_bands_preempt_only_lower_bands(iris: Harness) -> None:
    """INTERACTIVE evicts BATCH, never INTERACTIVE or PRODUCTION; BATCH evicts nobody."""
    async with iris({"w1": 2}) as h:
        (interactive,) = await _fill(h, Band.INTERACTIVE, 1)
        (production,) = await _fill(h, Band.PRODUCTION, 1)
        batch = await _submit(h, JobRequest("late-batch", band=Band.BATCH))
        more = await _submit(h, JobRequest("late-interactive", band=Band.INTERACTIVE))
        h.clock.advance(1)
        await h.run_until_settled()
        assert [await _status(h, t) for t in (interactive, production)] == [T.RUNNING, T.RUNNING]
        assert [(await _tasks(h, j))[0].status for j in (batch, more)] == [T.PENDING, T.PENDING]
        assert [str(r.result) for r in await h.history(interactive)].count("preempted") == 0
        # A PRODUCTION task evicts the INTERACTIVE one (the lowest band running).
        prod = await _submit(h, JobRequest("prod", band=Band.PRODUCTION))
        await h.run_until_settled()
        assert (await _tasks(h, prod))[0].status == T.ASSIGNED
        assert await _status(h, interactive) == T.PENDING
        assert await _status(h, production) == T.RUNNING


async def test_a_task_preempted_while_assigned_retries_for_free(iris: Harness) -> None:
    async with iris({"w1": 1}) as h:
        batch = await _submit(h, JobRequest("batch", max_retries_preemption=0))
        await h.run_until_settled()
        (task,) = await _tasks(h, batch)
        assert task.status == T.ASSIGNED  # the worker has not started it
        first = (await _latest(h, task.id)).id
        prod = await _submit(h, JobRequest("prod", band=Band.PRODUCTION))
        await h.run_until_settled()
        assert await _status(h, first) == A.PREEMPTED
        found = await h.get(task.id)
        # No budget spent, even with a preemption budget of 0.
        assert (found.status, found.budgets[PREEMPTION]) == (T.PENDING, BudgetUse(0, 0))
        settle = [r for r in await h.history(task.id) if r.handler.startswith("iris-settle")]
        assert [(r.handler, str(r.result), r.from_status, r.to_status) for r in settle] == [
            ("iris-settle-preempted", "requeued", T.ASSIGNED, T.PENDING)
        ]
        (prod_task,) = await _tasks(h, prod)
        await _run(h, prod_task.id, A.RUNNING, A.SUCCEEDED)
        await _run(h, task.id, A.RUNNING, A.SUCCEEDED)
        assert [a.status for a in await _attempts(h, task.id)] == [A.PREEMPTED, A.SUCCEEDED]
        assert await _status(h, batch) == J.SUCCEEDED


async def test_a_spent_preemption_budget_ends_a_preempted_task_preempted(iris: Harness) -> None:
    """The engine's own give-up: the charge past the limit is counted (1/0, not 0/0) and the
    task ends PREEMPTED, the give-up of the handler that settles preemptions only."""
    async with iris({"w1": 1}) as h:
        (task,) = await _fill(h, Band.BATCH, 1, max_retries_preemption=0)
        await _submit(h, JobRequest("prod", band=Band.PRODUCTION))
        await h.run_until_settled()
        found = await h.get(task)
        assert (found.status, found.result) == (T.PREEMPTED, "FAILURE")
        assert found.budgets[PREEMPTION] == BudgetUse(1, 0)
        last = (await h.history(task))[-1]
        assert (last.handler, str(last.result), last.to_status) == (
            "iris-settle-preempted",
            "GIVE_UP",
            T.PREEMPTED,
        )
        assert "spent budget 'preemption' 1 times (limit=0)" in (last.message or "")
        assert found.parent_id is not None
        assert await _status(h, found.parent_id) == J.WORKER_FAILED


# -- stale reports ------------------------------------------------------------------------------


async def test_reports_from_a_stale_attempt_are_ignored(iris: Harness) -> None:
    """The first attempt was preempted and the task runs a second one: the first worker's late
    heartbeats (RUNNING, then exit 0) change nothing, in the attempt or its task."""
    async with iris({"w1": 1}) as h:
        (task,) = await _fill(h, Band.BATCH, 1)
        stale = (await _latest(h, task)).id
        prod = await _submit(h, JobRequest("prod", band=Band.PRODUCTION))
        await h.run_until_settled()
        (prod_task,) = await _tasks(h, prod)
        await _run(h, prod_task.id, A.RUNNING, A.SUCCEEDED)
        assert await _status(h, task) == T.ASSIGNED  # its second attempt
        rows = len(await h.history(stale))
        assert not await heartbeat(h.repository, stale, A.RUNNING)
        assert not await heartbeat(h.repository, stale, A.SUCCEEDED, exit_code=0)
        await h.run_until_settled()
        found = await h.get(stale)
        assert (found.status, found.data, len(await h.history(stale))) == (
            A.PREEMPTED,
            None,
            rows,
        )
        assert await _status(h, task) == T.ASSIGNED
        # A heartbeat that would move the live attempt backwards is refused too.
        await _run(h, task, A.RUNNING)
        assert not await heartbeat(h.repository, (await _latest(h, task)).id, A.BUILDING)
        assert await _status(h, task) == T.RUNNING


# -- the scheduling deadline --------------------------------------------------------------------


async def test_a_task_past_its_scheduling_deadline_is_unschedulable_and_its_job_kills_the_rest(
    iris: Harness,
) -> None:
    async with iris({"w1": 1}) as h:
        (blocker,) = await _fill(h, Band.BATCH, 1)
        job = await _submit(h, JobRequest("late", replicas=2, scheduling_timeout=60))
        await h.run_until_settled()
        assert [t.status for t in await _tasks(h, job)] == [T.PENDING, T.PENDING]
        # The blocker ends: one task of the job gets the slot, the other keeps waiting.
        await _run(h, blocker, A.SUCCEEDED)
        first, second = await _tasks(h, job)
        assert (first.status, second.status) == (T.ASSIGNED, T.PENDING)
        await _run(h, first.id, A.RUNNING)
        h.clock.advance(30)
        await h.run_until_settled()
        assert await _status(h, second.id) == T.PENDING  # 32 s after submission: in time
        h.clock.advance(30)
        await h.run_until_settled()
        found = await h.get(second.id)
        assert (found.status, found.status_info, found.children) == (
            T.UNSCHEDULABLE,
            "SCHEDULING_TIMEOUT",
            (),
        )
        found = await h.get(job)
        assert (found.status, found.result) == (J.UNSCHEDULABLE, "FAILURE")
        # The running task was killed, and its attempt ended with it.
        killed = await h.get(first.id)
        assert (killed.status, killed.status_info) == (T.KILLED, "JOB_UNSCHEDULABLE")
        attempt = await _latest(h, first.id)
        assert (attempt.status, attempt.status_info) == (A.KILLED, "JOB_UNSCHEDULABLE")
        assert _rows(await h.history(attempt.id))[-1] == (
            "iris-job-unschedulable",
            "MOVED",
            A.RUNNING,
            A.KILLED,
        )


async def test_the_deadline_is_absolute_from_submission_not_from_a_retry(iris: Harness) -> None:
    """A task that ran and failed after its job's deadline is requeued PENDING, then found
    UNSCHEDULABLE at once: the deadline is not restarted by the retry."""
    async with iris({"w1": 1}) as h:
        job = await _submit(h, JobRequest("slow", scheduling_timeout=10, max_retries_failure=5))
        await h.run_until_settled()
        (task,) = await _tasks(h, job)
        await _run(h, task.id, A.RUNNING)
        h.clock.advance(20)  # past the deadline, but it is running: fine
        await h.run_until_settled()
        assert await _status(h, task.id) == T.RUNNING
        await _run(h, task.id, A.FAILED, exit_code=1)
        found = await h.get(task.id)
        assert (found.status, found.budgets[FAILURE]) == (T.UNSCHEDULABLE, BudgetUse(1, 5))
        assert len(found.children) == 1  # no second attempt
        assert [h_.to_status for h_ in await h.history(task.id)][-2:] == [
            T.PENDING,
            T.UNSCHEDULABLE,
        ]
        assert await _status(h, job) == J.UNSCHEDULABLE


# -- gangs (coscheduled jobs) -------------------------------------------------------------------


async def test_a_gang_members_failure_ends_its_running_siblings_cosched_failed(
    iris: Harness,
) -> None:
    async with iris({"w1": 2, "w2": 2}) as h:
        job = await _submit(h, JobRequest("gang", replicas=3, coscheduled=True))
        await h.run_until_settled()
        tasks = await _tasks(h, job)
        for task in tasks:
            await _run(h, task.id, A.BUILDING, A.RUNNING)
        healthy = [t.id for t in tasks[1:]]
        await _run(h, tasks[0].id, A.FAILED, exit_code=137)
        assert await _status(h, tasks[0].id) == T.FAILED
        for task in healthy:
            found = await h.get(task)
            assert (found.status, found.result) == (T.COSCHED_FAILED, "FAILURE")
            assert _rows(await h.history(task))[-1] == (
                "iris-gang",
                "MOVED",
                T.RUNNING,
                T.COSCHED_FAILED,
            )
            # Its attempt was ended too: the worker's slot is free.
            attempt = await _latest(h, task)
            assert attempt.status == A.COSCHED_FAILED
            assert _rows(await h.history(attempt.id))[-1] == (
                "iris-gang",
                "MOVED",
                A.RUNNING,
                A.COSCHED_FAILED,
            )
        found = await h.get(job)
        assert (found.status, found.result) == (J.FAILED, "FAILURE")
        assert [str(r.result) for r in await h.history(job)][-2:] == ["SUCCESS", "SUCCESS"]
        assert [r.handler for r in await h.history(job)][-2:] == ["iris-gang", "iris-job-failed"]
        # Nothing holds a worker any more.
        assert (
            await h.app.queries.list_entities(
                ATTEMPT_KIND, statuses=[A.ASSIGNED, A.BUILDING, A.RUNNING]
            )
            == []
        )


async def test_without_a_gang_a_failed_task_gets_its_siblings_killed_by_the_job(
    iris: Harness,
) -> None:
    async with iris() as h:
        job = await _submit(h, JobRequest("plain", replicas=3))
        await h.run_until_settled()
        tasks = await _tasks(h, job)
        for task in tasks:
            await _run(h, task.id, A.RUNNING)
        await _run(h, tasks[0].id, A.FAILED, exit_code=1)
        assert [await _status(h, t.id) for t in tasks] == [T.FAILED, T.KILLED, T.KILLED]
        assert {(await _latest(h, t.id)).status for t in tasks[1:]} == {A.KILLED}
        assert _rows(await h.history(tasks[1].id))[-1] == (
            "iris-job-failed",
            "MOVED",
            T.RUNNING,
            T.KILLED,
        )
        assert await _status(h, job) == J.FAILED


async def test_a_gang_member_lost_with_its_worker_retries_without_a_cascade(
    iris: Harness,
) -> None:
    """Only a member that ends (budget spent) cascades; a retried one does not."""
    async with iris({"w1": 1, "w2": 1}) as h:
        job = await _submit(h, JobRequest("gang", replicas=2, coscheduled=True))
        await h.run_until_settled()
        first, second = await _tasks(h, job)
        for task in (first, second):
            await _run(h, task.id, A.RUNNING)
        worker = (await _latest(h, first.id)).spec["worker"]
        await _kill(h, worker)
        await h.run_until_settled()
        assert [await _status(h, t.id) for t in (first, second)] == [T.PENDING, T.RUNNING]
        assert await _status(h, job) == J.RUNNING


async def test_a_gang_member_preempted_for_good_does_not_cascade(iris: Harness) -> None:
    """As Iris's preempt_task: the sibling runs on, and the job ends WORKER_FAILED once it
    has ended too."""
    async with iris({"w1": 2}) as h:
        job = await _submit(
            h, JobRequest("gang", replicas=2, coscheduled=True, max_retries_preemption=0)
        )
        await h.run_until_settled()
        first, second = await _tasks(h, job)
        for task in (first, second):
            await _run(h, task.id, A.RUNNING)
        prod = await _submit(h, JobRequest("prod", band=Band.PRODUCTION))
        await h.run_until_settled()
        statuses = sorted([await _status(h, first.id), await _status(h, second.id)])
        assert statuses == [T.PREEMPTED, T.RUNNING]
        assert await _status(h, job) == J.RUNNING
        assert not [r for r in await h.history(job) if r.handler == "iris-gang"]
        (running,) = [t.id for t in (first, second) if await _status(h, t.id) == T.RUNNING]
        await _run(h, running, A.SUCCEEDED)
        found = await h.get(job)
        assert (found.status, found.result) == (J.WORKER_FAILED, "FAILURE")
        assert (await _tasks(h, prod))[0].status == T.ASSIGNED


# -- the job's state, derived from its tasks in Iris's order ------------------------------------

JOB_STATE_CASES = [
    # (job state, max_task_failures, task states) -> job state
    (J.PENDING, 0, [T.SUCCEEDED, T.SUCCEEDED], J.SUCCEEDED),
    (J.RUNNING, 0, [T.SUCCEEDED, T.FAILED], J.FAILED),  # FAILED before RUNNING
    (J.RUNNING, 0, [T.FAILED, T.UNSCHEDULABLE, T.KILLED], J.FAILED),  # FAILED first
    (J.RUNNING, 1, [T.FAILED, T.RUNNING], None),  # within tolerance: still RUNNING
    (J.RUNNING, 1, [T.FAILED, T.SUCCEEDED], J.SUCCEEDED),
    (J.RUNNING, 1, [T.FAILED, T.FAILED, T.RUNNING], J.FAILED),
    (J.RUNNING, 1, [T.FAILED, T.UNSCHEDULABLE, T.KILLED], J.UNSCHEDULABLE),
    (J.RUNNING, 0, [T.UNSCHEDULABLE, T.KILLED, T.RUNNING], J.UNSCHEDULABLE),
    (J.RUNNING, 0, [T.KILLED, T.RUNNING, T.SUCCEEDED], J.KILLED),
    (J.RUNNING, 0, [T.SUCCEEDED, T.WORKER_FAILED], J.WORKER_FAILED),
    (J.RUNNING, 0, [T.PREEMPTED, T.SUCCEEDED], J.WORKER_FAILED),
    (J.RUNNING, 0, [T.WORKER_FAILED, T.RUNNING], None),  # not every task has ended
    (J.PENDING, 0, [T.PENDING, T.BUILDING], J.RUNNING),
    (J.PENDING, 0, [T.PENDING, T.SUCCEEDED], None),
    (J.RUNNING, 0, [T.PENDING, T.SUCCEEDED], J.PENDING),  # none on a worker any more
]


@pytest.mark.parametrize(("start", "tolerance", "tasks", "expected"), JOB_STATE_CASES)
async def test_the_job_state_follows_the_task_counts_in_iris_order(
    iris: Harness, start: str, tolerance: int, tasks: list[str], expected: str | None
) -> None:
    """Each rule is one handler whose SQL filter excludes the earlier rules: one tick of
    every job handler, in any order, gives Iris's answer."""
    async with iris() as h:
        job = await h.create(
            JOB_KIND,
            status=start,
            spec={"max_task_failures": tolerance},
            children=[{"status": s, "spec": {"index": i}} for i, s in enumerate(tasks)],
        )
        names = [cls.name() for cls in JOB_HANDLERS]
        for order in (names, names[::-1]):
            for name in order:
                await h.tick(name)
        found = await h.get(job)
        assert found.status == (expected or start)
        moved = [r for r in await h.history(job) if r.handler != "api"]
        assert len(moved) == (0 if expected is None else 1)
        if expected in (J.FAILED, J.UNSCHEDULABLE, J.KILLED):
            # Iris kills what is left of the job.
            assert not {c.status for c in found.children} & {T.PENDING, T.RUNNING, T.BUILDING}


# -- killing ------------------------------------------------------------------------------------


async def test_killing_a_job_kills_its_tasks_and_ends_their_attempts(iris: Harness) -> None:
    async with iris() as h:
        job = await _submit(h, JobRequest("doomed", replicas=2))
        await h.run_until_settled()
        first, second = await _tasks(h, job)
        await _run(h, first.id, A.RUNNING)
        (outcome,) = await h.repository.request_termination([job])
        assert (outcome.from_status, outcome.to_status) == (J.RUNNING, J.KILLED)
        await h.run_until_settled()
        assert [await _status(h, t.id) for t in (first, second)] == [T.KILLED, T.KILLED]
        assert [(await _latest(h, t.id)).status for t in (first, second)] == [A.KILLED, A.KILLED]
        found = await h.get(job)
        assert (found.status, found.status_info, found.result) == (
            J.KILLED,
            "USER_KILLED",
            "CANCELLED",  # a termination somebody asked for
        )


async def test_killing_one_task_kills_its_job_and_the_other_tasks(iris: Harness) -> None:
    async with iris() as h:
        job = await _submit(h, JobRequest("one-killed", replicas=2))
        await h.run_until_settled()
        first, second = await _tasks(h, job)
        await _run(h, second.id, A.RUNNING)
        await h.repository.request_termination([first.id])
        await h.run_until_settled()
        assert await _status(h, job) == J.KILLED
        found = await h.get(second.id)
        assert (found.status, found.status_info) == (T.KILLED, "JOB_KILLED")
        assert _rows(await h.history(second.id))[-1] == (
            "iris-job-killed",
            "MOVED",
            T.RUNNING,
            T.KILLED,
        )


async def test_a_task_past_its_per_task_timeout_is_killed_and_so_is_its_job(
    iris: Harness,
) -> None:
    async with iris() as h:
        job = await _submit(h, JobRequest("slowpoke", replicas=2, timeout=60))
        await h.run_until_settled()
        first, second = await _tasks(h, job)
        await _run(h, first.id, A.RUNNING)
        h.clock.advance(59)
        await h.run_until_settled()
        assert await _status(h, first.id) == T.RUNNING
        h.clock.advance(2)
        await h.run_until_settled()
        found = await h.get(first.id)
        assert (found.status, found.status_info) == (T.KILLED, "TASK_TIMEOUT")
        assert (await _latest(h, first.id)).status == A.KILLED
        assert _rows(await h.history(first.id))[-1] == (
            "iris-task-timeout",
            "SUCCESS",
            T.RUNNING,
            T.KILLED,
        )
        # Never retried; the job is KILLED and so is its other task (never RUNNING: no timer).
        assert len(found.children) == 1
        assert await _status(h, second.id) == T.KILLED
        assert await _status(h, job) == J.KILLED


# -- the pool of worker slots -------------------------------------------------------------------


async def _schedule_from_two_coordinators(h: CoordinatorHarness) -> list[TickReport]:
    """One ``iris-schedule`` tick from each of two coordinators (batches of one), both
    reading before either applies; their reports."""
    scheduler = h.handlers["iris-schedule"]
    placed = scheduler.execute  # type: ignore[union-attr]
    both_read = asyncio.Barrier(2)

    async def read_together(targets: Any) -> Any:
        result = await placed(targets)
        await both_read.wait()
        return result

    scheduler.execute = read_together  # type: ignore[union-attr]
    a, b = (
        Coordinator(
            h.repository,
            {"iris-schedule": scheduler},
            clock=h.clock,
            kinds=h.app.kinds,
            claim_owner=owner,
            options={"iris-schedule": {"batch_size": 1}},
        )
        for owner in ("a", "b")
    )
    reports = await asyncio.gather(a.tick("iris-schedule"), b.tick("iris-schedule"))
    scheduler.execute = placed  # type: ignore[union-attr]
    return list(reports)


async def test_two_coordinators_never_assign_more_tasks_than_the_cluster_has_slots(
    iris: Harness,
) -> None:
    """Both schedulers read the one free slot before either applies, and both place a task
    on it; the pool (counted in the apply, under its lock on PostgreSQL) admits one and
    refuses the other, pool-full."""
    async with iris({"w1": 1}) as h:
        jobs = [await _submit(h, JobRequest(f"j{i}")) for i in range(2)]
        reports = await _schedule_from_two_coordinators(h)
        results = sorted((str(c.result), c.error_code) for r in reports for c in r.changes)
        assert results == [("SKIPPED", POOL_FULL), ("SUCCESS", None)]
        tasks = [t for j in jobs for t in await _tasks(h, j)]
        assert sorted(t.status for t in tasks) == [T.ASSIGNED, T.PENDING]
        # Only the admitted task got an attempt; the refused one's creation was dropped.
        assert sorted(len(t.children) for t in tasks) == [0, 1]
        # The slot frees when the task ends; the other one gets it.
        (running,) = [t for t in tasks if t.status == T.ASSIGNED]
        (waiting,) = [t for t in tasks if t.status == T.PENDING]
        await _run(h, running.id, A.SUCCEEDED)
        assert await _status(h, waiting.id) == T.ASSIGNED


async def test_two_coordinators_never_fill_one_workers_last_slot_twice(iris: Harness) -> None:
    """Two workers of one slot: both schedulers read both free and place their task on the
    same worker (w1). The cluster's total (2) would admit both; the worker's own pool,
    claimed by the scheduler's result and counted in the apply, admits one and refuses the
    other, which the next tick places on w2."""
    async with iris({"w1": 1, "w2": 1}) as h:
        jobs = [await _submit(h, JobRequest(f"j{i}")) for i in range(2)]
        reports = await _schedule_from_two_coordinators(h)
        changes = [c for r in reports for c in r.changes]
        assert sorted((str(c.result), c.error_code) for c in changes) == [
            ("SKIPPED", POOL_FULL),
            ("SUCCESS", None),
        ]
        (refused,) = [c for c in changes if c.error_code == POOL_FULL]
        assert "pool 'iris-worker-w1' is full (1/1 held, 1 claimed)" in (refused.message or "")
        tasks = [t for j in jobs for t in await _tasks(h, j)]
        (running,) = [t for t in tasks if t.status == T.ASSIGNED]
        (waiting,) = [t for t in tasks if t.status == T.PENDING]
        assert running.spec["pools"] == {"iris-worker-w1": 1}
        assert (await _latest(h, running.id)).spec["worker"] == "w1"
        # The waiting task goes to the other worker on the next tick.
        await h.tick("iris-schedule")
        found = await h.get(waiting.id)
        assert (found.status, found.spec["pools"]) == (T.ASSIGNED, {"iris-worker-w2": 1})
        assert (await _latest(h, waiting.id)).spec["worker"] == "w2"


async def test_a_worker_that_joins_while_drover_runs_needs_no_declaration(
    iris: Harness,
) -> None:
    """One worker of one slot: the second task waits. Worker w3 joins while the harness
    runs (no kind declares its pool: it is a member of the family ``iris-worker-*``); the
    next tick places the task there, counted in w3's own pool of 2 slots."""
    async with iris({"w1": 1}) as h:
        jobs = [await _submit(h, JobRequest(f"j{i}")) for i in range(2)]
        await h.tick("iris-schedule")
        tasks = [t for j in jobs for t in await _tasks(h, j)]
        assert sorted(t.status for t in tasks) == [T.ASSIGNED, T.PENDING]
        (waiting,) = [t for t in tasks if t.status == T.PENDING]
        await h.cluster.worker_joined(h.repository, "w3", 2)
        await h.tick("iris-schedule")
        found = await h.get(waiting.id)
        assert (found.status, found.spec["pools"]) == (T.ASSIGNED, {"iris-worker-w3": 1})
        usage = await h.app.queries.pool_usage("iris-worker-w3")
        assert (usage.capacity, usage.held) == (2, 1)
        assert (await h.app.queries.pool_usage("iris-workers")).capacity == 3


# -- the installed pack ------------------------------------------------------------------------


def test_plugins_check_strict_passes_and_graph_shows_the_kinds() -> None:
    """The installed pack: `drover plugins` lists it, `plugins check --strict` finds nothing,
    `drover graph --kind` draws each kind. Only this pack's entry point is loaded."""
    from drover.cli.group import main

    runner = CliRunner(env={"DROVER_LOAD_PLUGINS": "iris"})
    listed = runner.invoke(main, ["plugins"])
    assert listed.exit_code == 0, listed.output
    assert "drover-iris" in listed.output
    assert "iris-settle (ASSIGNED, BUILDING, RUNNING)" in listed.output
    checked = runner.invoke(main, ["plugins", "check", "--strict"])
    assert checked.exit_code == 0, checked.output
    assert "0 warning(s)" in checked.output
    graph = runner.invoke(main, ["graph", "--kind", TASK_KIND])
    assert graph.exit_code == 0, graph.output
    assert "RUNNING     -> PENDING      [iris-settle-preempted: preempted]" in graph.output
    assert "RUNNING     -> PREEMPTED    [iris-settle-preempted: give_up]" in graph.output
    assert "RUNNING     -> WORKER_FAILED  [iris-settle: give_up]" in graph.output
    assert "PENDING     -> UNSCHEDULABLE  [iris-unschedulable: success]" in graph.output
    graph = runner.invoke(main, ["graph", "--kind", JOB_KIND])
    assert graph.exit_code == 0, graph.output
    assert "RUNNING     -> WORKER_FAILED  [iris-job-worker-failed: success]" in graph.output
    graph = runner.invoke(main, ["graph", "--kind", ATTEMPT_KIND])
    assert graph.exit_code == 0, graph.output
    assert "ASSIGNED    -> BUILDING     [report: reported]" in graph.output  # heartbeats
    assert "RUNNING     -> WORKER_FAILED  [report: reported]" in graph.output


def test_the_entry_point_names_the_plugin() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    declared = project["entry-points"]["drover"]
    assert declared == {"iris": "drover_iris:plugin"}
    module = importlib.import_module("drover_iris")
    assert isinstance(module.plugin, IrisPlugin)
    dist = metadata.distribution(project["name"])  # `make venv` installs it
    (ep,) = [ep for ep in dist.entry_points if ep.group == "drover"]
    assert ep.load() is module.plugin


async def test_the_demo_workload_ends_as_the_readme_says(tmp_path: Path) -> None:
    """`drover-iris-demo submit`, then the pack's handlers (as `drover run` loads them) and
    the demo's workers (`drover-iris-demo workers`), one round a second."""
    from drover_iris.demo import DEMO_JOBS, URGENT_JOB, _with_app
    from drover_iris.workers import step

    url = f"sqlite+aiosqlite:///{tmp_path}/iris.db"
    plugin = IrisPlugin()
    async with CoordinatorHarness(
        plugins=[plugin], include_builtin_handlers=False, database_url=url
    ) as h:
        submitted = {}
        for label, request in DEMO_JOBS:
            submitted[label.split(" ")[0]] = await submit_job(
                h.repository, request, now=h.clock.time()
            )
        for second in range(60):
            if second == 5:  # `drover-iris-demo urgent`, while batch tasks fill the cluster
                label, request = URGENT_JOB
                submitted["serve"] = await submit_job(h.repository, request, now=h.clock.time())
            await h.run_until_settled()
            await step(h.repository, h.app.queries, h.clock.time())
            h.clock.advance(1)
        ends = {name: await _status(h, job) for name, job in submitted.items()}
        assert ends == {
            "train": J.SUCCEEDED,
            "flaky": J.SUCCEEDED,
            "broken": J.FAILED,
            "gang": J.FAILED,
            "serve": J.SUCCEEDED,
            "late": J.UNSCHEDULABLE,
        }
        gang = [t.status for t in await _tasks(h, submitted["gang"])]
        assert gang == [T.COSCHED_FAILED, T.FAILED]
        (flaky,) = await _tasks(h, submitted["flaky"])
        assert [a.status for a in await _attempts(h, flaky.id)] == [A.FAILED, A.SUCCEEDED]
        preempted = [
            t
            for j in submitted.values()
            for t in await _tasks(h, j)
            if t.budgets and t.budgets[PREEMPTION].used
        ]
        assert [t.name for t in preempted] == ["train-3"]  # the newest of the batch band
        assert [a.status for a in await _attempts(h, preempted[0].id)] == [
            A.PREEMPTED,
            A.SUCCEEDED,
        ]
    # The command's own path: it submits to a fresh database and prints one line per job.
    lines = await _with_app(f"sqlite+aiosqlite:///{tmp_path}/cli.db", "submit", 0, 0)
    assert [line.split("  ", 1)[1] for line in lines] == [label for label, _ in DEMO_JOBS]
    lines = await _with_app(f"sqlite+aiosqlite:///{tmp_path}/cli.db", "urgent", 0, 0)
    assert [line.split("  ", 1)[1] for line in lines] == [URGENT_JOB[0]]
