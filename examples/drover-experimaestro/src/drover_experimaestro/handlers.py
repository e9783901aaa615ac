"""One handler per step of experimaestro's scheduler, for the kind ``xpm-job``.

Each handler declares its transitions and its candidate filters; drover
applies the moves, counts the retries (the ``retries`` budget) and gates the
counter tokens (the claimed pools, ``xpm-token`` by default). No handler moves a status itself,
keeps a counter in ``data`` or filters its targets in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from drover import (
    AnyOf,
    DeclaredHandler,
    DependenciesFailed,
    DependenciesSucceeded,
    Dependents,
    Entity,
    Field,
    HandlerOptions,
    HandlerResult,
    StatusAge,
    StatusTransitions,
    Transition,
)

from .kinds import DEPENDS_ON, FAILURE_MEANINGS, JOB_KIND, RETRIES, FailureReason, JobState
from .launcher import SimulatedLauncher, job_directory

#: A run outcome that ends the job: the named outcome and the failure reason.
_ENDINGS = {
    "failed": ("failed", FailureReason.FAILED),
    "memory": ("out-of-memory", FailureReason.MEMORY),
}


class JobHandler(DeclaredHandler):
    """What every step shares: its kind, its name, its options; each step declares its
    status, filters and transitions."""

    kind: ClassVar[str] = JOB_KIND
    step: ClassVar[str] = "step"
    status_info_meanings = {str(k): v for k, v in FAILURE_MEANINGS.items()}
    #: No tries limit (failures are the jobs', judged by outcomes) and no timeout.
    options = HandlerOptions(max_retries=None, timeout=None, batch_size=100)

    @classmethod
    def name(cls) -> str:
        """``xpm-<step>``."""
        return "xpm-" + cls.step


class RegisterJobs(JobHandler):
    """UNSCHEDULED → WAITING: the scheduler has taken the submitted job.

    A transient job (``spec["transient"]``) is taken only while a job that
    depends on it is WAITING (a ``Dependents`` filter, in the fetch's SQL): a
    transient job nothing waiting needs stays UNSCHEDULED and never runs. A
    transient job needed by a transient one follows once that one is WAITING.
    """

    step = "register"
    statuses = frozenset({JobState.UNSCHEDULED})
    filters = (
        AnyOf(
            Field("spec", ("transient",), "ne", True),
            Dependents(DEPENDS_ON, statuses={JobState.WAITING}),
        ),
    )

    transitions = StatusTransitions(success=Transition(JobState.WAITING))

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Every submitted job is registered."""
        return HandlerResult(successes=[t.id for t in targets])


class ResolveDependencies(JobHandler):
    """WAITING → READY once every static dependency is DONE (a filter in the fetch's SQL)."""

    step = "resolve"
    statuses = frozenset({JobState.WAITING})
    filters = (DependenciesSucceeded(relation=DEPENDS_ON),)

    transitions = StatusTransitions(success=Transition(JobState.READY))

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """The fetch already kept only jobs whose dependencies all succeeded."""
        return HandlerResult(successes=[t.id for t in targets])


class FailDependents(JobHandler):
    """WAITING → ERROR(DEPENDENCY) once a dependency ended without success.

    The filter is in the fetch's SQL, before its LIMIT: a thousand older jobs
    still waiting never take the places of the doomed ones. Each failure makes
    its own dependents match on the next tick, so the failure travels down the
    graph one level per tick.
    """

    step = "fail-dependents"
    statuses = frozenset({JobState.WAITING})
    filters = (DependenciesFailed(relation=DEPENDS_ON),)

    transitions = StatusTransitions(success=Transition(JobState.ERROR))

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Every fetched job has a failed dependency."""
        ids = [t.id for t in targets]
        return HandlerResult(
            successes=ids,
            status_infos=dict.fromkeys(ids, FailureReason.DEPENDENCY),
            messages=dict.fromkeys(ids, "a dependency ended without success"),
        )


class ScheduleJobs(JobHandler):
    """READY → SCHEDULED, in the job's directory; the counters' pools gate this move for a job
    that claims tokens."""

    step = "schedule"
    statuses = frozenset({JobState.READY})

    transitions = StatusTransitions(success=Transition(JobState.SCHEDULED))

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Schedule every ready job; its directory is written once and kept for retries."""
        data: dict[str, dict[str, Any]] = {
            t.id: {"directory": job_directory(t.spec, t.name or t.id)}
            for t in targets
            if not (t.data or {}).get("directory")
        }
        return HandlerResult(successes=[t.id for t in targets], data=data)


class StartJobs(JobHandler):
    """SCHEDULED → RUNNING: the launcher starts the job's process."""

    step = "start"
    statuses = frozenset({JobState.SCHEDULED})

    def __init__(self, launcher: SimulatedLauncher) -> None:
        self.launcher = launcher

    transitions = StatusTransitions(success=Transition(JobState.RUNNING))

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Start each job's process."""
        for job in targets:
            await self.launcher.start(job)
        return HandlerResult(successes=[t.id for t in targets])


class FinishJobs(JobHandler):
    """RUNNING → DONE or ERROR(FAILED/MEMORY/TIMEOUT); a resumable job's timeout → WAITING.

    Only jobs whose process has ended are fetched: a job's ``spec["duration"]``
    (seconds of simulated run time) has passed, or it has none.
    """

    step = "finish"
    statuses = frozenset({JobState.RUNNING})
    filters = (AnyOf(StatusAge(spec_key="duration"), Field("spec", ("duration",), "missing")),)

    def __init__(self, launcher: SimulatedLauncher) -> None:
        self.launcher = launcher

    # A named outcome for each way a run ends without success. ``retry-timeout`` charges
    # the ``retries`` budget: past ``max_retries`` the budget's own give-up ends the job in ERROR.
    transitions = StatusTransitions(
        success=Transition(JobState.DONE),
        give_up=Transition(JobState.ERROR),
        outcomes={
            "failed": Transition(JobState.ERROR),
            "out-of-memory": Transition(JobState.ERROR),
            "timed-out": Transition(JobState.ERROR),
            "retry-timeout": Transition(JobState.WAITING),
        },
    )

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Read each ended process's outcome from the launcher."""
        successes: list[str] = []
        outcomes: dict[str, str] = {}
        budgets: dict[str, str] = {}
        infos: dict[str, str] = {}
        messages: dict[str, str] = {}
        for job in targets:
            try:
                ended = await self.launcher.outcome(job)
            except ValueError as error:
                outcomes[job.id], infos[job.id] = "failed", FailureReason.FAILED
                messages[job.id] = str(error)
                continue
            if ended == "done":
                successes.append(job.id)
            elif ended in _ENDINGS:
                outcomes[job.id], infos[job.id] = _ENDINGS[ended]
            elif job.spec.get("resumable"):
                # Same directory, next run; the charge past max_retries gives up.
                # The charge that gives up ends it ERROR, TIMEOUT (the budget's give_up).
                outcomes[job.id], budgets[job.id] = "retry-timeout", RETRIES
                use = (job.budgets or {})[RETRIES]
                messages[job.id] = f"walltime exceeded; retries used {use.used + 1}/{use.limit}"
            else:
                outcomes[job.id], infos[job.id] = "timed-out", FailureReason.TIMEOUT
        return HandlerResult(
            successes=successes,
            outcomes=outcomes,
            budgets=budgets,
            status_infos=infos,
            messages=messages,
        )


STEPS: tuple[type[JobHandler], ...] = (
    RegisterJobs,
    ResolveDependencies,
    FailDependents,
    ScheduleJobs,
    StartJobs,
    FinishJobs,
)


def handlers_for(kind: str, launcher: SimulatedLauncher) -> list[JobHandler]:
    """Every step's handler for ``kind``, sharing ``launcher``."""
    made: list[JobHandler] = []
    for step in STEPS:
        cls = type(step.__name__, (step,), {"kind": kind, "__doc__": step.__doc__})
        made.append(cls(launcher) if step in (StartJobs, FinishJobs) else cls())
    return made
