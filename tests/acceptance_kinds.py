"""An Iris-like plugin defined only in tests: job -> task -> attempt, on a pool of workers.

Written as a third-party plugin would be: three kinds and their handlers with
their own logic, registered through ``drover_register_kinds`` and
``drover_register_handlers``. Nothing here is scripted by the tests; they only
create entities, tick handlers and push reports (a worker's heartbeat).

* A job starts when its gang is there (``spec["gang"]`` PENDING tasks), is
  cancelled when its spec asks (``spec["cancel"]``), and fails at once when a
  job it depends on failed. Promotions finish it.
* A task starts only while its job runs and only on the queues this cluster
  serves; each start is a new attempt. An attempt's failure sends the task to
  BACKOFF (``data["retry_after"]``) and charges its ``failure`` budget, whose
  own give-up ends it FAILED (the handler's give-up is WORKER_FAILED).
* An attempt runs while it holds a worker (pool ``workers``); heartbeats
  report it SUCCEEDED or FAILED (silent past ``spec["timeout"]``: FAILED, WORKER_LOST).
  A high-priority task preempts the lowest
  running one by moves on entities it did not fetch.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, ClassVar

import attrs

from drover import (
    AllOf,
    Budget,
    ChildCount,
    DeclaredHandler,
    DependenciesFailed,
    DependenciesSucceeded,
    Entity,
    EntityKind,
    Field,
    HandlerOptions,
    HandlerResult,
    KernelMatchType,
    NewEntity,
    Parent,
    Pool,
    PromotionRule,
    StatusAge,
    StatusTransitions,
    TerminationRule,
    Transition,
    hookimpl,
)


class Job(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class Task(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    BACKOFF = "BACKOFF"
    DONE = "DONE"
    FAILED = "FAILED"
    WORKER_FAILED = "WORKER_FAILED"
    CANCELLED = "CANCELLED"


class Attempt(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PREEMPTED = "PREEMPTED"


QUEUES = ("cpu", "gpu")
WORKERS = Pool("workers", 2, held_in={Attempt.RUNNING})

JOB = EntityKind(
    "job",
    Job,
    terminal={Job.DONE, Job.FAILED, Job.CANCELLED},
    success={Job.DONE},
    termination=(TerminationRule(Job.CANCELLED, status_info="ABORTED"),),
)
TASK = EntityKind(
    "task",
    Task,
    terminal={Task.DONE, Task.FAILED, Task.WORKER_FAILED, Task.CANCELLED},
    success={Task.DONE},
    parent="job",
    result_from="latest-child",
    budgets=(Budget("failure", 1, give_up=Transition(Task.FAILED)),),
)
ATTEMPT = EntityKind(
    "attempt",
    Attempt,
    terminal={Attempt.SUCCEEDED, Attempt.FAILED, Attempt.PREEMPTED},
    success={Attempt.SUCCEEDED},
    parent="task",
    pools=(WORKERS,),
)
KINDS = (JOB, TASK, ATTEMPT)


def latest(children: Sequence[Entity]) -> Entity | None:
    """The newest attempt (attempts are numbered in their spec)."""
    return max(children, key=lambda c: int(c.spec.get("n", 0)), default=None)


def new_attempt(task: Entity) -> NewEntity:
    """The next attempt of ``task``, QUEUED for a worker."""
    n = max((int(c.spec.get("n", 0)) for c in task.children), default=0) + 1
    return NewEntity("attempt", {"n": n}, parent_id=task.id, status=Attempt.QUEUED)


class _Handler(DeclaredHandler):
    """The plugin's handlers: class attributes say what each one is."""

    kind: ClassVar[str]
    handler: ClassVar[str]
    statuses: ClassVar[frozenset[str]]
    transitions: ClassVar[StatusTransitions]
    filters: ClassVar[tuple[Any, ...]] = ()
    options: ClassVar[HandlerOptions] = HandlerOptions(max_retries=3, batch_size=1)

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    async def execute(self, targets: Sequence[Any]) -> HandlerResult:
        self.seen.append([t.id for t in targets])
        return self.decide(targets)

    def decide(self, targets: Sequence[Entity]) -> HandlerResult:
        """The handler's own logic."""
        raise NotImplementedError


