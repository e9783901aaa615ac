"""The ``slurm`` backend: each kernel is one Slurm batch job (docs/slurm.md).

* agents: the partition's nodes from ``sinfo`` (CPUs, memory, GRES); drained,
  down or unresponsive nodes are not offered, so drover's scheduler places
  kernels as for any backend and refuses requests no node could ever hold.
* prepare: ``sbatch --parsable`` of a script that exports ``env``, runs
  ``setup`` and ``exec``\\ s ``command``, named ``<prefix><kernel id>``, with
  ``--nodelist`` on the chosen node (unless ``placement = false``). The job id
  is stored in the kernel's ``runtime`` by the PREPARING report, before anything
  relies on it.
* progress, from one ``squeue --json`` per poll: CONFIGURING is PULLING; once
  Slurm gives the job a node it is PREPARED, and RUNNING as soon as
  ``start-sessions`` has asked for it; COMPLETED is TERMINATED with exit code 0;
  FAILED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL… are ERROR with the exit code and
  Slurm's reason; CANCELLED is TERMINATED (it ran) or CANCELLED (it never did).
  A job that left the controller is read with ``scontrol``, then from the
  ``jobcomp/filetxt`` file.
* destroy: ``scancel --signal`` (``--full``, so the batch shell gets it too),
  the final ``scancel`` after ``kill_grace``.

Restarts: jobs keep running without drover. At start-up the jobs recorded in
kernels are adopted (finished ones are reported on the first poll), and jobs
named after a kernel are remembered, so a kernel whose PREPARING report never
committed (the coordinator died right after ``sbatch``) adopts its job instead
of getting a second one. Jobs of kernels that were sent back to PENDING or
ended are cancelled.

The loop, destroy's steps and file retention are the shared
:class:`~drover.backends.tracking.TrackingBackend`'s.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Any

from drover.backends.base import AgentInfo, BackendError, KernelReporter
from drover.backends.fence import Fence
from drover.backends.logfiles import create_log
from drover.backends.slurm._client import SlurmClient, newest_named
from drover.backends.slurm._reports import OWNING, ended, lost, progress, started
from drover.backends.slurm._script import SpecProblem, job_script, resource_args
from drover.backends.slurm._settings import SlurmSettings
from drover.backends.slurm._tools import SlurmCommandError, SlurmJob, SlurmNode, transient_retry
from drover.backends.stopping import STOPPED
from drover.backends.tracking import Tracked, TrackingBackend
from drover.kinds.sessions.values import (
    NON_TERMINAL_KERNEL_STATUSES,
    TERMINAL_KERNEL_STATUSES,
    KernelInfo,
    KernelReport,
    KernelStatus,
    SessionWithKernels,
)

__all__ = ["SlurmBackend", "SlurmSettings"]

_K = KernelStatus


class _Job(Tracked):
    """A kernel's job this backend watches (missing: from squeue, scontrol and the
    jobcomp file)."""

    def __init__(self, kernel_id: str, job_id: int, runtime: Mapping[str, Any]) -> None:
        super().__init__(kernel_id, runtime)
        self.job_id = job_id
        self.job: SlurmJob | None = None
        #: When the poll last cancelled it (loop time); it cancels again after kill_grace.
        self.cancelled_at: float | None = None


class SlurmBackend(TrackingBackend[_Job]):
    """Kernels as Slurm batch jobs; see the module docstring."""

    name = "slurm"
    wait_step = 0.2
    # A job's port on its compute node is unknown: no deployment's replica could be checked.
    records_ports = False

    def __init__(
        self,
        settings: SlurmSettings,
        data_dir: str | os.PathLike[str],
        *,
        kill_grace: float = 10.0,
    ) -> None:
        grace = settings.kill_grace if settings.kill_grace is not None else kill_grace
        # Agents are the partition's nodes, read from sinfo (agents()).
        super().__init__(
            [], data_dir, kill_grace=grace, kill_margin=grace,
            poll_interval=settings.poll_interval, sweep_interval=settings.nodes_interval,
        )  # fmt: skip
        self.settings = settings
        self._nodes: list[SlurmNode] = []
        # Jobs named after a kernel that existed when this backend started: a
        # kernel whose PREPARING report was lost adopts its job from here.
        self._found: dict[str, list[SlurmJob]] = {}
        self.slurm = SlurmClient(settings)

    # -- the backend's own lifecycle ------------------------------------------------------

    async def _refresh_nodes(self) -> None:
        nodes = await self.slurm.nodes()
        before = {n.name for n in self._nodes if n.usable}
        self._nodes = nodes
        after = {n.name for n in nodes if n.usable}
        if before != after:
            self.log.info("slurm nodes offered: %s", ", ".join(sorted(after)) or "none")

    async def offered_slots(self) -> set[str] | None:
        """CPUs, memory and every GRES of the partition's nodes, read with ``sinfo`` if this
        backend has not started (``drover submit`` never starts it); ``None`` if Slurm
        does not answer (the submission is then not checked against it)."""
        if not self._nodes:
            try:
                await self._refresh_nodes()
            except BackendError as error:
                self.log.warning("cannot read the slurm nodes to check a submission: %s", error)
                return None
        return await super().offered_slots()

    def agents(self) -> Sequence[AgentInfo]:
        """The partition's nodes that take jobs, with CPUs, memory (MiB) and GRES counts."""
        return [
            AgentInfo(n.name, {"cpu": n.cpus, "mem": n.mem, **n.gres})
            for n in self._nodes
            if n.usable
        ]

    async def _adopt(self, reporter: KernelReporter) -> None:
        """Read the nodes, adopt recorded jobs, cancel abandoned ones."""
        try:
            async for attempt in transient_retry():
                with attempt:
                    await self._refresh_nodes()
                    jobs = await self.slurm.squeue()
        except SlurmCommandError as error:
            raise BackendError(f"slurm backend cannot reach Slurm: {error}") from None
        await self.slurm.find_jobcomp()
        prefix = self.settings.job_name_prefix
        named = [j for j in jobs.values() if j.name.startswith(prefix)]
        named += (await self.slurm.read_jobcomp()).values()
        for job in named:
            self._found.setdefault(job.name[len(prefix) :], []).append(job)
        adopted = 0
        for kernel in await reporter.kernels_in(NON_TERMINAL_KERNEL_STATUSES):
            tracked = self._track(kernel)
            if tracked is None:
                continue
            tracked.job = jobs.get(tracked.job_id)
            if kernel.status in OWNING:
                adopted += 1
            elif tracked.job is None or tracked.job.finished:
                del self._tracked[kernel.id]  # an old attempt's job, already over
            # else: an old attempt's job still running; the first poll cancels it
        await self._cancel_strays(jobs)
        self.log.info(
            "slurm backend started: %d node(s) offered, %d job(s) adopted, jobcomp file %s",
            len(self.agents()),
            adopted,
            self.slurm.jobcomp or "none",
        )

    async def _cancel_strays(self, jobs: dict[int, SlurmJob]) -> None:
        """Cancel live jobs named after kernels of this database that no longer own them."""
        assert self.reporter is not None
        prefix = self.settings.job_name_prefix
        live = [j for j in jobs.values() if j.name.startswith(prefix) and not j.finished]
        if not live:
            return
        # Kernels of another database (another drover on this cluster) are unknown here.
        statuses = await self.reporter.kernel_statuses([j.name[len(prefix) :] for j in live])
        strays = []
        for job in live:
            kernel_id = job.name[len(prefix) :]
            status = statuses.get(kernel_id)
            tracked = self._tracked.get(kernel_id)
            if status is None or status == _K.SCHEDULED:
                continue  # unknown here, or waiting for prepare() to adopt it
            if status in OWNING and tracked is not None and tracked.job_id == job.job_id:
                continue
            strays.append(job.job_id)
        if strays:
            self.log.warning("cancelling slurm jobs no kernel owns: %s", strays)
            await self.slurm.cancel(strays)

    async def _close(self) -> None:
        await self.slurm.close()

    def _track(self, kernel: KernelInfo) -> _Job | None:
        """Track the job recorded in the kernel's runtime, if it has one."""
        tracked = self._tracked.get(kernel.id)
        if tracked is not None:
            return tracked
        runtime = kernel.runtime or {}
        job_id = runtime.get("slurm_job_id")
        if not isinstance(job_id, int):
            return None
        tracked = self._tracked[kernel.id] = _Job(kernel.id, job_id, runtime)
        return tracked

    async def _report(self, reports: Sequence[KernelReport]) -> list[bool]:
        """Report now; a kernel whose end applied is no longer tracked."""
        applied = await super()._report(reports)
        for report, ok in zip(reports, applied, strict=True):
            if ok and report.status in TERMINAL_KERNEL_STATUSES:
                self._tracked.pop(report.kernel_id, None)
        return applied

    # -- prepare: submit ------------------------------------------------------------------

    async def prepare(self, session: SessionWithKernels) -> None:
        """Submit one job per SCHEDULED kernel (or adopt the one submitted before a crash).

        Each ``sbatch`` and ``scancel`` is fenced by the tick's claim
        (:mod:`drover.backends.fence`): a call whose claim lapsed or was taken
        over submits and cancels nothing more.
        """
        fence = Fence.of(session, self.reporter)
        for kernel in session.kernels:
            if kernel.status == _K.SCHEDULED:
                await self._submit(session, kernel, fence)
            elif kernel.status in OWNING:
                self._track(kernel)  # submitted before a restart; the poll follows it

    def _known_gres(self) -> list[str]:
        return sorted({name for node in self._nodes for name in node.gres})

    async def _submit(self, session: SessionWithKernels, kernel: KernelInfo, fence: Fence) -> None:
        workdir = self.kernel_dir(kernel.id)
        workdir.mkdir(parents=True, exist_ok=True)
        cwd = kernel.spec.get("cwd")
        try:
            script = job_script(
                kernel.spec,
                cwd=str(workdir / cwd if isinstance(cwd, str) and cwd else workdir),
                session_id=session.id,
                kernel_id=kernel.id,
            )
            resources = resource_args(kernel.spec, self._known_gres())
        except SpecProblem as problem:
            await self._refuse(kernel, str(problem))
            return
        previous = (kernel.runtime or {}).get("slurm_job_id")
        after = previous if isinstance(previous, int) else None
        await fence.check()
        old = self._tracked.pop(kernel.id, None)
        if old is not None and (old.job is None or not old.job.finished):
            # Sent back to PENDING and scheduled again: the old attempt's job goes.
            await self.slurm.cancel([old.job_id])
            await fence.check()
        runtime: dict[str, Any] = {
            "backend": "slurm",
            "workdir": str(workdir),
            "stdout": str(workdir / "stdout.log"),
            "stderr": str(workdir / "stderr.log"),
        }
        name = f"{self.settings.job_name_prefix}{kernel.id}"
        job_id = newest_named(self._found.pop(kernel.id, []), name, after)
        if job_id is not None:
            self.log.info(
                "kernel %s: adopting slurm job %d submitted before a restart", kernel.id, job_id
            )
        else:
            try:
                # Regular files before the job starts (slurmstepd appends to what it finds);
                # readers open them without following links (drover.backends.logfiles).
                for stream in ("stdout", "stderr"):
                    os.close(create_log(runtime[stream]))
            except OSError as error:
                await self._refuse(kernel, f"cannot create its log: {error}")
                return
            argv = [
                "--parsable",
                f"--job-name={name}",
                f"--comment=drover session {session.id} kernel {kernel.id}",
                f"--output={runtime['stdout']}",
                f"--error={runtime['stderr']}",
                "--open-mode=append",
                f"--chdir={workdir}",
                # drover decides what runs again, not Slurm.
                "--no-requeue",
                *resources,
                *([f"--partition={self.settings.partition}"] if self.settings.partition else []),
                *([f"--account={self.settings.account}"] if self.settings.account else []),
                *(
                    [f"--nodelist={kernel.agent_id}"]
                    if self.settings.placement and kernel.agent_id
                    else []
                ),
                *self.settings.sbatch_args,
            ]
            fence.check_clock()
            try:
                job_id = await self.slurm.submit(argv, script, name, after)
            except SlurmCommandError as error:
                if error.transient:
                    raise  # prepare-sessions retries the session on its next tick
                await self._refuse(kernel, f"slurm refused the job: {error}")
                return
        runtime["slurm_job_id"] = job_id
        early = frozenset({_K.SCHEDULED})
        (ok,) = await self._report(
            [KernelReport(kernel.id, _K.PREPARING, expected=early, runtime=runtime)]
        )
        if ok:
            self._tracked[kernel.id] = _Job(kernel.id, job_id, runtime)
        else:
            self.log.warning(
                "kernel %s moved on during sbatch: cancelling job %d", kernel.id, job_id
            )
            await self.slurm.cancel([job_id])

    async def _refuse(self, kernel: KernelInfo, message: str) -> None:
        early = frozenset({_K.SCHEDULED})
        await self._report([KernelReport(kernel.id, _K.ERROR, expected=early, message=message)])

    # -- create: RUNNING -------------------------------------------------------------------

    async def create(self, session: SessionWithKernels) -> None:
        """Report RUNNING for kernels whose job Slurm has started (the job starts itself)."""
        reports: list[KernelReport] = []
        for kernel in session.kernels:
            if kernel.status in TERMINAL_KERNEL_STATUSES:
                continue
            tracked = self._track(kernel)
            if tracked is None:
                raise BackendError(f"kernel {kernel.id} has no slurm job; it was not prepared")
            if tracked.job is None or not tracked.job.allocated:
                tracked.job = (await self.slurm.recent_jobs()).get(tracked.job_id, tracked.job)
            if tracked.job is not None and tracked.job.allocated and not tracked.destroying:
                reports += started(tracked.kernel_id, tracked.job)
        await self._report(reports)

    # -- watching -------------------------------------------------------------------------

    async def _sweep(self) -> None:
        """Every ``nodes_interval``: read the nodes again (drained ones are not offered)."""
        await self._refresh_nodes()

    async def _poll(self) -> None:
        """One ``squeue --json`` for every tracked job; report what changed."""
        assert self.reporter is not None
        if not self._tracked:
            return
        tracked = list(self._tracked.values())
        statuses = await self.reporter.kernel_statuses([t.kernel_id for t in tracked])
        jobs = await self.slurm.recent_jobs()
        reports: list[KernelReport] = []
        cancel: list[int] = []
        for item in tracked:
            status = statuses.get(item.kernel_id)
            job = jobs.get(item.job_id)
            if job is None and (item.job is None or not item.job.finished):
                job = await self.slurm.lookup_gone(item.job_id)
                if job is None:
                    gone = item.missed(seen=False)
                    if status not in OWNING:
                        self._tracked.pop(item.kernel_id, None)
                    elif gone:
                        reports.append(lost(item.kernel_id, item.job_id))
                    continue
            item.missed(seen=True)
            item.job = job or item.job
            if status is None or status not in OWNING:
                # Ended, or sent back to PENDING: its job is no longer wanted.
                if item.job is not None and not item.job.finished:
                    now = asyncio.get_running_loop().time()
                    if item.cancelled_at is None or now - item.cancelled_at >= self.kill_grace:
                        item.cancelled_at = now
                        cancel.append(item.job_id)
                else:
                    self._tracked.pop(item.kernel_id, None)
                continue
            if item.job is not None:
                # TERMINATING: a destroy (of this coordinator or another) stopped it.
                reports += progress(
                    item.kernel_id,
                    item.job,
                    status,
                    destroying=item.destroying or status in STOPPED,
                    runtime=item.runtime,
                )
        if cancel:
            self.log.warning(
                "cancelling slurm jobs of kernels that no longer want them: %s", cancel
            )
            await self.slurm.cancel(cancel)
        await self._report(reports)

    # -- destroy --------------------------------------------------------------------------

    async def _victims(self, session: SessionWithKernels, fence: Fence) -> list[_Job]:
        """The session's jobs that have not finished; all of its jobs are marked destroyed."""
        victims: list[_Job] = []
        for kernel in session.kernels:
            if kernel.status in TERMINAL_KERNEL_STATUSES:
                continue
            tracked = self._track(kernel)
            if tracked is not None:
                tracked.destroying = True
                victims.append(tracked)
        if not victims:
            return []
        return await self._still_live(victims)

    async def _signal(self, items: Sequence[_Job], fence: Fence, *, kill: bool) -> None:
        """``scancel --signal`` (``--full``: the batch shell too) to jobs on a node, a plain
        ``scancel`` to those still waiting for one (nothing to signal there); ``kill``:
        ``scancel`` them all."""
        if kill:
            self.log.warning(
                "slurm jobs %s outlived --signal=%s for %ss: cancelling",
                [t.job_id for t in items],
                self.settings.signal,
                self.kill_grace,
            )
            fence.check_clock()
            await self.slurm.cancel([t.job_id for t in items])
            return
        signalled = [t.job_id for t in items if t.job is not None and t.job.allocated]
        await self.slurm.cancel([t.job_id for t in items if t.job_id not in signalled])
        fence.check_clock()
        await self.slurm.cancel(signalled, signal=self.settings.signal)

    async def _still_live(self, items: Sequence[_Job]) -> list[_Job]:
        jobs = await self.slurm.recent_jobs()
        for item in items:
            item.job = jobs.get(item.job_id, item.job)
        return [t for t in items if t.job is None or not t.job.finished]

    async def _destroyed(self, session: SessionWithKernels, victims: Sequence[_Job]) -> None:
        """Report how the finished jobs ended, before the handler marks their kernels
        TERMINATED without a code."""
        finished = [
            t
            for k in session.kernels
            if k.status not in TERMINAL_KERNEL_STATUSES
            and (t := self._tracked.get(k.id)) is not None
            and t.destroying
            and t.job is not None
            and t.job.finished
        ]
        await self._report(
            [
                ended(t.kernel_id, t.job, OWNING | {_K.SCHEDULED}, destroying=True)
                for t in finished
                if t.job is not None
            ]
        )
