"""The work every backend whose kernels run outside drover shares, done once.

A backend whose kernels run somewhere drover watches (local processes,
containers, Slurm jobs) is a :class:`TrackingBackend`. The base owns:

* the kernels it tracks (``_tracked``: one :class:`Tracked` per kernel's work),
  and how many polls in a row the engine did not list one (:meth:`Tracked.missed`);
* the monitor: a poll every ``poll_interval`` and a sweep every
  ``sweep_interval`` (by default: stop the work of kernels the database no
  longer wants), each failure logged and tried again at the next round;
* reports: sent now (``_report``), or kept in order until they commit
  (``_reports``, retried with backoff; ``_deliver`` tries now and keeps the rest);
* start and stop: the reporter, the data directory, adopting what runs, the
  monitor; on stop, tasks end (or are cancelled) and kernels keep running;
* destroy: the destroy intent recorded first (:mod:`drover.backends.stopping`),
  a signal, ``kill_grace``, a kill for whatever did not stop, each step fenced
  by the tick's claim (:mod:`drover.backends.fence`), then the ends committed;
* device ids for kernels that ask for a device slot (:mod:`drover.backends.devices`);
* file retention: :meth:`TrackingBackend.prune_files` deletes ``kernels/<id>/``
  of ended kernels.

An engine supplies what only it knows: ``prepare`` and ``create`` (launching),
``_adopt`` (what runs at start-up), ``_poll``, and for destroy ``_victims``,
``_signal``, ``_still_live`` and ``_destroyed``; the default sweep asks
``_wants`` and ``_abandon``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from abc import abstractmethod
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from drover.backends.base import AgentBackend, AgentInfo, KernelReporter, Wake
from drover.backends.devices import Devices
from drover.backends.fence import Fence
from drover.backends.report_queue import ReportQueue
from drover.backends.stopping import mark_stopping
from drover.kinds.sessions.values import (
    TERMINAL_KERNEL_STATUSES,
    KernelInfo,
    KernelReport,
    KernelStatus,
    SessionWithKernels,
)

__all__ = ["MISSING_POLLS", "Tracked", "TrackingBackend"]

#: A tracked kernel's work missing from the engine this many polls in a row is lost.
MISSING_POLLS = 3


class Tracked:
    """One kernel's work a backend watches: a process, a container, a job."""

    def __init__(
        self, kernel_id: str, runtime: Mapping[str, Any], *, confirmed: bool = False
    ) -> None:
        self.kernel_id = kernel_id
        self.runtime = dict(runtime)
        #: Its RUNNING report committed (or was refused: the kernel moved on). An end
        #: is reported only after it, or together with it, or a fast exit is refused.
        self.confirmed = confirmed
        #: A destroy asked it to stop: its end is judged as destroyed.
        self.destroying = False
        #: The database no longer wants it (the kernel ended, or went back to PENDING):
        #: the sweep stopped it.
        self.abandoned = False
        #: Polls in a row the engine did not list it.
        self.missing = 0

    def missed(self, seen: bool) -> bool:
        """Count one poll that did (not) see it; ``True`` once it is lost: unseen
        :data:`MISSING_POLLS` polls in a row."""
        self.missing = 0 if seen else self.missing + 1
        return self.missing >= MISSING_POLLS


T = TypeVar("T", bound=Tracked)


