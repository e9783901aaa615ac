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

The loop, reports, destroy's steps and file retention are the shared
:class:`~drover.backends.tracking.TrackingBackend`'s. Resources are accounted
for by the scheduler, not enforced by the OS.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import drover.backends.local._disk as disk
from drover.backends.base import AgentInfo, BackendError, KernelReporter
from drover.backends.devices import DeviceProblem
from drover.backends.fence import Fence, FencedError
from drover.backends.local._found import for_destroy, resume, settled, survey, watch_of
from drover.backends.local._outcome import (
    AFTER_SETUP,
    RUNNING_EXPECTED,
    WANTS_PROCESS,
    kernel_ends,
    setup_ends,
)
from drover.backends.local._proc import process_identity
from drover.backends.local._spec import cwd_of, env_of, log_paths, spec_problem
from drover.backends.local._starting import CommandStarter
from drover.backends.local._watch import (
    Attempt,
    Command,
    Watch,
    kernel_port,
    kill_now,
    read_end,
    record_devices,
    recorded_devices,
    reset_for_prepare,
    terminate,
)
from drover.backends.tracking import TrackingBackend
from drover.kinds.sessions.values import (
    TERMINAL_KERNEL_STATUSES,
    KernelInfo,
    KernelReport,
    KernelStatus,
    SessionWithKernels,
)

__all__ = ["LocalBackend", "process_identity"]

_K = KernelStatus
#: Kernel statuses in which this backend may own a process or a setup.
_LIVE = frozenset({_K.PREPARING, _K.PULLING, _K.PREPARED, _K.CREATING, _K.RUNNING, _K.TERMINATING})
_STDERR_TAIL = 2000
# Seconds destroy waits past a supervisor's own grace before killing it too.
_KILL_MARGIN = 5.0


