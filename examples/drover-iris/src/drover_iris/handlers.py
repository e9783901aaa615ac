"""Iris's controller as drover handlers: one per decision, each declaring its moves.

* Jobs: one handler per rule of Iris's ``_compute_job_state``, each fetching
  (in SQL, by child counts) only the jobs that rule applies to and that no
  earlier rule claims, so the rules' order holds whichever handler ticks
  first; plus the gang cascade.
* Tasks: the scheduler (a new attempt on a worker with room, gated by the
  pool of worker slots, or the preemption of a lower band's attempt), the
  scheduling deadline, the per-task timeout and the settling of an ended
  attempt against the task's two budgets. Three promotions make a task
  follow its attempt (BUILDING, RUNNING, SUCCEEDED).
* Attempts have no handler: workers report them (:mod:`.cluster`).

No handler keeps a counter in ``data`` (an attempt's number is its task's
count of attempts; retries are drover budgets), filters its targets in
Python, moves a status from ``execute`` or reaps anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from drover import (
    AllOf,
    AnyOf,
    ChildCount,
    Children,
    Clock,
    Entity,
    Field,
    HandlerOptions,
    HandlerResult,
    KernelMatchType,
    LifecycleHandler,
    NewEntity,
    PromotionRule,
    StatusAge,
    StatusTransitions,
    Transition,
)

from .cluster import SimulatedCluster
from .kinds import (
    ACTIVE_TASK,
    ATTEMPT_KIND,
    FAILURE,
    GANG_TRIGGER_TASK,
    JOB_KIND,
    LIVE_ATTEMPT,
    LIVE_TASK,
    PREEMPTION,
    STATUS_INFO_MEANINGS,
    TASK_KIND,
    WORKER_FAILURE_TASK,
    AttemptState,
    JobState,
    TaskState,
)

if TYPE_CHECKING:
    # Storage is imported when the daemon runs, not when drover loads the plugin.
    from drover import Queries

ALL, ANY, NOT_ANY = KernelMatchType.ALL, KernelMatchType.ANY, KernelMatchType.NOT_ANY
LIVE_JOB = frozenset({JobState.PENDING, JobState.RUNNING})

# -- the rules of Iris's job state, as SQL filters on the tasks' counts -------------------------

#: More FAILED tasks than ``spec["max_task_failures"]`` (0 when the spec has none).
FAILURES_EXCEEDED = AnyOf(
    ChildCount("gt", statuses={TaskState.FAILED}, spec_key="max_task_failures"),
    AllOf(
        Field("spec", ("max_task_failures",), "missing"),
        ChildCount("gt", 0, statuses={TaskState.FAILED}),
    ),
)
#: Its negation: the failed tasks are within the job's tolerance.
WITHIN_TOLERANCE = AnyOf(
    ChildCount("le", statuses={TaskState.FAILED}, spec_key="max_task_failures"),
    AllOf(
        Field("spec", ("max_task_failures",), "missing"),
        ChildCount("eq", 0, statuses={TaskState.FAILED}),
    ),
)
NO_UNSCHEDULABLE = Children({TaskState.UNSCHEDULABLE}, NOT_ANY)
NO_KILLED = Children({TaskState.KILLED}, NOT_ANY)
GANG = Field("spec", ("coscheduled",), "eq", True)
NOT_GANG = Field("spec", ("coscheduled",), "ne", True)


class IrisHandler(LifecycleHandler):
    """What every handler of the pack shares: name, statuses, filters and transitions as
    class attributes, no tries limit (the budgets judge failures) and no timeout."""

    kind: ClassVar[str] = JOB_KIND
    handler: ClassVar[str] = "iris"
    statuses: ClassVar[frozenset[str]] = frozenset()
    filters: ClassVar[tuple[Any, ...]] = ()
    transitions: ClassVar[StatusTransitions] = StatusTransitions()
    status_info_meanings = dict(STATUS_INFO_MEANINGS)

    @classmethod
    def name(cls) -> str:
        """The handler's name (history's ``handler`` column)."""
        return cls.handler

    @property
    def target_statuses(self) -> frozenset[str]:
        """The statuses this handler acts on."""
        return self.statuses

    @property
    def candidate_filters(self) -> tuple[Any, ...]:
        """Compiled into the fetch's SQL, before its LIMIT."""
        return self.filters

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """The declared moves."""
        return cls.transitions

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """No tries limit and no timeout: outcomes and budgets decide."""
        return HandlerOptions(max_retries=None, timeout=None, batch_size=100)

    async def execute(self, targets: Sequence[Any]) -> HandlerResult:
        """By default every fetched target is one the rule holds for: success."""
        return HandlerResult(successes=[t.id for t in targets])