class TrackingBackend(AgentBackend, Generic[T]):
    """Kernels whose work runs outside drover, tracked, polled, destroyed and retained.

    See the module docstring for what the base does and what an engine supplies.
    """

    #: The backend's name, in log lines and task names.
    name: ClassVar[str]
    #: Seconds :meth:`stop` lets tasks end on their own before it cancels them.
    stop_grace: ClassVar[float] = 0.0
    #: Seconds between two checks whether destroyed work ended (the default ``_wait_ended``).
    wait_step: ClassVar[float] = 0.1

    def __init__(
        self,
        agents: Sequence[AgentInfo],
        data_dir: str | os.PathLike[str],
        *,
        kill_grace: float,
        kill_margin: float,
        poll_interval: float,
        sweep_interval: float,
        report_backoff_max: float = 5.0,
        device_variables: Mapping[str, str] | None = None,
    ) -> None:
        self._agents = list(agents)
        self.devices = Devices(self._agents, device_variables or {})
        self.data_dir = Path(data_dir).resolve()
        self.kill_grace = kill_grace
        #: Seconds a destroy waits for work to end after killing it.
        self.kill_margin = kill_margin
        self.poll_interval = poll_interval
        self.sweep_interval = sweep_interval
        self.report_backoff_max = report_backoff_max
        self.reporter: KernelReporter | None = None
        self.log = logging.getLogger(f"drover.backends.{self.name}")
        # Called after reports applied, so the daemon wakes promotion handlers.
        self._wake: Wake = lambda: None
        self._tracked: dict[str, T] = {}
        # Reports that must commit (ends, preparations' results), kept until they do.
        self._reports = ReportQueue(
            lambda: self.reporter, lambda: self._wake, report_backoff_max, self.log
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = False

    def agents(self) -> Sequence[AgentInfo]:
        """The configured agents (by default, this host)."""
        return list(self._agents)

    def kernel_dir(self, kernel_id: str) -> Path:
        """The kernel's directory: its logs, and the working directory of its work."""
        return self.data_dir / "kernels" / kernel_id

    # -- the backend's own lifecycle ---------------------------------------------------

    async def start(self, reporter: KernelReporter, wake: Wake) -> None:
        """Adopt what runs (the engine's ``_adopt``), then start the monitor and the reports."""
        self.reporter = reporter
        self._wake = wake
        self._stopping = False
        await asyncio.to_thread(self.data_dir.mkdir, parents=True, exist_ok=True)
        await self._adopt(reporter)
        self._loops = [
            asyncio.create_task(self._watch(), name=f"drover-{self.name}-monitor"),
            asyncio.create_task(self._reports.run(), name=f"drover-{self.name}-reports"),
        ]

    async def stop(self, grace: float | None = None) -> None:
        """Stop watching; kernels keep running, to be adopted by the next start.

        Reports still waiting for the database get one last try; whatever does
        not commit is read again at the next start. Tasks get ``grace`` seconds
        (the backend's ``stop_grace`` by default) to end on their own; the rest
        are cancelled.
        """
        grace = self.stop_grace if grace is None else grace
        if self._reports and self.reporter is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._reports.flush(), timeout=2.0)
        self._stopping = True
        self._reports.stop()
        tasks = [*self._tasks, *self._loops]
        if tasks:
            _done, pending = (
                await asyncio.wait(tasks, timeout=grace) if grace > 0 else (set(), set(tasks))
            )
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self._loops = []
        await self._close()

    async def _close(self) -> None:
        """Release the engine's connections (the last step of :meth:`stop`)."""

    def _spawn_task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``coro`` in a task that :meth:`stop` waits for (or cancels)."""
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _ours(self, kernels: Sequence[KernelInfo]) -> list[KernelInfo]:
        """The kernels placed on this backend's agents."""
        ours = {a.id for a in self._agents}
        return [k for k in kernels if k.agent_id in ours]

    # -- reports ---------------------------------------------------------------------------

    async def _report(self, reports: Sequence[KernelReport]) -> list[bool]:
        """Report now (the caller handles a failure); return which applied."""
        assert self.reporter is not None, f"{type(self).__name__}.start() was not called"
        if not reports:
            return []
        applied = await self.reporter.report_kernel_statuses(list(reports))
        self._wake()
        return applied

    async def _deliver(self, reports: Sequence[KernelReport]) -> bool:
        """Commit the reports now, or keep them (after those already kept for the same
        kernels) for the report queue to retry; return whether they committed now."""
        self._reports.add(reports)
        try:
            await self._reports.flush(only={r.kernel_id for r in reports})
        except Exception as error:
            self.log.warning("%s backend: reports not applied, will retry: %s", self.name, error)
            return False
        return True

    # -- devices ---------------------------------------------------------------------------

    async def _assign_devices(self, kernel: KernelInfo, fence: Fence) -> dict[str, list[str]]:
        """The device ids of a kernel that asks for a device slot (``{}`` if it asks for
        none), taken in the database under ``fence``'s claim; raises
        :class:`~drover.backends.devices.DeviceProblem` (or ``FencedError``)."""
        if not self.devices.wanted(kernel):
            return {}
        assert self.reporter is not None
        return await self.devices.assign(kernel, self.reporter, fence)

    # -- file retention --------------------------------------------------------------------

    async def prune_files(self, unchanged_since: float) -> int:
        """Delete ``kernels/<id>/`` (logs, working directory) of ended kernels left unchanged.

        A directory goes when its kernel is in a terminal status, this backend
        no longer watches its work, and nothing in it changed after
        ``unchanged_since``; a live kernel's, or one the database does not
        know, stays.
        """
        if self.reporter is None:
            return 0
        root = self.data_dir / "kernels"
        quiet = await asyncio.to_thread(_unchanged_dirs, root, unchanged_since)
        quiet -= set(self._tracked)
        if not quiet:
            return 0
        statuses = await self.reporter.kernel_statuses(sorted(quiet))
        ended = [k for k, status in statuses.items() if status in TERMINAL_KERNEL_STATUSES]
        await asyncio.to_thread(_remove_dirs, [root / k for k in ended])
        return len(ended)

    # -- the monitor -----------------------------------------------------------------------

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        next_sweep = loop.time() + self.sweep_interval
        while not self._stopping:
            await asyncio.sleep(self.poll_interval)
            if self._stopping:
                return
            try:
                await self._poll()
                if loop.time() >= next_sweep:
                    next_sweep = loop.time() + self.sweep_interval
                    await self._sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.exception("%s backend: polling failed; will retry", self.name)

    @abstractmethod
    async def _poll(self) -> None:
        """One look at the tracked work: report what changed, what ended, what is lost."""

    async def _sweep(self) -> None:
        """Every ``sweep_interval``: stop the work of kernels the database no longer wants.

        A kernel that expired back to PENDING, or ended in the database, no
        longer owns its work: without this it would run on as an orphan while
        the session is rescheduled.
        """
        assert self.reporter is not None
        watched = self._watched()
        if not watched:
            return
        statuses = await self.reporter.kernel_statuses(sorted({w.kernel_id for w in watched}))
        for item in watched:
            status = statuses.get(item.kernel_id)
            if item.abandoned or self._wants(item, status):
                continue
            self.log.warning("kernel %s is %s: stopping its work", item.kernel_id, status)
            item.abandoned = True
            await self._abandon(item)

    def _watched(self) -> list[T]:
        """The work the sweep checks."""
        return list(self._tracked.values())

    def _wants(self, item: T, status: KernelStatus | None) -> bool:
        """Whether a kernel in ``status`` (``None``: unknown) still wants ``item``."""
        return True

    async def _abandon(self, item: T) -> None:
        """Stop the work of a kernel that no longer wants it (its end is still reported)."""

    # -- adopting what runs ----------------------------------------------------------------

    @abstractmethod
    async def _adopt(self, reporter: KernelReporter) -> None:
        """At start-up: track the work of live kernels, judge what ended meanwhile, log
        what was found."""

    # -- destroy ---------------------------------------------------------------------------

    async def destroy(self, session: SessionWithKernels) -> None:
        """Stop the session's live kernels: a signal, a kill after ``kill_grace``; their ends.

        The kernels are reported TERMINATING before any signal, so that whoever
        sees them end calls them destroyed (:mod:`drover.backends.stopping`).
        Every signal is fenced by the tick's claim (:mod:`drover.backends.fence`):
        a fenced call signals nothing more and raises
        :class:`~drover.backends.fence.FencedError`. Returns once how each ended
        is committed, so that the handler's transition never hides an exit
        code; raises :class:`~drover.backends.base.BackendError` if that cannot
        be committed yet.
        """
        fence = Fence.of(session, self.reporter)
        await fence.check()
        victims = await self._victims(session, fence)
        await mark_stopping(self.reporter, [v.kernel_id for v in victims])
        await self._stop(victims, fence)
        await self._destroyed(session, victims)

    async def _stop(self, victims: Sequence[T], fence: Fence) -> None:
        """Signal the work, wait for its grace, kill what did not stop and wait again."""
        # Checked (and the claim renewed) even with nothing to signal: the ends
        # committed next are the claim holder's to commit.
        await fence.check()
        if not victims:
            return
        await self._signal(victims, fence, kill=False)
        stuck = await self._wait_ended(victims, self._grace(victims))
        if not stuck:
            return
        await fence.check()
        await self._signal(stuck, fence, kill=True)
        await self._wait_ended(stuck, self.kill_margin)

    def _grace(self, victims: Sequence[T]) -> float:
        """Seconds from the signal to the kill."""
        return self.kill_grace

    async def _wait_ended(self, items: Sequence[T], seconds: float) -> list[T]:
        """Wait until every one of ``items`` ended, or ``seconds`` passed; return the rest."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        live = await self._still_live(items)
        while live and loop.time() < deadline:
            await asyncio.sleep(self.wait_step)
            live = await self._still_live(live)
        return live

    @abstractmethod
    async def _victims(self, session: SessionWithKernels, fence: Fence) -> list[T]:
        """The work of the session's live kernels a destroy stops; work of a kernel this
        backend does not watch (any more) is adopted for it."""

    @abstractmethod
    async def _signal(self, items: Sequence[T], fence: Fence, *, kill: bool) -> None:
        """Ask the work to stop (SIGTERM or the engine's word), or ``kill`` it. Each side
        effect is preceded by ``fence.check_clock()``."""

    @abstractmethod
    async def _still_live(self, items: Sequence[T]) -> list[T]:
        """Those of ``items`` whose work has not ended yet."""

    @abstractmethod
    async def _destroyed(self, session: SessionWithKernels, victims: Sequence[T]) -> None:
        """Commit how the destroyed work ended; raise ``BackendError`` if that cannot be done."""


def _unchanged_dirs(root: Path, since: float) -> set[str]:
    """(worker thread) Names of the directories under ``root`` in which nothing changed
    after ``since`` (epoch).

    A directory's last change is the newest modification time of itself and
    of anything below it (a kernel writing its log keeps it fresh).
    """
    found: set[str] = set()
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return found
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        newest = entry.stat(follow_symlinks=False).st_mtime
        for parent, dirs, files in os.walk(entry.path):
            for name in (*dirs, *files):
                with contextlib.suppress(OSError):
                    newest = max(newest, os.lstat(os.path.join(parent, name)).st_mtime)
            if newest > since:
                break
        if newest <= since:
            found.add(entry.name)
    return found


def _remove_dirs(paths: Sequence[Path]) -> None:
    """(worker thread) Delete each directory tree (one that is already gone is fine)."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