class LocalBackend(TrackingBackend[Watch]):
    """Kernels as local processes; see the module docstring and docs/daemon.md."""

    name = "local"
    stop_grace = 5.0

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
        super().__init__(
            agents, data_dir, kill_grace=kill_grace, kill_margin=_KILL_MARGIN,
            poll_interval=poll_interval, sweep_interval=sweep_interval,
            report_backoff_max=report_backoff_max, device_variables=device_variables,
        )  # fmt: skip
        self.start_timeout = start_timeout
        # The kernels' commands are ``_tracked``; their setups are watched here.
        self._setups: dict[str, Watch] = {}
        # Kernels being started or prepared right now (one attempt at a time).
        self._busy: set[str] = set()
        # Kernels whose end was seen and whose reports are being built.
        self._ending: set[str] = set()
        # Set whenever the monitor has processed ends (destroy waits on it).
        self._ends = asyncio.Event()
        self._starter = CommandStarter()

    # -- adopting what runs at start-up ----------------------------------------------------

    async def _adopt(self, reporter: KernelReporter) -> None:
        """Pick up where the last daemon left off.

        For every kernel of our agents that may own a process: a live
        supervisor is adopted (and reported RUNNING if that report never
        committed); a command that ended meanwhile is judged from its exit
        record like any other end; one that left no record is ``lost``
        (ERROR), never run again; a setup that was interrupted is adopted, or
        its preparation restarted.
        """
        kernels = self._ours(await reporter.kernels_in(_LIVE))
        dirs = [self.kernel_dir(k.id) for k in kernels]
        spawns = await asyncio.to_thread(lambda: [survey(d) for d in dirs])
        counts: Counter[str] = Counter()
        now: list[KernelReport] = []
        for kernel, workdir, (spawn, setup) in zip(kernels, dirs, spawns, strict=True):
            found = resume(kernel, workdir, spawn, setup, self.kill_grace)
            if found.watch is not None:
                self._keep(found.watch)
            if found.restart:
                unfenced = Fence(kernel.session_id)
                self._spawn_task(self._prepare_kernel(kernel.session_id, kernel, unfenced))
            now.extend(found.reports)
            counts[found.word] += 1
        adopted = [w for w in self._tracked.values() if not w.confirmed]
        for w in adopted:
            w.reporting = True
        try:
            await self._report(now)
        except Exception:
            self.log.exception("local backend: start-up reports failed; they will be retried")
            # An adopted kernel's RUNNING report is sent again with its end, or
            # by create(); every other report is queued as it is.
            self._reports.add(r for r in now if r.kernel_id not in self._tracked)
        else:
            for w in adopted:
                w.confirmed = True
        finally:
            for w in adopted:
                w.reporting = False
        self.log.info(
            "local backend started: adopted=%d ended=%d lost=%d restarted=%d",
            counts["adopted"],
            counts["ended"],
            counts["lost"],
            counts["restarted"],
        )

    def _keep(self, watch: Watch) -> None:
        """Watch ``watch`` from now on (a kernel's command, or its setup)."""
        (self._setups if watch.role == "setup" else self._tracked)[watch.kernel_id] = watch

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
        """Queue the kernel's ERROR: its preparation failed (``message`` says why)."""
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
            self.log.exception("preparing kernel %s failed", kernel.id)
            self._setup_failed(kernel.id, f"prepare failed: {type(error).__name__}: {error}")
        finally:
            self._busy.discard(kernel.id)

    async def _prepare_now(self, session_id: str, kernel: KernelInfo, fence: Fence) -> None:
        problem = spec_problem(kernel.spec)
        if problem:
            self._setup_failed(kernel.id, problem)
            return
        workdir = self.kernel_dir(kernel.id)
        runtime: dict[str, Any] = {"workdir": str(workdir), **log_paths(workdir)}
        try:
            devices = await self._assign_devices(kernel, fence)
        except DeviceProblem as problem:
            self._setup_failed(kernel.id, str(problem))
            return
        if devices:
            runtime["devices"] = devices
        setup = kernel.spec.get("setup")
        await fence.check()
        earlier = self._tracked.pop(kernel.id, None)
        if earlier is not None:
            # An earlier attempt's command (killed by the reset below): a new
            # attempt must not be taken for it by create().
            earlier.abandoned = True
            if earlier.own:
                self._starter.reap.add(earlier.supervisor_pid)
        live = await asyncio.to_thread(reset_for_prepare, workdir, fence.check_clock)
        if live is None:
            await asyncio.to_thread(record_devices, workdir, devices)
        if live is not None:
            self._keep(watch_of(kernel.id, "setup", workdir, live, self.kill_grace))
            return
        if not setup:
            self._reports.add(
                [KernelReport(kernel.id, _K.PREPARED, expected=AFTER_SETUP, runtime=runtime)]
            )
            return
        early = frozenset({_K.SCHEDULED, _K.PREPARING})
        try:
            await self._report(
                [KernelReport(kernel.id, _K.PULLING, expected=early, runtime=runtime)]
            )
        except Exception as error:  # its end is reported with retries anyway
            self.log.warning("kernel %s: PULLING not reported: %s", kernel.id, error)
        argv = ["/bin/sh", "-c", setup] if isinstance(setup, str) else [str(a) for a in setup]
        cwd = await asyncio.to_thread(cwd_of, kernel.spec, workdir)
        command = Command(
            kernel.id, "setup", workdir, argv, cwd,
            {**env_of(session_id, kernel), **self.devices.env(devices)},
            workdir / "setup.stdout.log", workdir / "setup.stderr.log",
        )  # fmt: skip
        (attempt,) = await self._starter.start(
            [command], fence, grace=self.kill_grace, answer_within=self.start_timeout
        )
        if attempt.kind == "adopt" and attempt.spawn is not None:
            own = attempt.pid != 0
            self._keep(
                watch_of(kernel.id, "setup", workdir, attempt.spawn, self.kill_grace, own=own)
            )
            return
        if attempt.kind == "ended" and attempt.spawn is not None:
            tail = await asyncio.to_thread(disk.read_tail, command.stderr, _STDERR_TAIL)
            self._reports.add(
                setup_ends(kernel.id, attempt.spawn.exit, destroying=False, stderr_tail=tail)
            )
            return
        self._setup_failed(kernel.id, f"setup failed to start: {attempt.message or 'lost'}")

    # -- create ------------------------------------------------------------------

    async def create(self, session: SessionWithKernels) -> None:
        """Start each prepared kernel's command (or adopt it) and report it RUNNING.

        A kernel whose command was already started, by this daemon or by one
        that crashed before its RUNNING report committed, is adopted, never
        started twice. Spawns are fenced by the tick's claim (see :meth:`prepare`).
        """
        fence = Fence.of(session, self.reporter)
        reports: list[KernelReport] = []
        # Busy from the moment it is chosen: a destroy meanwhile waits for its start
        # (before its spawn record exists, its disk says there is nothing to stop).
        chosen: list[str] = []
        try:
            commands = await self._commands(session, reports, chosen)
            attempts = await self._starter.start(
                commands, fence, grace=self.kill_grace, answer_within=self.start_timeout
            )
        finally:
            self._busy.difference_update(chosen)
        for command, attempt in zip(commands, attempts, strict=True):
            reports.extend(self._started(command, attempt))
        await self._report_started(reports)

    async def _commands(
        self, session: SessionWithKernels, reports: list[KernelReport], chosen: list[str]
    ) -> list[Command]:
        """The commands of the session's kernels to start, each marked busy in ``chosen``;
        ``reports``: what is known of the others at once."""
        commands: list[Command] = []
        for kernel in session.kernels:
            if kernel.status not in RUNNING_EXPECTED:
                continue
            watch = self._tracked.get(kernel.id)
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
            self._busy.add(kernel.id)
            chosen.append(kernel.id)
            workdir = self.kernel_dir(kernel.id)
            logs = log_paths(workdir)
            argv = [str(a) for a in kernel.spec["command"]]
            cwd = await asyncio.to_thread(cwd_of, kernel.spec, workdir)
            env = env_of(session.id, kernel)
            env["PORT"] = str(await asyncio.to_thread(kernel_port, workdir))
            devices = await asyncio.to_thread(recorded_devices, workdir)
            env.update(self.devices.env(devices))
            out, err = Path(logs["stdout"]), Path(logs["stderr"])
            commands.append(Command(kernel.id, "kernel", workdir, argv, cwd, env, out, err))
        return commands

    async def _report_started(self, reports: list[KernelReport]) -> None:
        """Report the kernels started (RUNNING), adopted or found ended."""
        watches = [self._tracked[r.kernel_id] for r in reports if r.kernel_id in self._tracked]
        for watch in watches:
            watch.reporting = True
        try:
            applied = await self._report(reports)
        except Exception:
            # A watched kernel's RUNNING goes again (next create(), or with its
            # end); what was found ended, or failed to start, must not be lost.
            self._reports.add(r for r in reports if r.kernel_id not in self._tracked)
            raise
        finally:
            for watch in watches:
                watch.reporting = False
        for report, ok in zip(reports, applied, strict=True):
            found = self._tracked.get(report.kernel_id)
            if found is not None and report.status == _K.RUNNING:
                # Applied, or refused because the kernel moved on (terminated,
                # rescheduled) meanwhile: the sweep then kills the process.
                found.confirmed = True
                if not ok:
                    self.log.warning("kernel %s: RUNNING not applied", report.kernel_id)

    def _started(self, command: Command, attempt: Attempt) -> list[KernelReport]:
        """The reports for one kernel command the starter adopted, judged or spawned."""
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
        watch, reports = settled(kid, command.workdir, spawn, self.kill_grace, own=attempt.pid != 0)
        if watch is not None:
            self._keep(watch)
        return reports

    # -- watching ends -------------------------------------------------------------

    async def _poll(self) -> None:
        """Queue the ends of the commands and setups whose supervisors are gone."""
        ended = [w for w in self._watched() if not w.reporting and w.ended()]
        if not ended:
            return
        for w in ended:
            (self._setups if w.role == "setup" else self._tracked).pop(w.kernel_id, None)
            self._ending.add(w.kernel_id)
        try:
            records = await asyncio.to_thread(lambda: [read_end(w) for w in ended])
            for w, (record, tail) in zip(ended, records, strict=True):
                self._reports.add(self._end_reports(w, record, tail))
        except BaseException:
            for w in ended:  # try again at the next poll
                self._keep(w)
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

    # -- the sweep: what the database no longer wants --------------------------------------

    async def _sweep(self) -> None:
        self._starter.reap_exited()
        await super()._sweep()

    def _watched(self) -> list[Watch]:
        """The kernels' commands and their setups."""
        return [*self._tracked.values(), *self._setups.values()]

    def _wants(self, item: Watch, status: KernelStatus | None) -> bool:
        # A kernel the database does not know is left alone.
        wanted = AFTER_SETUP if item.role == "setup" else WANTS_PROCESS
        return status is None or status in wanted

    async def _abandon(self, item: Watch) -> None:
        await asyncio.to_thread(kill_now, item)

    # -- destroy ---------------------------------------------------------------------------

    async def _victims(self, session: SessionWithKernels, fence: Fence) -> list[Watch]:
        """Each live kernel's setup and command, adopting a command this daemon does not
        watch (any more).

        A kernel whose command already ended and is not watched (by another
        coordinator, one killed before its RUNNING report committed, or this
        daemon's monitor still reading the end) has its end read from its exit
        record and queued here: its watcher may report it too late or never,
        and the session's transition to TERMINATED would then end the kernel
        without its code.
        """
        await self._starts_done(session)
        victims: list[Watch] = []
        ended: list[KernelReport] = []
        for kernel in session.kernels:
            setup = self._setups.get(kernel.id)
            watch = self._tracked.get(kernel.id)
            if watch is None and kernel.status not in TERMINAL_KERNEL_STATUSES:
                workdir = self.kernel_dir(kernel.id)
                watch, reports = await asyncio.to_thread(
                    for_destroy, kernel, workdir, self.kill_grace, fence.check_clock
                )
                ended.extend(reports)
                if watch is not None:
                    self._tracked[kernel.id] = watch
            victims.extend(v for v in (setup, watch) if v is not None)
        # Queued like every end, so that _destroyed commits them (or the queue retries).
        self._reports.add(ended)
        return victims

    async def _starts_done(self, session: SessionWithKernels) -> None:
        """Wait while a kernel of ``session`` is being prepared or started here (bounded by
        the start's own timeout): what it runs is known, and stopped, once it is."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.start_timeout + self.kill_grace
        ids = {k.id for k in session.kernels}
        # Polled: starts are few and short, and a destroy during one is rare.
        while ids & self._busy and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(self.wait_step)

    async def _signal(self, items: Sequence[Watch], fence: Fence, *, kill: bool) -> None:
        """SIGTERM to each supervisor (which signals its process groups, then SIGKILLs them
        after its grace); ``kill``: SIGKILL to every process of the command and the
        supervisor."""
        for item in items:
            if kill:
                self.log.warning(
                    "kernel %s: its %s did not stop: SIGKILL", item.kernel_id, item.role
                )
            fence.check_clock()
            if kill:
                await asyncio.to_thread(kill_now, item)
            else:
                item.destroying = True
                terminate(item)

    def _grace(self, victims: Sequence[Watch]) -> float:
        # The supervisors kill after their own grace: they are given that, and a margin.
        return max((v.grace for v in victims), default=0.0) + _KILL_MARGIN

    async def _wait_ended(self, items: Sequence[Watch], seconds: float) -> list[Watch]:
        """Wait until the monitor has seen every one of ``items`` end, or ``seconds`` pass."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while True:
                    self._ends.clear()
                    if not any(self._still_watched(w) for w in items):
                        break
                    await self._ends.wait()
        return await self._still_live(items)

    async def _still_live(self, items: Sequence[Watch]) -> list[Watch]:
        return [w for w in items if self._still_watched(w)]

    def _still_watched(self, watch: Watch) -> bool:
        table = self._setups if watch.role == "setup" else self._tracked
        return table.get(watch.kernel_id) is watch or watch.kernel_id in self._ending

    async def _destroyed(self, session: SessionWithKernels, victims: Sequence[Watch]) -> None:
        """Commit how the session's kernels ended (read by the monitor, or from their exit
        records); raise :class:`BackendError` if that cannot be committed yet."""
        await self._poll()
        ids = {k.id for k in session.kernels}
        if ids & self._reports.kernels():
            try:
                await self._reports.flush(only=ids)
            except Exception as error:
                raise BackendError(f"could not record how the kernels ended: {error}") from error
