"""dstack's runs and jobs as two drover kinds, with dstack's termination reasons.

``RunStatus`` and ``JobStatus`` are dstack's, in lifecycle order. A run's
``status_info`` is its ``RunTerminationReason`` once it is TERMINATING; a
job's is its ``JobTerminationReason``. Each reason maps to the final status
the entity gets once its termination is processed (``to_status`` in dstack),
and a job's reason to the retry event it triggers (``to_retry_event``): only
a reason whose final status is FAILED is an ``error``; a user stop, a
``max_duration`` or a server's stop end TERMINATED and are never retried.

A job is one *submission* of one slot of a run (``spec["slot"]``, replica and
node). A retry is a new job entity of the same slot with ``submission_num``
one higher; the old one stays, ended. The run's result counts only the
latest submission of each slot (``result_from="latest-child"``,
``result_slot=("replica_num", "job_num")``): a run that finally succeeded after retries has
result SUCCESS.
"""

from __future__ import annotations

from enum import StrEnum

from drover import Budget, EntityKind, TerminationRule

from .spec import check_run_spec


class RunStatus(StrEnum):
    """dstack's ``RunStatus``; declaration order is lifecycle order."""

    PENDING = "PENDING"
    SUBMITTED = "SUBMITTED"
    PROVISIONING = "PROVISIONING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    FAILED = "FAILED"
    DONE = "DONE"


class JobStatus(StrEnum):
    """dstack's ``JobStatus``; declaration order is lifecycle order."""

    SUBMITTED = "SUBMITTED"
    PROVISIONING = "PROVISIONING"
    PULLING = "PULLING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    ABORTED = "ABORTED"
    FAILED = "FAILED"
    DONE = "DONE"


class RunTerminationReason(StrEnum):
    """Why a run is TERMINATING (its ``status_info``)."""

    ALL_JOBS_DONE = "ALL_JOBS_DONE"
    JOB_FAILED = "JOB_FAILED"
    RETRY_LIMIT_EXCEEDED = "RETRY_LIMIT_EXCEEDED"
    STOPPED_BY_USER = "STOPPED_BY_USER"
    ABORTED_BY_USER = "ABORTED_BY_USER"
    SERVER_ERROR = "SERVER_ERROR"


class JobTerminationReason(StrEnum):
    """Why a job is TERMINATING (its ``status_info``); the ones this pack's cloud can cause."""

    FAILED_TO_START_DUE_TO_NO_CAPACITY = "FAILED_TO_START_DUE_TO_NO_CAPACITY"
    INTERRUPTED_BY_NO_CAPACITY = "INTERRUPTED_BY_NO_CAPACITY"
    INSTANCE_UNREACHABLE = "INSTANCE_UNREACHABLE"
    TERMINATED_BY_USER = "TERMINATED_BY_USER"
    DONE_BY_RUNNER = "DONE_BY_RUNNER"
    ABORTED_BY_USER = "ABORTED_BY_USER"
    TERMINATED_BY_SERVER = "TERMINATED_BY_SERVER"
    CONTAINER_EXITED_WITH_ERROR = "CONTAINER_EXITED_WITH_ERROR"
    MAX_DURATION_EXCEEDED = "MAX_DURATION_EXCEEDED"


class RetryEvent(StrEnum):
    """The events ``retry.on_events`` may name."""

    NO_CAPACITY = "no-capacity"
    INTERRUPTION = "interruption"
    ERROR = "error"


#: ``RunTerminationReason.to_status``: the run's final status.
RUN_FINAL_STATUS: dict[str, RunStatus] = {
    RunTerminationReason.ALL_JOBS_DONE: RunStatus.DONE,
    RunTerminationReason.JOB_FAILED: RunStatus.FAILED,
    RunTerminationReason.RETRY_LIMIT_EXCEEDED: RunStatus.FAILED,
    RunTerminationReason.STOPPED_BY_USER: RunStatus.TERMINATED,
    RunTerminationReason.ABORTED_BY_USER: RunStatus.TERMINATED,
    RunTerminationReason.SERVER_ERROR: RunStatus.FAILED,
}

#: ``RunTerminationReason.to_job_termination_reason``: what the run's live jobs are told.
RUN_TO_JOB_REASON: dict[str, JobTerminationReason] = {
    RunTerminationReason.ALL_JOBS_DONE: JobTerminationReason.DONE_BY_RUNNER,
    RunTerminationReason.JOB_FAILED: JobTerminationReason.TERMINATED_BY_SERVER,
    RunTerminationReason.RETRY_LIMIT_EXCEEDED: JobTerminationReason.TERMINATED_BY_SERVER,
    RunTerminationReason.STOPPED_BY_USER: JobTerminationReason.TERMINATED_BY_USER,
    RunTerminationReason.ABORTED_BY_USER: JobTerminationReason.ABORTED_BY_USER,
    RunTerminationReason.SERVER_ERROR: JobTerminationReason.TERMINATED_BY_SERVER,
}

#: ``JobTerminationReason.to_status``: the job's final status.
JOB_FINAL_STATUS: dict[str, JobStatus] = {
    JobTerminationReason.FAILED_TO_START_DUE_TO_NO_CAPACITY: JobStatus.FAILED,
    JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY: JobStatus.FAILED,
    JobTerminationReason.INSTANCE_UNREACHABLE: JobStatus.FAILED,
    JobTerminationReason.TERMINATED_BY_USER: JobStatus.TERMINATED,
    JobTerminationReason.DONE_BY_RUNNER: JobStatus.DONE,
    JobTerminationReason.ABORTED_BY_USER: JobStatus.ABORTED,
    JobTerminationReason.TERMINATED_BY_SERVER: JobStatus.TERMINATED,
    JobTerminationReason.CONTAINER_EXITED_WITH_ERROR: JobStatus.FAILED,
    JobTerminationReason.MAX_DURATION_EXCEEDED: JobStatus.TERMINATED,
}


