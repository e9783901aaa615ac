"""Hierarchy: ending or moving an entity's children reaches the whole tree.

Three kinds defined only in ``tests/tree.py`` (job -> task -> attempt), on
SQLite and PostgreSQL, through real ticks and termination requests.
"""

from __future__ import annotations

from tree import Attempt, Job, RunJobs, RunTasks, Task, harness, ids, plugin, sound_handlers, tree

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
        # The transition's children_info reaches the whole tree it ends.
        assert {(await h.get(x)).status_info for x in tasks + attempts} == {"JOB_FAILED"}
        assert (await h.get(other_attempts[0])).status_info is None
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


def test_plugins_check_counts_child_statuses_reached_through_the_parent(monkeypatch, tmp_path):
    """Bug 2: STOPPING is reached only by the job's Transition(children=STOPPING); the task
    kind has handlers of its own, and --strict used to fail with a false "unreachable"."""
    import json

    from click.testing import CliRunner

    import drover.app
    from drover.cli.group import main

    the_plugin = plugin(*sound_handlers())
    real = drover.app.make_plugin_manager
    monkeypatch.setattr(
        drover.app, "make_plugin_manager", lambda **kw: real(**kw, plugins=[the_plugin])
    )
    monkeypatch.chdir(tmp_path)
    env = {"DROVER_LOAD_PLUGINS": ""}
    done = CliRunner().invoke(main, ["plugins", "check", "--strict", "--json"], env=env)
    report = json.loads(done.output)
    assert report["warnings"] == []
    assert report["errors"] == []
    assert done.exit_code == 0


async def test_children_created_with_their_parent_have_a_created_row(make_harness):
    """Bug 6: a child created together with its parent had no history at all."""
    async with harness(make_harness) as h:
        job = await h.create("job", children=[{}, {"status": Task.RUNNING, "priority": 5}])
        first, second = (await h.get(job)).children
        rows = [
            (r.handler, r.result, r.from_status, r.to_status) for r in await h.history(second.id)
        ]
        assert rows == [("api", "CREATED", Task.RUNNING, Task.RUNNING)]
        assert (await h.history(first.id))[0].message == f"created by api with its job {job}"
        # NewEntity children may carry a priority (they compete in their own kind's queue).
        assert (first.priority, second.priority) == (0, 5)


async def test_a_child_moved_by_its_parents_transition_has_the_move_in_its_own_history(
    make_harness,
):
    """Bug 6: the move showed only among the parent's child changes."""
    run = RunJobs(lambda ts: HandlerResult(outcomes=dict.fromkeys(ids(ts), "stop-tasks")))
    tasks_run = RunTasks(lambda ts: HandlerResult(successes=ids(ts)))
    async with harness(make_harness, run, tasks_run) as h:
        _, tasks, attempts = await tree(h)
        h.clock.advance(1)
        await h.tick("run-jobs")
        rows = [
            (r.handler, r.result, r.from_status, r.to_status) for r in await h.history(tasks[0])
        ]
        assert rows == [
            ("api", "CREATED", Task.RUNNING, Task.RUNNING),
            ("run-jobs", "MOVED", Task.RUNNING, Task.STOPPING),
        ]
        assert (await h.get(tasks[0])).status_info == "STOP_ASKED"
        # A move by a handler of the child's own kind is one row, not two.
        h.clock.advance(1)
        await h.tick("run-tasks")
        rows = [(r.handler, r.result, r.to_status) for r in await h.history(tasks[0])]
        assert rows[2:] == [("run-tasks", "SUCCESS", Task.DONE)]
        # The attempts ended with their task: that is in their history too.
        last = (await h.history(attempts[0]))[-1]
        assert (last.handler, last.result, last.to_status) == (
            "run-tasks",
            "MOVED",
            Attempt.FAILED,
        )


async def test_pruning_reaches_the_history_of_grandchildren_of_ended_entities(make_harness):
    """Children's own rows (their creation, their moves) go with their ended top entity."""
    async with harness(make_harness) as h:
        ended, tasks, attempts = await tree(h)
        live, _, live_attempts = await tree(h)
        await h.repository.request_termination([ended])
        h.clock.advance(100)
        counts = await h.repository.prune_history(older_than=h.clock.time())
        # The job's, tasks' and attempts' rows; the termination request's row is the
        # newest of the table, which pruning always keeps (its id is never reused).
        assert counts["scheduling_history"] == 1 + 2 + 2
        assert counts["status_changes"] == 2 + 2 - 1  # the tasks' and the attempts' ends
        assert await h.history(attempts[0]) == []
        assert await h.history(tasks[0]) == []
        assert len(await h.history(live_attempts[0])) == 1
        assert len(await h.history(live)) == 1
