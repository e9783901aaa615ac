"""The ``local`` backend: each kernel is one real OS process on this machine.

* prepare: create the kernel's working directory under ``data_dir``, run the
  optional ``setup`` command (PULLING while it runs), then PREPARED; a failed
  setup is ERROR with its exit code and the tail of its stderr.
* create: start ``command`` under a supervisor, stdout and stderr to files in
  its working directory; RUNNING once it started, with pids and identities
  in the kernel's ``runtime``. A command that cannot start (not found,
  permission denied, a NUL byte) is ERROR with the OS error.
* exit: TERMINATED for exit code 0, ERROR otherwise, with the command's own
  exit status (a death by signal is the negative signal number).
* destroy: SIGTERM to the kernel's process groups, SIGKILL after
  ``kill_grace``; the kernel is reported ended once none of its processes is left.

Every command (a kernel's, or its setup) runs under its own small supervisor
(``_local_supervisor.py``), which leads a session of its own, waits for the
command, records how it ended in the working directory and cleans up what
the command left behind. Supervisors are not children of an asyncio
transport and outlive the daemon: a restarted daemon adopts what runs, and
reads how the rest ended. Before any spawn an intent (a spawn token) is
fsynced and locked, so a crash never runs a kernel twice (see
``_local_disk.py``). Reports of how things ended are kept until they commit.
A pid is only ever signalled if its ``/proc`` start time and boot id still
match what was recorded: pids get reused. Linux only.

Resources are accounted for by the scheduler, not enforced by the OS.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections import Counter
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
from tenacity import (
    AsyncRetrying,
    before_sleep_log,
    retry_if_exception,
    wait_exponential_jitter,
)

from drover.backends import _local_disk as disk
from drover.backends._local_outcome import (
    AFTER_SETUP,
    RUNNING_EXPECTED,
    kernel_end,
    setup_end,
)
from drover.backends._local_proc import (
    boot_id,
    process_identity,
    session_members,
    signal_members,
)
from drover.backends.base import AgentBackend, AgentInfo, BackendError, KernelReporter, Wake
from drover.model.errors import UnknownKernelError
from drover.model.status import TERMINAL_KERNEL_STATUSES, KernelStatus
from drover.model.values import KernelInfo, KernelReport, SessionWithKernels

__all__ = ["LocalBackend", "process_identity"]

log = logging.getLogger("drover.backends.local")

_K = KernelStatus
#: Kernel statuses in which this backend may own a process or a setup.
_LIVE = frozenset({_K.PREPARING, _K.PULLING, _K.PREPARED, _K.CREATING, _K.RUNNING, _K.TERMINATING})
#: Kernel statuses that still want their command's process.
_WANTS_PROCESS = frozenset({_K.PREPARED, _K.CREATING, _K.RUNNING, _K.TERMINATING})
_STDERR_TAIL = 2000
# Seconds destroy waits past a supervisor's own grace before killing it too.
_KILL_MARGIN = 5.0
_LEGACY_EXIT_FILE = ".drover-exit"


class _Watch:
    """A supervisor this backend watches: of a kernel's command, or of its setup.

    A *legacy* watch (``token`` None) is a kernel started by an older drover
    under an ``sh`` wrapper: watched by the wrapper's identity and its session.
    """

    def __init__(
        self,
        kernel_id: str,
        role: str,
        workdir: Path,
        supervisor: tuple[int, str],
        *,
        own: bool,
        runtime: Mapping[str, Any],
        token: str | None,
        grace: float,
        confirmed: bool,
    ) -> None:
        self.kernel_id = kernel_id
        self.role = role
        self.workdir = workdir
        self.supervisor_pid, self.supervisor_identity = supervisor
        self.own = own
        self.runtime = dict(runtime)
        self.token = token
        self.grace = grace
        self.destroying = False
        self.abandoned = False
        # Its RUNNING report committed (kernels only): an end is reported only
        # after it, or together with it, or a fast exit would be refused.
        self.confirmed = confirmed
        # create() is committing its RUNNING report right now.
        self.reporting = False

    def ended(self) -> bool:
        """Whether the supervisor (and so every process of the command) is gone."""
        if self.own:
            try:
                pid, _status = os.waitpid(self.supervisor_pid, os.WNOHANG)
            except ChildProcessError:
                pass
            else:
                if pid == 0:
                    return False
                self.own = False  # reaped: from now on only /proc can tell
        if process_identity(self.supervisor_pid) == self.supervisor_identity:
            return False
        if self.token is None:
            # A legacy wrapper died at once on SIGTERM; its command may live on.
            return not session_members(self.supervisor_pid)
        return True

    def running_report(self) -> KernelReport:
        """The kernel's RUNNING report, with its runtime."""
        return KernelReport(
            self.kernel_id, _K.RUNNING, expected=RUNNING_EXPECTED, runtime=self.runtime
        )


