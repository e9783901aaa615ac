"""Acceptance tests of the dstack pack, from the seed's semantics, on SQLite and PostgreSQL.

Every test builds its own plugin (a fresh simulated cloud) and gives it to
drover's ``CoordinatorHarness``; entry points stay off, so the tests mean the
same whether or not the pack is installed. Time is the harness's manual
clock: back-off, retry windows and stop_duration pass without sleeping.
"""

from __future__ import annotations

import importlib
import tomllib
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from drover_dstack import (
    CLOUD_SOURCE,
    JOB_KIND,
    RESUBMISSIONS,
    RUN_KIND,
    DstackPlugin,
    JobStatus,
    JobTerminationReason,
    Offer,
    RunRequest,
    RunStatus,
    RunTerminationReason,
    SimulatedCloud,
    abort_run,
    retry_delay,
    submit_run,
)
from drover_dstack.kinds import JOB_FINAL_STATUS, RetryEvent, retry_event

from drover import Entity, InvalidSpecError
from drover.testing import CoordinatorHarness, TestDatabase

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
RETRY_ALL = {"on_events": ["no-capacity", "interruption", "error"], "duration": 3600}
R = RunStatus
J = JobStatus
JR = JobTerminationReason
RR = RunTerminationReason


Harness = Callable[..., CoordinatorHarness]


@pytest.fixture
def dstack(drover_database: TestDatabase) -> Harness:
    """A harness with only this pack loaded; its cloud is ``h.cloud``."""

    def make(*offers: Offer) -> CoordinatorHarness:
        cloud = SimulatedCloud(offers or None)
        h = CoordinatorHarness(
            plugins=[DstackPlugin(cloud)],
            include_builtin_handlers=False,
            database_url=drover_database.url,
            database_schema=drover_database.schema,
        )
        h.cloud = cloud  # type: ignore[attr-defined]
        return h

    return make


def cloud(h: CoordinatorHarness) -> SimulatedCloud:
    """The harness's simulated cloud."""
    return h.cloud  # type: ignore[attr-defined, no-any-return]


async def submit(h: CoordinatorHarness, **request: Any) -> str:
    """Submit a run named ``run`` (unless named otherwise)."""
    return await submit_run(h.repository, RunRequest(request.pop("name", "run"), **request))


async def state(h: CoordinatorHarness, entity: str) -> tuple[str, str | None, str | None]:
    """(status, status_info, result)."""
    e = await h.get(entity)
    return (str(e.status), e.status_info, e.result)


async def jobs(h: CoordinatorHarness, run: str) -> list[Entity]:
    """The run's job submissions, by slot then submission_num."""
    children = (await h.get(run)).children
    return sorted(children, key=lambda j: (j.spec["slot"], j.spec["submission_num"]))


async def submissions(h: CoordinatorHarness, run: str) -> list[tuple[str, int, str, str | None]]:
    """(slot, submission_num, status, status_info) of every job submission of the run."""
    return [
        (j.spec["slot"], j.spec["submission_num"], str(j.status), j.status_info)
        for j in await jobs(h, run)
    ]


async def moves(h: CoordinatorHarness, entity: str) -> list[tuple[str, str, str, str]]:
    """(handler, result, from, to) of every history row."""
    return [
        (r.handler, str(r.result), str(r.from_status), str(r.to_status))
        for r in await h.history(entity)
    ]


async def back_off(h: CoordinatorHarness, run: str) -> int:
    """Let a PENDING run's back-off pass (StatusAge: at the delay itself), settle; the delay."""
    delay = int((await h.get(run)).data["retry_after"])
    h.clock.advance(delay)
    await h.run_until_settled()
    return delay


# -- statuses and termination reasons -------------------------------------------------------


async def test_a_task_walks_every_status_and_ends_done(dstack: Harness) -> None:
    async with dstack() as h:
        run = await submit(h, sim={"*": [{"run_for": 30}]})
        assert await state(h, run) == ("SUBMITTED", None, None)
        (job_id,) = [j.id for j in await jobs(h, run)]
        assert await state(h, job_id) == ("SUBMITTED", None, None)
        await h.tick("dstack-provision-jobs")
        await h.tick("dstack-process-runs")  # a job PROVISIONING: the run is PROVISIONING
        assert await state(h, run) == ("PROVISIONING", None, None)
        await h.run_until_settled()
        assert await state(h, run) == ("RUNNING", None, None)
        h.clock.advance(30)
        await h.run_until_settled()
        assert await state(h, run) == ("DONE", RR.ALL_JOBS_DONE, "SUCCESS")
        assert await state(h, job_id) == ("DONE", JR.DONE_BY_RUNNER, "SUCCESS")
        assert await moves(h, job_id) == [
            ("api", "CREATED", "SUBMITTED", "SUBMITTED"),
            ("dstack-provision-jobs", "SUCCESS", "SUBMITTED", "PROVISIONING"),
            ("dstack-pull-jobs", "SUCCESS", "PROVISIONING", "PULLING"),
            ("dstack-start-jobs", "SUCCESS", "PULLING", "RUNNING"),
            ("dstack-watch-jobs", "SUCCESS", "RUNNING", "TERMINATING"),
            ("dstack-stop-jobs", "done", "TERMINATING", "DONE"),
        ]
        assert await moves(h, run) == [
            ("api", "CREATED", "SUBMITTED", "SUBMITTED"),
            ("dstack-process-runs", "provisioning", "SUBMITTED", "PROVISIONING"),
            ("dstack-process-runs", "running", "PROVISIONING", "RUNNING"),
            ("dstack-process-runs", "all-jobs-done", "RUNNING", "TERMINATING"),
            ("dstack-finish-runs", "done", "TERMINATING", "DONE"),
        ]
        assert cloud(h).calls(job_id) == ["provision", "start", "release"]
        assert (await h.get(job_id)).name == "run-0-0"  # dstack's <run>-<job>-<replica>
        assert (await h.get(job_id)).data == {
            "instance": "i-1",
            "offer": "gpu-on-demand",
            "exit_code": 0,
        }


