"""What a Slurm job's state means for its kernel: pure functions from a job to reports.

The kernel walks drover's lifecycle in order whatever Slurm does: a job that
already ran when drover first looks still goes PREPARED, then RUNNING (once
``start-sessions`` asked for it), then its end. So a fast job ends like a slow
one (``detect-termination``, KERNEL_EXITED), never as a start failure.
"""

from __future__ import annotations

from drover.backends.slurm._tools import SlurmJob
from drover.backends.stopping import seen_end
from drover.kinds.sessions.values import KernelReport, KernelStatus

__all__ = ["AFTER_START", "EARLY", "OWNING", "ended", "ends", "lost", "progress", "started"]

_K = KernelStatus
#: Kernel statuses in which a kernel owns the job recorded in its runtime.
OWNING = frozenset({_K.PREPARING, _K.PULLING, _K.PREPARED, _K.CREATING, _K.RUNNING, _K.TERMINATING})
#: Submitted, waiting for Slurm to give the job a node.
EARLY = frozenset({_K.PREPARING, _K.PULLING})
AFTER_START = frozenset({_K.RUNNING, _K.TERMINATING})


def ended(
    kernel_id: str, job: SlurmJob, expected: frozenset[KernelStatus], *, destroying: bool
) -> KernelReport:
    """How a finished job ends its kernel.

    COMPLETED is TERMINATED with exit code 0. CANCELLED is TERMINATED if the
    job ran, CANCELLED if it never did. Any other end (FAILED, TIMEOUT,
    OUT_OF_MEMORY, NODE_FAIL…) is ERROR, with the exit code and Slurm's state
    and reason. A job drover destroyed ends TERMINATED (CANCELLED if it never
    ran), with whatever code it had.
    """
    code = job.exit_code
    status = _K.ERROR
    message: str | None = job.describe()
    if destroying:
        status = _K.TERMINATED if job.allocated else _K.CANCELLED
        message = f"destroyed: {message}"
    elif job.state == "COMPLETED":
        status, message, code = _K.TERMINATED, None, code or 0
    elif job.state == "CANCELLED":
        status = _K.TERMINATED if job.allocated else _K.CANCELLED
    elif code is not None and code > 0:
        message = f"exited with code {code}; {message}"
    elif code is not None and code < 0:
        message = f"killed by signal {-code}; {message}"
    return KernelReport(kernel_id, status, expected=expected, exit_code=code, message=message)


def ends(
    kernel_id: str, job: SlurmJob, expected: frozenset[KernelStatus], *, destroying: bool
) -> list[KernelReport]:
    """The reports of a finished job, as :func:`ended` judges it. Not ``destroying`` (this
    coordinator did not stop it): the destroy's verdict follows, for a kernel another
    coordinator is destroying (TERMINATING, :mod:`drover.backends.stopping`)."""
    end = ended(kernel_id, job, expected, destroying=destroying)
    if destroying:
        return [end]
    return seen_end(end, ended(kernel_id, job, expected, destroying=True))


def started(kernel_id: str, job: SlurmJob, *, destroying: bool = False) -> list[KernelReport]:
    """RUNNING for a PREPARED or CREATING kernel whose job has a node, then its end if over."""
    reports = [KernelReport(kernel_id, _K.RUNNING, expected=frozenset({_K.PREPARED, _K.CREATING}))]
    if job.finished:
        reports += ends(kernel_id, job, frozenset({_K.RUNNING}), destroying=destroying)
    return reports


def progress(
    kernel_id: str,
    job: SlurmJob,
    status: KernelStatus,
    *,
    destroying: bool,
    runtime: dict[str, object],
) -> list[KernelReport]:
    """The reports that bring a kernel in ``status`` up to its job's state.

    ``runtime`` is the kernel's bookkeeping; the PREPARED report records the
    node Slurm gave the job in it.
    """
    if job.finished and (destroying or not job.allocated):
        return ends(kernel_id, job, OWNING, destroying=destroying)
    if not job.allocated:
        if job.state == "CONFIGURING" and status == _K.PREPARING:
            return [KernelReport(kernel_id, _K.PULLING, expected=frozenset({_K.PREPARING}))]
        return []
    if status in EARLY:
        prepared = {**runtime, "node": job.node}
        return [KernelReport(kernel_id, _K.PREPARED, expected=EARLY, runtime=prepared)]
    if status == _K.CREATING:
        return started(kernel_id, job)
    if status in AFTER_START and job.finished:
        return ends(kernel_id, job, AFTER_START, destroying=False)
    return []  # PREPARED: create() reports RUNNING when start-sessions asks


def lost(kernel_id: str, job_id: int) -> KernelReport:
    """ERROR for a kernel whose job Slurm no longer knows anywhere."""
    return KernelReport(
        kernel_id,
        _K.ERROR,
        expected=OWNING,
        message=f"slurm job {job_id} is known neither to squeue, scontrol nor the jobcomp "
        "file: lost",
    )
