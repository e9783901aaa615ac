"""Iris's controller as drover handlers: one per decision, each declaring its moves.

* Jobs: one handler per rule of Iris's ``_compute_job_state``, each fetching
  (in SQL, by child counts) only the jobs that rule applies to and that no
  earlier rule claims (``Not`` of the earlier rules' filters), so the rules'
  order holds whichever handler ticks first; plus the gang cascade.
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
    DeclaredHandler,
    Entity,
    Field,
    HandlerOptions,
    HandlerResult,
    KernelMatchType,
    LatestChild,
    NewEntity,
    Not,
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
    worker_pool_name,
)

if TYPE_CHECKING:
    # Storage is imported when the daemon runs, not when drover loads the plugin.
    from drover import Queries

ALL, ANY, NOT_ANY = KernelMatchType.ALL, KernelMatchType.ANY, KernelMatchType.NOT_ANY
LIVE_JOB = frozenset({JobState.PENDING, JobState.RUNNING})

# -- the rules of Iris's job state, as SQL filters on the tasks' counts -------------------------
#
# Each rule is its condition; a later rule's handler adds ``Not`` of every earlier rule's,
# so the rules' order holds whichever handler ticks first.

#: Rule 2: more FAILED tasks than ``spec["max_task_failures"]`` (0 when the spec has none).
FAILURES_EXCEEDED = AnyOf(
    ChildCount("gt", statuses={TaskState.FAILED}, spec_key="max_task_failures"),
    AllOf(
        Field("spec", ("max_task_failures",), "missing"),
        ChildCount("gt", 0, statuses={TaskState.FAILED}),
    ),
)
#: Rule 3: a task UNSCHEDULABLE.
ANY_UNSCHEDULABLE = Children({TaskState.UNSCHEDULABLE}, ANY)
#: Rule 4: a task KILLED.
ANY_KILLED = Children({TaskState.KILLED}, ANY)
#: Every rule before the worker-failure, running and pending ones.
EARLIER_RULES = Not(AnyOf(FAILURES_EXCEEDED, ANY_UNSCHEDULABLE, ANY_KILLED))
GANG = Field("spec", ("coscheduled",), "eq", True)


class IrisHandler(DeclaredHandler):
    """What every handler of the pack shares: name, statuses, filters and transitions as
    class attributes (drover's DeclaredHandler), no tries limit (the budgets judge
    failures) and no timeout."""

    kind: ClassVar[str] = JOB_KIND
    handler: ClassVar[str] = "iris"
    options: ClassVar[HandlerOptions] = HandlerOptions(
        max_retries=None, timeout=None, batch_size=100
    )
    status_info_meanings = dict(STATUS_INFO_MEANINGS)

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
    filters = (FAILURES_EXCEEDED, Not(AllOf(GANG, Children(ACTIVE_TASK, ANY))))
    transitions = StatusTransitions(
        success=Transition(JobState.FAILED, children=TaskState.KILLED, children_info="JOB_FAILED")
    )


class JobUnschedulable(IrisHandler):
    """Rule 3: a task UNSCHEDULABLE → the job UNSCHEDULABLE; its other tasks KILLED."""

    handler = "iris-job-unschedulable"
    statuses = LIVE_JOB
    filters = (ANY_UNSCHEDULABLE, Not(FAILURES_EXCEEDED))
    transitions = StatusTransitions(
        success=Transition(
            JobState.UNSCHEDULABLE, children=TaskState.KILLED, children_info="JOB_UNSCHEDULABLE"
        )
    )


class JobKilled(IrisHandler):
    """Rule 4: a task KILLED (a per-task kill) → the job KILLED; its other tasks too."""

    handler = "iris-job-killed"
    statuses = LIVE_JOB
    filters = (ANY_KILLED, Not(AnyOf(FAILURES_EXCEEDED, ANY_UNSCHEDULABLE)))
    transitions = StatusTransitions(
        success=Transition(JobState.KILLED, children=TaskState.KILLED, children_info="JOB_KILLED")
    )


class JobWorkerFailed(IrisHandler):
    """Every task ended, one of them by a worker failure or preemption → WORKER_FAILED."""

    handler = "iris-job-worker-failed"
    statuses = LIVE_JOB
    filters = (Children(LIVE_TASK, NOT_ANY), Children(WORKER_FAILURE_TASK, ANY), EARLIER_RULES)
    transitions = StatusTransitions(success=Transition(JobState.WORKER_FAILED))


class JobSucceeded(IrisHandler):
    """Rule 1: every task SUCCEEDED (or FAILED within ``max_task_failures``) → SUCCEEDED."""

    handler = "iris-job-succeeded"
    statuses = LIVE_JOB
    filters = (Children({TaskState.SUCCEEDED, TaskState.FAILED}, ALL), Not(FAILURES_EXCEEDED))
    transitions = StatusTransitions(success=Transition(JobState.SUCCEEDED))


class JobRunning(IrisHandler):
    """Rule 5: a task ASSIGNED, BUILDING or RUNNING (and no earlier rule) → RUNNING."""

    handler = "iris-job-running"
    statuses = frozenset({JobState.PENDING})
    filters = (Children(ACTIVE_TASK, ANY), EARLIER_RULES)
    transitions = StatusTransitions(success=Transition(JobState.RUNNING))


class JobPending(IrisHandler):
    """Rule 6: no task on a worker any more, some waiting (all preempted, say) → PENDING."""

    handler = "iris-job-pending"
    statuses = frozenset({JobState.RUNNING})
    filters = (Children(ACTIVE_TASK, NOT_ANY), Children({TaskState.PENDING}, ANY), EARLIER_RULES)
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

    Highest band first (drover's fetch order: priority, then age). The
    worker is read here (the freest live one), and the result claims a slot
    of its pool (``iris-worker-<name>``, ``HandlerResult.claims``): the apply
    gates the move on that pool and on ``iris-workers`` (history
    ``pool-full`` past a worker's or the cluster's slots, also when another
    coordinator filled the slot meanwhile); its creation of the attempt is
    dropped with it. Tasks whose
    deadline passed are left to ``iris-unschedulable``.

    A task that finds no free slot waits (SKIPPED, the reason in its row);
    if a lower band's task runs, it preempts one (Iris's preemption pass):
    the running attempt of the lowest band (the newest first: the least work
    lost) is moved to PREEMPTED, a targeted move on an entity this handler
    never fetched; ``iris-settle-preempted`` then retries its task on its preemption
    budget (free if it was still ASSIGNED). A preempted attempt holds no
    slot any more, so the next tick places the waiting task there (after
    ``iris-settle-preempted`` gave the slot's token back) and never evicts twice.
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
        claims: dict[str, dict[str, int]] = {}
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
            claims[task.id] = {worker_pool_name(worker): 1}
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
            successes=placed,
            skipped=waiting,
            create=create,
            moves=moves,
            messages=messages,
            claims=claims,
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


#: An attempt that ended other than by success, from outside or by a preemption.
ENDED_NOT_PREEMPTED = frozenset(
    {
        AttemptState.FAILED,
        AttemptState.WORKER_FAILED,
        AttemptState.KILLED,
        AttemptState.COSCHED_FAILED,
    }
)


class SettleAttempts(IrisHandler):
    """A task whose latest attempt ended FAILED, WORKER_FAILED or from outside: retry or
    give up.

    Fetched (SQL): tasks on a worker whose latest attempt (``LatestChild``)
    ended so; a preempted one is :class:`SettlePreempted`'s. Each retry goes
    back to PENDING, where the scheduler makes the next attempt (the old one
    is kept):

    * FAILED: ``failed``, charging the ``failure`` budget; past its limit the
      budget's own give-up, FAILED.
    * WORKER_FAILED: ``worker-failed``, charging ``preemption``; past its
      limit this handler's give-up, WORKER_FAILED.
    * KILLED or COSCHED_FAILED (ended from outside): ``killed`` → KILLED.
    """

    kind = TASK_KIND
    handler = "iris-settle"
    statuses = ACTIVE_TASK
    filters = (LatestChild(ENDED_NOT_PREEMPTED),)
    transitions = StatusTransitions(
        give_up=Transition(TaskState.WORKER_FAILED),
        outcomes={
            "failed": Transition(TaskState.PENDING),
            "worker-failed": Transition(TaskState.PENDING),
            "killed": Transition(TaskState.KILLED),
        },
    )

    async def execute(self, targets: Sequence[Any]) -> HandlerResult:
        """Read each task's latest attempt and name the outcome."""
        outcomes: dict[str, str] = {}
        budgets: dict[str, str] = {}
        messages: dict[str, str] = {}
        for task in targets:
            last = _latest(task)
            if last.status == AttemptState.FAILED:
                outcomes[task.id], budgets[task.id] = "failed", FAILURE
            elif last.status == AttemptState.WORKER_FAILED:
                outcomes[task.id], budgets[task.id] = "worker-failed", PREEMPTION
            else:  # KILLED or COSCHED_FAILED: ended from outside, never retried
                outcomes[task.id] = "killed"
            messages[task.id] = f"attempt {last.spec.get('n')} {last.status}"
        return HandlerResult(outcomes=outcomes, budgets=budgets, messages=messages)