async def test_a_run_created_without_jobs_gets_its_first_submissions(dstack: Harness) -> None:
    """A run created by another path than submit_run (the API, the harness) still runs."""
    async with dstack() as h:
        run = await h.create(
            RUN_KIND, R.SUBMITTED, spec={"nodes": 2, "sim": {"*": [{"run_for": 5}]}}
        )
        await h.run_until_settled()
        assert await submissions(h, run) == [
            ("0/0", 0, "RUNNING", None),
            ("0/1", 0, "RUNNING", None),
        ]
        name = (await h.get(run)).name
        assert [j.name for j in await jobs(h, run)] == [f"{name}-0-0", f"{name}-1-0"]
        (row,) = [r for r in await h.history(run) if r.result == "submit-jobs"]
        assert row.message == "created its first job submissions"
        h.clock.advance(5)
        await h.run_until_settled()
        assert await state(h, run) == ("DONE", RR.ALL_JOBS_DONE, "SUCCESS")


def test_each_job_termination_reason_maps_to_its_final_status_and_retry_event() -> None:
    """dstack's JobTerminationReason.to_status / to_retry_event, for the reasons the pack uses."""
    assert {str(r): str(s) for r, s in JOB_FINAL_STATUS.items()} == {
        "FAILED_TO_START_DUE_TO_NO_CAPACITY": "FAILED",
        "INTERRUPTED_BY_NO_CAPACITY": "FAILED",
        "INSTANCE_UNREACHABLE": "FAILED",
        "TERMINATED_BY_USER": "TERMINATED",
        "DONE_BY_RUNNER": "DONE",
        "ABORTED_BY_USER": "ABORTED",
        "TERMINATED_BY_SERVER": "TERMINATED",
        "CONTAINER_EXITED_WITH_ERROR": "FAILED",
        "MAX_DURATION_EXCEEDED": "TERMINATED",
    }
    assert {str(r): retry_event(r) for r in JR} == {
        "FAILED_TO_START_DUE_TO_NO_CAPACITY": RetryEvent.NO_CAPACITY,
        "INTERRUPTED_BY_NO_CAPACITY": RetryEvent.INTERRUPTION,
        "INSTANCE_UNREACHABLE": RetryEvent.ERROR,
        "CONTAINER_EXITED_WITH_ERROR": RetryEvent.ERROR,
        # TERMINATED / DONE / ABORTED: never retried.
        "TERMINATED_BY_USER": None,
        "DONE_BY_RUNNER": None,
        "ABORTED_BY_USER": None,
        "TERMINATED_BY_SERVER": None,
        "MAX_DURATION_EXCEEDED": None,
    }


async def test_a_container_error_without_retry_fails_the_run(dstack: Harness) -> None:
    async with dstack() as h:
        run = await submit(h, sim={"*": [{"run_for": 5, "exit_code": 3}]})
        h.clock.advance(1)
        await h.run_until_settled()
        h.clock.advance(5)
        await h.run_until_settled()
        assert await state(h, run) == ("FAILED", RR.JOB_FAILED, "FAILURE")
        assert await submissions(h, run) == [("0/0", 0, "FAILED", JR.CONTAINER_EXITED_WITH_ERROR)]
        (job,) = await jobs(h, run)
        assert job.data is not None
        assert job.data["exit_code"] == 3
        (row,) = [r for r in await h.history(job.id) if r.handler == "dstack-watch-jobs"]
        assert (row.result, row.message) == ("exited-with-error", "container exited with code 3")


