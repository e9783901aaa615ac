"""Results: how an ended entity's result is derived, set by a handler, and cleared by reopen.

Kinds from ``tests/tree.py`` (job -> task -> attempt; a task's result counts
only its latest attempt), on SQLite and PostgreSQL.
"""

from __future__ import annotations

from enum import StrEnum

import pytest
from tree import (
    JOB,
    KINDS,
    Attempt,
    Job,
    RunJobs,
    RunTasks,
    StartJobs,
    Task,
    harness,
    ids,
)

from drover import (
    DependenciesSucceeded,
    EntityKind,
    HandlerResult,
    InvalidHandlerError,
    InvalidSpecError,
    StatusTransitions,
    Transition,
)


async def test_a_retried_task_that_finally_succeeded_has_result_success(make_harness):
    """Bug 3: each retry is a new attempt; an earlier failed attempt is superseded."""
    run = RunTasks(lambda ts: HandlerResult(successes=ids(ts)))
    async with harness(make_harness, run) as h:
        job = await h.create("job", status=Job.RUNNING)
        retried = await h.create("task", status=Task.RUNNING, parent=job)
        await h.create("attempt", status=Attempt.FAILED, parent=retried)
        await h.create("attempt", status=Attempt.SUCCEEDED, parent=retried)
        failing = await h.create("task", status=Task.RUNNING, parent=job)
        await h.create("attempt", status=Attempt.SUCCEEDED, parent=failing)
        await h.create("attempt", status=Attempt.PREEMPTED, parent=failing)
        await h.tick("run-tasks")
        assert ((await h.get(retried)).status, (await h.get(retried)).result) == (
            Task.DONE,
            "SUCCESS",
        )
        # Its latest attempt did not succeed: the success before it does not count.
        assert (await h.get(failing)).result == "FAILURE"


class Run(StrEnum):
    ACTIVE = "ACTIVE"
    DONE = "DONE"
    FAILED = "FAILED"


class Submission(StrEnum):
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"


RUN = EntityKind(
    "run", Run, terminal={Run.DONE, Run.FAILED}, result_from="latest-child", result_slot="replica"
)
SUBMISSION = EntityKind(
    "submission", Submission, terminal={Submission.DONE, Submission.FAILED}, parent="run"
)


async def test_latest_child_per_slot_counts_each_replicas_latest_submission(make_harness):
    """dstack: a run's jobs are replicas; a retry is a new submission of the same replica."""
    async with harness(make_harness, kinds=(RUN, SUBMISSION)) as h:
        children = [
            {"status": Submission.FAILED, "spec": {"replica": 0}},
            {"status": Submission.DONE, "spec": {"replica": 1}},
            {"status": Submission.DONE, "spec": {"replica": 0}},
        ]
        good = await h.create("run", status=Run.DONE, children=children)
        # Replica 1's only submission failed: a later success of replica 0 does not hide it.
        bad_children = [
            {"status": Submission.FAILED, "spec": {"replica": 1}},
            {"status": Submission.DONE, "spec": {"replica": 0}},
        ]
        bad = await h.create("run", status=Run.DONE, children=bad_children)
        assert (await h.get(good)).result == "SUCCESS"
        assert (await h.get(bad)).result == "FAILURE"


def test_result_from_is_checked():
    with pytest.raises(InvalidHandlerError, match="result_from 'newest'"):
        EntityKind("x", Run, terminal={Run.DONE}, result_from="newest")
    with pytest.raises(InvalidHandlerError, match="result_slot is set"):
        EntityKind("x", Run, terminal={Run.DONE}, result_slot="replica")


async def test_an_entity_created_in_a_terminal_status_has_its_result(make_harness):
    """Bug 4: a job created DONE had result NULL, so its dependents waited forever."""

    class StartWhenReady(StartJobs):
        filters = (DependenciesSucceeded(),)

    start = StartWhenReady(lambda ts: HandlerResult(successes=ids(ts)))
    async with harness(make_harness, start) as h:
        done = await h.create("job", status=Job.DONE)
        failed = await h.create("job", status=Job.FAILED)
        assert (await h.get(done)).result == "SUCCESS"
        assert (await h.get(failed)).result == "FAILURE"
        ready = await h.create("job", links=[("depends_on", done)])
        blocked = await h.create("job", links=[("depends_on", failed)])
        await h.tick("start-jobs")
        assert (await h.get(ready)).status == Job.RUNNING
        assert (await h.get(blocked)).status == Job.QUEUED
        # Children created ended get theirs too.
        parent = await h.create("job", children=[{"status": Task.CANCELLED}])
        (child,) = (await h.get(parent)).children
        assert child.result == "FAILURE"