class SettlePreempted(IrisHandler):
    """A task whose latest attempt was PREEMPTED: retry, or give up PREEMPTED.

    Fetched (SQL, ``LatestChild``) apart from :class:`SettleAttempts`, so each
    cause of the shared ``preemption`` budget has its own give-up: the charge
    past the limit ends the task PREEMPTED here (this handler's give-up),
    WORKER_FAILED there.

    * preempted while BUILDING or RUNNING: ``preempted``, charging ``preemption``.
    * preempted while still ASSIGNED (it never started): ``requeued``, free.
    """

    kind = TASK_KIND
    handler = "iris-settle-preempted"
    statuses = ACTIVE_TASK
    filters = (LatestChild({AttemptState.PREEMPTED}),)
    transitions = StatusTransitions(
        give_up=Transition(TaskState.PREEMPTED),
        outcomes={
            "preempted": Transition(TaskState.PENDING),
            "requeued": Transition(TaskState.PENDING),
        },
    )

    async def execute(self, targets: Sequence[Any]) -> HandlerResult:
        """Charge the preemption budget, unless the attempt never started."""
        outcomes: dict[str, str] = {}
        budgets: dict[str, str] = {}
        messages: dict[str, str] = {}
        for task in targets:
            ended = f"attempt {_latest(task).spec.get('n')} PREEMPTED"
            if task.status == TaskState.ASSIGNED:
                outcomes[task.id] = "requeued"
                ended += " before it started: retried for free"
            else:
                outcomes[task.id], budgets[task.id] = "preempted", PREEMPTION
            messages[task.id] = ended
        return HandlerResult(outcomes=outcomes, budgets=budgets, messages=messages)


def _latest(task: Any) -> Entity:
    """The task's latest attempt (the one its handlers' ``LatestChild`` filter read)."""
    return max(task.children, key=lambda a: int(a.spec.get("n", 0)))


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
        SettlePreempted(),
        TimeoutTasks(),
        *task_promotions(),
    ]