async def test_max_duration_terminates_the_job_and_is_never_retried(dstack: Harness) -> None:
    """MAX_DURATION_EXCEEDED ends the job TERMINATED; no retry event covers it, so even
    ``retry`` on every event does not resubmit it, and the run ends FAILED (JOB_FAILED), as
    dstack's process_active_run judges a TERMINATED job it may not retry."""
    async with dstack() as h:
        run = await submit(h, max_duration=120, stop_duration=10, retry=RETRY_ALL)
        await h.run_until_settled()
        h.clock.advance(119)
        await h.run_until_settled()
        assert (await state(h, run))[0] == "RUNNING"  # not there yet (StatusAge: inclusive)
        h.clock.advance(1)
        await h.run_until_settled()
        (job,) = await jobs(h, run)
        (row,) = [r for r in await h.history(job.id) if r.handler == "dstack-enforce-max-duration"]
        assert (row.from_status, row.to_status) == ("RUNNING", "TERMINATING")
        assert row.message == "ran longer than max_duration 120s"
        assert await submissions(h, run) == [("0/0", 0, "TERMINATED", JR.MAX_DURATION_EXCEEDED)]
        assert await state(h, run) == ("FAILED", RR.JOB_FAILED, "FAILURE")
        assert cloud(h).calls(job.id) == ["provision", "start", "sigterm", "release"]


async def test_a_user_stop_terminates_the_run_and_is_never_retried(dstack: Harness) -> None:
    async with dstack() as h:
        run = await submit(h, nodes=2, retry=RETRY_ALL, stop_duration=30)
        await h.run_until_settled()
        assert await state(h, run) == ("RUNNING", None, None)
        outcome = await h.request_termination(run)
        assert (outcome.from_status, outcome.to_status) == (R.RUNNING, R.TERMINATING)
        assert await state(h, run) == ("TERMINATING", RR.STOPPED_BY_USER, None)
        await h.run_until_settled()
        assert await submissions(h, run) == [
            ("0/0", 0, "TERMINATED", JR.TERMINATED_BY_USER),
            ("0/1", 0, "TERMINATED", JR.TERMINATED_BY_USER),
        ]
        # TERMINATED, with the result CANCELLED of a stop somebody asked for.
        assert await state(h, run) == ("TERMINATED", RR.STOPPED_BY_USER, "CANCELLED")
        assert [m[1] for m in await moves(h, run)][-2:] == ["stop-jobs-by-user", "terminated"]


async def test_an_aborted_run_kills_its_jobs_at_once(dstack: Harness) -> None:
    """`dstack stop --abort` is the termination mode ``abort``: no graceful stop, the jobs
    end ABORTED (never retried), the run TERMINATED with the CANCELLED of a user's stop."""
    async with dstack() as h:
        run = await submit(h, retry=RETRY_ALL, sim={"*": [{"stop_takes": None}]})
        await h.run_until_settled()
        await abort_run(h.repository, run)
        assert await state(h, run) == ("TERMINATING", RR.ABORTED_BY_USER, None)
        await h.run_until_settled()
        (job,) = await jobs(h, run)
        assert await state(h, job.id) == ("ABORTED", JR.ABORTED_BY_USER, "FAILURE")
        assert cloud(h).calls(job.id) == ["provision", "start", "kill", "release"]
        assert await state(h, run) == ("TERMINATED", RR.ABORTED_BY_USER, "CANCELLED")
        assert [m[:2] for m in await moves(h, run)][-3:] == [
            ("api", "SUCCESS"),
            ("dstack-terminate-runs", "abort-jobs"),
            ("dstack-finish-runs", "terminated"),
        ]
        request = [r for r in await h.history(run) if r.handler == "api"][-1]
        assert request.message == "termination requested (mode abort)"


async def test_a_pending_run_aborted_ends_terminated_at_once(dstack: Harness) -> None:
    async with dstack(Offer("gpu", 0)) as h:
        run = await submit(h, retry=RETRY_ALL)
        await h.run_until_settled()
        assert (await state(h, run))[0] == "PENDING"
        outcome = await h.request_termination(run, mode="abort")
        assert (outcome.from_status, outcome.to_status) == (R.PENDING, R.TERMINATING)
        await h.run_until_settled()
        assert await state(h, run) == ("TERMINATED", RR.ABORTED_BY_USER, "CANCELLED")
        # A job has no abort of its own: it ends with its run.
        (job,) = await jobs(h, run)
        with pytest.raises(InvalidSpecError, match=r"is a dstack-job: no termination mode"):
            await h.request_termination(job.id, mode="abort")


async def test_a_stopped_pending_run_ends_terminated(dstack: Harness) -> None:
    async with dstack(Offer("gpu", 0)) as h:
        run = await submit(h, retry=RETRY_ALL)
        await h.run_until_settled()
        assert (await state(h, run))[0] == "PENDING"
        await h.request_termination(run)
        await h.run_until_settled()
        assert await state(h, run) == ("TERMINATED", RR.STOPPED_BY_USER, "CANCELLED")
        assert await submissions(h, run) == [
            ("0/0", 0, "FAILED", JR.FAILED_TO_START_DUE_TO_NO_CAPACITY)
        ]