async def test_reopen_clears_the_result_so_dependents_wait_again(make_harness):
    """Bug 4: a re-opened DONE job kept SUCCESS, and its dependents started before it re-ran."""

    class StartWhenReady(StartJobs):
        filters = (DependenciesSucceeded(),)

    start = StartWhenReady(lambda ts: HandlerResult(successes=ids(ts)))
    run = RunJobs(lambda ts: HandlerResult(successes=ids(ts)))
    async with harness(make_harness, start, run) as h:
        upstream = await h.create("job", status=Job.DONE)
        await h.repository.reopen(upstream, Job.QUEUED)
        found = await h.get(upstream)
        assert (found.status, found.result) == (Job.QUEUED, None)
        last = (await h.history(upstream))[-1]
        assert (last.handler, last.result, last.from_status, last.to_status) == (
            "api",
            "REOPENED",
            Job.DONE,
            Job.QUEUED,
        )
        downstream = await h.create("job", links=[("depends_on", upstream)])
        await h.tick("start-jobs")
        # The upstream job started again; the downstream one waits for it to end.
        assert (await h.get(upstream)).status == Job.RUNNING
        assert (await h.get(downstream)).status == Job.QUEUED
        await h.tick("run-jobs")
        assert (await h.get(upstream)).result == "SUCCESS"
        await h.tick("start-jobs")
        assert (await h.get(downstream)).status == Job.RUNNING


async def test_reopen_refuses_what_it_cannot_do_and_writes_nothing(make_harness):
    async with harness(make_harness) as h:
        live = await h.create("job", status=Job.RUNNING)
        with pytest.raises(InvalidSpecError, match="has not ended"):
            await h.repository.reopen(live, Job.QUEUED)
        done = await h.create("job", status=Job.DONE)
        with pytest.raises(InvalidSpecError, match="not a live status"):
            await h.repository.reopen(done, Job.FAILED)
        task = await h.create("task", status=Task.DONE, parent=done)
        with pytest.raises(InvalidSpecError, match="reopen that first"):
            await h.repository.reopen(task, Task.RUNNING)
        assert (await h.get(done)).result == "SUCCESS"
        assert len(await h.history(done)) == 1


async def test_a_handler_sets_the_result_of_a_target_it_ends(make_harness):
    """HandlerResult(results=…): the handler knows better than the children (say, a job whose
    optional tasks failed)."""
    run = RunJobs(
        lambda ts: HandlerResult(successes=ids(ts), results=dict.fromkeys(ids(ts), "SUCCESS"))
    )
    async with harness(make_harness, run) as h:
        job = await h.create("job", status=Job.RUNNING, children=[{"status": Task.FAILED}])
        await h.tick("run-jobs")
        assert (await h.get(job)).result == "SUCCESS"
        bad = RunJobs(lambda ts: HandlerResult(successes=ids(ts), results={ts[0].id: "MAYBE"}))
        h.coordinator.handlers["run-jobs"] = bad
        other = await h.create("job", status=Job.RUNNING)
        report = await h.tick("run-jobs")
        assert "result 'MAYBE'" in (report.error or "")
        assert (await h.get(other)).status == Job.RUNNING


async def test_a_handler_cannot_leave_a_terminal_status(make_harness):
    class Revive(RunJobs):
        handler = "revive-jobs"
        statuses = frozenset({Job.FAILED})
        transitions = StatusTransitions(success=Transition(Job.QUEUED))

    with pytest.raises(InvalidHandlerError, match="cannot leave a terminal status"):
        async with harness(make_harness, Revive()) as h:
            _ = h.coordinator


def test_kinds_are_what_the_tests_declare():
    assert JOB in KINDS


async def test_reopen_clears_the_status_info_that_said_how_it_ended(make_harness):
    """A reopened job kept its old status_info: revived and DONE, it still said OOM."""
    async with harness(make_harness) as h:
        job = await h.create("job", status=Job.RUNNING)
        assert await h.repository.report(job, Job.FAILED, status_info="OOM")
        assert ((await h.get(job)).status_info, (await h.get(job)).result) == ("OOM", "FAILURE")
        await h.repository.reopen(job, Job.QUEUED)
        found = await h.get(job)
        assert (found.status, found.status_info, found.result) == (Job.QUEUED, None, None)