@attrs.frozen
class _Attempt:
    """What the worker thread found or did for one command about to start.

    ``kind``: ``adopt`` (a live supervisor of an earlier spawn), ``ended``
    (an earlier spawn ended; ``spawn.exit`` says how), ``lost`` (an earlier
    spawn may have run and left no record: never run again), ``spawned``
    (a new supervisor, handshake pending) or ``failed`` (``message``).
    """

    kind: str
    spawn: disk.DiskSpawn | None = None
    token: str = ""
    pid: int = 0
    handshake_fd: int = -1
    message: str = ""


@attrs.frozen
class _Command:
    """One command to start: where, what, and with which environment and logs."""

    kernel_id: str
    role: str
    workdir: Path
    argv: list[str]
    cwd: Path
    env: dict[str, str]
    stdout: Path
    stderr: Path


class LocalBackend(AgentBackend):
    """Kernels as local processes; see the module docstring and docs/daemon.md."""

    def __init__(
        self,
        agents: Sequence[AgentInfo],
        data_dir: str | os.PathLike[str],
        *,
        kill_grace: float = 10.0,
        poll_interval: float = 0.05,
        sweep_interval: float = 1.0,
        start_timeout: float = 30.0,
        report_backoff_max: float = 5.0,
    ) -> None:
        self._agents = list(agents)
        self.data_dir = Path(data_dir).resolve()
        self.kill_grace = kill_grace
        self.poll_interval = poll_interval
        self.sweep_interval = sweep_interval
        self.start_timeout = start_timeout
        self.report_backoff_max = report_backoff_max
        self.reporter: KernelReporter | None = None
        # Called after reports applied, so the daemon wakes promotion handlers.
        self._wake: Wake = lambda: None
        self._kernels: dict[str, _Watch] = {}
        self._setups: dict[str, _Watch] = {}
        # Kernels being started or prepared right now (one attempt at a time).
        self._busy: set[str] = set()
        # Kernels whose end was seen and whose reports are being built.
        self._ending: set[str] = set()
        # Reports that must commit (ends, setup results), kept until they do.
        self._unreported: dict[str, list[KernelReport]] = {}
        self._pending = asyncio.Event()
        # Set whenever the monitor has processed ends (destroy waits on it).
        self._ends = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        # Supervisors that failed to start their command: reaped when they exit.
        self._reap: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = False

    def agents(self) -> Sequence[AgentInfo]:
        """The configured agents (by default, this host)."""
        return list(self._agents)

    # -- lifecycle of the backend itself ------------------------------------------

    async def start(self, reporter: KernelReporter, wake: Wake) -> None:
        """Pick up where the last daemon left off, then start watching.

        For every kernel of our agents that may own a process: a live
        supervisor is adopted (and reported RUNNING if that report never
        committed); a command that ended meanwhile is judged from its exit
        record like any other end; one that left no record is ``lost``
        (ERROR), never run again; a setup that was interrupted is adopted, or
        its preparation restarted.
        """
        self.reporter = reporter
        self._wake = wake
        await asyncio.to_thread(self.data_dir.mkdir, parents=True, exist_ok=True)
        ours = {a.id for a in self._agents}
        kernels = [k for k in await reporter.kernels_in(_LIVE) if k.agent_id in ours]
        found = await asyncio.to_thread(lambda: [self._survey(k) for k in kernels])
        counts: Counter[str] = Counter()
        now: list[KernelReport] = []
        for kernel, (kernel_spawn, setup_spawn) in zip(kernels, found, strict=True):
            outcome = self._resume(kernel, kernel_spawn, setup_spawn, now)
            counts[outcome] += 1
        adopted = [w for w in self._kernels.values() if not w.confirmed]
        for w in adopted:
            w.reporting = True
        try:
            await self._report(*now)
        except Exception:
            log.exception("local backend: start-up reports failed; they will be retried")
            # An adopted kernel's RUNNING report is sent again with its end, or
            # by create(); every other report is queued as it is.
            self._queue(*(r for r in now if r.kernel_id not in self._kernels))
        else:
            for w in adopted:
                w.confirmed = True
        finally:
            for w in adopted:
                w.reporting = False
        self._loops = [
            asyncio.create_task(self._watch(), name="drover-local-monitor"),
            asyncio.create_task(self._flush_forever(), name="drover-local-reports"),
        ]
        if self._unreported:
            self._pending.set()
        log.info(
            "local backend started: adopted=%d ended=%d lost=%d restarted=%d",
            counts["adopted"],
            counts["ended"],
            counts["lost"],
            counts["restarted"],
        )

    def _survey(self, kernel: KernelInfo) -> tuple[disk.DiskSpawn | None, disk.DiskSpawn | None]:
        """(worker thread) The kernel's spawns on disk; leftovers of dead supervisors killed."""
        workdir = self._workdir(kernel)
        spawns = (disk.inspect(workdir, "kernel"), disk.inspect(workdir, "setup"))
        for role, spawn in zip(("kernel", "setup"), spawns, strict=True):
            if spawn is not None and not spawn.alive and spawn.exit is None and spawn.started:
                disk.kill_supervised(workdir, role, spawn)
        return spawns

    def _resume(
        self,
        kernel: KernelInfo,
        spawn: disk.DiskSpawn | None,
        setup: disk.DiskSpawn | None,
        reports: list[KernelReport],
    ) -> str:
        """Decide what to do with one kernel at start-up; return the word for the log."""
        workdir = self._workdir(kernel)
        runtime = kernel.runtime or {}
        if kernel.status in (_K.PREPARING, _K.PULLING):
            if setup is not None and setup.alive and setup.supervisor is not None:
                self._setups[kernel.id] = self._watch_of(kernel.id, "setup", workdir, setup)
                return "adopted"
            if setup is not None and setup.exit is not None:
                tail = disk.read_tail(workdir / "setup.stderr.log", _STDERR_TAIL)
                reports.append(setup_end(kernel.id, setup.exit, destroying=False, stderr_tail=tail))
                return "ended"
            self._spawn_task(self._prepare_kernel(kernel.session_id, kernel))
            return "restarted"
        if kernel.status == _K.PREPARED:
            # Its session is PREPARED too: start-sessions calls create(), which
            # adopts what was started (reporting RUNNING now would leave the
            # session where no handler looks for it).
            return "left to start-sessions"
        if kernel.status == _K.CREATING:
            if spawn is None or (not spawn.started and not spawn.alive and spawn.this_boot):
                return "never started"
            reports.extend(self._settled(kernel.id, workdir, spawn, own=False))
            return "adopted" if spawn.alive else "ended" if spawn.exit is not None else "lost"
        # RUNNING or TERMINATING: its RUNNING report committed.
        if runtime.get("token") is None and isinstance(runtime.get("pid"), int):
            return self._resume_legacy(kernel, reports)
        if spawn is None or spawn.token != runtime.get("token"):
            spawn = None
        if spawn is not None and spawn.alive and spawn.supervisor is not None:
            watch = self._watch_of(kernel.id, "kernel", workdir, spawn, confirmed=True)
            self._kernels[kernel.id] = watch
            return "adopted"
        record = spawn.exit if spawn is not None else None
        reports.append(
            kernel_end(kernel.id, record, destroying=False, runtime=runtime, lost=_lost(spawn))
        )
        return "ended" if record is not None else "lost"

    def _resume_legacy(self, kernel: KernelInfo, reports: list[KernelReport]) -> str:
        runtime = kernel.runtime or {}
        pid, identity = runtime["pid"], runtime.get("identity")
        workdir = Path(runtime.get("workdir", self._workdir(kernel)))
        if isinstance(identity, str) and process_identity(pid) == identity:
            self._kernels[kernel.id] = _Watch(
                kernel.id, "kernel", workdir, (pid, identity), own=False, runtime=runtime,
                token=None, grace=self.kill_grace, confirmed=True,
            )  # fmt: skip
            return "adopted"
        record = _legacy_exit(workdir)
        reports.append(
            kernel_end(kernel.id, record, destroying=False, runtime=runtime, lost=_lost(None))
        )
        return "ended" if record is not None else "lost"

    async def stop(self, grace: float = 5.0) -> None:
        """Stop watching. Kernels and setups keep running, to be adopted on restart.

        Reports still waiting for the database get one last try; whatever
        does not commit is read again from the exit records at the next
        start. Tasks end on their own; stragglers past ``grace`` seconds are
        cancelled.
        """
        if self._unreported and self.reporter is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._flush(), timeout=min(grace, 2.0))
        self._stopping = True
        self._pending.set()
        tasks = [*self._tasks, *self._loops]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self._loops = []

    async def _report(self, *reports: KernelReport) -> list[bool]:
        """Report now; the caller handles a failure."""
        assert self.reporter is not None, "LocalBackend.start() was not called"
        if not reports:
            return []
        applied = await self.reporter.report_kernel_statuses(list(reports))
        self._wake()
        return applied

    def _spawn_task(self, coro: Coroutine[Any, Any, None]) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _workdir(self, kernel: KernelInfo) -> Path:
        return self.data_dir / "kernels" / kernel.id

    def _watch_of(
        self,
        kernel_id: str,
        role: str,
        workdir: Path,
        spawn: disk.DiskSpawn,
        *,
        own: bool = False,
        confirmed: bool = False,
    ) -> _Watch:
        assert spawn.supervisor is not None
        return _Watch(
            kernel_id, role, workdir, spawn.supervisor, own=own, confirmed=confirmed,
            runtime=_runtime(workdir, spawn.state or {}, role), token=spawn.token,
            grace=float((spawn.state or {}).get("grace", self.kill_grace)),
        )  # fmt: skip

    def _settled(
        self, kernel_id: str, workdir: Path, spawn: disk.DiskSpawn, *, own: bool
    ) -> list[KernelReport]:
        """Reports for a kernel's spawn found on disk; a live one is watched from now on."""
        runtime = _runtime(workdir, spawn.state or {}, "kernel")
        if spawn.alive:
            if spawn.supervisor is None:
                log.error("kernel %s: its supervisor lives but recorded nothing", kernel_id)
                return []
            watch = self._watch_of(kernel_id, "kernel", workdir, spawn, own=own)
            self._kernels[kernel_id] = watch
            return [watch.running_report()]
        end = kernel_end(
            kernel_id, spawn.exit, destroying=False, runtime=runtime, lost=_lost(spawn),
            unstarted=True,
        )  # fmt: skip
        if end.status == _K.ERROR and end.exit_code is None:
            return [end]  # it never ran: no RUNNING in its history
        running = KernelReport(kernel_id, _K.RUNNING, expected=RUNNING_EXPECTED, runtime=runtime)
        return [running, end]

    # -- starting commands ----------------------------------------------------------

    def _attempt(self, command: _Command) -> _Attempt:
        """(worker thread) Adopt or judge an earlier spawn of the command, or spawn it."""
        command.workdir.mkdir(parents=True, exist_ok=True)
        earlier = disk.inspect(command.workdir, command.role)
        if earlier is not None:
            if earlier.alive:
                return _Attempt("adopt", earlier)
            if earlier.exit is not None:
                return _Attempt("ended", earlier)
            if earlier.started or not earlier.this_boot:
                disk.kill_supervised(command.workdir, command.role, earlier)
                return _Attempt("lost", earlier)
            # An intent whose supervisor never ran: the command never started.
        token = disk.new_token()
        try:
            pid, fd = disk.spawn_supervisor(
                command.workdir, command.role, token, command=command.argv, cwd=command.cwd,
                env=command.env, grace=self.kill_grace, stdout=command.stdout,
                stderr=command.stderr,
            )  # fmt: skip
        except disk.SupervisorAliveError:
            again = disk.inspect(command.workdir, command.role)
            return _Attempt("adopt", again) if again is not None else _Attempt("failed")
        except (OSError, ValueError) as error:
            return _Attempt("failed", message=f"cannot start its supervisor: {error}")
        return _Attempt("spawned", token=token, pid=pid, handshake_fd=fd)

    async def _start(self, commands: Sequence[_Command]) -> list[_Attempt]:
        """Adopt or spawn each command; wait for the new supervisors' handshakes.

        A spawned attempt comes back as ``adopt`` with the supervisor's state
        (the command started), as ``ended`` (it could not start), or as
        ``failed`` (the supervisor never answered; it was killed).
        """
        attempts = await asyncio.to_thread(lambda: [self._attempt(c) for c in commands])
        answers = await asyncio.gather(
            *(
                _handshake(a.handshake_fd, self.start_timeout)
                for a in attempts
                if a.kind == "spawned"
            )
        )
        answered = iter(answers)
        results: list[_Attempt] = []
        for command, attempt in zip(commands, attempts, strict=True):
            if attempt.kind != "spawned":
                results.append(attempt)
                continue
            record = next(answered)
            results.append(await self._answered(command, attempt, record))
        return results

    async def _answered(
        self, command: _Command, attempt: _Attempt, record: dict[str, Any] | None
    ) -> _Attempt:
        if record is not None and record.get("token") == attempt.token:
            own = disk.DiskSpawn(attempt.token, boot_id(), True, record, None)
            if "pid" in record:
                return attrs.evolve(attempt, kind="adopt", spawn=own)
            self._reap.add(attempt.pid)  # it exits right after answering
            ended = disk.DiskSpawn(attempt.token, boot_id(), False, None, record)
            return attrs.evolve(attempt, kind="ended", spawn=ended)
        log.error("kernel %s: its supervisor did not start; killing it", command.kernel_id)
        found = await asyncio.to_thread(disk.inspect, command.workdir, command.role, wait=False)
        if found is not None:
            await asyncio.to_thread(disk.kill_supervised, command.workdir, command.role, found)
        with contextlib.suppress(ProcessLookupError):
            os.kill(attempt.pid, signal.SIGKILL)
        self._reap.add(attempt.pid)
        return attrs.evolve(
            attempt,
            kind="failed",
            message=f"its supervisor did not start within {self.start_timeout:g}s",
        )

    # -- prepare -----------------------------------------------------------------

    async def prepare(self, session: SessionWithKernels) -> None:
        """Start preparing each live kernel in the background."""
        for kernel in session.kernels:
            if kernel.status not in TERMINAL_KERNEL_STATUSES:
                self._spawn_task(self._prepare_kernel(session.id, kernel))

    async def _prepare_kernel(self, session_id: str, kernel: KernelInfo) -> None:
        if kernel.id in self._busy or kernel.id in self._setups:
            return  # being prepared already (a restart, or a repeated call)
        self._busy.add(kernel.id)
        try:
            await self._prepare_now(session_id, kernel)
        except Exception as error:
            log.exception("preparing kernel %s failed", kernel.id)
            message = f"prepare failed: {type(error).__name__}: {error}"
            self._queue(KernelReport(kernel.id, _K.ERROR, expected=AFTER_SETUP, message=message))
        finally:
            self._busy.discard(kernel.id)

    async def _prepare_now(self, session_id: str, kernel: KernelInfo) -> None:
        problem = _spec_problem(kernel.spec)
        if problem:
            self._queue(KernelReport(kernel.id, _K.ERROR, expected=AFTER_SETUP, message=problem))
            return
        workdir = self._workdir(kernel)
        runtime = {"workdir": str(workdir), **_log_paths(workdir)}
        setup = kernel.spec.get("setup")
        live = await asyncio.to_thread(_reset_for_prepare, workdir)
        if live is not None:
            self._setups[kernel.id] = self._watch_of(kernel.id, "setup", workdir, live)
            return
        if not setup:
            self._queue(KernelReport(kernel.id, _K.PREPARED, expected=AFTER_SETUP, runtime=runtime))
            return
        early = frozenset({_K.SCHEDULED, _K.PREPARING})
        try:
            await self._report(KernelReport(kernel.id, _K.PULLING, expected=early, runtime=runtime))
        except Exception as error:  # its end is reported with retries anyway
            log.warning("kernel %s: PULLING not reported: %s", kernel.id, error)
        argv = ["/bin/sh", "-c", setup] if isinstance(setup, str) else [str(a) for a in setup]
        command = _Command(
            kernel.id, "setup", workdir, argv, _cwd(kernel.spec, workdir),
            _env(session_id, kernel), workdir / "setup.stdout.log", workdir / "setup.stderr.log",
        )  # fmt: skip
        (attempt,) = await self._start([command])
        if attempt.kind == "adopt" and attempt.spawn is not None:
            own = attempt.pid != 0
            self._setups[kernel.id] = self._watch_of(
                kernel.id, "setup", workdir, attempt.spawn, own=own
            )
            return
        if attempt.kind == "ended" and attempt.spawn is not None:
            tail = await asyncio.to_thread(disk.read_tail, command.stderr, _STDERR_TAIL)
            self._queue(
                setup_end(kernel.id, attempt.spawn.exit, destroying=False, stderr_tail=tail)
            )
            return
        message = f"setup failed to start: {attempt.message or 'lost'}"
        self._queue(KernelReport(kernel.id, _K.ERROR, expected=AFTER_SETUP, message=message))

    # -- create ------------------------------------------------------------------

    async def create(self, session: SessionWithKernels) -> None:
        """Start each prepared kernel's command (or adopt it) and report it RUNNING.

        A kernel whose command was already started, by this daemon or by one
        that crashed before its RUNNING report committed, is adopted, never
        started twice.
        """
        reports: list[KernelReport] = []
        commands: list[_Command] = []
        for kernel in session.kernels:
            if kernel.status not in RUNNING_EXPECTED:
                continue
            watch = self._kernels.get(kernel.id)
            if watch is not None:
                if not watch.confirmed and not watch.reporting:
                    reports.append(watch.running_report())
                continue
            if kernel.id in self._busy or kernel.id in self._ending:
                continue
            if kernel.id in self._unreported:
                continue  # it ended; the report is on its way
            problem = _spec_problem(kernel.spec)
            if problem:
                reports.append(
                    KernelReport(kernel.id, _K.ERROR, expected=RUNNING_EXPECTED, message=problem)
                )
                continue
            workdir = self._workdir(kernel)
            logs = _log_paths(workdir)
            argv = [str(a) for a in kernel.spec["command"]]
            cwd, env = _cwd(kernel.spec, workdir), _env(session.id, kernel)
            out, err = Path(logs["stdout"]), Path(logs["stderr"])
            commands.append(_Command(kernel.id, "kernel", workdir, argv, cwd, env, out, err))
        self._busy.update(c.kernel_id for c in commands)
        try:
            attempts = await self._start(commands)
        finally:
            self._busy.difference_update(c.kernel_id for c in commands)
        for command, attempt in zip(commands, attempts, strict=True):
            reports.extend(self._started(command, attempt))
        watches = [self._kernels[r.kernel_id] for r in reports if r.kernel_id in self._kernels]
        for watch in watches:
            watch.reporting = True
        try:
            applied = await self._report(*reports)
        finally:
            for watch in watches:
                watch.reporting = False
        for report, ok in zip(reports, applied, strict=True):
            watch = self._kernels.get(report.kernel_id)
            if watch is not None and report.status == _K.RUNNING:
                # Applied, or refused because the kernel moved on (terminated,
                # rescheduled) meanwhile: the sweep then kills the process.
                watch.confirmed = True
                if not ok:
                    log.warning("kernel %s: RUNNING not applied", report.kernel_id)

    def _started(self, command: _Command, attempt: _Attempt) -> list[KernelReport]:
        """The reports for one kernel command after ``_start``."""
        kid, spawn = command.kernel_id, attempt.spawn
        if attempt.kind == "failed" or spawn is None:
            return [
                KernelReport(
                    kid,
                    _K.ERROR,
                    expected=RUNNING_EXPECTED,
                    message=f"failed to start: {attempt.message}",
                )
            ]
        return self._settled(kid, command.workdir, spawn, own=attempt.pid != 0)

    # -- watching ends -------------------------------------------------------------

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        next_sweep = loop.time() + self.sweep_interval
        while not self._stopping:
            await asyncio.sleep(self.poll_interval)
            if self._stopping:
                return
            try:
                await self._poll_once()
                if loop.time() >= next_sweep:
                    next_sweep = loop.time() + self.sweep_interval
                    self._reap_failed()
                    await self._kill_abandoned()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("local backend: watching processes failed; will retry")

    def _reap_failed(self) -> None:
        for pid in list(self._reap):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self._reap.discard(pid)

    async def _kill_abandoned(self) -> None:
        """Kill commands and setups whose kernels the coordinator gave up on.

        A kernel that expired back to PENDING, or ended in the database, no
        longer owns its process or setup: without this they would run on as
        orphans while the session is rescheduled.
        """
        assert self.reporter is not None
        watched = list(self._kernels) + list(self._setups)
        if not watched:
            return
        statuses = await self.reporter.kernel_statuses(watched)
        for kernel_id, status in statuses.items():
            for watch, wanted in (
                (self._setups.get(kernel_id), AFTER_SETUP),
                (self._kernels.get(kernel_id), _WANTS_PROCESS),
            ):
                if watch is None or status in wanted or watch.abandoned:
                    continue
                log.warning("kernel %s is %s: killing its %s", kernel_id, status, watch.role)
                watch.abandoned = True
                await asyncio.to_thread(_kill_now, watch)

    async def _poll_once(self) -> None:
        ended = [
            w
            for w in (*self._kernels.values(), *self._setups.values())
            if not w.reporting and w.ended()
        ]
        if not ended:
            return
        for w in ended:
            (self._kernels if w.role == "kernel" else self._setups).pop(w.kernel_id, None)
            self._ending.add(w.kernel_id)
        try:
            records = await asyncio.to_thread(lambda: [_read_end(w) for w in ended])
            for w, (record, tail) in zip(ended, records, strict=True):
                self._queue(*self._end_reports(w, record, tail))
        except BaseException:
            for w in ended:  # try again at the next poll
                (self._kernels if w.role == "kernel" else self._setups)[w.kernel_id] = w
            raise
        finally:
            self._ending.difference_update(w.kernel_id for w in ended)
            self._ends.set()

    def _end_reports(
        self, watch: _Watch, record: Mapping[str, Any] | None, tail: str
    ) -> list[KernelReport]:
        stopped = watch.destroying or watch.abandoned
        if watch.role == "setup":
            return [setup_end(watch.kernel_id, record, destroying=stopped, stderr_tail=tail)]
        end = kernel_end(watch.kernel_id, record, destroying=stopped, runtime=watch.runtime)
        return [end] if watch.confirmed else [watch.running_report(), end]

    # -- reports that must commit -------------------------------------------------------

    def _queue(self, *reports: KernelReport) -> None:
        for report in reports:
            self._unreported.setdefault(report.kernel_id, []).append(report)
        if reports:
            self._pending.set()

    async def _flush_forever(self) -> None:
        """Commit queued reports; on failure retry with backoff, keeping every report."""
        retrying = AsyncRetrying(
            retry=retry_if_exception(lambda _e: not self._stopping),
            wait=wait_exponential_jitter(multiplier=0.1, max=self.report_backoff_max, jitter=0.1),
            before_sleep=before_sleep_log(log, logging.WARNING),
            reraise=True,
        )
        while not self._stopping:
            await self._pending.wait()
            self._pending.clear()
            if self._stopping:
                return
            try:
                async for attempt in retrying:
                    with attempt:
                        await self._flush()
            except Exception:
                return  # only when stopping: the exit records are read again at start-up

    async def _flush(self, only: Iterable[str] | None = None) -> None:
        """Report the queued reports (of ``only`` these kernels); drop them once committed."""
        assert self.reporter is not None
        wanted = None if only is None else set(only)
        async with self._flush_lock:
            batch = {
                kid: list(reports)
                for kid, reports in self._unreported.items()
                if wanted is None or kid in wanted
            }
            if not batch:
                return
            try:
                await self.reporter.report_kernel_statuses(
                    [r for reports in batch.values() for r in reports]
                )
            except UnknownKernelError as error:
                # A kernel that no longer exists can never take its report.
                log.error("local backend: dropping reports of unknown kernel %s", error.kernel_id)
                self._unreported.pop(error.kernel_id, None)
                raise
            for kid, sent in batch.items():
                queued = self._unreported.get(kid)
                if queued is not None:
                    del queued[: len(sent)]
                    if not queued:
                        del self._unreported[kid]
        self._wake()

    # -- destroy -------------------------------------------------------------------

    async def destroy(self, session: SessionWithKernels) -> None:
        """Stop each live kernel: SIGTERM to its process groups, SIGKILL after the grace.

        Returns once no process of any of them is left and how each ended is
        committed, so that the handler's transition never hides an exit code;
        raises :class:`BackendError` if that cannot be committed yet.
        """
        victims: list[_Watch] = []
        for kernel in session.kernels:
            setup = self._setups.get(kernel.id)
            watch = self._kernels.get(kernel.id)
            if watch is None and kernel.status not in TERMINAL_KERNEL_STATUSES:
                watch = await self._adopt_for_destroy(kernel)
            for victim in (setup, watch):
                if victim is not None:
                    victim.destroying = True
                    _terminate(victim)
                    victims.append(victim)
        grace = max((v.grace for v in victims), default=0.0)
        await self._wait_for_ends(victims, grace + _KILL_MARGIN)
        stuck = [v for v in victims if self._still_watched(v)]
        for victim in stuck:
            log.warning("kernel %s: its %s did not stop: SIGKILL", victim.kernel_id, victim.role)
            await asyncio.to_thread(_kill_now, victim)
        await self._wait_for_ends(stuck, _KILL_MARGIN)
        await self._poll_once()
        ids = {k.id for k in session.kernels}
        if ids & self._unreported.keys():
            try:
                await self._flush(only=ids)
            except Exception as error:
                raise BackendError(f"could not record how the kernels ended: {error}") from error

    async def _wait_for_ends(self, watches: Sequence[_Watch], seconds: float) -> None:
        """Wait until the monitor has seen every one of ``watches`` end, or ``seconds`` pass."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while True:
                    self._ends.clear()
                    if not any(self._still_watched(w) for w in watches):
                        return
                    await self._ends.wait()

    def _still_watched(self, watch: _Watch) -> bool:
        table = self._kernels if watch.role == "kernel" else self._setups
        return table.get(watch.kernel_id) is watch or watch.kernel_id in self._ending

    async def _adopt_for_destroy(self, kernel: KernelInfo) -> _Watch | None:
        """Watch a kernel's live command that this daemon does not watch yet."""
        runtime = kernel.runtime or {}
        if runtime.get("token") is None and "pid" in runtime:
            pid, identity = runtime.get("pid"), runtime.get("identity")
            if not isinstance(pid, int) or not isinstance(identity, str):
                return None
            if process_identity(pid) != identity:
                return None
            self._resume_legacy(kernel, [])
            return self._kernels.get(kernel.id)
        workdir = self._workdir(kernel)
        spawn = await asyncio.to_thread(disk.inspect, workdir, "kernel", wait=False)
        if spawn is None or not spawn.alive or spawn.supervisor is None:
            return None
        # A kernel never reported RUNNING (a crash came first) has no token in
        # the database; its live spawn on disk is the current attempt's.
        if runtime.get("token") not in (None, spawn.token):
            return None
        confirmed = kernel.status not in RUNNING_EXPECTED
        watch = self._watch_of(kernel.id, "kernel", workdir, spawn, confirmed=confirmed)
        self._kernels[kernel.id] = watch
        return watch