# -- retry: new submissions, back-off, duration windows -------------------------------------


async def test_no_capacity_retries_as_new_submissions_with_the_pending_back_off(
    dstack: Harness,
) -> None:
    """Each retry is a new job (submission_num + 1, the old one kept FAILED); PENDING waits
    15 s, 30 s, 1 min, 2 min, 5 min, then 10 min before each resubmission."""
    async with dstack(Offer("gpu", 0)) as h:
        run = await submit(h, retry={"on_events": ["no-capacity"], "duration": 7200})
        await h.run_until_settled()
        delays = []
        for attempt in range(1, 8):
            r = await h.get(run)
            assert (r.status, r.budgets[RESUBMISSIONS].used) == (R.PENDING, attempt)
            delay = r.data["retry_after"]
            delays.append(delay)
            h.clock.advance(delay - 1)
            await h.run_until_settled()
            assert (await state(h, run))[0] == "PENDING"  # still backing off
            assert len(await jobs(h, run)) == attempt
            h.clock.advance(1.5)
            await h.tick("dstack-resubmit-runs")
            assert (await state(h, run))[0] == "SUBMITTED"
            assert len(await jobs(h, run)) == attempt + 1
            await h.run_until_settled()
        assert delays == [15, 30, 60, 120, 300, 600, 600]
        assert [retry_delay(n) for n in range(1, 9)] == [15, 30, 60, 120, 300, 600, 600, 600]
        assert await submissions(h, run) == [
            ("0/0", n, "FAILED", JR.FAILED_TO_START_DUE_TO_NO_CAPACITY) for n in range(8)
        ]
        # Capacity comes back: the next submission runs, and the run succeeds.
        cloud(h).set_capacity("gpu", 1)
        h.clock.advance(601)
        await h.run_until_settled()
        (*failed, last) = await jobs(h, run)
        assert (last.spec["submission_num"], last.status) == (8, J.RUNNING)
        cloud(h).exit(last.id, 0)
        await h.run_until_settled()
        assert await state(h, run) == ("DONE", RR.ALL_JOBS_DONE, "SUCCESS")
        assert [j.result for j in failed] == ["FAILURE"] * 8
        run_moves = [m[1:] for m in await moves(h, run)]
        assert run_moves.count(("pending", "SUBMITTED", "PENDING")) == 8
        assert run_moves.count(("SUCCESS", "PENDING", "SUBMITTED")) == 8


async def test_the_no_capacity_window_is_measured_from_the_run_submission(
    dstack: Harness,
) -> None:
    async with dstack(Offer("gpu", 0)) as h:
        run = await submit(h, retry={"on_events": ["no-capacity"], "duration": 100})
        await h.run_until_settled()
        for delay in (15, 30, 60):  # resubmitted 16 s, 47 s, 108 s after submission
            assert await back_off(h, run) == delay
        assert await state(h, run) == ("FAILED", RR.RETRY_LIMIT_EXCEEDED, "FAILURE")
        assert [s[1:] for s in await submissions(h, run)] == [
            (n, "FAILED", JR.FAILED_TO_START_DUE_TO_NO_CAPACITY) for n in range(4)
        ]


async def test_no_capacity_is_not_retried_unless_on_events_names_it(dstack: Harness) -> None:
    async with dstack(Offer("gpu", 0)) as h:
        run = await submit(h, retry={"on_events": ["error", "interruption"], "duration": 600})
        await h.run_until_settled()
        assert await state(h, run) == ("FAILED", RR.JOB_FAILED, "FAILURE")
        assert len(await jobs(h, run)) == 1


async def test_interruption_window_is_measured_from_the_last_provisioned_submission(
    dstack: Harness,
) -> None:
    """A spot instance interrupted after an hour is retried (an hour is far past the
    window from submission); submissions without capacity after it count their window from
    the interrupted one, and past it the run ends RETRY_LIMIT_EXCEEDED."""
    async with dstack(Offer("spot", 1, spot=True)) as h:
        run = await submit(h, retry={"on_events": ["interruption", "no-capacity"], "duration": 200})
        await h.run_until_settled()
        (first,) = await jobs(h, run)
        h.clock.advance(3600)
        await h.run_until_settled()
        instance = cloud(h).instance_of(first.id)
        assert instance is not None
        cloud(h).set_capacity("spot", 0)
        assert await cloud(h).interrupt(instance.id) is True  # a pushed report
        pushed = (await h.history(first.id))[-1]
        assert (pushed.handler, pushed.from_status, pushed.to_status) == (
            CLOUD_SOURCE,
            "RUNNING",
            "TERMINATING",
        )
        await h.run_until_settled()
        assert await state(h, first.id) == ("FAILED", JR.INTERRUPTED_BY_NO_CAPACITY, "FAILURE")
        assert (await state(h, run))[0] == "PENDING"
        for delay in (15, 30, 60):  # resubmitted 16 s, 47 s, 108 s after the interruption
            assert await back_off(h, run) == delay
            assert (await state(h, run))[0] == "PENDING"
        assert await back_off(h, run) == 120  # 229 s after it: past the window

        assert await state(h, run) == ("FAILED", RR.RETRY_LIMIT_EXCEEDED, "FAILURE")
        assert await submissions(h, run) == [
            ("0/0", 0, "FAILED", JR.INTERRUPTED_BY_NO_CAPACITY),
            *[("0/0", n, "FAILED", JR.FAILED_TO_START_DUE_TO_NO_CAPACITY) for n in range(1, 5)],
        ]


