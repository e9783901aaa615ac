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
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from drover.backends.base import AgentBackend, AgentInfo, BackendError, KernelReporter, Wake
from drover.backends.fence import Fence
from drover.backends.logfiles import create_log
from drover.backends.slurm._client import SlurmClient, newest_named
from drover.backends.slurm._reports import OWNING, ended, lost, progress, started
from drover.backends.slurm._script import SpecProblem, job_script, resource_args
from drover.backends.slurm._settings import SlurmSettings
from drover.backends.slurm._tools import SlurmCommandError, SlurmJob, SlurmNode, transient_retry
from drover.backends.stopping import STOPPED, mark_stopping
from drover.kinds.sessions.values import (
    NON_TERMINAL_KERNEL_STATUSES,
    TERMINAL_KERNEL_STATUSES,
    KernelInfo,
    KernelReport,
    KernelStatus,
    SessionWithKernels,
)

__all__ = ["SlurmBackend", "SlurmSettings"]

log = logging.getLogger("drover.backends.slurm")

_K = KernelStatus
#: A tracked job missing from squeue, scontrol and the jobcomp file this many polls in a row
#: is reported lost.
_MISSING_POLLS = 3


class _Tracked:
    """A kernel's job this backend watches."""

    def __init__(self, kernel_id: str, job_id: int, runtime: dict[str, Any]) -> None:
        self.kernel_id = kernel_id
        self.job_id = job_id
        self.runtime = runtime
        self.job: SlurmJob | None = None
        self.destroying = False
        self.missing = 0
        #: When the poll last cancelled it (loop time); it cancels again after kill_grace.
        self.cancelled_at: float | None = None