class StartJobs(_Handler):
    """A gang starts together: a job with ``spec["gang"]`` PENDING tasks, once the jobs it
    depends on have succeeded."""

    kind = "job"
    handler = "start-jobs"
    statuses = frozenset({Job.QUEUED})
    transitions = StatusTransitions(success=Transition(Job.RUNNING))
    filters = (
        ChildCount("ge", statuses={Task.PENDING}, spec_key="gang"),
        DependenciesSucceeded(),
    )

    def decide(self, targets: Sequence[Entity]) -> HandlerResult:
        return HandlerResult(successes=[t.id for t in targets])


class FailDoomedJobs(_Handler):
    """A job whose dependency failed will never run."""

    kind = "job"
    handler = "fail-doomed-jobs"
    statuses = frozenset({Job.QUEUED})
    transitions = StatusTransitions(
        success=Transition(Job.FAILED, children_info="DEPENDENCY_FAILED")
    )
    filters = (DependenciesFailed(),)

    def decide(self, targets: Sequence[Entity]) -> HandlerResult:
        return HandlerResult(
            successes=[t.id for t in targets],
            messages={t.id: f"dependency {', '.join(t.linked('depends_on'))}" for t in targets},
        )


class CancelJobs(_Handler):
    """The user asked (``spec["cancel"]``): the job and everything under it ends."""

    kind = "job"
    handler = "cancel-jobs"
    statuses = frozenset({Job.QUEUED, Job.RUNNING})
    transitions = StatusTransitions(
        success=Transition(Job.CANCELLED, children_info="JOB_CANCELLED")
    )
    filters = (Field("spec", ("cancel",), "eq", True),)

    def decide(self, targets: Sequence[Entity]) -> HandlerResult:
        return HandlerResult(successes=[t.id for t in targets])


class StartTasks(_Handler):
    """A task starts (a new attempt) only while its job runs, on a queue we serve."""

    kind = "task"
    handler = "start-tasks"
    statuses = frozenset({Task.PENDING})
    transitions = StatusTransitions(success=Transition(Task.RUNNING))
    filters = (AllOf(Parent(statuses={Job.RUNNING}), Field("spec", ("queue",), "in", QUEUES)),)

    def decide(self, targets: Sequence[Entity]) -> HandlerResult:
        return HandlerResult(
            successes=[t.id for t in targets], create=[new_attempt(t) for t in targets]
        )


class RunTasks(_Handler):
    """A task follows its latest attempt: done, or back off (``spec["backoff"]``, default 30
    seconds) and retry, charging budget ``failure``."""

    kind = "task"
    handler = "run-tasks"
    statuses = frozenset({Task.RUNNING})
    transitions = StatusTransitions(
        success=Transition(Task.DONE),
        need_retry=Transition(Task.BACKOFF),
        give_up=Transition(Task.WORKER_FAILED),
    )
    # Failures charge the task's budget: no per-handler retry limit to defeat.
    options = HandlerOptions(max_retries=None, batch_size=10)

    def decide(self, targets: Sequence[Entity]) -> HandlerResult:
        done, failed, waiting = [], [], []
        for task in targets:
            last = latest(task.children)
            if last is not None and last.status == Attempt.SUCCEEDED:
                done.append(task.id)
            elif last is not None and last.status == Attempt.FAILED:
                failed.append(task.id)
            else:
                waiting.append(task.id)
        return HandlerResult(
            successes=done,
            failures=failed,
            skipped=waiting,
            budgets=dict.fromkeys(failed, "failure"),
            data={
                t.id: {"retry_after": t.spec.get("backoff", 30)} for t in targets if t.id in failed
            },
        )


class ResumeTasks(_Handler):
    """A task whose back-off (``data["retry_after"]`` seconds) is over runs a new attempt."""

    kind = "task"
    handler = "resume-tasks"
    statuses = frozenset({Task.BACKOFF})
    transitions = StatusTransitions(success=Transition(Task.RUNNING))
    filters = (StatusAge(data_key="retry_after"),)

    def decide(self, targets: Sequence[Entity]) -> HandlerResult:
        return HandlerResult(
            successes=[t.id for t in targets], create=[new_attempt(t) for t in targets]
        )