async def test_an_interruption_not_in_on_events_fails_the_run(dstack: Harness) -> None:
    async with dstack() as h:
        run = await submit(h, retry={"on_events": ["no-capacity"], "duration": 600})
        await h.run_until_settled()
        (job,) = await jobs(h, run)
        instance = cloud(h).instance_of(job.id)
        assert instance is not None
        await cloud(h).interrupt(instance.id)
        await h.run_until_settled()
        assert await state(h, run) == ("FAILED", RR.JOB_FAILED, "FAILURE")
        assert await submissions(h, run) == [("0/0", 0, "FAILED", JR.INTERRUPTED_BY_NO_CAPACITY)]


async def test_an_error_retried_then_succeeding_gives_the_run_result_success(
    dstack: Harness,
) -> None:
    async with dstack() as h:
        run = await submit(
            h,
            retry={"on_events": ["error"], "duration": 600},
            sim={"*": [{"run_for": 10, "exit_code": 1}, {"run_for": 10}]},
        )
        await h.run_until_settled()
        h.clock.advance(10)
        await h.run_until_settled()
        assert (await state(h, run))[0] == "PENDING"
        assert await back_off(h, run) == 15
        assert (await state(h, run))[0] == "RUNNING"
        h.clock.advance(10)
        await h.run_until_settled()
        assert await submissions(h, run) == [
            ("0/0", 0, "FAILED", JR.CONTAINER_EXITED_WITH_ERROR),
            ("0/0", 1, "DONE", JR.DONE_BY_RUNNER),
        ]
        # The failed submission is superseded by the later one of its slot.
        assert await state(h, run) == ("DONE", RR.ALL_JOBS_DONE, "SUCCESS")


async def test_an_error_window_restarts_with_each_provisioned_submission(
    dstack: Harness,
) -> None:
    """For an error the window counts from the last provisioned submission, the failing one
    itself: a run whose every submission starts and fails keeps being retried, each time after
    the back-off of its attempt, however long ago it was submitted."""
    async with dstack() as h:
        run = await submit(
            h,
            retry={"on_events": ["error"], "duration": 60},
            sim={"*": [{"run_for": 10, "exit_code": 1}]},
        )
        await h.run_until_settled()
        for delay in (15, 30, 60, 120):
            h.clock.advance(10)
            await h.run_until_settled()
            assert (await state(h, run))[0] == "PENDING"
            assert await back_off(h, run) == delay
        assert (await state(h, run))[0] == "RUNNING"  # 4 retries, 265 s after submission
        assert await submissions(h, run) == [
            *[("0/0", n, "FAILED", JR.CONTAINER_EXITED_WITH_ERROR) for n in range(4)],
            ("0/0", 4, "RUNNING", None),
        ]


async def test_the_back_off_starts_over_once_the_run_reaches_provisioning(
    dstack: Harness,
) -> None:
    """dstack resets ``resubmission_attempt`` when the run becomes PROVISIONING: the
    ``resubmissions`` budget is refilled there (``resets_on``), so a run that was
    provisioned again waits 15 s, not 30 s. A run that never shows PROVISIONING (its job
    got to RUNNING first, as above) keeps counting. The budget has no limit."""
    async with dstack() as h:
        run = await submit(
            h,
            retry={"on_events": ["error"], "duration": 600},
            sim={"*": [{"run_for": 10, "exit_code": 1}]},
        )
        await h.run_until_settled()
        h.clock.advance(10)
        await h.run_until_settled()
        r = await h.get(run)
        assert (r.status, r.data["retry_after"], str(r.budgets[RESUBMISSIONS])) == (
            R.PENDING, 15, "1/∞",
        )  # fmt: skip
        h.clock.advance(16)
        await h.tick("dstack-resubmit-runs")
        await h.tick("dstack-provision-jobs")
        await h.tick("dstack-process-runs")
        r = await h.get(run)
        assert (r.status, str(r.budgets[RESUBMISSIONS])) == (R.PROVISIONING, "0/∞")
        await h.run_until_settled()
        h.clock.advance(10)
        await h.run_until_settled()
        r = await h.get(run)
        assert (r.status, r.data["retry_after"], str(r.budgets[RESUBMISSIONS])) == (
            R.PENDING, 15, "1/∞",
        )  # fmt: skip
        assert [m[1:] for m in await moves(h, run)] == [
            ("CREATED", "SUBMITTED", "SUBMITTED"),
            ("running", "SUBMITTED", "RUNNING"),
            ("pending", "RUNNING", "PENDING"),
            ("SUCCESS", "PENDING", "SUBMITTED"),
            ("provisioning", "SUBMITTED", "PROVISIONING"),
            ("running", "PROVISIONING", "RUNNING"),
            ("pending", "RUNNING", "PENDING"),
        ]


