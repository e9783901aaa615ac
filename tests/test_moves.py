"""Targeted moves: ``HandlerResult(moves={id: (expected, new[, status_info])})`` moves
entities other than the tick's targets, in the tick's transaction, each with
compare-and-set.

Kinds from ``tests/tree.py`` (job -> task -> attempt), on SQLite and PostgreSQL.
"""

from __future__ import annotations

import pytest
from tree import Attempt, Job, RunJobs, Task, harness, ids, tree

from drover import HandlerResult, MoveTo, SchedulingResult


async def test_a_handler_preempts_a_task_it_did_not_fetch(make_harness):
    """Iris: scheduling one job preempts another job's task; its attempt ends with it."""
    victims: dict[str, tuple[str, str]] = {}
    run = RunJobs(lambda ts: HandlerResult(skipped=ids(ts), moves=victims))
    async with harness(make_harness, run) as h:
        job = await h.create("job", status=Job.RUNNING)
        _, tasks, attempts = await tree(h, job=Job.QUEUED)
        victims[tasks[0]] = (Task.RUNNING, Task.CANCELLED)
        h.clock.advance(1)
        report = await h.tick("run-jobs")
        moved = [c for c in report.changes if c.entity_id == tasks[0]]
        assert [(c.result, c.from_status, c.to_status) for c in moved] == [
            ("MOVED", Task.RUNNING, Task.CANCELLED)
        ]
        victim = await h.get(tasks[0])
        assert (victim.status, victim.result) == (Task.CANCELLED, "FAILURE")
        # Down the tree: its attempt ended too; the other task is untouched.
        assert (await h.get(attempts[0])).status == Attempt.FAILED
        assert (await h.get(tasks[1])).status == Task.RUNNING
        last = (await h.history(tasks[0]))[-1]
        assert (last.handler, last.result, last.to_status, last.message) == (
            "run-jobs",
            "MOVED",
            Task.CANCELLED,
            "moved by run-jobs",
        )
        assert (await h.history(job))[-1].result == SchedulingResult.SKIPPED


async def test_a_move_that_lost_its_race_is_dropped_like_a_stale_transition(make_harness):
    victims: dict[str, tuple[str, str]] = {}
    run = RunJobs(lambda ts: HandlerResult(skipped=ids(ts), moves=victims))
    async with harness(make_harness, run) as h:
        await h.create("job", status=Job.RUNNING)
        _, tasks, _ = await tree(h, job=Job.QUEUED)
        # The handler believed the task PENDING; it is RUNNING.
        victims[tasks[0]] = (Task.PENDING, Task.CANCELLED)
        victims["no-such-entity"] = (Task.RUNNING, Task.CANCELLED)
        report = await h.tick("run-jobs")
        lost = {c.entity_id: c for c in report.changes if c.entity_id in victims}
        assert {(c.result, c.error_code) for c in lost.values()} == {
            (SchedulingResult.SKIPPED, "stale-status")
        }
        assert (await h.get(tasks[0])).status == Task.RUNNING
        # No row: the entity's latest word stays the one that won.
        assert [r.result for r in await h.history(tasks[0])] == ["CREATED"]


async def test_moves_a_kind_cannot_make_are_refused_and_write_nothing(make_harness):
    victims: dict[str, tuple[str, str]] = {}
    run = RunJobs(lambda ts: HandlerResult(skipped=ids(ts), moves=victims))
    async with harness(make_harness, run) as h:
        await h.create("job", status=Job.RUNNING)
        _, tasks, _ = await tree(h, job=Job.QUEUED)
        ended = await h.create("task", status=Task.DONE, parent=await h.create("job"))
        victims[tasks[0]] = (Task.RUNNING, "LOST")
        victims[ended] = (Task.DONE, Task.RUNNING)
        report = await h.tick("run-jobs")
        refused = {c.entity_id: c for c in report.changes if c.entity_id in victims}
        assert {c.error_code for c in refused.values()} == {"invalid-move"}
        assert "has no status 'LOST'" in (refused[tasks[0]].message or "")
        assert "is terminal (reopen" in (refused[ended].message or "")
        assert (await h.get(tasks[0])).status == Task.RUNNING
        assert (await h.get(ended)).status == Task.DONE


async def test_a_move_of_a_target_makes_the_result_invalid(make_harness):
    run = RunJobs(
        lambda ts: HandlerResult(skipped=ids(ts), moves={ts[0].id: (Job.RUNNING, Job.DONE)})
    )
    async with harness(make_harness, run) as h:
        job = await h.create("job", status=Job.RUNNING)
        report = await h.tick("run-jobs")
        assert "a target: report its outcome instead" in (report.error or "")
        assert (await h.get(job)).status == Job.RUNNING


