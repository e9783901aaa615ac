"""Submitting an Iris job: a job with ``replicas`` tasks, each with its budgets and deadline.

Iris's ``expand_job_to_tasks``: every task starts PENDING with the job's
band (its drover priority, so higher bands are fetched first), the two retry
budgets as the task's ``spec["budgets"]`` (drover's budget limits) and the
job's scheduling deadline made absolute at submission.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .kinds import (
    DEFAULT_MAX_RETRIES_FAILURE,
    DEFAULT_MAX_RETRIES_PREEMPTION,
    FAILURE,
    JOB_KIND,
    PREEMPTION,
    Band,
)
from .workers import check_script

if TYPE_CHECKING:
    from drover import Repository


@attrs.frozen
class JobRequest:
    """One job as a user submits it to Iris.

    ``scheduling_timeout`` (seconds, or None) is measured from submission;
    ``coscheduled`` makes the tasks a gang; ``script`` is what the simulated
    workers make of each attempt of each task (``ok``/``fail``, see :mod:`.workers`).
    """

    name: str
    replicas: int = 1
    band: Band = Band.BATCH
    max_retries_failure: int = DEFAULT_MAX_RETRIES_FAILURE
    max_retries_preemption: int = DEFAULT_MAX_RETRIES_PREEMPTION
    max_task_failures: int = 0
    scheduling_timeout: float | None = None
    #: Seconds a task may run (RUNNING) before it is KILLED; None: no limit.
    timeout: float | None = None
    coscheduled: bool = False
    script: Sequence[str] = ("ok",)
    #: Seconds a succeeding attempt runs (simulated).
    duration: float = 0
    #: Scripts of particular tasks (by index), instead of ``script``.
    task_scripts: Mapping[int, Sequence[str]] = attrs.field(factory=dict)

    def job_spec(self) -> dict[str, Any]:
        """The job's spec."""
        return {
            "replicas": self.replicas,
            "band": self.band.name,
            "max_task_failures": self.max_task_failures,
            "coscheduled": self.coscheduled,
        }

    def task_spec(self, index: int, submitted_at: float) -> dict[str, Any]:
        """Task ``index``'s spec, its deadline absolute (``submitted_at`` + timeout)."""
        spec: dict[str, Any] = {
            "index": index,
            "band": self.band.name,
            "budgets": {FAILURE: self.max_retries_failure, PREEMPTION: self.max_retries_preemption},
            "script": list(check_script(self.task_scripts.get(index, self.script))),
            "duration": self.duration,
        }
        if self.timeout is not None:
            spec["timeout"] = self.timeout
        if self.scheduling_timeout is not None:
            spec["deadline"] = submitted_at + self.scheduling_timeout
        return spec


async def submit_job(repository: Repository, request: JobRequest, *, now: float) -> str:
    """Create the job PENDING with its tasks PENDING, in one transaction; return its id."""
    if request.replicas < 1:
        raise ValueError(f"job {request.name!r}: replicas must be at least 1")
    return await repository.create_entity(
        JOB_KIND,
        spec=request.job_spec(),
        name=request.name,
        priority=int(request.band),
        children=[
            {
                "spec": request.task_spec(i, now),
                "name": f"{request.name}-{i}",
                "priority": int(request.band),
            }
            for i in range(request.replicas)
        ],
    )