class SlurmBackend(AgentBackend):
    """Kernels as Slurm batch jobs; see the module docstring."""

    def __init__(
        self,
        settings: SlurmSettings,
        data_dir: str | os.PathLike[str],
        *,
        kill_grace: float = 10.0,
    ) -> None:
        self.settings = settings
        self.data_dir = Path(data_dir).resolve()
        self.kill_grace = settings.kill_grace if settings.kill_grace is not None else kill_grace
        self.reporter: KernelReporter | None = None
        self._wake: Wake = lambda: None
        self._nodes: list[SlurmNode] = []
        self._jobs: dict[str, _Tracked] = {}
        # Jobs named after a kernel that existed when this backend started: a
        # kernel whose PREPARING report was lost adopts its job from here.
        self._found: dict[str, list[SlurmJob]] = {}
        self.slurm = SlurmClient(settings)
        self._monitor: asyncio.Task[None] | None = None
        self._stopping = False

    # -- the backend's own lifecycle ------------------------------------------------------

    async def _refresh_nodes(self) -> None:
        nodes = await self.slurm.nodes()
        before = {n.name for n in self._nodes if n.usable}
        self._nodes = nodes
        after = {n.name for n in nodes if n.usable}
        if before != after:
            log.info("slurm nodes offered: %s", ", ".join(sorted(after)) or "none")

    async def offered_slots(self) -> set[str] | None:
        """CPUs, memory and every GRES of the partition's nodes, read with ``sinfo`` if this
        backend has not started (``drover submit`` never starts it); ``None`` if Slurm
        does not answer (the submission is then not checked against it)."""
        if not self._nodes:
            try:
                await self._refresh_nodes()
            except BackendError as error:
                log.warning("cannot read the slurm nodes to check a submission: %s", error)
                return None
        return await super().offered_slots()

    def agents(self) -> Sequence[AgentInfo]:
        """The partition's nodes that take jobs, with CPUs, memory (MiB) and GRES counts."""
        return [
            AgentInfo(n.name, {"cpu": n.cpus, "mem": n.mem, **n.gres})
            for n in self._nodes
            if n.usable
        ]

    async def start(self, reporter: KernelReporter, wake: Wake) -> None:
        """Read the nodes, adopt recorded jobs, cancel abandoned ones, start polling."""
        self.reporter = reporter
        self._wake = wake
        self._stopping = False
        self.data_dir.mkdir(parents=True, exist_ok=True)
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
            tracked = self._adopt(kernel)
            if tracked is None:
                continue
            tracked.job = jobs.get(tracked.job_id)
            if kernel.status in OWNING:
                adopted += 1
            elif tracked.job is None or tracked.job.finished:
                del self._jobs[kernel.id]  # an old attempt's job, already over
            # else: an old attempt's job still running; the first poll cancels it
        await self._cancel_strays(jobs)
        self._monitor = asyncio.create_task(self._watch(), name="drover-slurm-monitor")
        log.info(
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
            tracked = self._jobs.get(kernel_id)
            if status is None or status == _K.SCHEDULED:
                continue  # unknown here, or waiting for prepare() to adopt it
            if status in OWNING and tracked is not None and tracked.job_id == job.job_id:
                continue
            strays.append(job.job_id)
        if strays:
            log.warning("cancelling slurm jobs no kernel owns: %s", strays)
            await self.slurm.cancel(strays)

    async def stop(self) -> None:
        """Stop polling. Jobs keep running, to be adopted by the next start."""
        self._stopping = True
        if self._monitor is not None:
            self._monitor.cancel()
            await asyncio.gather(self._monitor, return_exceptions=True)
            self._monitor = None
        await self.slurm.close()

    def _adopt(self, kernel: KernelInfo) -> _Tracked | None:
        """Track the job recorded in the kernel's runtime, if it has one."""
        tracked = self._jobs.get(kernel.id)
        if tracked is not None:
            return tracked
        runtime = kernel.runtime or {}
        job_id = runtime.get("slurm_job_id")
        if not isinstance(job_id, int):
            return None
        tracked = self._jobs[kernel.id] = _Tracked(kernel.id, job_id, dict(runtime))
        return tracked

    async def _report(self, reports: Sequence[KernelReport]) -> list[bool]:
        assert self.reporter is not None, "SlurmBackend.start() was not called"
        if not reports:
            return []
        applied = await self.reporter.report_kernel_statuses(reports)
        for report, ok in zip(reports, applied, strict=True):
            if ok and report.status in TERMINAL_KERNEL_STATUSES:
                self._jobs.pop(report.kernel_id, None)
        self._wake()
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
                self._adopt(kernel)  # submitted before a restart; the poll follows it

    def _known_gres(self) -> list[str]:
        return sorted({name for node in self._nodes for name in node.gres})

    async def _submit(self, session: SessionWithKernels, kernel: KernelInfo, fence: Fence) -> None:
        workdir = self.data_dir / "kernels" / kernel.id
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
        old = self._jobs.pop(kernel.id, None)
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
            log.info(
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
            self._jobs[kernel.id] = _Tracked(kernel.id, job_id, runtime)
        else:
            log.warning("kernel %s moved on during sbatch: cancelling job %d", kernel.id, job_id)
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
            tracked = self._adopt(kernel)
            if tracked is None:
                raise BackendError(f"kernel {kernel.id} has no slurm job; it was not prepared")
            if tracked.job is None or not tracked.job.allocated:
                tracked.job = (await self.slurm.recent_jobs()).get(tracked.job_id, tracked.job)
            if tracked.job is not None and tracked.job.allocated and not tracked.destroying:
                reports += started(tracked.kernel_id, tracked.job)
        await self._report(reports)

    # -- watching -------------------------------------------------------------------------

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        next_nodes = loop.time() + self.settings.nodes_interval
        while not self._stopping:
            await asyncio.sleep(self.settings.poll_interval)
            try:
                if loop.time() >= next_nodes:
                    next_nodes = loop.time() + self.settings.nodes_interval
                    await self._refresh_nodes()
                await self._poll_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("slurm backend: polling failed; will retry")

    async def _poll_once(self) -> None:
        """One ``squeue --json`` for every tracked job; report what changed."""
        assert self.reporter is not None
        if not self._jobs:
            return
        tracked = list(self._jobs.values())
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
                    item.missing += 1
                    if status not in OWNING:
                        self._jobs.pop(item.kernel_id, None)
                    elif item.missing >= _MISSING_POLLS:
                        reports.append(lost(item.kernel_id, item.job_id))
                    continue
            item.missing = 0
            item.job = job or item.job
            if status is None or status not in OWNING:
                # Ended, or sent back to PENDING: its job is no longer wanted.
                if item.job is not None and not item.job.finished:
                    now = asyncio.get_running_loop().time()
                    if item.cancelled_at is None or now - item.cancelled_at >= self.kill_grace:
                        item.cancelled_at = now
                        cancel.append(item.job_id)
                else:
                    self._jobs.pop(item.kernel_id, None)
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
            log.warning("cancelling slurm jobs of kernels that no longer want them: %s", cancel)
            await self.slurm.cancel(cancel)
        await self._report(reports)

    # -- destroy --------------------------------------------------------------------------

    async def destroy(self, session: SessionWithKernels) -> None:
        """Signal the session's jobs, cancel them after ``kill_grace``, report how they ended.

        The kernels are reported TERMINATING before any signal, so that a poll
        of another coordinator calls their end destroyed too
        (:mod:`drover.backends.stopping`); every ``scancel`` is fenced by the
        tick's claim (:mod:`drover.backends.fence`).
        """
        fence = Fence.of(session, self.reporter)
        await fence.check()
        victims: list[_Tracked] = []
        for kernel in session.kernels:
            if kernel.status in TERMINAL_KERNEL_STATUSES:
                continue
            tracked = self._adopt(kernel)
            if tracked is not None:
                tracked.destroying = True
                victims.append(tracked)
        if not victims:
            return
        await self._refresh(victims)
        live = [t for t in victims if t.job is None or not t.job.finished]
        await mark_stopping(self.reporter, [t.kernel_id for t in live])
        # A job still waiting for a node has nothing to signal: it is cancelled at once.
        signalled = [t.job_id for t in live if t.job is not None and t.job.allocated]
        await fence.check()
        await self.slurm.cancel([t.job_id for t in live if t.job_id not in signalled])
        fence.check_clock()
        await self.slurm.cancel(signalled, signal=self.settings.signal)
        live = await self._wait_finished(live)
        if live:
            log.warning(
                "slurm jobs %s outlived --signal=%s for %ss: cancelling",
                [t.job_id for t in live],
                self.settings.signal,
                self.kill_grace,
            )
            await fence.check()
            await self.slurm.cancel([t.job_id for t in live])
            live = await self._wait_finished(live)
        # Report how they ended before the handler marks them TERMINATED without a code.
        await self._report(
            [
                ended(t.kernel_id, t.job, OWNING | {_K.SCHEDULED}, destroying=True)
                for t in victims
                if t.job is not None and t.job.finished
            ]
        )

    async def _refresh(self, items: Sequence[_Tracked]) -> None:
        jobs = await self.slurm.recent_jobs()
        for item in items:
            item.job = jobs.get(item.job_id, item.job)

    async def _wait_finished(self, items: list[_Tracked]) -> list[_Tracked]:
        """Poll until the jobs finished or ``kill_grace`` passed; return those still live."""
        deadline = asyncio.get_running_loop().time() + self.kill_grace
        while items and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.2)
            await self._refresh(items)
            items = [t for t in items if t.job is None or not t.job.finished]
        return items