async def _handshake(fd: int, seconds: float) -> dict[str, Any] | None:
    """The supervisor's first line on its pipe, or ``None`` (it died, or said nothing in time)."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    done: asyncio.Future[bytes] = loop.create_future()
    chunks: list[bytes] = []

    def readable() -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        chunks.append(data)
        if (not data or b"\n" in data) and not done.done():
            done.set_result(b"".join(chunks))

    loop.add_reader(fd, readable)
    try:
        line = await asyncio.wait_for(done, seconds)
    except TimeoutError:
        return None
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    try:
        record = json.loads(line.split(b"\n", 1)[0] or b"null")
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _terminate(watch: _Watch) -> None:
    """Ask the command to stop: its supervisor does SIGTERM, the grace, then SIGKILL."""
    if process_identity(watch.supervisor_pid) != watch.supervisor_identity:
        return
    with contextlib.suppress(ProcessLookupError):
        if watch.token is None:
            # A legacy wrapper: signal its session's groups; the wrapper too.
            signal_members(watch.supervisor_pid, signal.SIGTERM)
            os.killpg(watch.supervisor_pid, signal.SIGTERM)
        else:
            os.kill(watch.supervisor_pid, signal.SIGTERM)


def _kill_now(watch: _Watch) -> None:
    """(worker thread) SIGKILL every process of the command and its supervisor."""
    alive = process_identity(watch.supervisor_pid) == watch.supervisor_identity
    if alive or watch.token is None:
        signal_members(watch.supervisor_pid, signal.SIGKILL)
    if alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(watch.supervisor_pid, signal.SIGKILL)


def _read_end(watch: _Watch) -> tuple[Mapping[str, Any] | None, str]:
    """(worker thread) How a watched command ended, and the tail of a setup's stderr."""
    tail = ""
    if watch.role == "setup":
        tail = disk.read_tail(watch.workdir / "setup.stderr.log", _STDERR_TAIL)
    if watch.token is None:
        return _legacy_exit(watch.workdir), tail
    spawn = disk.inspect(watch.workdir, watch.role, wait=False)
    if spawn is None or spawn.token != watch.token:
        return None, tail
    if spawn.exit is None and spawn.started:
        disk.kill_supervised(watch.workdir, watch.role, spawn)  # its supervisor was killed
    return spawn.exit, tail


