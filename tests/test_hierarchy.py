"""Hierarchy: ending or moving an entity's children reaches the whole tree.

Three kinds defined only in ``tests/tree.py`` (job -> task -> attempt), on
SQLite and PostgreSQL, through real ticks and termination requests.
"""

from __future__ import annotations

from tree import Attempt, Job, RunJobs, Task, harness, ids, plugin, sound_handlers, tree

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


def test_plugins_check_counts_child_statuses_reached_through_the_parent(monkeypatch, tmp_path):
    """Bug 2: STOPPING is reached only by the job's Transition(children=STOPPING); the task
    kind has handlers of its own, and --strict used to fail with a false "unreachable"."""
    import json

    from click.testing import CliRunner

    import drover.app
    from drover.cli.main import main

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
