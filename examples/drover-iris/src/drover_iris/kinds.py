"""Iris's three lifecycles as drover kinds: ``iris-job`` → ``iris-task`` → ``iris-attempt``.

``TaskState`` is Iris's ``TaskState`` (without UNSPECIFIED, plus
COSCHED_FAILED for a gang member ended because a sibling failed); an attempt
has the same states minus PENDING and UNSCHEDULABLE (an attempt exists only
once a worker was chosen). ``JobState`` is what Iris derives from its tasks'
counts. A task holds a token of the pool ``iris-workers`` while ASSIGNED,
BUILDING or RUNNING, and a token of its worker's pool (``iris-worker-w1``, a
member of the pool family ``iris-worker-*``, claimed by the scheduler's
result): the apply never assigns more tasks than the cluster or one worker has
slots, also with several coordinators, and a worker that joins while drover
runs needs no declaration.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum, StrEnum
from typing import Any

from drover import Budget, EntityKind, InvalidSpecError, Pool, TerminationRule, Transition


class JobState(StrEnum):
    """An Iris job's state, derived from its tasks' states (no machine of its own)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    WORKER_FAILED = "WORKER_FAILED"
    UNSCHEDULABLE = "UNSCHEDULABLE"


class TaskState(StrEnum):
    """Iris's task states; declaration order is lifecycle order."""

    PENDING = "PENDING"
    ASSIGNED = "ASSIGNED"
    BUILDING = "BUILDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    WORKER_FAILED = "WORKER_FAILED"
    UNSCHEDULABLE = "UNSCHEDULABLE"
    PREEMPTED = "PREEMPTED"
    COSCHED_FAILED = "COSCHED_FAILED"


class AttemptState(StrEnum):
    """One try of a task on one worker (Iris's ``ControllerTaskAttempt``)."""

    ASSIGNED = "ASSIGNED"
    BUILDING = "BUILDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    WORKER_FAILED = "WORKER_FAILED"
    PREEMPTED = "PREEMPTED"
    COSCHED_FAILED = "COSCHED_FAILED"


class Band(IntEnum):
    """Iris's priority bands; the value is the entities' drover priority (fetch order)."""

    BATCH = 100
    INTERACTIVE = 200
    PRODUCTION = 300


JOB_KIND = "iris-job"
TASK_KIND = "iris-task"
ATTEMPT_KIND = "iris-attempt"

#: The failure budget (Iris's ``max_retries_failure``): FAILED attempts.
FAILURE = "failure"
#: The preemption budget (``max_retries_preemption``): WORKER_FAILED and PREEMPTED attempts.
PREEMPTION = "preemption"
DEFAULT_MAX_RETRIES_FAILURE = 0
DEFAULT_MAX_RETRIES_PREEMPTION = 100

#: A worker's slots when the cluster names none.
DEFAULT_SLOTS = 2
#: The pool of worker slots; ``[pools] iris-workers = N`` overrides its capacity.
WORKERS_POOL = "iris-workers"

#: A task on a worker (Iris: RUNNING for its job's state).
ACTIVE_TASK = frozenset({TaskState.ASSIGNED, TaskState.BUILDING, TaskState.RUNNING})
LIVE_TASK = ACTIVE_TASK | {TaskState.PENDING}
#: Terminal task states grouped as "worker failure" in the job's state.
WORKER_FAILURE_TASK = frozenset(
    {TaskState.WORKER_FAILED, TaskState.PREEMPTED, TaskState.COSCHED_FAILED}
)
#: A member ended in one of these: its gang's running siblings end COSCHED_FAILED. Not
#: PREEMPTED: Iris's preempt_task does not cascade (only the job's finalization does).
GANG_TRIGGER_TASK = frozenset({TaskState.FAILED, TaskState.WORKER_FAILED})
LIVE_ATTEMPT = frozenset({AttemptState.ASSIGNED, AttemptState.BUILDING, AttemptState.RUNNING})

#: What a worker's heartbeats (and a dead worker's cascade) may say about an attempt.
WORKER_REPORTS = frozenset(
    {
        (AttemptState.ASSIGNED, AttemptState.BUILDING),
        (AttemptState.ASSIGNED, AttemptState.RUNNING),
        (AttemptState.BUILDING, AttemptState.RUNNING),
    }
    | {
        (live, end)
        for live in LIVE_ATTEMPT
        for end in (AttemptState.SUCCEEDED, AttemptState.FAILED, AttemptState.WORKER_FAILED)
    }
)

