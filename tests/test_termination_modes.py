"""Named termination modes: ``TerminationRule(..., mode="abort")`` and
``drover terminate --mode abort``. A request in a mode uses only that mode's rules; the
mode is named in history and ``status_info``; the entity's result is CANCELLED in any
mode; an unknown mode is one line and writes nothing. Both databases."""

from __future__ import annotations

import attrs
import pytest
from peers import JOB, TASK, Job, Task, harness

from drover import EntityKind, InvalidHandlerError, InvalidSpecError, TerminationRule
from drover.plugins.graph import api_edges

#: A plain stop lets running jobs wind down (CANCELLING, the tasks keep working); an
#: abort ends them at once, their tasks FAILED.
MODAL_JOB = attrs.evolve(
    JOB,
    termination=(
        TerminationRule(Job.CANCELLING, from_statuses={Job.RUNNING}),
        TerminationRule(Job.CANCELLED),
        TerminationRule(Job.CANCELLED, children=Task.FAILED, status_info="ABORTED", mode="abort"),
        TerminationRule(Job.CANCELLED, from_statuses={Job.QUEUED}, mode="drain"),
    ),
)
KINDS = (MODAL_JOB, TASK)


async def _job_with_task(h, status=Job.RUNNING):
    job = await h.create("job", status=status)
    task = await h.create("task", status=Task.WORKING, parent=job)
    return job, task


async def test_a_plain_request_uses_the_rules_without_a_mode(make_harness):
    async with harness(make_harness, kinds=KINDS) as h:
        job, task = await _job_with_task(h)
        outcome = await h.request_termination(job)
        assert (outcome.from_status, outcome.to_status) == (Job.RUNNING, Job.CANCELLING)
        found = await h.get(job)
        assert (found.status, found.status_info) == (Job.CANCELLING, "USER_REQUESTED")
        assert (await h.get(task)).status == Task.WORKING


async def test_a_request_in_a_mode_uses_that_modes_rule_and_is_cancelled(make_harness):
    async with harness(make_harness, kinds=KINDS) as h:
        job, task = await _job_with_task(h)
        outcome = await h.request_termination(job, mode="abort")
        assert (outcome.from_status, outcome.to_status) == (Job.RUNNING, Job.CANCELLED)
        found = await h.get(job)
        # A user's stop in any mode: CANCELLED, not FAILURE.
        assert (found.status, found.status_info, found.result) == (
            Job.CANCELLED,
            "ABORTED",
            "CANCELLED",
        )
        assert found.data == {"stop_requested_by": "api"}
        assert (await h.get(task)).status == Task.FAILED
        last = (await h.history(job))[-1]
        assert (last.handler, str(last.result), last.to_status, last.message) == (
            "api",
            "SUCCESS",
            Job.CANCELLED,
            "termination requested (mode abort)",
        )


async def test_a_mode_without_its_own_status_info_names_the_mode_in_it(make_harness):
    async with harness(make_harness, kinds=KINDS) as h:
        job = await h.create("job", status=Job.QUEUED)
        (outcome,) = await h.repository.request_termination([job], mode="drain", reason="quota")
        assert outcome.to_status == Job.CANCELLED
        found = await h.get(job)
        assert (found.status_info, found.result) == ("USER_REQUESTED:drain", "CANCELLED")
        last = (await h.history(job))[-1]
        assert last.message == "termination requested (mode drain): quota"
        # The mode's rules cover only QUEUED: a running job is refused, and left as it is.
        running = await h.create("job", status=Job.RUNNING)
        with pytest.raises(InvalidSpecError, match="no termination rule of mode 'drain'"):
            await h.repository.request_termination([running], mode="drain")
        assert (await h.get(running)).status == Job.RUNNING


async def test_an_unknown_mode_is_one_line_and_writes_nothing(make_harness):
    async with harness(make_harness, kinds=KINDS) as h:
        job, task = await _job_with_task(h)
        other = await h.create("job", status=Job.QUEUED)
        with pytest.raises(InvalidSpecError) as error:
            await h.repository.request_termination([other, task], mode="abort")
        assert str(error.value).count("\n") == 0
        assert f"{task} is a task: no termination mode 'abort'" in str(error.value)
        with pytest.raises(InvalidSpecError, match=r"no termination mode 'kill' \(its modes: "):
            await h.repository.request_termination([other, job], mode="kill")
        for entity in (job, other):
            assert [r.result for r in await h.history(entity)] == ["CREATED"]
        assert (await h.get(other)).status == Job.QUEUED


async def test_a_kind_without_modes_refuses_any(make_harness):
    async with harness(make_harness, kinds=(JOB, TASK)) as h:
        job = await h.create("job", status=Job.RUNNING)
        with pytest.raises(
            InvalidSpecError, match=r"no termination mode 'abort' \(its modes: none\)"
        ):
            await h.request_termination(job, mode="abort")
        assert (await h.get(job)).status == Job.RUNNING


def test_modes_are_declared_by_the_rules_and_drawn_in_the_graph():
    assert MODAL_JOB.termination_modes == {"abort", "drain"}
    assert JOB.termination_modes == frozenset()
    labels = {(e.source, e.target, e.outcome) for e in api_edges(MODAL_JOB)}
    assert (Job.RUNNING, Job.CANCELLED, "terminate:abort") in labels
    assert (Job.RUNNING, Job.CANCELLING, "terminate") in labels
    with pytest.raises(InvalidHandlerError, match="termination mode 'Abort!' must be kebab-case"):
        EntityKind(
            "job2",
            Job,
            terminal={Job.DONE},
            termination=(TerminationRule(Job.DONE, mode="Abort!"),),
        )
