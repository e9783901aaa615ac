"""The Slurm backend's calls to Slurm: one method per question or order, no kernel logic."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

from drover.backends.slurm._settings import SlurmSettings
from drover.backends.slurm._tools import (
    SINFO_FORMAT,
    SlurmCommandError,
    SlurmJob,
    SlurmNode,
    job_from_fields,
    parse_jobcomp,
    parse_key_values,
    parse_sinfo,
    parse_squeue_json,
    run_tool,
    transient_retry,
)

__all__ = ["SlurmClient"]

log = logging.getLogger("drover.backends.slurm")


class SlurmClient:
    """``sbatch``, ``squeue``, ``sinfo``, ``scontrol`` and ``scancel`` as the settings name them."""

    def __init__(self, settings: SlurmSettings) -> None:
        self.settings = settings
        #: The ``jobcomp/filetxt`` file, once known (:meth:`find_jobcomp`).
        self.jobcomp: str | None = settings.jobcomp_file
        self._squeue_task: asyncio.Future[dict[int, SlurmJob]] | None = None

    async def _tool(self, *argv: str, stdin: str | None = None) -> str:
        return await run_tool(argv, stdin=stdin, limit=self.settings.command_timeout)

    async def squeue(self) -> dict[int, SlurmJob]:
        """Every job the controller holds, by id.

        22.05's ``squeue --json`` ignores ``-j`` and ``-t``: one call lists every
        job, finished ones included until ``MinJobAge``; callers filter.
        """
        text = await self._tool(self.settings.squeue, "--json")
        # Parsed off the loop: on a busy cluster the document is megabytes.
        return await asyncio.to_thread(parse_squeue_json, text)

    async def recent_jobs(self) -> dict[int, SlurmJob]:
        """Like :meth:`squeue`, but callers that overlap share one run."""
        if self._squeue_task is None or self._squeue_task.done():
            self._squeue_task = asyncio.ensure_future(self.squeue())
        return await asyncio.shield(self._squeue_task)

    async def close(self) -> None:
        """Wait for a shared squeue still running."""
        if self._squeue_task is not None:
            await asyncio.gather(self._squeue_task, return_exceptions=True)

    async def nodes(self) -> list[SlurmNode]:
        """The partition's nodes (the default partition, marked ``*``, when none is set)."""
        partition = self.settings.partition
        argv = [self.settings.sinfo, "-N", "-h", "-o", SINFO_FORMAT]
        text = await self._tool(*argv, *(["-p", partition] if partition else []))
        nodes = parse_sinfo(text)
        if not partition:
            nodes = [n for n in nodes if any(p.endswith("*") for p in n.partitions)]
        return nodes

    async def cancel(self, job_ids: Iterable[int], *, signal: str | None = None) -> None:
        """``scancel`` the jobs; with ``signal``, send it to every step and the batch shell."""
        ids = sorted({str(j) for j in job_ids})
        if not ids:
            return
        flags = [f"--signal={signal}", "--full"] if signal else []
        try:
            async for attempt in transient_retry():
                with attempt:
                    await self._tool(self.settings.scancel, *flags, *ids)
        except SlurmCommandError as error:
            # Some job had already ended: the others were still signalled.
            log.info("scancel %s: %s", " ".join(ids), error)

    async def lookup_gone(self, job_id: int) -> SlurmJob | None:
        """A job squeue no longer lists: ``scontrol -o show job``, then the jobcomp file."""
        try:
            text = await self._tool(self.settings.scontrol, "-o", "show", "job", str(job_id))
            for line in text.splitlines():
                job = job_from_fields(parse_key_values(line))
                if job is not None and job.job_id == job_id:
                    return job
        except SlurmCommandError as error:
            if error.transient:
                raise
        return (await self.read_jobcomp()).get(job_id)

    async def read_jobcomp(self) -> dict[int, SlurmJob]:
        """drover's jobs in the jobcomp file (read in a thread: it only grows)."""
        path = self.jobcomp
        if not path:
            return {}

        def read() -> dict[int, SlurmJob]:
            try:
                text = Path(path).read_text(errors="replace")
            except OSError:
                return {}
            return parse_jobcomp(text, self.settings.job_name_prefix)

        return await asyncio.to_thread(read)

    async def find_jobcomp(self) -> None:
        """Learn the jobcomp file from ``scontrol show config`` unless the settings name one."""
        if self.jobcomp is not None:
            return
        try:
            text = await self._tool(self.settings.scontrol, "show", "config")
        except SlurmCommandError as error:
            log.warning("scontrol show config failed (%s): no jobcomp file", error)
            return
        config: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                config[key.strip()] = value.strip()
        if config.get("JobCompType") == "jobcomp/filetxt" and config.get("JobCompLoc"):
            self.jobcomp = config["JobCompLoc"]
            return
        log.warning(
            "JobCompType is %s, not jobcomp/filetxt: jobs that leave the controller while "
            "drover is down cannot be read back",
            config.get("JobCompType", "unknown"),
        )

    async def submit(self, argv: Sequence[str], script: str, name: str, after: int | None) -> int:
        """``sbatch`` the script (retrying transient failures); return the job id.

        A failed ``sbatch`` may have reached the controller after all, so a retry
        first looks for a job called ``name`` newer than ``after``: a kernel
        never gets two jobs.
        """
        first = True
        async for attempt in transient_retry():
            with attempt:
                if not first:
                    found = newest_named((await self.squeue()).values(), name, after)
                    if found is not None:
                        return found
                first = False
                out = await self._tool(self.settings.sbatch, *argv, stdin=script)
                try:
                    return int(out.strip().split(";")[0])
                except ValueError:
                    raise SlurmCommandError(
                        [self.settings.sbatch],
                        f"unexpected output {out.strip()!r}",
                        transient=False,
                    ) from None
        raise AssertionError("unreachable")  # pragma: no cover


def newest_named(jobs: Iterable[SlurmJob], name: str, after: int | None) -> int | None:
    """The newest job called ``name`` with an id above ``after`` (a previous attempt's)."""
    ids = [j.job_id for j in jobs if j.name == name and (after is None or j.job_id > after)]
    return max(ids) if ids else None