#: ``drover why`` prints these words beside a status_info.
STATUS_INFO_MEANINGS = {
    "SCHEDULING_TIMEOUT": "its job's scheduling deadline passed before a worker took it",
    "JOB_FAILED": "its job failed (more failed tasks than max_task_failures)",
    "JOB_UNSCHEDULABLE": "a task of its job could not be scheduled in time",
    "JOB_KILLED": "its job was killed",
    "COSCHED_FAILED": "a member of its gang (coscheduled job) failed",
    "WORKER_DIED": "the worker it ran on stopped answering",
    "TASK_TIMEOUT": "it ran longer than its job's per-task timeout",
}


def _check_job_spec(spec: Mapping[str, Any], where: str) -> None:
    value = spec.get("max_task_failures", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidSpecError(f"{where}: max_task_failures must be a whole number >= 0")
    if not isinstance(spec.get("coscheduled", False), bool):
        raise InvalidSpecError(f"{where}: coscheduled must be true or false")


def _check_task_spec(spec: Mapping[str, Any], where: str) -> None:
    band = spec.get("band", Band.BATCH.name)
    if band not in Band.__members__:
        raise InvalidSpecError(f"{where}: band must be one of {', '.join(Band.__members__)}")
    timeout = spec.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise InvalidSpecError(f"{where}: timeout must be a number of seconds > 0")
    deadline = spec.get("deadline")
    number = isinstance(deadline, int | float) and not isinstance(deadline, bool)
    if deadline is not None and not number:
        raise InvalidSpecError(f"{where}: deadline must be a number (seconds since the epoch)")


def workers_pool(capacity: int) -> Pool:
    """The cluster's slots: a task holds one while ASSIGNED, BUILDING or RUNNING."""
    return Pool(WORKERS_POOL, capacity, held_in=ACTIVE_TASK)


def worker_pool_name(worker: str) -> str:
    """The pool of one worker's slots (``iris-worker-w1``)."""
    return f"iris-worker-{worker}"


#: Every worker's pool: a member of this family (``iris-worker-w1``), never declared one by one.
WORKER_POOLS = "iris-worker-*"


def worker_pools(slots: int) -> Pool:
    """The family of the workers' pools: each worker's holds ``slots`` tokens unless its
    own capacity was set (``drover pools set iris-worker-w3 4``,
    :meth:`~drover_iris.cluster.SimulatedCluster.worker_joined`)."""
    return Pool(WORKER_POOLS, slots, held_in=ACTIVE_TASK, claimed=True)


def make_kinds(workers: Mapping[str, int]) -> tuple[EntityKind, EntityKind, EntityKind]:
    """The three kinds, the task kind holding the cluster's slots (the pool of all of
    them, and the family of claimed pools, one per worker, each of the fewest slots
    a worker of ``workers`` (name → slots) has: the others' are set when they join)."""
    capacity = sum(workers.values())
    job = EntityKind(
        JOB_KIND,
        JobState,
        terminal={
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.KILLED,
            JobState.WORKER_FAILED,
            JobState.UNSCHEDULABLE,
        },
        success={JobState.SUCCEEDED},
        created_in={JobState.PENDING},
        # The job's state is Iris's verdict; max_task_failures may tolerate failed tasks.
        result_from="status",
        termination=(
            TerminationRule(JobState.KILLED, children=TaskState.KILLED, status_info="USER_KILLED"),
        ),
        check_spec=_check_job_spec,
    )
    task = EntityKind(
        TASK_KIND,
        TaskState,
        terminal=set(TaskState) - LIVE_TASK,
        success={TaskState.SUCCEEDED},
        parent=JOB_KIND,
        created_in={TaskState.PENDING},
        # Each retry is a new attempt: only the latest one counts for the result.
        result_from="latest-child",
        budgets=(
            Budget(FAILURE, DEFAULT_MAX_RETRIES_FAILURE, give_up=Transition(TaskState.FAILED)),
            # No give-up of its own: the settling handler's, WORKER_FAILED or PREEMPTED by cause.
            Budget(PREEMPTION, DEFAULT_MAX_RETRIES_PREEMPTION),
        ),
        termination=(TerminationRule(TaskState.KILLED, status_info="USER_KILLED"),),
        pools=(
            workers_pool(capacity),
            worker_pools(min(workers.values(), default=DEFAULT_SLOTS)),
        ),
        check_spec=_check_task_spec,
    )
    attempt = EntityKind(
        ATTEMPT_KIND,
        AttemptState,
        terminal=set(AttemptState) - LIVE_ATTEMPT,
        success={AttemptState.SUCCEEDED},
        parent=TASK_KIND,
        result_from="status",
        termination=(TerminationRule(AttemptState.KILLED, status_info="USER_KILLED"),),
        # Workers move attempts (heartbeats, a dead worker's cascade): drawn by drover graph.
        reported=WORKER_REPORTS,
    )
    return job, task, attempt