def _reset_for_prepare(workdir: Path) -> disk.DiskSpawn | None:
    """(worker thread) Clear an earlier attempt's spawns; return a setup still running."""
    workdir.mkdir(parents=True, exist_ok=True)
    earlier = disk.inspect(workdir, "kernel", wait=False)
    if earlier is not None:
        if earlier.alive or earlier.started:
            disk.kill_supervised(workdir, "kernel", earlier)
        disk.remove(workdir, "kernel")
    setup = disk.inspect(workdir, "setup")
    if setup is not None and setup.alive and setup.supervisor is not None:
        return setup
    if setup is not None:
        if setup.started:
            disk.kill_supervised(workdir, "setup", setup)
        disk.remove(workdir, "setup")
    return None


def _legacy_exit(workdir: Path) -> dict[str, Any] | None:
    try:
        return {"exit_code": int((workdir / _LEGACY_EXIT_FILE).read_text().strip())}
    except (OSError, ValueError):
        return None


def _lost(spawn: disk.DiskSpawn | None) -> str:
    if spawn is not None and not spawn.this_boot:
        return "the machine restarted after it was started; it is not run again"
    return "its process is gone and left no exit status; it is not run again"


def _runtime(workdir: Path, state: Mapping[str, Any], role: str) -> dict[str, Any]:
    """What the database keeps about a kernel's process (the ``runtime`` column)."""
    runtime: dict[str, Any] = {"workdir": str(workdir), **_log_paths(workdir)}
    if role == "setup":
        return runtime
    for key in ("pid", "identity", "supervisor_pid", "supervisor_identity", "token"):
        if key in state:
            runtime[key] = state[key]
    return runtime