# -- jobs -------------------------------------------------------------------------------------


class JobFailed(IrisHandler):
    """Rule 2: more FAILED tasks than ``max_task_failures`` → FAILED; the rest KILLED.

    A gang's running members are first ended COSCHED_FAILED by ``iris-gang``:
    a gang job is fetched here only once none of its tasks is on a worker.
    """

    handler = "iris-job-failed"
    statuses = LIVE_JOB
    filters = (FAILURES_EXCEEDED, AnyOf(NOT_GANG, Children(ACTIVE_TASK, NOT_ANY)))
    transitions = StatusTransitions(
        success=Transition(JobState.FAILED, children=TaskState.KILLED, children_info="JOB_FAILED")
    )


class JobUnschedulable(IrisHandler):
    """Rule 3: a task UNSCHEDULABLE → the job UNSCHEDULABLE; its other tasks KILLED."""

    handler = "iris-job-unschedulable"
    statuses = LIVE_JOB
    filters = (Children({TaskState.UNSCHEDULABLE}, ANY), WITHIN_TOLERANCE)
    transitions = StatusTransitions(
        success=Transition(
            JobState.UNSCHEDULABLE, children=TaskState.KILLED, children_info="JOB_UNSCHEDULABLE"
        )
    )


class JobKilled(IrisHandler):
    """Rule 4: a task KILLED (a per-task kill) → the job KILLED; its other tasks too."""

    handler = "iris-job-killed"
    statuses = LIVE_JOB
    filters = (Children({TaskState.KILLED}, ANY), WITHIN_TOLERANCE, NO_UNSCHEDULABLE)
    transitions = StatusTransitions(
        success=Transition(JobState.KILLED, children=TaskState.KILLED, children_info="JOB_KILLED")
    )


class JobWorkerFailed(IrisHandler):
    """Every task ended, one of them by a worker failure or preemption → WORKER_FAILED."""

    handler = "iris-job-worker-failed"
    statuses = LIVE_JOB
    filters = (
        Children(LIVE_TASK, NOT_ANY),
        Children(WORKER_FAILURE_TASK, ANY),
        WITHIN_TOLERANCE,
        NO_UNSCHEDULABLE,
        NO_KILLED,
    )
    transitions = StatusTransitions(success=Transition(JobState.WORKER_FAILED))


class JobSucceeded(IrisHandler):
    """Rule 1: every task SUCCEEDED (or FAILED within ``max_task_failures``) → SUCCEEDED."""

    handler = "iris-job-succeeded"
    statuses = LIVE_JOB
    filters = (Children({TaskState.SUCCEEDED, TaskState.FAILED}, ALL), WITHIN_TOLERANCE)
    transitions = StatusTransitions(success=Transition(JobState.SUCCEEDED))


class JobRunning(IrisHandler):
    """Rule 5: a task ASSIGNED, BUILDING or RUNNING (and no earlier rule) → RUNNING."""

    handler = "iris-job-running"
    statuses = frozenset({JobState.PENDING})
    filters = (Children(ACTIVE_TASK, ANY), WITHIN_TOLERANCE, NO_UNSCHEDULABLE, NO_KILLED)
    transitions = StatusTransitions(success=Transition(JobState.RUNNING))


class JobPending(IrisHandler):
    """Rule 6: no task on a worker any more, some waiting (all preempted, say) → PENDING."""

    handler = "iris-job-pending"
    statuses = frozenset({JobState.RUNNING})
    filters = (
        Children(ACTIVE_TASK, NOT_ANY),
        Children({TaskState.PENDING}, ANY),
        WITHIN_TOLERANCE,
        NO_UNSCHEDULABLE,
        NO_KILLED,
    )
    transitions = StatusTransitions(success=Transition(JobState.PENDING))