# -- graceful stop --------------------------------------------------------------------------


async def test_graceful_stop_waits_for_the_container_then_kills_after_stop_duration(
    dstack: Harness,
) -> None:
    async with dstack() as h:
        polite = await submit(h, name="polite", stop_duration=60, sim={"*": [{"stop_takes": 20}]})
        stubborn = await submit(
            h, name="stubborn", stop_duration=60, sim={"*": [{"stop_takes": None}]}
        )
        await h.run_until_settled()
        for run in (polite, stubborn):
            await h.request_termination(run)
        await h.run_until_settled()
        (p,), (s,) = await jobs(h, polite), await jobs(h, stubborn)
        assert cloud(h).calls(p.id)[-1] == cloud(h).calls(s.id)[-1] == "sigterm"
        assert (await state(h, p.id))[0] == (await state(h, s.id))[0] == "TERMINATING"
        h.clock.advance(20)
        await h.run_until_settled()
        assert await state(h, p.id) == ("TERMINATED", JR.TERMINATED_BY_USER, "FAILURE")
        assert cloud(h).calls(p.id) == ["provision", "start", "sigterm", "release"]
        assert (await state(h, s.id))[0] == "TERMINATING"  # ignores SIGTERM
        h.clock.advance(39)
        await h.run_until_settled()
        assert (await state(h, s.id))[0] == "TERMINATING"  # 60 s not reached yet
        h.clock.advance(1)
        await h.run_until_settled()
        assert await state(h, s.id) == ("TERMINATED", JR.TERMINATED_BY_USER, "FAILURE")
        assert cloud(h).calls(s.id) == ["provision", "start", "sigterm", "kill", "release"]
        (killed,) = [r for r in await h.history(s.id) if r.handler == "dstack-kill-jobs"]
        assert killed.message == "stop_duration 60s passed: container killed"
        for run in (polite, stubborn):
            assert await state(h, run) == ("TERMINATED", RR.STOPPED_BY_USER, "CANCELLED")


# -- multi-node and replicas ----------------------------------------------------------------


async def test_master_done_stops_the_workers_and_the_run_succeeds(dstack: Harness) -> None:
    async with dstack() as h:
        sim = {"0/0": [{"run_for": 50}], "*": [{"stop_takes": 5}]}
        run = await submit(h, nodes=3, stop_criteria="master-done", sim=sim)
        other = await submit(h, name="all-done", nodes=3, sim=sim)
        await h.run_until_settled()
        h.clock.advance(50)
        await h.run_until_settled()
        # all-done (the default): the workers still run, so does the run.
        assert (await state(h, other))[0] == "RUNNING"
        assert [s[2] for s in await submissions(h, other)] == ["DONE", "RUNNING", "RUNNING"]
        # master-done: the run terminates ALL_JOBS_DONE; workers get a graceful stop.
        assert await state(h, run) == ("TERMINATING", RR.ALL_JOBS_DONE, None)
        h.clock.advance(5)
        await h.run_until_settled()
        assert await submissions(h, run) == [
            ("0/0", 0, "DONE", JR.DONE_BY_RUNNER),
            ("0/1", 0, "DONE", JR.DONE_BY_RUNNER),
            ("0/2", 0, "DONE", JR.DONE_BY_RUNNER),
        ]
        workers = (await jobs(h, run))[1:]
        assert all(
            cloud(h).calls(w.id) == ["provision", "start", "sigterm", "release"] for w in workers
        )
        assert await state(h, run) == ("DONE", RR.ALL_JOBS_DONE, "SUCCESS")


async def test_a_failed_node_of_a_multi_node_task_resubmits_every_node(dstack: Harness) -> None:
    async with dstack() as h:
        run = await submit(
            h,
            nodes=2,
            retry={"on_events": ["error"], "duration": 600},
            stop_duration=30,
            sim={"0/1": [{"run_for": 10, "exit_code": 1}, {}]},
        )
        await h.run_until_settled()
        h.clock.advance(10)
        await h.run_until_settled()
        # The only replica is retrying: the run goes PENDING, the master is stopped by the server.
        assert (await state(h, run))[0] == "PENDING"
        assert await submissions(h, run) == [
            ("0/0", 0, "TERMINATED", JR.TERMINATED_BY_SERVER),
            ("0/1", 0, "FAILED", JR.CONTAINER_EXITED_WITH_ERROR),
        ]
        assert await back_off(h, run) == 15
        assert await submissions(h, run) == [
            ("0/0", 0, "TERMINATED", JR.TERMINATED_BY_SERVER),
            ("0/0", 1, "RUNNING", None),
            ("0/1", 0, "FAILED", JR.CONTAINER_EXITED_WITH_ERROR),
            ("0/1", 1, "RUNNING", None),
        ]
        assert (await state(h, run))[0] == "RUNNING"