async def test_moves_are_written_in_the_ticks_transaction(make_harness):
    victims: dict[str, tuple[str, str]] = {}
    run = RunJobs(lambda ts: HandlerResult(successes=ids(ts), moves=victims))
    async with harness(make_harness, run) as h:
        job = await h.create("job", status=Job.RUNNING)
        _, tasks, _ = await tree(h, job=Job.QUEUED)
        victims[tasks[0]] = (Task.RUNNING, Task.CANCELLED)

        def fail(step: str) -> None:
            if step == "before-history":
                raise RuntimeError("injected")

        h.coordinator.inject_apply_failure = fail
        with pytest.raises(RuntimeError, match="injected"):
            await h.tick("run-jobs")
        assert (await h.get(job)).status == Job.RUNNING
        assert (await h.get(tasks[0])).status == Task.RUNNING


async def test_moves_apply_when_the_tick_claims_its_targets(make_harness):
    """Several coordinators (PostgreSQL): a tick claims only its targets; the entities it
    moves are not among them, and their compare-and-set alone guards them."""
    victims: dict[str, tuple[str, str]] = {}
    run = RunJobs(lambda ts: HandlerResult(successes=ids(ts), moves=victims))
    async with harness(make_harness, run) as h:
        h.coordinator.claim_owner = "coordinator-a"
        job = await h.create("job", status=Job.RUNNING)
        _, tasks, _ = await tree(h, job=Job.QUEUED)
        victims[tasks[0]] = (Task.RUNNING, Task.CANCELLED)
        report = await h.tick("run-jobs")
        assert {c.entity_id: c.error_code for c in report.changes} == {job: None, tasks[0]: None}
        assert (await h.get(job)).status == Job.DONE
        assert (await h.get(tasks[0])).status == Task.CANCELLED


async def test_a_move_with_status_info_sets_it_in_the_same_write(make_harness):
    """A 3-tuple (or a MoveTo) gives the moved entity its reason at once: the entity's
    ``status_info`` and its history row say it; a 2-tuple leaves the entity's own."""
    victims: dict[str, object] = {}
    run = RunJobs(lambda ts: HandlerResult(skipped=ids(ts), moves=victims))
    async with harness(make_harness, run) as h:
        await h.create("job", status=Job.RUNNING)
        _, tasks, attempts = await tree(h, job=Job.QUEUED)
        victims[tasks[0]] = (Task.RUNNING, Task.CANCELLED, "PREEMPTED_BY_RUN_JOBS")
        victims[tasks[1]] = MoveTo(Task.RUNNING, Task.PENDING, status_info="RESCHEDULED")
        report = await h.tick("run-jobs")
        moved = {c.entity_id: (c.result, c.to_status) for c in report.changes}
        assert moved[tasks[0]] == ("MOVED", Task.CANCELLED)
        assert moved[tasks[1]] == ("MOVED", Task.PENDING)
        first, second = await h.get(tasks[0]), await h.get(tasks[1])
        assert (first.status, first.status_info) == (Task.CANCELLED, "PREEMPTED_BY_RUN_JOBS")
        assert (second.status, second.status_info) == (Task.PENDING, "RESCHEDULED")
        assert (await h.get(attempts[0])).status == Attempt.FAILED
        rows = [(await h.history(t))[-1] for t in tasks]
        assert [(r.result, r.message) for r in rows] == [
            ("MOVED", "moved by run-jobs: PREEMPTED_BY_RUN_JOBS"),
            ("MOVED", "moved by run-jobs: RESCHEDULED"),
        ]


async def test_a_plain_move_keeps_the_entitys_status_info(make_harness):
    victims: dict[str, tuple[str, str]] = {}
    run = RunJobs(lambda ts: HandlerResult(skipped=ids(ts), moves=victims))
    async with harness(make_harness, run) as h:
        await h.create("job", status=Job.RUNNING)
        _, tasks, _ = await tree(h, job=Job.QUEUED)
        victims[tasks[0]] = (Task.RUNNING, Task.CANCELLED)
        await h.tick("run-jobs")
        victim = await h.get(tasks[0])
        assert (victim.status, victim.status_info) == (Task.CANCELLED, None)
        assert HandlerResult(moves=victims).moves[tasks[0]] == MoveTo(Task.RUNNING, Task.CANCELLED)


def test_a_move_of_another_shape_is_refused_with_one_line():
    with pytest.raises(TypeError, match=r"moves\['x'\] must be \(expected_status, new_status"):
        HandlerResult(moves={"x": ("RUNNING",)})
