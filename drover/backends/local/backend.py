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
  A kernel whose command already ended and was not reported yet (by another
  coordinator, or by a daemon that died) is reported from its exit record, so
  its exit code is never lost.

Every command (a kernel's, or its setup) runs under its own small supervisor
(``_supervisor.py``), which leads a session of its own, waits for the
command, records how it ended in the working directory and cleans up what
the command left behind. Supervisors are not children of an asyncio
transport and outlive the daemon: a restarted daemon adopts what runs, and
reads how the rest ended. Before any spawn an intent (a spawn token) is
fsynced and locked, so a crash never runs a kernel twice (see
``_disk.py``). Reports of how things ended are kept until they commit.
A pid is only ever signalled if its ``/proc`` start time and boot id still
match what was recorded: pids get reused. Linux only.

Resources are accounted for by the scheduler, not enforced by the OS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections import Counter
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from drover.backends.base import AgentBackend, AgentInfo, BackendError, KernelReporter, Wake
from drover.backends.devices import DeviceProblem, Devices
from drover.backends.fence import Fence, FencedError
from drover.backends.local import _disk as disk
from drover.backends.local._outcome import (
    AFTER_SETUP,
    RUNNING_EXPECTED,
    kernel_ends,
    setup_ends,
)
from drover.backends.local._proc import boot_id, process_identity
from drover.backends.local._reports import ReportQueue
from drover.backends.local._spec import cwd_of, env_of, log_paths, spec_problem
from drover.backends.local._watch import (
    Attempt,
    Check,
    Command,
    Watch,
    handshake,
    kernel_port,
    kill_now,
    legacy_exit,
    lost_reason,
    read_end,
    record_devices,
    recorded_devices,
    reset_for_prepare,
    runtime_of,
    terminate,
)
from drover.backends.stopping import mark_stopping
from drover.kinds.sessions.values import (
    TERMINAL_KERNEL_STATUSES,
    KernelInfo,
    KernelReport,
    KernelStatus,
    SessionWithKernels,
)

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


def _unchecked() -> None:
    """A fence check that always passes (the batch was checked as a whole)."""


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
        device_variables: Mapping[str, str] | None = None,
    ) -> None:
        self._agents = list(agents)
        self.devices = Devices(self._agents, device_variables or {})
        self.data_dir = Path(data_dir).resolve()
        self.kill_grace = kill_grace
        self.poll_interval = poll_interval
        self.sweep_interval = sweep_interval
        self.start_timeout = start_timeout
        self.report_backoff_max = report_backoff_max
        self.reporter: KernelReporter | None = None
        # Called after reports applied, so the daemon wakes promotion handlers.
        self._wake: Wake = lambda: None
        self._kernels: dict[str, Watch] = {}
        self._setups: dict[str, Watch] = {}
        # Kernels being started or prepared right now (one attempt at a time).
        self._busy: set[str] = set()
        # Kernels whose end was seen and whose reports are being built.
        self._ending: set[str] = set()
        # Reports that must commit (ends, setup results), kept until they do.
        self._reports = ReportQueue(lambda: self.reporter, lambda: self._wake, report_backoff_max)
        # Set whenever the monitor has processed ends (destroy waits on it).
        self._ends = asyncio.Event()
        # Supervisors that failed to start their command: reaped when they exit.
        self._reap: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = False

    def agents(self) -> Sequence[AgentInfo]:
        """The configured agents (by default, this host)."""
        return list(self._agents)

    async def prune_files(self, unchanged_since: float) -> int:
        """Delete ``kernels/<id>/`` (logs, working directory) of ended kernels left unchanged.

        A directory goes when its kernel is in a terminal status and no file
        in it changed after ``unchanged_since``; a live kernel's, or one the
        database does not know, stays.
        """
        if self.reporter is None:
            return 0
        root = self.data_dir / "kernels"
        quiet = await asyncio.to_thread(disk.unchanged_dirs, root, unchanged_since)
        if not quiet:
            return 0
        statuses = await self.reporter.kernel_statuses(sorted(quiet))
        ended = [k for k, status in statuses.items() if status in TERMINAL_KERNEL_STATUSES]
        await asyncio.to_thread(disk.remove_dirs, [root / k for k in ended])
        return len(ended)

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
            self._reports.add(r for r in now if r.kernel_id not in self._kernels)
        else:
            for w in adopted:
                w.confirmed = True
        finally:
            for w in adopted:
                w.reporting = False
        self._loops = [
            asyncio.create_task(self._watch(), name="drover-local-monitor"),
            asyncio.create_task(self._reports.run(), name="drover-local-reports"),
        ]
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
                reports.extend(
                    setup_ends(kernel.id, setup.exit, destroying=False, stderr_tail=tail)
                )
                return "ended"
            # No tick asked for it: a restart carries on an interrupted preparation.
            unfenced = Fence(kernel.session_id)
            self._spawn_task(self._prepare_kernel(kernel.session_id, kernel, unfenced))
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
        reports.extend(
            kernel_ends(
                kernel.id, record, destroying=False, runtime=runtime, lost=lost_reason(spawn)
            )
        )
        return "ended" if record is not None else "lost"

    def _resume_legacy(self, kernel: KernelInfo, reports: list[KernelReport]) -> str:
        runtime = kernel.runtime or {}
        pid, identity = runtime["pid"], runtime.get("identity")
        workdir = Path(runtime.get("workdir", self._workdir(kernel)))
        if isinstance(identity, str) and process_identity(pid) == identity:
            self._kernels[kernel.id] = Watch(
                kernel.id, "kernel", workdir, (pid, identity), own=False, runtime=runtime,
                token=None, grace=self.kill_grace, confirmed=True,
            )  # fmt: skip
            return "adopted"
        record = legacy_exit(workdir)
        reports.extend(
            kernel_ends(
                kernel.id, record, destroying=False, runtime=runtime, lost=lost_reason(None)
            )
        )
        return "ended" if record is not None else "lost"

    async def stop(self, grace: float = 5.0) -> None:
        """Stop watching. Kernels and setups keep running, to be adopted on restart.

        Reports still waiting for the database get one last try; whatever
        does not commit is read again from the exit records at the next
        start. Tasks end on their own; stragglers past ``grace`` seconds are
        cancelled.
        """
        if self._reports and self.reporter is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._reports.flush(), timeout=min(grace, 2.0))
        self._stopping = True
        self._reports.stop()
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
    ) -> Watch:
        assert spawn.supervisor is not None
        return Watch(
            kernel_id, role, workdir, spawn.supervisor, own=own, confirmed=confirmed,
            runtime=runtime_of(workdir, spawn.state or {}, role), token=spawn.token,
            grace=float((spawn.state or {}).get("grace", self.kill_grace)),
        )  # fmt: skip

    def _settled(
        self, kernel_id: str, workdir: Path, spawn: disk.DiskSpawn, *, own: bool
    ) -> list[KernelReport]:
        """Reports for a kernel's spawn found on disk; a live one is watched from now on."""
        if spawn.alive:
            if spawn.supervisor is None:
                log.error("kernel %s: its supervisor lives but recorded nothing", kernel_id)
                return []
            watch = self._watch_of(kernel_id, "kernel", workdir, spawn, own=own)
            self._kernels[kernel_id] = watch
            return [watch.running_report()]
        return self._ended(kernel_id, workdir, spawn, destroying=False, unstarted=True)

    def _ended(
        self,
        kernel_id: str,
        workdir: Path,
        spawn: disk.DiskSpawn,
        *,
        destroying: bool,
        unstarted: bool,
    ) -> list[KernelReport]:
        """Reports for a kernel's spawn found ended on disk: how it ended, from its exit record.

        ``unstarted``: the kernel's RUNNING never committed (it is PREPARED or
        CREATING in the database). A command that ran then gets its RUNNING
        first, so its history says it ran; one that never ran (it could not
        start, or nobody knows how it ended) goes straight to its end.
        """
        runtime = runtime_of(workdir, spawn.state or {}, "kernel")
        ends = kernel_ends(
            kernel_id, spawn.exit, destroying=destroying, runtime=runtime,
            lost=lost_reason(spawn), unstarted=unstarted,
        )  # fmt: skip
        if not unstarted or ends[0].exit_code is None:
            return ends
        running = KernelReport(kernel_id, _K.RUNNING, expected=RUNNING_EXPECTED, runtime=runtime)
        return [running, *ends]

    # -- starting commands ----------------------------------------------------------

    def _attempt(self, command: Command, check: Check) -> Attempt:
        """(worker thread) Adopt or judge an earlier spawn of the command, or spawn it.

        ``check`` (the call's fence) runs right before anything is killed or spawned.
        """
        command.workdir.mkdir(parents=True, exist_ok=True)
        earlier = disk.inspect(command.workdir, command.role)
        if earlier is not None:
            if earlier.alive:
                return Attempt("adopt", earlier)
            if earlier.exit is not None:
                return Attempt("ended", earlier)
            if earlier.started or not earlier.this_boot:
                check()
                disk.kill_supervised(command.workdir, command.role, earlier)
                return Attempt("lost", earlier)
            # An intent whose supervisor never ran: the command never started.
        token = disk.new_token()
        check()
        try:
            pid, fd = disk.spawn_supervisor(
                command.workdir, command.role, token, command=command.argv, cwd=command.cwd,
                env=command.env, grace=self.kill_grace, stdout=command.stdout,
                stderr=command.stderr,
            )  # fmt: skip
        except disk.SupervisorAliveError:
            again = disk.inspect(command.workdir, command.role)
            return Attempt("adopt", again) if again is not None else Attempt("failed")
        except (OSError, ValueError) as error:
            return Attempt("failed", message=f"cannot start its supervisor: {error}")
        return Attempt("spawned", token=token, pid=pid, handshake_fd=fd)

    async def _start(self, commands: Sequence[Command], fence: Fence) -> list[Attempt]:
        """Adopt or spawn each command; wait for the new supervisors' handshakes.

        A spawned attempt comes back as ``adopt`` with the supervisor's state
        (the command started), as ``ended`` (it could not start), or as
        ``failed`` (the supervisor never answered; it was killed). Raises
        :class:`FencedError`, having spawned nothing, if ``fence`` fails.
        """
        if not commands:
            return []
        await fence.check()
        attempts: list[Attempt] = []

        def attempt_each() -> None:
            # One session's spawns go together: fenced before the first, never half
            # done (a session left with some kernels spawned and none reported RUNNING
            # would be sent back to PENDING, and its spawned kernels run again).
            fence.check_clock()
            for command in commands:
                attempts.append(self._attempt(command, _unchecked))

        await asyncio.to_thread(attempt_each)
        answers = await asyncio.gather(
            *(
                handshake(a.handshake_fd, self.start_timeout)
                for a in attempts
                if a.kind == "spawned"
            )
        )
        answered = iter(answers)
        results: list[Attempt] = []
        for command, attempt in zip(commands, attempts, strict=True):
            if attempt.kind != "spawned":
                results.append(attempt)
                continue
            record = next(answered)
            results.append(await self._answered(command, attempt, record))
        return results

    async def _answered(
        self, command: Command, attempt: Attempt, record: dict[str, Any] | None
    ) -> Attempt:
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
        """Prepare each live kernel: clear what an earlier attempt left, start its setup.

        Returns once every setup was started (the monitor reports how each
        ends), all of it under the tick's claim: a fenced call (the claim
        lapsed or was taken over, e.g. this daemon was paused) kills, removes
        and spawns nothing more and raises :class:`FencedError`.
        """
        fence = Fence.of(session, self.reporter)
        await fence.check()
        kernels = [k for k in session.kernels if k.status not in TERMINAL_KERNEL_STATUSES]
        done = await asyncio.gather(
            *(self._prepare_kernel(session.id, k, fence) for k in kernels), return_exceptions=True
        )
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome

    def _setup_failed(self, kernel_id: str, message: str) -> None:
        self._reports.add(
            [KernelReport(kernel_id, _K.ERROR, expected=AFTER_SETUP, message=message)]
        )

    async def _prepare_kernel(self, session_id: str, kernel: KernelInfo, fence: Fence) -> None:
        if kernel.id in self._busy or kernel.id in self._setups:
            return  # being prepared already (a restart, or a repeated call)
        self._busy.add(kernel.id)
        try:
            await self._prepare_now(session_id, kernel, fence)
        except FencedError:
            raise  # not the kernel's failure: another coordinator may own it now
        except Exception as error:
            log.exception("preparing kernel %s failed", kernel.id)
            message = f"prepare failed: {type(error).__name__}: {error}"
            self._reports.add(
                [KernelReport(kernel.id, _K.ERROR, expected=AFTER_SETUP, message=message)]
            )
        finally:
            self._busy.discard(kernel.id)

    async def _prepare_now(self, session_id: str, kernel: KernelInfo, fence: Fence) -> None:
        problem = spec_problem(kernel.spec)
        if problem:
            self._reports.add(
                [KernelReport(kernel.id, _K.ERROR, expected=AFTER_SETUP, message=problem)]
            )
            return
        workdir = self._workdir(kernel)
        runtime: dict[str, Any] = {"workdir": str(workdir), **log_paths(workdir)}
        devices: dict[str, list[str]] = {}
        if self.devices.wanted(kernel):
            assert self.reporter is not None
            try:
                devices = await self.devices.assign(kernel, self.reporter)
            except DeviceProblem as problem:
                self._setup_failed(kernel.id, str(problem))
                return
            runtime["devices"] = devices
        setup = kernel.spec.get("setup")
        await fence.check()
        earlier = self._kernels.pop(kernel.id, None)
        if earlier is not None:
            # An earlier attempt's command (killed by the reset below): a new
            # attempt must not be taken for it by create().
            earlier.abandoned = True
            if earlier.own:
                self._reap.add(earlier.supervisor_pid)
        live = await asyncio.to_thread(reset_for_prepare, workdir, fence.check_clock)
        if live is None:
            await asyncio.to_thread(record_devices, workdir, devices)
        if live is not None:
            self._setups[kernel.id] = self._watch_of(kernel.id, "setup", workdir, live)
            return
        if not setup:
            self._reports.add(
                [KernelReport(kernel.id, _K.PREPARED, expected=AFTER_SETUP, runtime=runtime)]
            )
            return
        early = frozenset({_K.SCHEDULED, _K.PREPARING})
        try:
            await self._report(KernelReport(kernel.id, _K.PULLING, expected=early, runtime=runtime))
        except Exception as error:  # its end is reported with retries anyway
            log.warning("kernel %s: PULLING not reported: %s", kernel.id, error)
        argv = ["/bin/sh", "-c", setup] if isinstance(setup, str) else [str(a) for a in setup]
        cwd = await asyncio.to_thread(cwd_of, kernel.spec, workdir)
        command = Command(
            kernel.id, "setup", workdir, argv, cwd,
            {**env_of(session_id, kernel), **self.devices.env(devices)},
            workdir / "setup.stdout.log", workdir / "setup.stderr.log",
        )  # fmt: skip
        (attempt,) = await self._start([command], fence)
        if attempt.kind == "adopt" and attempt.spawn is not None:
            own = attempt.pid != 0
            self._setups[kernel.id] = self._watch_of(
                kernel.id, "setup", workdir, attempt.spawn, own=own
            )
            return
        if attempt.kind == "ended" and attempt.spawn is not None:
            tail = await asyncio.to_thread(disk.read_tail, command.stderr, _STDERR_TAIL)
            self._reports.add(
                setup_ends(kernel.id, attempt.spawn.exit, destroying=False, stderr_tail=tail)
            )
            return
        message = f"setup failed to start: {attempt.message or 'lost'}"
        self._reports.add(
            [KernelReport(kernel.id, _K.ERROR, expected=AFTER_SETUP, message=message)]
        )

    # -- create ------------------------------------------------------------------

    async def create(self, session: SessionWithKernels) -> None:
        """Start each prepared kernel's command (or adopt it) and report it RUNNING.

        A kernel whose command was already started, by this daemon or by one
        that crashed before its RUNNING report committed, is adopted, never
        started twice. Spawns are fenced by the tick's claim (see :meth:`prepare`).
        """
        fence = Fence.of(session, self.reporter)
        reports: list[KernelReport] = []
        commands: list[Command] = []
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
            if kernel.id in self._reports:
                continue  # it ended; the report is on its way
            problem = spec_problem(kernel.spec)
            if problem:
                reports.append(
                    KernelReport(kernel.id, _K.ERROR, expected=RUNNING_EXPECTED, message=problem)
                )
                continue
            workdir = self._workdir(kernel)
            logs = log_paths(workdir)
            argv = [str(a) for a in kernel.spec["command"]]
            cwd = await asyncio.to_thread(cwd_of, kernel.spec, workdir)
            env = env_of(session.id, kernel)
            env["PORT"] = str(await asyncio.to_thread(kernel_port, workdir))
            devices = await asyncio.to_thread(recorded_devices, workdir)
            env.update(self.devices.env(devices))
            out, err = Path(logs["stdout"]), Path(logs["stderr"])
            commands.append(Command(kernel.id, "kernel", workdir, argv, cwd, env, out, err))
        self._busy.update(c.kernel_id for c in commands)
        try:
            attempts = await self._start(commands, fence)
        finally:
            self._busy.difference_update(c.kernel_id for c in commands)
        for command, attempt in zip(commands, attempts, strict=True):
            reports.extend(self._started(command, attempt))
        watches = [self._kernels[r.kernel_id] for r in reports if r.kernel_id in self._kernels]
        for watch in watches:
            watch.reporting = True
        try:
            applied = await self._report(*reports)
        except Exception:
            # A watched kernel's RUNNING goes again (next create(), or with its
            # end); what was found ended, or failed to start, must not be lost.
            self._reports.add(r for r in reports if r.kernel_id not in self._kernels)
            raise
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

    def _started(self, command: Command, attempt: Attempt) -> list[KernelReport]:
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
                await asyncio.to_thread(kill_now, watch)

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
            records = await asyncio.to_thread(lambda: [read_end(w) for w in ended])
            for w, (record, tail) in zip(ended, records, strict=True):
                self._reports.add(self._end_reports(w, record, tail))
        except BaseException:
            for w in ended:  # try again at the next poll
                (self._kernels if w.role == "kernel" else self._setups)[w.kernel_id] = w
            raise
        finally:
            self._ending.difference_update(w.kernel_id for w in ended)
            self._ends.set()

    def _end_reports(
        self, watch: Watch, record: Mapping[str, Any] | None, tail: str
    ) -> list[KernelReport]:
        stopped = watch.destroying or watch.abandoned
        if watch.role == "setup":
            return setup_ends(watch.kernel_id, record, destroying=stopped, stderr_tail=tail)
        ends = kernel_ends(watch.kernel_id, record, destroying=stopped, runtime=watch.runtime)
        return ends if watch.confirmed else [watch.running_report(), *ends]

    # -- destroy -------------------------------------------------------------------

    async def destroy(self, session: SessionWithKernels) -> None:
        """Stop each live kernel: SIGTERM to its process groups, SIGKILL after the grace.

        Returns once no process of any of them is left and how each ended is
        committed, so that the handler's transition never hides an exit code;
        raises :class:`BackendError` if that cannot be committed yet. That
        includes a kernel this daemon does not watch (any more) whose command
        already ended: its watcher (another coordinator, one killed before its
        RUNNING report committed, or this daemon's monitor still reading the
        end) may report it too late or never, and the session's transition to
        TERMINATED would then end the kernel without its code.

        Before any signal the kernels are reported TERMINATING, so that whoever
        sees them end calls them destroyed (:mod:`drover.backends.stopping`).
        Every signal is fenced by the tick's claim (see :meth:`prepare`).
        """
        fence = Fence.of(session, self.reporter)
        await fence.check()
        victims: list[Watch] = []
        ended: list[KernelReport] = []
        for kernel in session.kernels:
            setup = self._setups.get(kernel.id)
            watch = self._kernels.get(kernel.id)
            if watch is None and kernel.status not in TERMINAL_KERNEL_STATUSES:
                watch = await self._adopt_for_destroy(kernel, ended, fence)
            victims.extend(v for v in (setup, watch) if v is not None)
        # Queued like every end, so the flush below commits them (or the runner retries).
        self._reports.add(ended)
        await mark_stopping(self.reporter, [v.kernel_id for v in victims])
        await fence.check()
        for victim in victims:
            fence.check_clock()
            victim.destroying = True
            terminate(victim)
        grace = max((v.grace for v in victims), default=0.0)
        await self._wait_for_ends(victims, grace + _KILL_MARGIN)
        stuck = [v for v in victims if self._still_watched(v)]
        if stuck:
            await fence.check()
        for victim in stuck:
            log.warning("kernel %s: its %s did not stop: SIGKILL", victim.kernel_id, victim.role)
            fence.check_clock()
            await asyncio.to_thread(kill_now, victim)
        await self._wait_for_ends(stuck, _KILL_MARGIN)
        await self._poll_once()
        ids = {k.id for k in session.kernels}
        if ids & self._reports.kernels():
            try:
                await self._reports.flush(only=ids)
            except Exception as error:
                raise BackendError(f"could not record how the kernels ended: {error}") from error

    async def _wait_for_ends(self, watches: Sequence[Watch], seconds: float) -> None:
        """Wait until the monitor has seen every one of ``watches`` end, or ``seconds`` pass."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while True:
                    self._ends.clear()
                    if not any(self._still_watched(w) for w in watches):
                        return
                    await self._ends.wait()

    def _still_watched(self, watch: Watch) -> bool:
        table = self._kernels if watch.role == "kernel" else self._setups
        return table.get(watch.kernel_id) is watch or watch.kernel_id in self._ending

    async def _adopt_for_destroy(
        self, kernel: KernelInfo, ended: list[KernelReport], fence: Fence
    ) -> Watch | None:
        """Watch a kernel's live command that this daemon does not watch yet.

        A command of the kernel's current attempt that already ended is not
        watched: how it ended (read from its exit record) is added to ``ended``.
        """
        runtime = kernel.runtime or {}
        if runtime.get("token") is None and "pid" in runtime:
            pid, identity = runtime.get("pid"), runtime.get("identity")
            if not isinstance(pid, int) or not isinstance(identity, str):
                return None
            if process_identity(pid) != identity:
                # An older drover's wrapper that ended: its exit file, if it wrote one.
                workdir = Path(runtime.get("workdir", self._workdir(kernel)))
                record = await asyncio.to_thread(legacy_exit, workdir)
                if record is not None:
                    ended.extend(kernel_ends(kernel.id, record, destroying=True, runtime=runtime))
                return None
            self._resume_legacy(kernel, [])
            return self._kernels.get(kernel.id)
        workdir = self._workdir(kernel)
        # Waiting lets a supervisor spawned a moment ago record its command,
        # which is then adopted and stopped instead of escaping the destroy.
        spawn = await asyncio.to_thread(disk.inspect, workdir, "kernel")
        if spawn is None:
            return None
        # A kernel never reported RUNNING (a crash came first) has no token in
        # the database; its spawn on disk is the current attempt's.
        if runtime.get("token") not in (None, spawn.token):
            return None
        if not spawn.alive:
            # Only a kernel that wants a process has its current attempt's spawn
            # on disk: an earlier attempt's would be reset by its preparation.
            if kernel.status in _WANTS_PROCESS and (spawn.started or spawn.exit is not None):
                ended.extend(await asyncio.to_thread(self._ended_for_destroy, kernel, spawn, fence))
            return None
        if spawn.supervisor is None:
            return None
        confirmed = kernel.status not in RUNNING_EXPECTED
        watch = self._watch_of(kernel.id, "kernel", workdir, spawn, confirmed=confirmed)
        self._kernels[kernel.id] = watch
        return watch

    def _ended_for_destroy(
        self, kernel: KernelInfo, spawn: disk.DiskSpawn, fence: Fence
    ) -> list[KernelReport]:
        """(worker thread) How an unwatched kernel's command ended, for destroy to commit.

        A supervisor that died without recording the end may have left
        processes: they are killed, as destroy promises.
        """
        workdir = self._workdir(kernel)
        if spawn.exit is None and spawn.started:
            fence.check_clock()
            disk.kill_supervised(workdir, "kernel", spawn)
        unstarted = kernel.status in RUNNING_EXPECTED
        return self._ended(kernel.id, workdir, spawn, destroying=True, unstarted=unstarted)