async def test_a_failed_replica_resubmits_its_jobs_while_the_other_replicas_keep_running(
    dstack: Harness,
) -> None:
    async with dstack() as h:
        run = await submit(
            h,
            type="service",
            replicas=2,
            nodes=2,
            retry={"on_events": ["error"], "duration": 600},
            stop_duration=30,
            sim={"1/1": [{"run_for": 10, "exit_code": 1}, {}]},
        )
        await h.run_until_settled()
        replica0 = [j.id for j in await jobs(h, run) if j.spec["replica_num"] == 0]
        h.clock.advance(10)
        await h.run_until_settled()
        assert await submissions(h, run) == [
            ("0/0", 0, "RUNNING", None),
            ("0/1", 0, "RUNNING", None),
            ("1/0", 0, "TERMINATED", JR.TERMINATED_BY_SERVER),
            ("1/0", 1, "RUNNING", None),
            ("1/1", 0, "FAILED", JR.CONTAINER_EXITED_WITH_ERROR),
            ("1/1", 1, "RUNNING", None),
        ]
        # The moved job had its reason from the move on (its history row names it).
        stopped = next(j for j in await jobs(h, run) if j.spec["slot"] == "1/0")
        moved = [r for r in await h.history(stopped.id) if r.result == "MOVED"]
        assert [(r.handler, r.to_status, r.message) for r in moved] == [
            (
                "dstack-process-runs",
                J.TERMINATING,
                f"moved by dstack-process-runs: {JR.TERMINATED_BY_SERVER}",
            )
        ]
        # The run never left RUNNING, and replica 0's jobs were never touched.
        run_moves = await moves(h, run)
        assert [m[3] for m in run_moves] == ["SUBMITTED", "RUNNING", "RUNNING"]
        assert run_moves[-1][:2] == ("dstack-process-runs", "retry-replicas")
        for job in replica0:
            assert [m[3] for m in await moves(h, job)][-1] == "RUNNING"
            assert cloud(h).calls(job) == ["provision", "start"]
        assert (await h.get(run)).budgets[RESUBMISSIONS].used == 0  # no PENDING back-off
        await h.request_termination(run)
        await h.run_until_settled()
        assert await state(h, run) == ("TERMINATED", RR.STOPPED_BY_USER, "CANCELLED")


async def test_a_job_stopped_for_its_replicas_retry_has_its_reason_while_it_stops(
    dstack: Harness,
) -> None:
    """The move to TERMINATING carries TERMINATED_BY_SERVER (``MoveTo.status_info``): the
    job shows it during its graceful stop, not only once it has ended."""
    async with dstack() as h:
        run = await submit(
            h,
            type="service",
            replicas=2,
            nodes=2,
            retry={"on_events": ["error"], "duration": 600},
            stop_duration=30,
            sim={"1/1": [{"run_for": 10, "exit_code": 1}, {}], "1/0": [{"stop_takes": None}, {}]},
        )
        await h.run_until_settled()
        h.clock.advance(10)
        await h.run_until_settled()
        stopping = [s for s in await submissions(h, run) if s[0] == "1/0"]
        assert stopping == [
            ("1/0", 0, "TERMINATING", JR.TERMINATED_BY_SERVER),
            ("1/0", 1, "RUNNING", None),
        ]
        h.clock.advance(31)
        await h.run_until_settled()
        assert next(s for s in await submissions(h, run) if s[0] == "1/0") == (
            "1/0", 0, "TERMINATED", JR.TERMINATED_BY_SERVER,
        )  # fmt: skip


# -- input, packaging, demo -----------------------------------------------------------------


async def test_a_bad_run_configuration_is_refused_with_one_line(dstack: Harness) -> None:
    async with dstack() as h:
        with pytest.raises(InvalidSpecError, match=r"retry.on_events must list events of"):
            await submit(h, retry={"on_events": ["sunspots"], "duration": 60})
        with pytest.raises(
            InvalidSpecError, match=r"stop_criteria must be all-done or master-done"
        ):
            await submit(h, stop_criteria="first-done")
        with pytest.raises(InvalidSpecError, match=r"only a service may have replicas > 1"):
            await submit(h, replicas=2)
        with pytest.raises(InvalidSpecError, match=r"sim\['\*'\] entries take only exit_code"):
            await submit(h, sim={"*": [{"exit": 1}]})
        assert await h.app.queries.list_entities(RUN_KIND, limit=None) == []
        assert await h.app.queries.list_entities(JOB_KIND, limit=None) == []