class GangCascade(IrisHandler):
    """A coscheduled job's member ended FAILED or WORKER_FAILED: its siblings on a worker
    end COSCHED_FAILED (and so do their attempts), so no host hangs on a collective. A
    member ended PREEMPTED does not cascade (Iris's ``preempt_task`` does not either).

    The job keeps its state (its rules then derive it); the siblings move by
    targeted moves, compare-and-set on the state each was fetched in.
    """

    handler = "iris-gang"
    statuses = LIVE_JOB
    filters = (GANG, Children(GANG_TRIGGER_TASK, ANY), Children(ACTIVE_TASK, ANY))
    transitions = StatusTransitions(success=Transition())

    async def execute(self, targets: Sequence[Any]) -> HandlerResult:
        """Move each running sibling to COSCHED_FAILED."""
        moves = {
            task.id: (task.status, TaskState.COSCHED_FAILED)
            for job in targets
            for task in job.children
            if task.status in ACTIVE_TASK
        }
        messages = {
            job.id: "a member failed: "
            + ", ".join(sorted(t.id for t in job.children if t.status in ACTIVE_TASK))
            + " COSCHED_FAILED"
            for job in targets
        }
        return HandlerResult(successes=[t.id for t in targets], moves=moves, messages=messages)


# -- tasks ------------------------------------------------------------------------------------


