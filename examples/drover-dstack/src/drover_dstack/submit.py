"""``submit_run``: dstack's ``services.runs.submit_run``, a run SUBMITTED with its jobs.

The run is created with every slot's first job submission (``submission_num``
0), all SUBMITTED, in one transaction; the run's spec is checked first
(:func:`.spec.check_run_spec`, one line naming the bad field, nothing written).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .kinds import ABORT, JOB_KIND, RUN_KIND, JobStatus, RunStatus
from .spec import DEFAULT_STOP_DURATION, first_jobs, job_name

if TYPE_CHECKING:
    # Storage is imported when a run is submitted, not when drover loads the plugin.
    from drover import Repository


@attrs.frozen
class RunRequest:
    """A run configuration, as ``dstack apply`` would send it.

    ``retry`` is ``{"on_events": [...], "duration": seconds}`` (None: no
    retry); ``sim`` each slot's container behaviour by submission (see
    :mod:`.cloud`), ``"*"`` for every slot.
    """

    name: str
    type: str = "task"
    nodes: int = 1
    replicas: int = 1
    retry: Mapping[str, Any] | None = None
    max_duration: float | None = None
    stop_duration: float | None = DEFAULT_STOP_DURATION
    stop_criteria: str = "all-done"
    sim: Mapping[str, Sequence[Mapping[str, Any]]] = attrs.field(factory=dict)

    def spec(self) -> dict[str, Any]:
        """The run's spec (its configuration)."""
        spec: dict[str, Any] = {
            "type": self.type,
            "nodes": self.nodes,
            "replicas": self.replicas,
            "stop_duration": self.stop_duration,
            "stop_criteria": self.stop_criteria,
            "sim": {k: [dict(b) for b in v] for k, v in self.sim.items()},
        }
        if self.retry is not None:
            spec["retry"] = dict(self.retry)
        if self.max_duration is not None:
            spec["max_duration"] = self.max_duration
        return spec


async def submit_run(repository: Repository, request: RunRequest) -> str:
    """Create the run SUBMITTED with its first job submissions; return its id."""
    spec = request.spec()
    children = [
        {
            "kind": JOB_KIND,
            "status": JobStatus.SUBMITTED,
            "spec": s,
            "name": job_name(request.name, s["replica_num"], s["job_num"]),
        }
        for s in first_jobs(spec)
    ]
    return await repository.create_entity(
        RUN_KIND, spec=spec, status=RunStatus.SUBMITTED, name=request.name, children=children
    )


async def abort_run(repository: Repository, run_id: str) -> None:
    """``dstack stop --abort``: the termination mode ``abort`` (``drover terminate RUN
    --mode abort``).

    The run kind's ``abort`` rule takes it from any live status but TERMINATING
    to TERMINATING (ABORTED_BY_USER); its jobs are killed without a graceful stop
    and end ABORTED, and the run ends TERMINATED with the result CANCELLED of a
    stop the user asked for. A plain stop is ``drover terminate RUN``.
    """
    await repository.request_termination([run_id], mode=ABORT)