def test_the_cli_lists_checks_and_draws_the_pack() -> None:
    from drover.cli import main

    runner = CliRunner()
    env = {"DROVER_LOAD_PLUGINS": "dstack"}
    listed = runner.invoke(main, ["plugins"], env=env)
    assert listed.exit_code == 0, listed.output
    assert "dstack" in listed.output
    assert "dstack-process-runs" in listed.output
    checked = runner.invoke(main, ["plugins", "check", "--strict"], env=env)
    assert checked.exit_code == 0, checked.output
    assert "0 warning(s)" in checked.output
    for kind, edge in ((RUN_KIND, "PENDING"), (JOB_KIND, "TERMINATING")):
        graph = runner.invoke(main, ["graph", "--kind", kind], env=env)
        assert graph.exit_code == 0, graph.output
        assert edge in graph.output


def test_the_entry_point_names_the_plugin() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert project["entry-points"]["drover"] == {"dstack": "drover_dstack:plugin"}
    module = importlib.import_module("drover_dstack")
    assert isinstance(module.plugin, DstackPlugin)
    dist = metadata.distribution(project["name"])  # `make venv` installs it
    (ep,) = [ep for ep in dist.entry_points if ep.group == "drover"]
    assert ep.load() is module.plugin


def test_drover_terminate_mode_abort_aborts_a_run(tmp_path: Path) -> None:
    """`drover terminate RUN --mode abort` from the CLI; an unknown mode is one line."""
    import asyncio

    from drover.cli import main

    url = f"sqlite+aiosqlite:///{tmp_path}/dstack.db"

    async def settle(
        work: Callable[[CoordinatorHarness], Any],
    ) -> Any:
        async with CoordinatorHarness(
            plugins=[DstackPlugin()], include_builtin_handlers=False, database_url=url
        ) as h:
            found = await work(h)
            await h.run_until_settled()
            return found

    async def started(h: CoordinatorHarness) -> str:
        run = await submit(h)
        await h.run_until_settled()
        return run

    run = asyncio.run(settle(started))
    runner = CliRunner()
    env = {"DROVER_LOAD_PLUGINS": "dstack", "DROVER_DATABASE_URL": url}
    wrong = runner.invoke(main, ["terminate", run, "--mode", "kill"], env=env)
    assert wrong.exit_code == 1
    assert wrong.output.strip() == (
        f"Error: {run} is a dstack-run: no termination mode 'kill' (its modes: abort)"
    )
    assert asyncio.run(settle(lambda h: state(h, run)))[0] == "RUNNING"
    done = runner.invoke(main, ["terminate", run, "--mode", "abort"], env=env)
    assert done.exit_code == 0, done.output
    assert done.output.strip() == f"{run}: RUNNING -> TERMINATING"
    asyncio.run(settle(lambda h: asyncio.sleep(0)))
    ended = asyncio.run(settle(lambda h: state(h, run)))
    assert ended == ("TERMINATED", RR.ABORTED_BY_USER, "CANCELLED")


async def test_the_demo_runs_end_as_the_readme_says(tmp_path: Path) -> None:
    """`drover-dstack-demo` submits; the pack's handlers (as `drover run` loads them) carry
    them out."""
    from drover_dstack.demo import _submit_runs

    url = f"sqlite+aiosqlite:///{tmp_path}/dstack.db"
    submitted = {label.split(":")[0]: run for label, run in await _submit_runs(url)}
    async with CoordinatorHarness(
        plugins=[DstackPlugin()], include_builtin_handlers=False, database_url=url
    ) as h:
        for _ in range(30):  # 30 s: flaky's back-off (15 s) is the longest wait
            h.clock.advance(1)
            await h.run_until_settled()
        ends = {name: await state(h, run) for name, run in submitted.items()}
        assert ends == {
            "train": ("DONE", RR.ALL_JOBS_DONE, "SUCCESS"),
            "flaky": ("DONE", RR.ALL_JOBS_DONE, "SUCCESS"),
            "broken": ("FAILED", RR.JOB_FAILED, "FAILURE"),
            "cluster": ("DONE", RR.ALL_JOBS_DONE, "SUCCESS"),
            "capped": ("FAILED", RR.JOB_FAILED, "FAILURE"),
        }
        assert [s[1:] for s in await submissions(h, submitted["flaky"])] == [
            (0, "FAILED", JR.CONTAINER_EXITED_WITH_ERROR),
            (1, "DONE", JR.DONE_BY_RUNNER),
        ]
        assert [j.name for j in await jobs(h, submitted["cluster"])] == [
            "cluster-0-0",
            "cluster-1-0",
            "cluster-2-0",
        ]
        assert await submissions(h, submitted["capped"]) == [
            ("0/0", 0, "TERMINATED", JR.MAX_DURATION_EXCEEDED)
        ]