def job_final_status(reason: str | None) -> JobStatus:
    """The final status of a job TERMINATING for ``reason`` (none given: the server's stop)."""
    return JOB_FINAL_STATUS.get(reason or "", JobStatus.TERMINATED)


def retry_event(reason: str | None) -> RetryEvent | None:
    """``JobTerminationReason.to_retry_event``: the event a reason triggers, or None."""
    if reason == JobTerminationReason.FAILED_TO_START_DUE_TO_NO_CAPACITY:
        return RetryEvent.NO_CAPACITY
    if reason == JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY:
        return RetryEvent.INTERRUPTION
    return RetryEvent.ERROR if job_final_status(reason) == JobStatus.FAILED else None


#: ``drover why`` prints these beside a run's or job's status_info.
REASON_MEANINGS: dict[str, str] = {
    RunTerminationReason.ALL_JOBS_DONE: "every job is done (or the master is, with master-done)",
    RunTerminationReason.JOB_FAILED: "a job failed and its retry policy does not cover it",
    RunTerminationReason.RETRY_LIMIT_EXCEEDED: "a job failed past its retry duration",
    RunTerminationReason.STOPPED_BY_USER: "the user stopped the run (drover terminate)",
    RunTerminationReason.ABORTED_BY_USER: "the user aborted the run",
    RunTerminationReason.SERVER_ERROR: "the server could not go on with the run",
    JobTerminationReason.FAILED_TO_START_DUE_TO_NO_CAPACITY: "no offer had capacity",
    JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY: "its (spot) instance was interrupted",
    JobTerminationReason.INSTANCE_UNREACHABLE: "its instance stopped answering",
    JobTerminationReason.TERMINATED_BY_USER: "the user stopped its run",
    JobTerminationReason.DONE_BY_RUNNER: "its container exited with code 0",
    JobTerminationReason.ABORTED_BY_USER: "the user aborted its run",
    JobTerminationReason.TERMINATED_BY_SERVER: "the server stopped it (its run ends or retries)",
    JobTerminationReason.CONTAINER_EXITED_WITH_ERROR: "its container exited with a non-zero code",
    JobTerminationReason.MAX_DURATION_EXCEEDED: "it ran longer than max_duration",
}

RUN_KIND = "dstack-run"
#: The termination mode of ``dstack stop --abort`` (``drover terminate RUN --mode abort``).
ABORT = "abort"
JOB_KIND = "dstack-job"
#: The budget a run's moves to PENDING charge: the back-off's attempt number. Without a
#: limit (dstack bounds resubmissions by ``retry.duration``, not by a count), and refilled
#: when the run reaches PROVISIONING, as dstack resets ``resubmission_attempt``.
RESUBMISSIONS = "resubmissions"
#: dstack's PENDING back-off by resubmission attempt (seconds), the last one repeating.
PENDING_RETRY_DELAYS = (15, 30, 60, 120, 300, 600)

LIVE_JOB = frozenset(
    {
        JobStatus.SUBMITTED,
        JobStatus.PROVISIONING,
        JobStatus.PULLING,
        JobStatus.RUNNING,
        JobStatus.TERMINATING,
    }
)
ACTIVE_JOB = LIVE_JOB - {JobStatus.TERMINATING}
FINISHED_JOB = frozenset(
    {JobStatus.TERMINATED, JobStatus.ABORTED, JobStatus.FAILED, JobStatus.DONE}
)


def retry_delay(attempt: int) -> int:
    """The PENDING back-off before resubmission ``attempt`` (1 first): 15 s … 10 min."""
    return PENDING_RETRY_DELAYS[min(max(attempt, 1), len(PENDING_RETRY_DELAYS)) - 1]


RUN = EntityKind(
    RUN_KIND,
    RunStatus,
    terminal={RunStatus.TERMINATED, RunStatus.FAILED, RunStatus.DONE},
    success={RunStatus.DONE},
    created_in={RunStatus.SUBMITTED},
    check_spec=check_run_spec,
    # Each retry is a new submission of a slot (replica x job number, a composite slot);
    # only the latest one counts.
    result_from="latest-child",
    result_slot=("replica_num", "job_num"),
    budgets=(Budget(RESUBMISSIONS, None, resets_on={RunStatus.PROVISIONING}),),
    # `dstack stop`: TERMINATING with the reason; the run's handlers stop its jobs.
    # `dstack stop --abort` is the mode ABORT: its jobs are killed at once.
    termination=(
        TerminationRule(RunStatus.TERMINATING, status_info=RunTerminationReason.STOPPED_BY_USER),
        TerminationRule(
            RunStatus.TERMINATING, status_info=RunTerminationReason.ABORTED_BY_USER, mode=ABORT
        ),
    ),
)
JOB = EntityKind(
    JOB_KIND,
    JobStatus,
    terminal=FINISHED_JOB,
    success={JobStatus.DONE},
    parent=RUN_KIND,
    termination=(
        TerminationRule(JobStatus.TERMINATING, status_info=JobTerminationReason.TERMINATED_BY_USER),
    ),
)
KINDS = (RUN, JOB)