@attrs.define
class Cluster:
    """What the workers run, as the scheduler knows it (outside drover's database)."""

    #: attempt id -> (its task's id, the task's priority)
    running: dict[str, tuple[str, int]] = attrs.field(factory=dict)


class PreemptForTasks(_Handler):
    """A PENDING task of priority >= 10 takes the worker of the lowest-priority running task:
    that task goes back to PENDING and its attempt ends PREEMPTED, by moves on entities this
    handler never fetched."""

    kind = "task"
    handler = "preempt"
    statuses = frozenset({Task.PENDING})
    transitions = StatusTransitions()
    filters = (Parent(statuses={Job.RUNNING}), Field("spec", ("urgent",), "eq", True))

    def __init__(self, cluster: Cluster) -> None:
        super().__init__()
        self.cluster = cluster

    def decide(self, targets: Sequence[Entity]) -> HandlerResult:
        moves: dict[str, tuple[str, str]] = {}
        victims = sorted(self.cluster.running.items(), key=lambda item: item[1][1])
        for target in targets:
            if not victims or victims[0][1][1] >= target.priority:
                continue
            attempt, (task, _) = victims.pop(0)
            moves[task] = (Task.RUNNING, Task.PENDING)
            moves[attempt] = (Attempt.RUNNING, Attempt.PREEMPTED)
        return HandlerResult(skipped=[t.id for t in targets], moves=moves)


class StartAttempts(_Handler):
    """An attempt runs once it holds a worker (the pool gates the move)."""

    kind = "attempt"
    handler = "start-attempts"
    statuses = frozenset({Attempt.QUEUED})
    transitions = StatusTransitions(success=Transition(Attempt.RUNNING))
    options = HandlerOptions(max_retries=None, batch_size=2)

    def decide(self, targets: Sequence[Entity]) -> HandlerResult:
        return HandlerResult(successes=[t.id for t in targets])


class LoseSilentAttempts(_Handler):
    """An attempt still RUNNING after ``spec["timeout"]`` seconds lost its worker (no
    heartbeat said how it ended)."""

    kind = "attempt"
    handler = "lose-silent-attempts"
    statuses = frozenset({Attempt.RUNNING})
    transitions = StatusTransitions(success=Transition(Attempt.FAILED))
    filters = (StatusAge(spec_key="timeout"),)
    options = HandlerOptions(max_retries=3, batch_size=10)

    def decide(self, targets: Sequence[Entity]) -> HandlerResult:
        ids = [t.id for t in targets]
        return HandlerResult(successes=ids, status_infos=dict.fromkeys(ids, "WORKER_LOST"))


FINISH_JOBS = PromotionRule(
    "finish-jobs", {Job.RUNNING}, {Task.DONE}, KernelMatchType.ALL, Job.DONE, kind="job"
)
FAIL_JOBS = PromotionRule(
    "fail-jobs",
    {Job.RUNNING},
    {Task.FAILED, Task.WORKER_FAILED},
    KernelMatchType.ANY,
    Job.FAILED,
    kind="job",
)


def handlers(cluster: Cluster) -> list[Any]:
    """Every handler of the plugin, fresh."""
    return [
        StartJobs(),
        FailDoomedJobs(),
        CancelJobs(),
        StartTasks(),
        RunTasks(),
        ResumeTasks(),
        PreemptForTasks(cluster),
        StartAttempts(),
        LoseSilentAttempts(),
        FINISH_JOBS,
        FAIL_JOBS,
    ]


class IrisPlugin:
    """The plugin object, as a package's entry point would give it."""

    def __init__(self, cluster: Cluster | None = None, kinds: Sequence[EntityKind] = KINDS):
        self.cluster = cluster or Cluster()
        self.kinds = tuple(kinds)
        self.handlers = handlers(self.cluster)

    @hookimpl
    def drover_register_kinds(self, register: Any) -> None:
        register(*self.kinds)

    @hookimpl
    def drover_register_handlers(self, register: Any) -> None:
        register(*self.handlers)

    def handler(self, name: str) -> Any:
        """The registered handler called ``name``."""
        return next(h for h in self.handlers if isinstance(h, _Handler) and h.name() == name)