class _Deadline:
    """Filters on a task's absolute scheduling deadline (``spec["deadline"]``) against now."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def passed(self) -> Field:
        """The deadline is now or earlier."""
        return Field("spec", ("deadline",), "le", self.clock.time())

    def open(self) -> AnyOf:
        """No deadline, or one still ahead."""
        return AnyOf(
            Field("spec", ("deadline",), "missing"),
            Field("spec", ("deadline",), "gt", self.clock.time()),
        )


async def _held_slots(queries: Queries) -> tuple[list[Entity], dict[str, int]]:
    """The attempts on workers now, and how many slots each worker has given them."""
    live = await queries.list_entities(ATTEMPT_KIND, statuses=LIVE_ATTEMPT, limit=None)
    held: dict[str, int] = {}
    for attempt in live:
        worker = str(attempt.spec.get("worker"))
        held[worker] = held.get(worker, 0) + 1
    return live, held


class ScheduleTasks(IrisHandler):
    """PENDING → ASSIGNED on a live worker with a free slot: a new attempt, ASSIGNED there.

    Highest band first (drover's fetch order: priority, then age). The pool
    ``iris-workers`` gates the move (history ``pool-full`` past the cluster's
    slots); its creation of the attempt is dropped with it. Tasks whose
    deadline passed are left to ``iris-unschedulable``.

    A task that finds no free slot waits (SKIPPED, the reason in its row);
    if a lower band's task runs, it preempts one (Iris's preemption pass):
    the running attempt of the lowest band (the newest first: the least work
    lost) is moved to PREEMPTED, a targeted move on an entity this handler
    never fetched; ``iris-settle`` then retries its task on its preemption
    budget (free if it was still ASSIGNED). A preempted attempt holds no
    slot any more, so the next tick places the waiting task there (after
    ``iris-settle`` gave the slot's token back) and never evicts twice.
    """

    kind = TASK_KIND
    handler = "iris-schedule"
    statuses = frozenset({TaskState.PENDING})
    transitions = StatusTransitions(success=Transition(TaskState.ASSIGNED))

    def __init__(self, cluster: SimulatedCluster, queries: Queries, clock: Clock) -> None:
        self.cluster = cluster
        self.queries = queries
        self.deadline = _Deadline(clock)

    @property
    def candidate_filters(self) -> tuple[Any, ...]:
        """Tasks whose scheduling deadline has not passed (now bound each tick)."""
        return (self.deadline.open(),)

    async def execute(self, targets: Sequence[Any]) -> HandlerResult:
        """Place each task on the freest live worker; a task with no room waits (SKIPPED)
        and, if a lower band runs, evicts one of its attempts."""
        live, held = await _held_slots(self.queries)
        # Lowest band first, then the newest attempt.
        victims = sorted(live, key=lambda a: (a.priority, -a.created_at.timestamp()))
        placed: list[str] = []
        create: list[NewEntity] = []
        waiting: list[str] = []
        moves: dict[str, tuple[str, str]] = {}
        messages: dict[str, str] = {}
        for task in targets:
            worker = self.cluster.place(held)
            if worker is None:
                waiting.append(task.id)
                messages[task.id] = "pending: no live worker has a free slot"
                if victims and victims[0].priority < task.priority:
                    victim = victims.pop(0)
                    moves[victim.id] = (victim.status, AttemptState.PREEMPTED)
                    messages[task.id] += (
                        f"; preempting attempt {victim.id} ({victim.spec.get('band')}) "
                        f"of task {victim.parent_id}"
                    )
                continue
            held[worker] = held.get(worker, 0) + 1
            placed.append(task.id)
            number = len(task.children) + 1  # its attempts so far, each kept
            create.append(
                NewEntity(
                    ATTEMPT_KIND,
                    {"n": number, "worker": worker, "band": task.spec.get("band", "BATCH")},
                    parent_id=task.id,
                    status=AttemptState.ASSIGNED,
                    priority=task.priority,
                    name=f"{task.name or task.id}-attempt-{number}",
                )
            )
            messages[task.id] = f"attempt {number} on worker {worker}"
        return HandlerResult(
            successes=placed, skipped=waiting, create=create, moves=moves, messages=messages
        )


class ExpireUnschedulable(IrisHandler):
    """A PENDING task past its job's scheduling deadline → UNSCHEDULABLE (never retried)."""

    kind = TASK_KIND
    handler = "iris-unschedulable"
    statuses = frozenset({TaskState.PENDING})
    transitions = StatusTransitions(success=Transition(TaskState.UNSCHEDULABLE))

    def __init__(self, clock: Clock) -> None:
        self.deadline = _Deadline(clock)

    @property
    def candidate_filters(self) -> tuple[Any, ...]:
        """Only tasks whose deadline has passed (bound as a parameter each tick)."""
        return (self.deadline.passed(),)

    async def execute(self, targets: Sequence[Any]) -> HandlerResult:
        """Each fetched task ran out of time."""
        ids = [t.id for t in targets]
        return HandlerResult(
            successes=ids,
            status_infos=dict.fromkeys(ids, "SCHEDULING_TIMEOUT"),
            messages={t.id: f"scheduling deadline {t.spec['deadline']} passed" for t in targets},
        )


class SettleAttempts(IrisHandler):
    """A task whose latest attempt has ended, other than by success: retry or give up.

    Fetched (SQL): tasks on a worker with no live attempt and none SUCCEEDED.
    The latest attempt's state picks the named outcome (each retry back to
    PENDING, where the scheduler makes the next attempt; the old one is kept):

    * FAILED: ``failed``, charging the ``failure`` budget; past its limit the
      budget's own give-up, FAILED.
    * WORKER_FAILED: ``worker-failed``, charging ``preemption``; past its
      limit the handler's give-up, WORKER_FAILED.
    * PREEMPTED while the task was ASSIGNED: ``requeued``, free.
    * PREEMPTED while BUILDING or RUNNING: ``preempted``, charging
      ``preemption``; the charge that would go past the limit is reported as
      ``preemption-spent`` (→ PREEMPTED) instead, since a budget has one
      give-up (README: workarounds).
    * KILLED (the attempt was killed): ``killed`` → KILLED.
    """

    kind = TASK_KIND
    handler = "iris-settle"
    statuses = ACTIVE_TASK
    filters = (
        ChildCount("ge", 1),
        Children(LIVE_ATTEMPT, NOT_ANY),
        Children({AttemptState.SUCCEEDED}, NOT_ANY),
    )
    transitions = StatusTransitions(
        give_up=Transition(TaskState.WORKER_FAILED),
        outcomes={
            "failed": Transition(TaskState.PENDING),
            "worker-failed": Transition(TaskState.PENDING),
            "preempted": Transition(TaskState.PENDING),
            "requeued": Transition(TaskState.PENDING),
            "preemption-spent": Transition(TaskState.PREEMPTED),
            "killed": Transition(TaskState.KILLED),
        },
    )

    async def execute(self, targets: Sequence[Any]) -> HandlerResult:
        """Read each task's latest attempt and name the outcome."""
        outcomes: dict[str, str] = {}
        budgets: dict[str, str] = {}
        messages: dict[str, str] = {}
        for task in targets:
            last = max(task.children, key=lambda a: int(a.spec.get("n", 0)))
            use = (task.budgets or {}).get(PREEMPTION)
            ended = f"attempt {last.spec.get('n')} {last.status}"
            if last.status == AttemptState.FAILED:
                outcomes[task.id], budgets[task.id] = "failed", FAILURE
            elif last.status == AttemptState.WORKER_FAILED:
                outcomes[task.id], budgets[task.id] = "worker-failed", PREEMPTION
            elif last.status == AttemptState.PREEMPTED and task.status == TaskState.ASSIGNED:
                outcomes[task.id] = "requeued"
                ended += " before it started: retried for free"
            elif last.status == AttemptState.PREEMPTED and use is not None and use.left == 0:
                outcomes[task.id] = "preemption-spent"
                ended += f"; preemption budget spent ({use.used + 1} > {use.limit})"
            elif last.status == AttemptState.PREEMPTED:
                outcomes[task.id], budgets[task.id] = "preempted", PREEMPTION
            else:  # KILLED or COSCHED_FAILED: ended from outside, never retried
                outcomes[task.id] = "killed"
            messages[task.id] = ended
        return HandlerResult(outcomes=outcomes, budgets=budgets, messages=messages)


class TimeoutTasks(IrisHandler):
    """A task RUNNING longer than its ``spec["timeout"]`` seconds is KILLED (Iris's per-task
    timeout; never retried), and its attempt with it."""

    kind = TASK_KIND
    handler = "iris-task-timeout"
    statuses = frozenset({TaskState.RUNNING})
    filters = (StatusAge(spec_key="timeout"),)
    transitions = StatusTransitions(
        success=Transition(TaskState.KILLED, children_info="TASK_TIMEOUT")
    )

    async def execute(self, targets: Sequence[Any]) -> HandlerResult:
        """Each fetched task ran past its timeout."""
        ids = [t.id for t in targets]
        return HandlerResult(
            successes=ids,
            status_infos=dict.fromkeys(ids, "TASK_TIMEOUT"),
            messages={
                t.id: f"ran longer than its timeout of {t.spec['timeout']} s" for t in targets
            },
        )


def task_promotions() -> list[PromotionRule]:
    """A task follows its attempt while it runs (only the live attempt can be in these)."""
    return [
        PromotionRule(
            "iris-task-building",
            {TaskState.ASSIGNED},
            {AttemptState.BUILDING},
            ANY,
            TaskState.BUILDING,
            kind=TASK_KIND,
        ),
        PromotionRule(
            "iris-task-running",
            {TaskState.ASSIGNED, TaskState.BUILDING},
            {AttemptState.RUNNING},
            ANY,
            TaskState.RUNNING,
            kind=TASK_KIND,
        ),
        PromotionRule(
            "iris-task-succeeded",
            ACTIVE_TASK,
            {AttemptState.SUCCEEDED},
            ANY,
            TaskState.SUCCEEDED,
            kind=TASK_KIND,
        ),
    ]


JOB_HANDLERS: tuple[type[IrisHandler], ...] = (
    GangCascade,
    JobFailed,
    JobUnschedulable,
    JobKilled,
    JobWorkerFailed,
    JobSucceeded,
    JobRunning,
    JobPending,
)


def make_handlers(cluster: SimulatedCluster, queries: Queries, clock: Clock) -> list[Any]:
    """Every handler of the pack, sharing one cluster."""
    return [
        *(cls() for cls in JOB_HANDLERS),
        ExpireUnschedulable(clock),
        ScheduleTasks(cluster, queries, clock),
        SettleAttempts(),
        TimeoutTasks(),
        *task_promotions(),
    ]
