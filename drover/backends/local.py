"""The ``local`` backend: each kernel is one real OS process on this machine.

* prepare: create the kernel's working directory under ``data_dir``, run the
  optional ``setup`` command (PULLING while it runs), then PREPARED; a failed
  setup is ERROR with its exit code and the tail of its stderr.
* create: spawn ``command`` in its own session/process group, stdout and stderr
  to files in its working directory; RUNNING, with pid and process identity
  recorded in the kernel's ``runtime``.
* exit: TERMINATED for exit code 0, ERROR otherwise.
* destroy: SIGTERM to the process group, SIGKILL after ``kill_grace``.

Processes are not children of an asyncio transport (asyncio kills those when
the loop closes), so kernels outlive a daemon restart and are adopted by the
next daemon. A pid is only ever signalled if its ``/proc`` start time and boot
id still match what was recorded: pids get reused. Linux only.

Resources are accounted for by the scheduler, not enforced by the OS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from drover.backends.base import AgentBackend, AgentInfo, KernelReporter, Wake
from drover.model.status import TERMINAL_KERNEL_STATUSES, KernelStatus
from drover.model.values import KernelInfo, KernelReport, SessionWithKernels

__all__ = ["LocalBackend", "process_identity"]

log = logging.getLogger("drover.backends.local")

_K = KernelStatus
_EXIT_FILE = ".drover-exit"
# Runs the command in its working directory and records its exit code, so a
# daemon that adopts the process after a restart can still learn how it ended.
_WRAPPER = (
    'cd "$1" || exit 126; exitfile="$2"; shift 2; '
    '"$@"; code=$?; echo $code > "$exitfile"; exit $code'
)
_STDERR_TAIL = 2000


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown-boot"


def process_identity(pid: int) -> str | None:
    """``boot_id:starttime`` of a live (non-zombie) process, or ``None`` if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in {"Z", "X"}:
        return None
    return f"{_boot_id()}:{fields[19]}"


class _Proc:
    """A kernel process this backend watches."""

    def __init__(self, kernel_id: str, pid: int, identity: str, workdir: Path, own: bool) -> None:
        self.kernel_id = kernel_id
        self.pid = pid
        self.identity = identity
        self.workdir = workdir
        self.own = own
        self.destroying = False
        # Whether its RUNNING report was applied; exits are reported only after
        # that, or a fast exit would be refused (still PREPARED) and lost.
        self.announced = not own
        # Its RUNNING report was refused: the kernel belongs to another process
        # (or ended), so this one's end is never reported: a "destroyed" report
        # would end the kernel another coordinator runs.
        self.refused = False
        # What the first poll after the leader's end saw (its exit code, if known).
        self.first_end: object = _RUNNING


