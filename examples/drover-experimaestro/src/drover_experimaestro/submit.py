"""experimaestro's ``submit``: a job is identified by its task and parameters.

Submitting a job that exists already follows experimaestro's
``aio_registerJob``/``aio_submit_inner``: a DONE job is kept; a higher
``max_retries`` replaces the job's; a job that ended in ERROR runs again
(reopened to WAITING, so the jobs that depend on it wait for it again),
except a timed-out job whose retries are spent, which runs again only when
the resubmission raises ``max_retries`` above the retries it used.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from drover import Entity

from .kinds import (
    DEFAULT_MAX_RETRIES,
    DEPENDS_ON,
    JOB_KIND,
    RETRIES,
    TOKEN_POOL_NAME,
    FailureReason,
    JobState,
)
from .launcher import check_script

if TYPE_CHECKING:
    # Storage is imported when a job is submitted, not when drover loads the
    # plugin: `drover --help` stays fast.
    from drover import Queries, Repository


def _tokens(value: Mapping[str, int] | int | None) -> dict[str, int]:
    if value is None:
        return {}
    return {TOKEN_POOL_NAME: value} if isinstance(value, int) else dict(value)


@attrs.frozen
class JobRequest:
    """One job as an experiment submits it.

    ``script`` is what the simulated launcher makes of each run (see
    :mod:`.launcher`); ``duration`` its simulated run time in seconds;
    ``tokens`` the tokens it takes of each counter while SCHEDULED or RUNNING
    (``{"xpm-token": 2}``; a number ``n`` means ``{"xpm-token": n}``);
    ``transient`` makes it run only if a job waiting for it needs it.
    """

    task: str
    params: Mapping[str, Any] = attrs.field(factory=dict)
    depends_on: Sequence[str] = ()
    resumable: bool = False
    max_retries: int = DEFAULT_MAX_RETRIES
    tokens: dict[str, int] = attrs.field(factory=dict, converter=_tokens)
    transient: bool = False
    script: Sequence[str] = ("done",)
    duration: float | None = None

    @property
    def kind(self) -> str:
        """Every job is an ``xpm-job``."""
        return JOB_KIND

    @property
    def identifier(self) -> str:
        """experimaestro's job identifier: a hash of the task and its parameters."""
        text = json.dumps([self.task, self.params], sort_keys=True, separators=(",", ":"))
        return f"{self.task}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"

    def spec(self) -> dict[str, Any]:
        """The entity's spec; ``max_retries`` is the limit of its ``retries`` budget."""
        spec: dict[str, Any] = {
            "task": self.task,
            "params": dict(self.params),
            "resumable": self.resumable,
            "script": list(check_script(list(self.script))),
            "budgets": {RETRIES: self.max_retries},
        }
        if self.duration is not None:
            spec["duration"] = self.duration
        if self.tokens:
            # Claims on the counters' pools: the apply counts them (drover checks them).
            spec["pools"] = dict(self.tokens)
        if self.transient:
            spec["transient"] = True
        return spec


def _retries_spent(job: Entity) -> bool:
    return job.status_info == FailureReason.TIMEOUT and bool(job.spec.get("resumable"))


async def submit(repository: Repository, queries: Queries, request: JobRequest) -> str:
    """Submit ``request`` (or resubmit the job it names) and return the job's id."""
    found = await queries.find_by_name(request.kind, request.identifier)
    if not found:
        return await repository.create_entity(
            request.kind,
            spec=request.spec(),
            name=request.identifier,
            links=[(DEPENDS_ON, d) for d in request.depends_on],
        )
    job = found[0]
    old_limit = int(job.spec.get("budgets", {}).get(RETRIES, DEFAULT_MAX_RETRIES))
    raised = request.max_retries > old_limit
    if raised:
        await repository.update_spec(job.id, {"budgets": {RETRIES: request.max_retries}})
    if job.status != JobState.ERROR:
        return job.id  # live (it goes on) or DONE (kept)
    used = (job.budgets or {}).get(RETRIES)
    if _retries_spent(job) and not (
        raised and used is not None and used.used <= request.max_retries
    ):
        return job.id  # exhausted, and this submission gives it no more retries
    await repository.reopen(job.id, JobState.WAITING, message="resubmitted")
    return job.id
