"""Hierarchy: ending or moving an entity's children reaches the whole tree.

Three kinds defined only in ``tests/tree.py`` (job -> task -> attempt), on
SQLite and PostgreSQL, through real ticks and termination requests.
"""

from __future__ import annotations

from tree import Attempt, Job, RunJobs, Task, harness, ids, tree

from drover import HandlerResult


async def test_a_job_ended_by_its_handler_ends_its_tasks_and_their_attempts(make_harness):
    """Bug 1: grandchildren stayed RUNNING when their parent was ended by its own parent."""
    run = RunJobs(lambda ts: HandlerResult(failures=ids(ts)))
    async with harness(make_harness, run) as h:
        job, tasks, attempts = await tree(h)
        _, other_tasks, other_attempts = await tree(h, job=Job.QUEUED)
        await h.tick("run-jobs")
        await h.tick("run-jobs")
        assert (await h.get(job)).status == Job.FAILED
        assert [(await h.get(t)).status for t in tasks] == [Task.FAILED, Task.FAILED]
        # No attempt is left live: each ends in the status of the task's name.
        assert [(await h.get(a)).status for a in attempts] == [Attempt.FAILED, Attempt.FAILED]
        # Another job's tree is untouched.
        assert (await h.get(other_tasks[0])).status == Task.RUNNING
        assert (await h.get(other_attempts[0])).status == Attempt.RUNNING
        # Each grandchild's change is recorded, with the job's handler as its source.
        (change,) = await h.kernel_history(attempts[0])
        assert (change.source, change.from_status, change.to_status) == (
            "run-jobs",
            Attempt.RUNNING,
            Attempt.FAILED,
        )


async def test_a_termination_request_ends_the_whole_tree(make_harness):
    """Bug 1, the cancelled job: tasks end CANCELLED and their attempts end too."""
    async with harness(make_harness) as h:
        job, tasks, attempts = await tree(h)
        (outcome,) = await h.repository.request_termination([job])
        assert outcome.to_status == Job.CANCELLED
        assert {(await h.get(t)).status for t in tasks} == {Task.CANCELLED}
        # attempt has no CANCELLED: its first terminal status that is not a success.
        assert {(await h.get(a)).status for a in attempts} == {Attempt.FAILED}
        changes = await h.kernel_history(attempts[1])
        assert [(c.source, c.to_status) for c in changes] == [("api", Attempt.FAILED)]