def _log_paths(workdir: Path) -> dict[str, str]:
    return {"stdout": str(workdir / "stdout.log"), "stderr": str(workdir / "stderr.log")}


def _cwd(spec: Mapping[str, Any], workdir: Path) -> Path:
    cwd = spec.get("cwd")
    return workdir / cwd if isinstance(cwd, str) and cwd else workdir


def _env(session_id: str, kernel: KernelInfo) -> dict[str, str]:
    env = dict(os.environ)
    extra = kernel.spec.get("env") or {}
    env.update({str(k): str(v) for k, v in extra.items()})
    env["DROVER_SESSION_ID"] = session_id
    env["DROVER_KERNEL_ID"] = kernel.id
    return env


def _nul(values: Iterable[Any]) -> int | None:
    """The 1-based position of the first value whose text holds a NUL byte."""
    for index, value in enumerate(values, start=1):
        if "\0" in str(value):
            return index
    return None


def _spec_problem(spec: Mapping[str, Any]) -> str | None:
    """Why a kernel spec cannot run locally, or ``None``."""
    command = spec.get("command")
    if (
        not isinstance(command, list)
        or not command
        or not all(isinstance(a, str | int | float) for a in command)
    ):
        return "invalid kernel spec: 'command' must be a non-empty list of arguments"
    env = spec.get("env")
    if env is not None and not isinstance(env, Mapping):
        return "invalid kernel spec: 'env' must be a table of NAME = value"
    setup = spec.get("setup")
    if setup is not None and not isinstance(setup, str | list):
        return "invalid kernel spec: 'setup' must be a shell command string or an argument list"
    # No program can receive a NUL byte: the OS takes arguments as C strings.
    at = _nul(command)
    if at is not None:
        return f"failed to start: argument {at} of the command contains a NUL byte"
    if env and (_nul(env) is not None or _nul(env.values()) is not None):
        return "failed to start: the environment contains a NUL byte"
    if env and any("=" in str(name) or not str(name) for name in env):
        return "failed to start: an environment variable name is empty or contains '='"
    if setup is not None and _nul([setup] if isinstance(setup, str) else setup) is not None:
        return "failed to start: the setup command contains a NUL byte"
    if _nul([spec.get("cwd") or ""]) is not None:
        return "failed to start: the working directory contains a NUL byte"
    return None
