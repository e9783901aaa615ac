"""dstack's background processing as drover handlers: one per step, for runs and for jobs.

dstack's server has ``process_runs`` (active, pending and terminating runs),
``process_submitted_jobs``, ``process_running_jobs`` and
``process_terminating_jobs``. Here each step is a handler with its targets,
its candidate filters (SQL, before the fetch's LIMIT) and its transitions;
drover applies every move. A status moves only through a handler's result
(or the cloud's pushed report of an interruption), retries are new job
entities created in the run's apply, the back-off's attempt number is the
run's ``resubmissions`` budget and its delay a ``StatusAge`` filter.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import attrs

from drover import (
    ChildCount,
    Children,
    Clock,
    DeclaredHandler,
    Entity,
    HandlerOptions,
    HandlerResult,
    KernelMatchType,
    MoveTo,
    NewEntity,
    Parent,
    StatusAge,
    StatusTransitions,
    Transition,
)

from .cloud import SimulatedCloud
from .kinds import (
    ACTIVE_JOB,
    JOB_KIND,
    LIVE_JOB,
    REASON_MEANINGS,
    RESUBMISSIONS,
    RUN_FINAL_STATUS,
    RUN_KIND,
    RUN_TO_JOB_REASON,
    JobStatus,
    JobTerminationReason,
    RetryEvent,
    RunStatus,
    RunTerminationReason,
    job_final_status,
    retry_delay,
    retry_event,
)
from .spec import RETRY_EVENTS, job_name, job_spec, jobs_per_replica, replicas, slot

#: The named outcome that ends a TERMINATING job in each final status.
FINAL_OUTCOMES = {
    JobStatus.DONE: "done",
    JobStatus.FAILED: "failed",
    JobStatus.TERMINATED: "terminated",
    JobStatus.ABORTED: "aborted",
}
#: The named outcome that ends a TERMINATING run in each final status.
RUN_FINAL_OUTCOMES = {
    RunStatus.DONE: "done",
    RunStatus.FAILED: "failed",
    RunStatus.TERMINATED: "terminated",
}
#: The named outcome with which a TERMINATING run tells its live jobs to stop, by job reason.
STOP_JOBS_OUTCOMES = {
    JobTerminationReason.DONE_BY_RUNNER: "stop-jobs-done",
    JobTerminationReason.TERMINATED_BY_SERVER: "stop-jobs-by-server",
    JobTerminationReason.TERMINATED_BY_USER: "stop-jobs-by-user",
    JobTerminationReason.ABORTED_BY_USER: "abort-jobs",
}
#: The named outcome of an active run for each status it may move to.
ACTIVE_OUTCOMES = {
    RunStatus.SUBMITTED: "submitted",
    RunStatus.PROVISIONING: "provisioning",
    RunStatus.RUNNING: "running",
}
#: The named outcome of an active run that ends it, for each run termination reason.
TERMINATE_OUTCOMES: dict[str, str] = {
    RunTerminationReason.JOB_FAILED: "job-failed",
    RunTerminationReason.RETRY_LIMIT_EXCEEDED: "retry-limit-exceeded",
    RunTerminationReason.ALL_JOBS_DONE: "all-jobs-done",
}


class DstackHandler(DeclaredHandler):
    """What every step shares: its kind and name, statuses, filters and transitions as
    class attributes (drover's DeclaredHandler), and options computed from its order."""

    kind: ClassVar[str] = JOB_KIND
    handler: ClassVar[str] = "dstack"
    #: ``"oldest-seen"`` for the steps that poll the cloud or their children every tick.
    order: ClassVar[str] = "priority"
    status_info_meanings = {str(k): v for k, v in REASON_MEANINGS.items()}

    def __init__(self, cloud: SimulatedCloud, clock: Clock) -> None:
        self.cloud, self.clock = cloud, clock

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """No tries limit (outcomes judge the runs and jobs), no timeout."""
        return HandlerOptions(max_retries=None, timeout=None, batch_size=100, order=cls.order)


# -- jobs ---------------------------------------------------------------------------------


class ProvisionJobs(DstackHandler):
    """SUBMITTED → PROVISIONING on an instance; no offer with room: TERMINATING (no capacity).

    Only jobs of an active run are fetched (``Parent``): a TERMINATING run's
    SUBMITTED jobs are stopped by its own step.
    """

    handler = "dstack-provision-jobs"
    statuses = frozenset({JobStatus.SUBMITTED})
    filters = (Parent(statuses={RunStatus.SUBMITTED, RunStatus.PROVISIONING, RunStatus.RUNNING}),)
    transitions = StatusTransitions(
        success=Transition(JobStatus.PROVISIONING),
        outcomes={"no-capacity": Transition(JobStatus.TERMINATING)},
    )

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Ask the cloud for an instance for each job."""
        result = _Result()
        for job in targets:
            instance = self.cloud.provision(job)
            if instance is None:
                result.outcome(
                    job.id,
                    "no-capacity",
                    JobTerminationReason.FAILED_TO_START_DUE_TO_NO_CAPACITY,
                    "no offer has a free instance",
                )
            else:
                result.successes.append(job.id)
                result.data[job.id] = {"instance": instance.id, "offer": instance.offer}
        return result.build()


class PullJobs(DstackHandler):
    """PROVISIONING → PULLING: the instance's shim answers and pulls the image."""

    handler = "dstack-pull-jobs"
    statuses = frozenset({JobStatus.PROVISIONING})
    transitions = StatusTransitions(success=Transition(JobStatus.PULLING))

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """The simulated shim is up at once."""
        return HandlerResult(successes=[t.id for t in targets])


class StartJobs(DstackHandler):
    """PULLING → RUNNING: the runner starts the job's container."""

    handler = "dstack-start-jobs"
    statuses = frozenset({JobStatus.PULLING})
    transitions = StatusTransitions(success=Transition(JobStatus.RUNNING))

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Start each container."""
        for job in targets:
            self.cloud.start(job)
        return HandlerResult(successes=[t.id for t in targets])


class WatchJobs(DstackHandler):
    """RUNNING → TERMINATING once the container exited: DONE_BY_RUNNER (code 0) or
    CONTAINER_EXITED_WITH_ERROR. Polls the runner, every running job in turn."""

    handler = "dstack-watch-jobs"
    statuses = frozenset({JobStatus.RUNNING})
    order = "oldest-seen"
    transitions = StatusTransitions(
        success=Transition(JobStatus.TERMINATING),
        outcomes={"exited-with-error": Transition(JobStatus.TERMINATING)},
    )

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Ask the runner whether each container has exited; still running: unmentioned."""
        result = _Result()
        for job in targets:
            code = self.cloud.exit_code(job)
            if code is None:
                continue
            result.data[job.id] = {"exit_code": code}
            if code == 0:
                result.successes.append(job.id)
                result.status_infos[job.id] = JobTerminationReason.DONE_BY_RUNNER
            else:
                result.outcome(
                    job.id,
                    "exited-with-error",
                    JobTerminationReason.CONTAINER_EXITED_WITH_ERROR,
                    f"container exited with code {code}",
                )
        return result.build()


class EnforceMaxDuration(DstackHandler):
    """RUNNING past ``max_duration`` → TERMINATING (MAX_DURATION_EXCEEDED; ends TERMINATED)."""

    handler = "dstack-enforce-max-duration"
    statuses = frozenset({JobStatus.RUNNING})
    filters = (StatusAge(spec_key="max_duration"),)
    transitions = StatusTransitions(success=Transition(JobStatus.TERMINATING))

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Every fetched job ran past its limit."""
        ids = [t.id for t in targets]
        return HandlerResult(
            successes=ids,
            status_infos=dict.fromkeys(ids, JobTerminationReason.MAX_DURATION_EXCEEDED),
            messages={
                t.id: f"ran longer than max_duration {t.spec['max_duration']}s" for t in targets
            },
        )


_FINISH_JOB = StatusTransitions(
    outcomes={name: Transition(status) for status, name in FINAL_OUTCOMES.items()}
)


def _finish_job(result: _Result, job: Entity, message: str) -> None:
    """End a TERMINATING job in its reason's final status.

    Every path to TERMINATING gives a reason; one pushed without it (``drover report``
    with no ``--info``) is read as the server's stop.
    """
    reason = job.status_info or JobTerminationReason.TERMINATED_BY_SERVER
    name = FINAL_OUTCOMES[job_final_status(reason)]
    result.outcome(job.id, name, reason, message)


class StopJobs(DstackHandler):
    """TERMINATING → the reason's final status once the container is gone.

    The first time it sees a job whose container still runs it sends SIGTERM
    (graceful stop); an aborted job is killed at once. Jobs still stopping are
    left unmentioned; ``dstack-kill-jobs`` kills them after ``stop_duration``.
    """

    handler = "dstack-stop-jobs"
    statuses = frozenset({JobStatus.TERMINATING})
    order = "oldest-seen"
    transitions = _FINISH_JOB

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Stop each job's container; end the jobs whose container is gone."""
        result = _Result()
        for job in targets:
            if job.status_info == JobTerminationReason.ABORTED_BY_USER:
                self.cloud.kill(job)
            elif not self.cloud.stop(job):
                continue
            self.cloud.release(job)
            _finish_job(result, job, "container stopped; instance released")
        return result.build()


class KillJobs(DstackHandler):
    """TERMINATING longer than ``stop_duration``: kill the container, end the job."""

    handler = "dstack-kill-jobs"
    statuses = frozenset({JobStatus.TERMINATING})
    filters = (StatusAge(spec_key="stop_duration"),)
    transitions = _FINISH_JOB

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """The graceful stop took too long: SIGKILL, release, end."""
        result = _Result()
        for job in targets:
            self.cloud.kill(job)
            self.cloud.release(job)
            _finish_job(
                result, job, f"stop_duration {job.spec['stop_duration']}s passed: container killed"
            )
        return result.build()


# -- runs ---------------------------------------------------------------------------------


def latest_submissions(children: Iterable[Entity]) -> dict[str, Entity]:
    """The latest submission (highest ``submission_num``) of each slot."""
    latest: dict[str, Entity] = {}
    for job in children:
        name = str(job.spec.get("slot"))
        if name not in latest or job.spec["submission_num"] > latest[name].spec["submission_num"]:
            latest[name] = job
    return latest


def new_submission(run: Entity, replica_num: int, job_num: int, submission_num: int) -> NewEntity:
    """Submission ``submission_num`` of one slot of ``run``, SUBMITTED."""
    return NewEntity(
        JOB_KIND,
        job_spec(run.spec, replica_num, job_num, submission_num),
        parent_id=run.id,
        status=JobStatus.SUBMITTED,
        name=job_name(run.name, replica_num, job_num),
    )


def next_submission(run: Entity, previous: Entity) -> NewEntity:
    """The next submission of ``previous``'s slot (the old one is kept)."""
    return new_submission(
        run,
        int(previous.spec["replica_num"]),
        int(previous.spec["job_num"]),
        int(previous.spec["submission_num"]) + 1,
    )


def _done(job: Entity) -> bool:
    return job.status == JobStatus.DONE or (
        job.status == JobStatus.TERMINATING
        and job.status_info == JobTerminationReason.DONE_BY_RUNNER
    )


_ACTIVE_CONTRIBUTION = {
    JobStatus.RUNNING: RunStatus.RUNNING,
    JobStatus.PROVISIONING: RunStatus.PROVISIONING,
    JobStatus.PULLING: RunStatus.PROVISIONING,
    JobStatus.SUBMITTED: RunStatus.SUBMITTED,
}


@attrs.define
class Analysis:
    """What an active run's latest submissions say (dstack's ``_RunAnalysis``)."""

    statuses: set[str] = attrs.field(factory=set)
    reasons: set[str] = attrs.field(factory=set)
    #: Replicas whose failed jobs are retried: all their jobs get a new submission.
    to_retry: list[int] = attrs.field(factory=list)


def retry_elapsed(run: Entity, job: Entity, now: float) -> float | None:
    """Seconds of the retry window used, or None if the job's failure is not retried.

    No capacity before any submission of the slot was provisioned: since the
    run's submission. Otherwise (interruption, error, or no capacity after a
    provisioned one): since the last provisioned submission of the slot was
    last processed (its last status change).
    """
    retry = run.spec.get("retry")
    if retry is None:
        return None
    events = retry.get("on_events", list(RETRY_EVENTS))
    event = retry_event(job.status_info)
    provisioned = [
        c
        for c in run.children
        if c.spec.get("slot") == job.spec.get("slot") and (c.data or {}).get("instance")
    ]
    last = max(provisioned, key=lambda c: int(c.spec["submission_num"]), default=None)
    if event == RetryEvent.NO_CAPACITY and last is None and event in events:
        return now - run.created_at.timestamp()
    if event is not None and event in events and last is not None:
        return now - last.status_changed_at.timestamp()
    return None


def analyze(run: Entity, now: float) -> Analysis:
    """Each replica's contribution to the run's next status, in dstack's order."""
    analysis = Analysis()
    by_replica: dict[int, list[Entity]] = defaultdict(list)
    for job in latest_submissions(run.children).values():
        by_replica[int(job.spec["replica_num"])].append(job)
    duration = float((run.spec.get("retry") or {}).get("duration", 0))
    for replica, jobs in sorted(by_replica.items()):
        contributed: set[str] = set()
        reasons: set[str] = set()
        needs_retry = False
        for job in jobs:
            if _done(job):
                contributed.add(RunStatus.DONE)
            elif job.status in _ACTIVE_CONTRIBUTION:
                contributed.add(_ACTIVE_CONTRIBUTION[JobStatus(job.status)])
            else:
                elapsed = retry_elapsed(run, job, now)
                if elapsed is None:
                    contributed.add(RunStatus.FAILED)
                    reasons.add(RunTerminationReason.JOB_FAILED)
                elif elapsed > duration:
                    contributed.add(RunStatus.FAILED)
                    reasons.add(RunTerminationReason.RETRY_LIMIT_EXCEEDED)
                else:
                    needs_retry = True
        if RunStatus.FAILED in contributed:
            analysis.statuses.add(RunStatus.FAILED)
            analysis.reasons |= reasons
        elif needs_retry:
            analysis.to_retry.append(replica)
        else:
            analysis.statuses |= contributed
    return analysis


def _master_done(run: Entity) -> bool:
    if run.spec.get("stop_criteria") != "master-done":
        return False
    return any(
        int(j.spec.get("job_num", -1)) == 0 and j.status == JobStatus.DONE
        for j in latest_submissions(run.children).values()
    )


def next_run_status(run: Entity, analysis: Analysis) -> tuple[str, str | None]:
    """The run's next status and, for TERMINATING, its termination reason."""
    if RunStatus.FAILED in analysis.statuses:
        reason = (
            RunTerminationReason.JOB_FAILED
            if RunTerminationReason.JOB_FAILED in analysis.reasons
            else RunTerminationReason.RETRY_LIMIT_EXCEEDED
        )
        return RunStatus.TERMINATING, reason
    if _master_done(run):
        return RunStatus.TERMINATING, RunTerminationReason.ALL_JOBS_DONE
    for status in (RunStatus.RUNNING, RunStatus.PROVISIONING, RunStatus.SUBMITTED):
        if status in analysis.statuses:
            return status, None
    if RunStatus.DONE in analysis.statuses and not analysis.to_retry:
        return RunStatus.TERMINATING, RunTerminationReason.ALL_JOBS_DONE
    return RunStatus.PENDING, None  # every replica left is retrying: back off, resubmit


class ProcessRuns(DstackHandler):
    """An active run follows its latest job submissions (dstack's ``process_active_run``).

    * a replica with a job that failed for an event ``retry.on_events`` covers,
      within ``retry.duration``, is retried: while other replicas keep the run
      going, every job of that replica gets a new submission at once (its live
      jobs are stopped, TERMINATED_BY_SERVER) and the others run on;
    * when no replica is left active the run goes PENDING (its live jobs
      stopped), charging its ``resubmissions`` budget, with the back-off for
      that attempt in ``data["retry_after"]``;
    * a failure not retried ends the run: TERMINATING, JOB_FAILED or
      RETRY_LIMIT_EXCEEDED; all jobs done (or the master, with
      ``stop_criteria: master-done``): TERMINATING, ALL_JOBS_DONE;
    * otherwise RUNNING, PROVISIONING or SUBMITTED, the most advanced job's.
    """

    kind = RUN_KIND
    handler = "dstack-process-runs"
    statuses = frozenset({RunStatus.SUBMITTED, RunStatus.PROVISIONING, RunStatus.RUNNING})
    order = "oldest-seen"
    transitions = StatusTransitions(
        outcomes={
            **{name: Transition(status) for status, name in ACTIVE_OUTCOMES.items()},
            **{name: Transition(RunStatus.TERMINATING) for name in TERMINATE_OUTCOMES.values()},
            "retry-replicas": Transition(),
            "submit-jobs": Transition(),
            "pending": Transition(
                RunStatus.PENDING,
                children=JobStatus.TERMINATING,
                children_info=JobTerminationReason.TERMINATED_BY_SERVER,
            ),
        }
    )

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Decide each run's next step from its jobs."""
        result = _Result()
        now = self.clock.time()
        for run in targets:
            if not run.children:  # created without its jobs (not by submit_run): create them
                for replica in range(replicas(run.spec)):
                    for n in range(jobs_per_replica(run.spec)):
                        result.create.append(new_submission(run, replica, n, 0))
                result.outcome(run.id, "submit-jobs", None, "created its first job submissions")
                continue
            analysis = analyze(run, now)
            status, reason = next_run_status(run, analysis)
            if status == RunStatus.TERMINATING:
                assert reason is not None
                result.outcome(run.id, TERMINATE_OUTCOMES[reason], reason)
                continue
            if status == RunStatus.PENDING:
                attempt = (run.budgets or {})[RESUBMISSIONS].used + 1
                delay = retry_delay(attempt)
                result.outcome(
                    run.id, "pending", None, f"resubmission attempt {attempt} in {delay}s"
                )
                result.budgets[run.id] = RESUBMISSIONS
                result.data[run.id] = {"retry_after": delay}
                continue
            retried = self._retry_replicas(run, analysis.to_retry, result)
            if status != run.status:
                result.outcome(run.id, ACTIVE_OUTCOMES[RunStatus(status)], None, retried)
            elif retried:
                result.outcome(run.id, "retry-replicas", None, retried)
        return result.build()

    def _retry_replicas(self, run: Entity, replicas_: list[int], result: _Result) -> str | None:
        """New submissions for every job of each replica; its live jobs are stopped."""
        if not replicas_:
            return None
        for job in latest_submissions(run.children).values():
            if int(job.spec["replica_num"]) not in replicas_:
                continue
            result.create.append(next_submission(run, job))
            if job.status in ACTIVE_JOB:
                # The move gives the job its reason in the same write.
                result.moves[job.id] = MoveTo(
                    job.status, JobStatus.TERMINATING, JobTerminationReason.TERMINATED_BY_SERVER
                )
        return "resubmitted replica(s) " + ", ".join(str(r) for r in replicas_)


class ResubmitRuns(DstackHandler):
    """PENDING → SUBMITTED once the back-off is over (``StatusAge(data_key="retry_after")``):
    a new submission of every job of each replica that is not done."""

    kind = RUN_KIND
    handler = "dstack-resubmit-runs"
    statuses = frozenset({RunStatus.PENDING})
    filters = (StatusAge(data_key="retry_after"),)
    transitions = StatusTransitions(success=Transition(RunStatus.SUBMITTED))

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Resubmit each run's unfinished replicas."""
        result = _Result()
        for run in targets:
            latest = latest_submissions(run.children)
            for replica in range(replicas(run.spec)):
                jobs = [latest.get(slot(replica, j)) for j in range(jobs_per_replica(run.spec))]
                if all(job is not None and _done(job) for job in jobs):
                    continue
                for n, job in enumerate(jobs):
                    if job is not None:
                        result.create.append(next_submission(run, job))
                    else:
                        result.create.append(new_submission(run, replica, n, 0))
            result.successes.append(run.id)
            result.data[run.id] = {"retry_after": None}
        return result.build()


class TerminateRuns(DstackHandler):
    """A TERMINATING run stops its live jobs with the job reason its own reason maps to."""

    kind = RUN_KIND
    handler = "dstack-terminate-runs"
    statuses = frozenset({RunStatus.TERMINATING})
    filters = (Children(statuses=ACTIVE_JOB, match=KernelMatchType.ANY),)
    transitions = StatusTransitions(
        outcomes={
            name: Transition(children=JobStatus.TERMINATING, children_info=reason)
            for reason, name in STOP_JOBS_OUTCOMES.items()
        }
    )

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Each run's jobs get TERMINATING and the job reason of the run's reason."""
        result = _Result()
        for run in targets:
            reason = RUN_TO_JOB_REASON.get(
                run.status_info or "", JobTerminationReason.TERMINATED_BY_SERVER
            )
            result.outcome(run.id, STOP_JOBS_OUTCOMES[reason], None, None)
        return result.build()


class FinishRuns(DstackHandler):
    """A TERMINATING run whose jobs have all finished gets its reason's final status."""

    kind = RUN_KIND
    handler = "dstack-finish-runs"
    statuses = frozenset({RunStatus.TERMINATING})
    filters = (ChildCount("eq", 0, statuses=LIVE_JOB),)
    transitions = StatusTransitions(
        outcomes={name: Transition(status) for status, name in RUN_FINAL_OUTCOMES.items()}
    )

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """DONE, FAILED or TERMINATED, as the run's termination reason says."""
        result = _Result()
        for run in targets:
            final = RUN_FINAL_STATUS.get(run.status_info or "", RunStatus.FAILED)
            result.outcome(run.id, RUN_FINAL_OUTCOMES[final], None, None)
        return result.build()


@attrs.define
class _Result:
    """A HandlerResult being assembled."""

    successes: list[str] = attrs.field(factory=list)
    outcomes: dict[str, str] = attrs.field(factory=dict)
    status_infos: dict[str, str] = attrs.field(factory=dict)
    messages: dict[str, str] = attrs.field(factory=dict)
    budgets: dict[str, str] = attrs.field(factory=dict)
    data: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    create: list[NewEntity] = attrs.field(factory=list)
    moves: dict[str, MoveTo] = attrs.field(factory=dict)

    def outcome(
        self, entity: str, name: str, info: str | None = None, message: str | None = None
    ) -> None:
        """Report the named outcome ``name`` for ``entity``."""
        self.outcomes[entity] = name
        if info is not None:
            self.status_infos[entity] = info
        if message is not None:
            self.messages[entity] = message

    def build(self) -> HandlerResult:
        """The HandlerResult."""
        return HandlerResult(
            successes=self.successes,
            outcomes=self.outcomes,
            status_infos=self.status_infos,
            messages=self.messages,
            budgets=self.budgets,
            data=self.data,
            create=self.create,
            moves=self.moves,
        )


STEPS: tuple[type[DstackHandler], ...] = (
    ProcessRuns,
    ResubmitRuns,
    TerminateRuns,
    FinishRuns,
    ProvisionJobs,
    PullJobs,
    StartJobs,
    WatchJobs,
    EnforceMaxDuration,
    StopJobs,
    KillJobs,
)


def make_handlers(cloud: SimulatedCloud, clock: Clock) -> list[DstackHandler]:
    """Every step's handler, sharing one cloud and the coordinator's clock."""
    return [step(cloud, clock) for step in STEPS]