class LocalBackend(AgentBackend):
    """Kernels as local processes; see the module docstring."""

    def __init__(
        self,
        agents: Sequence[AgentInfo],
        data_dir: str | os.PathLike[str],
        *,
        kill_grace: float = 10.0,
        poll_interval: float = 0.05,
        sweep_interval: float = 1.0,
    ) -> None:
        self._agents = list(agents)
        self.data_dir = Path(data_dir).resolve()
        self.kill_grace = kill_grace
        self.poll_interval = poll_interval
        self.sweep_interval = sweep_interval
        self.reporter: KernelReporter | None = None
        # Called after reports applied, so the daemon wakes promotion handlers.
        self._wake: Wake = lambda: None
        self._procs: dict[str, _Proc] = {}
        self._setups: dict[str, asyncio.subprocess.Process] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._monitor: asyncio.Task[None] | None = None
        self._stopping = False

    def agents(self) -> Sequence[AgentInfo]:
        """The configured agents (by default, this host)."""
        return list(self._agents)

    # -- lifecycle of the backend itself ------------------------------------------

    async def start(self, reporter: KernelReporter, wake: Wake) -> None:
        """Adopt live kernel processes and mark dead ones ``lost``; start watching."""
        self.reporter = reporter
        self._wake = wake
        self.data_dir.mkdir(parents=True, exist_ok=True)
        ours = {a.id for a in self._agents}
        adopted = lost = 0
        reports: list[KernelReport] = []
        for kernel in await reporter.kernels_in([_K.RUNNING]):
            if kernel.agent_id not in ours:
                continue
            if self._adoptable(kernel) is not None:
                adopted += 1
            else:
                runtime = kernel.runtime or {}
                pid = runtime.get("pid")
                if isinstance(pid, int) and _group_has_live_members(pid, kernel.id):
                    # Its wrapper is gone but part of its group lives on (a command
                    # deaf to SIGTERM): the kernel is over, so is the rest of it.
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)
                reports.append(
                    KernelReport(
                        kernel.id,
                        _K.TERMINATED,
                        expected=frozenset({_K.RUNNING}),
                        exit_code=_read_exit(Path(runtime.get("workdir", "/nonexistent"))),
                        message="lost",
                    )
                )
                lost += 1
        if reports:
            await reporter.report_kernel_statuses(reports)
        self._monitor = asyncio.create_task(self._watch(), name="drover-local-monitor")
        log.info("local backend started: adopted=%d lost=%d", adopted, lost)

    async def stop(self, grace: float = 5.0) -> None:
        """Stop watching. Kernel processes keep running, to be adopted on restart.

        Running setups are killed without a report: their sessions go back to
        PENDING when prepare-sessions' timeout passes. Tasks end on their own
        (one in the middle of a report finishes it); only stragglers past
        ``grace`` seconds are cancelled.
        """
        self._stopping = True
        for proc in list(self._setups.values()):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        tasks = [*self._tasks, *([self._monitor] if self._monitor else [])]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self._setups.clear()
        self._monitor = None

    async def _report(self, *reports: KernelReport) -> list[bool]:
        assert self.reporter is not None, "LocalBackend.start() was not called"
        applied = await self.reporter.report_kernel_statuses(list(reports))
        self._wake()
        return applied

    def _spawn_task(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _workdir(self, kernel: KernelInfo) -> Path:
        return self.data_dir / "kernels" / kernel.id

    # -- prepare -----------------------------------------------------------------

    async def prepare(self, session: SessionWithKernels) -> None:
        """Start preparing each live kernel in the background."""
        for kernel in session.kernels:
            if kernel.status not in TERMINAL_KERNEL_STATUSES:
                self._spawn_task(self._prepare_kernel(session, kernel))

    async def _prepare_kernel(self, session: SessionWithKernels, kernel: KernelInfo) -> None:
        early = frozenset({_K.SCHEDULED, _K.PREPARING})
        try:
            workdir = self._workdir(kernel)
            workdir.mkdir(parents=True, exist_ok=True)
            problem = _spec_problem(kernel.spec)
            if problem:
                await self._report(
                    KernelReport(kernel.id, _K.ERROR, expected=early, message=problem)
                )
                return
            setup = kernel.spec.get("setup")
            runtime = {"workdir": str(workdir), **_log_paths(workdir)}
            if not setup:
                await self._report(
                    KernelReport(kernel.id, _K.PREPARED, expected=early, runtime=runtime)
                )
                return
            await self._report(KernelReport(kernel.id, _K.PULLING, expected=early, runtime=runtime))
            argv = ["/bin/sh", "-c", setup] if isinstance(setup, str) else [str(a) for a in setup]
            # Output goes to files, not pipes: a killed setup leaves no open transport.
            # Opening two local files does not block the loop noticeably.
            err_path = workdir / "setup.stderr.log"
            with (
                open(workdir / "setup.stdout.log", "wb") as out_file,  # noqa: ASYNC230
                open(err_path, "wb") as err_file,  # noqa: ASYNC230
            ):
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    cwd=_cwd(kernel.spec, workdir),
                    env=_env(session, kernel),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out_file,
                    stderr=err_file,
                )
            self._setups[kernel.id] = proc
            try:
                await proc.wait()
            finally:
                self._setups.pop(kernel.id, None)
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
            if self._stopping:
                return  # killed by stop(): the coordinator's timeout decides
            err = err_path.read_bytes()[-_STDERR_TAIL * 4 :]
            after = frozenset({_K.PREPARING, _K.PULLING})
            if proc.returncode == 0:
                await self._report(KernelReport(kernel.id, _K.PREPARED, expected=after))
            else:
                tail = err.decode(errors="replace")[-_STDERR_TAIL:].strip()
                await self._report(
                    KernelReport(
                        kernel.id,
                        _K.ERROR,
                        expected=after,
                        exit_code=proc.returncode,
                        message=f"setup failed with exit code {proc.returncode}: {tail}",
                    )
                )
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.exception("preparing kernel %s failed", kernel.id)
            await self._report(
                KernelReport(
                    kernel.id,
                    _K.ERROR,
                    expected=frozenset({_K.SCHEDULED, _K.PREPARING, _K.PULLING}),
                    message=f"prepare failed: {type(error).__name__}: {error}",
                )
            )

    # -- create ------------------------------------------------------------------

    async def create(self, session: SessionWithKernels) -> None:
        """Spawn each prepared kernel's command and report it RUNNING."""
        reports: list[KernelReport] = []
        for kernel in session.kernels:
            # Only a PREPARED kernel is started: one already RUNNING was started by a
            # coordinator that died before its tick applied (see docs/scaling.md).
            if kernel.status not in _STARTABLE or kernel.id in self._procs:
                continue
            earlier = _spawned_before(kernel, self._workdir(kernel))
            if earlier is not None:
                reports.append(self._adopt_spawned(kernel, earlier))
                continue
            reports.append(self._spawn(session, kernel))
        applied = await self._report(*reports)
        for report, ok in zip(reports, applied, strict=True):
            proc = self._procs.get(report.kernel_id)
            if proc is None:
                continue
            if not ok:
                # The kernel moved on (terminated, rescheduled) while we spawned it.
                log.warning("kernel %s no longer wants its process: killing it", proc.kernel_id)
                proc.destroying = True
                proc.refused = True
                _signal_group(proc, signal.SIGKILL)
            proc.announced = True

    def _spawn(self, session: SessionWithKernels, kernel: KernelInfo) -> KernelReport:
        expected = frozenset({_K.PREPARED, _K.CREATING})
        workdir = self._workdir(kernel)
        workdir.mkdir(parents=True, exist_ok=True)
        problem = _spec_problem(kernel.spec)
        if problem:
            return KernelReport(kernel.id, _K.ERROR, expected=expected, message=problem)
        logs = _log_paths(workdir)
        intent = _take_spawn_intent(kernel, workdir)
        if intent is None:
            # Another coordinator got there first, this instant: adopt its process.
            earlier = _spawned_before(kernel, workdir)
            assert earlier is not None
            return self._adopt_spawned(kernel, earlier)
        (workdir / _EXIT_FILE).unlink(missing_ok=True)
        argv = [
            "/bin/sh",
            "-c",
            _WRAPPER,
            "drover-kernel",
            str(_cwd(kernel.spec, workdir)),
            str(workdir / _EXIT_FILE),
            *[str(a) for a in kernel.spec["command"]],
        ]
        out = os.open(logs["stdout"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        err = os.open(logs["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            pid = os.posix_spawn(
                "/bin/sh",
                argv,
                _env(session, kernel),
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, out, 1),
                    (os.POSIX_SPAWN_DUP2, err, 2),
                ],
                setsid=True,
            )
        except OSError as error:
            os.close(intent)
            return KernelReport(
                kernel.id, _K.ERROR, expected=expected, message=f"spawn failed: {error}"
            )
        finally:
            os.close(out)
            os.close(err)
        identity = process_identity(pid) or f"{_boot_id()}:unknown"
        _record_spawn(intent, pid, identity)
        self._procs[kernel.id] = _Proc(kernel.id, pid, identity, workdir, own=True)
        runtime = {"pid": pid, "identity": identity, "workdir": str(workdir), **logs}
        return KernelReport(kernel.id, _K.RUNNING, expected=expected, runtime=runtime)

    def _adopt_spawned(self, kernel: KernelInfo, earlier: tuple[int, str] | None) -> KernelReport:
        """Report a kernel whose process another coordinator spawned for this attempt.

        Alive: watched from here (as adopted) and reported RUNNING. Gone: how
        it ended, from its exit file; never spawned a second time.
        """
        expected = frozenset({_K.PREPARED, _K.CREATING})
        workdir = self._workdir(kernel)
        runtime: dict[str, Any] = {"workdir": str(workdir), **_log_paths(workdir)}
        if earlier is not None:
            pid, identity = earlier
            if process_identity(pid) == identity:
                self._procs[kernel.id] = _Proc(kernel.id, pid, identity, workdir, own=False)
                return KernelReport(
                    kernel.id,
                    _K.RUNNING,
                    expected=expected,
                    runtime={"pid": pid, "identity": identity, **runtime},
                )
        code = _read_exit(workdir)
        return KernelReport(
            kernel.id,
            _K.TERMINATED if code == 0 else _K.ERROR,
            expected=expected,
            exit_code=code,
            runtime=runtime,
            message=None
            if code == 0
            else (
                f"exited with code {code}"
                if code is not None
                else "its process (spawned by a coordinator that died) is gone; exit code unknown"
            ),
        )

    # -- watching exits ------------------------------------------------------------

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
                    await self._kill_abandoned()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("local backend: watching processes failed; will retry")

    async def _kill_abandoned(self) -> None:
        """Kill processes whose kernels the coordinator gave up on (sent back to PENDING…).

        A kernel that expired back to PENDING, or ended in the database, no
        longer owns its process or setup: without this they would run on as
        orphans while the session is rescheduled.
        """
        assert self.reporter is not None
        watched = list(self._procs) + list(self._setups)
        if not watched:
            return
        statuses = await self.reporter.kernel_statuses(watched)
        for kernel_id, status in statuses.items():
            setup = self._setups.get(kernel_id)
            if setup is not None and status not in {_K.PREPARING, _K.PULLING, _K.SCHEDULED}:
                log.warning("kernel %s is %s: killing its setup", kernel_id, status)
                with contextlib.suppress(ProcessLookupError):
                    setup.kill()
            proc = self._procs.get(kernel_id)
            # PREPARED too: create() spawns before its RUNNING report commits.
            if proc is not None and status not in {
                _K.PREPARED,
                _K.CREATING,
                _K.RUNNING,
                _K.TERMINATING,
            }:
                log.warning("kernel %s is %s: killing its abandoned process", kernel_id, status)
                proc.destroying = True
                _signal_group(proc, signal.SIGKILL)

    async def _poll_once(self) -> None:
        ended: list[KernelReport] = []
        for proc in list(self._procs.values()):
            if not proc.announced:
                continue
            code = _exit_status(proc)
            if code is _RUNNING:
                continue
            if proc.first_end is _RUNNING:
                proc.first_end = code  # a reaped child reads as "unknown" afterwards
            code = proc.first_end
            ended_by_signal = code is None or (isinstance(code, int) and code < 0)
            if (proc.destroying or ended_by_signal) and _group_has_live_members(
                proc.pid, proc.kernel_id
            ):
                # The wrapper died of a signal but a command deaf to SIGTERM lives
                # on: the kernel has not ended until its group has (the destroy, or
                # a coordinator taking it over, kills the rest).
                continue
            del self._procs[proc.kernel_id]
            if proc.refused:
                continue
            exit_code = code if isinstance(code, int) else _read_exit(proc.workdir)
            if proc.destroying or exit_code == 0:
                status = _K.TERMINATED
                message = "destroyed" if proc.destroying else None
            else:
                status = _K.ERROR
                message = (
                    f"exited with code {exit_code}"
                    if exit_code is not None
                    else "exited; exit code unknown (adopted process)"
                )
            ended.append(
                KernelReport(
                    proc.kernel_id,
                    status,
                    expected=frozenset({_K.RUNNING, _K.CREATING, _K.TERMINATING}),
                    exit_code=exit_code,
                    message=message,
                )
            )
        if ended:
            await self._report(*ended)

    # -- destroy -------------------------------------------------------------------

    async def destroy(self, session: SessionWithKernels) -> None:
        """SIGTERM each live kernel's process group; SIGKILL after ``kill_grace``."""
        victims: list[_Proc] = []
        gone: list[KernelReport] = []
        for kernel in session.kernels:
            setup = self._setups.get(kernel.id)
            if setup is not None:
                with contextlib.suppress(ProcessLookupError):
                    setup.kill()
            proc = self._procs.get(kernel.id)
            if proc is None:
                proc = self._adoptable(kernel)
            if proc is None:
                gone.extend(self._ended_unwatched(kernel))
                continue
            # Only a process we actually signal counts as destroyed: one that
            # already exited keeps its own exit code (reported below).
            if _signal_group(proc, signal.SIGTERM):
                proc.destroying = True
                victims.append(proc)
        deadline = asyncio.get_running_loop().time() + self.kill_grace
        while victims and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(self.poll_interval)
            # The whole group, not just its leader: a command that ignores SIGTERM
            # outlives the wrapper shell that leads the group.
            victims = [p for p in victims if _group_has_live_members(p.pid, p.kernel_id)]
        for proc in victims:
            log.warning(
                "kernel %s ignored SIGTERM for %ss: SIGKILL", proc.kernel_id, self.kill_grace
            )
            # We checked the leader's identity before SIGTERM; a group id is never
            # reused while the group has members, so this reaches the same group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        # Report how they ended before the handler's transition marks them
        # TERMINATED without an exit code.
        if gone:
            await self._report(*gone)
        await self._poll_once()

    def _ended_unwatched(self, kernel: KernelInfo) -> list[KernelReport]:
        """A live kernel whose leader process is gone and which nobody here watched.

        Its coordinator died (several coordinators, docs/scaling.md): what is left
        of its process group is killed, and its exit code is read from its exit
        file, so the session's end does not record it without one.
        """
        runtime = kernel.runtime or {}
        pid = runtime.get("pid")
        if kernel.status not in {_K.RUNNING, _K.CREATING, _K.TERMINATING} or not isinstance(
            pid, int
        ):
            return []
        if _group_has_live_members(pid, kernel.id):
            # The leader (the wrapper shell) died, a command deaf to SIGTERM lives on.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        code = _read_exit(Path(runtime.get("workdir", "/nonexistent")))
        return [
            KernelReport(
                kernel.id,
                _K.TERMINATED if code in (0, None) else _K.ERROR,
                expected=frozenset({_K.RUNNING, _K.CREATING, _K.TERMINATING}),
                exit_code=code,
                message="lost" if code is None else None,
            )
        ]

    def _adoptable(self, kernel: KernelInfo) -> _Proc | None:
        """Watch the kernel's recorded process if it is still the same live process."""
        runtime = kernel.runtime or {}
        pid, identity = runtime.get("pid"), runtime.get("identity")
        if isinstance(pid, int) and identity and process_identity(pid) == identity:
            proc = _Proc(kernel.id, pid, identity, Path(runtime.get("workdir", ".")), own=False)
            self._procs[kernel.id] = proc
            return proc
        return None


_RUNNING = object()
_STARTABLE = frozenset({_K.PREPARED, _K.CREATING})


# -- spawn intents: one process per kernel attempt, whichever coordinator spawns it --------
#
# Several coordinators may share a data directory (docs/scaling.md). Before
# spawning, a coordinator creates ``.drover-spawn-<attempt>`` in the kernel's
# directory with O_EXCL, then writes ``pid identity`` into it: a second
# coordinator (one that took a dead coordinator's claim over) finds it and
# adopts or reports that process instead of starting the command again. The
# attempt is when the kernel became PREPARED, so a rescheduled kernel (sent
# back to PENDING and prepared again) is spawned anew.


def _intent_path(kernel: KernelInfo, workdir: Path) -> Path:
    attempt = round(kernel.status_changed_at.timestamp() * 1e6)
    return workdir / f".drover-spawn-{attempt}"


def _take_spawn_intent(kernel: KernelInfo, workdir: Path) -> int | None:
    """Create this attempt's intent file; ``None`` if some coordinator already did."""
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        return os.open(_intent_path(kernel, workdir), flags, 0o644)
    except FileExistsError:
        return None


def _record_spawn(fd: int, pid: int, identity: str) -> None:
    try:
        os.write(fd, f"{pid} {identity}\n".encode())
    finally:
        os.close(fd)


def _spawned_before(kernel: KernelInfo, workdir: Path) -> tuple[int, str] | None:
    """``(pid, identity)`` recorded for this attempt, ``None`` if it was never spawned.

    An intent without a pid (its coordinator died between creating the file and
    writing to it, or is writing right now) is resolved by looking for the
    process that carries the kernel's id in its environment.
    """
    path = _intent_path(kernel, workdir)
    if not path.exists():
        return None
    for _ in range(20):
        try:
            pid_text, identity = path.read_text().split()
            return int(pid_text), identity
        except (OSError, ValueError):
            pass
        found = _process_of_kernel(kernel.id)
        if found is not None:
            return found
        time.sleep(0.01)  # the spawning coordinator may be between spawn and write
    return (0, "gone")


def _process_of_kernel(kernel_id: str) -> tuple[int, str] | None:
    """A live process whose environment has ``DROVER_KERNEL_ID=kernel_id`` (the wrapper)."""
    needle = f"DROVER_KERNEL_ID={kernel_id}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            identity = process_identity(int(entry.name))
            if identity is not None:
                return int(entry.name), identity
    return None


def _exit_status(proc: _Proc) -> object:
    """``_RUNNING``, an exit code, or ``None`` when it ended with an unknown code."""
    if proc.own:
        try:
            pid, status = os.waitpid(proc.pid, os.WNOHANG)
        except ChildProcessError:
            return None if process_identity(proc.pid) != proc.identity else _RUNNING
        if pid == 0:
            return _RUNNING
        return os.waitstatus_to_exitcode(status)
    return _RUNNING if process_identity(proc.pid) == proc.identity else None


def _signal_group(proc: _Proc, sig: signal.Signals) -> bool:
    """Signal the process group, only if the pid is still the process we started."""
    if process_identity(proc.pid) != proc.identity:
        return False
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return False
    return True


def _group_has_live_members(pgid: int, kernel_id: str) -> bool:
    """Whether a live (non-zombie) process of kernel ``kernel_id`` is in process group ``pgid``.

    The kernel's id in the environment makes sure a reused group id is never
    taken for the kernel's.
    """
    needle = f"DROVER_KERNEL_ID={kernel_id}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            # fields: state, ppid, pgrp, …
            if fields[2] != str(pgid) or fields[0] in {"Z", "X"}:
                continue
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                return True
        except (OSError, IndexError):
            continue
    return False


def _read_exit(workdir: Path) -> int | None:
    try:
        return int((workdir / _EXIT_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def _log_paths(workdir: Path) -> dict[str, str]:
    return {"stdout": str(workdir / "stdout.log"), "stderr": str(workdir / "stderr.log")}


def _cwd(spec: Mapping[str, Any], workdir: Path) -> Path:
    cwd = spec.get("cwd")
    return workdir / cwd if isinstance(cwd, str) and cwd else workdir


def _env(session: SessionWithKernels, kernel: KernelInfo) -> dict[str, str]:
    env = dict(os.environ)
    extra = kernel.spec.get("env") or {}
    env.update({str(k): str(v) for k, v in extra.items()})
    env["DROVER_SESSION_ID"] = session.id
    env["DROVER_KERNEL_ID"] = kernel.id
    return env


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
    return None
