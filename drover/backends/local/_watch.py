"""What the local backend watches, and the process work around it.

Private to the local backend: the supervisor of a command being watched, the
result of trying to start one, and the (synchronous, worker-thread) helpers
that stop, kill and read back supervised commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

import drover.backends.local._disk as disk
from drover.backends.devices import devices_of
from drover.backends.local._outcome import RUNNING_EXPECTED
from drover.backends.local._proc import process_identity, session_members, signal_members
from drover.backends.local._spec import log_paths
from drover.backends.tracking import Tracked
from drover.kinds.sessions.values import KernelReport, KernelStatus

__all__ = [
    "Attempt",
    "Check",
    "Command",
    "Watch",
    "handshake",
    "kernel_port",
    "kill_now",
    "legacy_exit",
    "lost_reason",
    "read_end",
    "recorded_port",
    "reset_for_prepare",
    "runtime_of",
    "terminate",
]

#: A fence's check, called right before a side effect (raises to stop it).
Check = Callable[[], None]

#: How an older drover's ``sh`` wrapper recorded the exit code (legacy kernels).
LEGACY_EXIT_FILE = ".drover-exit"
_STDERR_TAIL = 2000


class Watch(Tracked):
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
        super().__init__(kernel_id, runtime, confirmed=confirmed)
        self.role = role
        self.workdir = workdir
        self.supervisor_pid, self.supervisor_identity = supervisor
        self.own = own
        self.token = token
        self.grace = grace
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
            self.kernel_id, KernelStatus.RUNNING, expected=RUNNING_EXPECTED, runtime=self.runtime
        )


@attrs.frozen
class Attempt:
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
class Command:
    """One command to start: where, what, and with which environment and logs."""

    kernel_id: str
    role: str
    workdir: Path
    argv: list[str]
    cwd: Path
    env: dict[str, str]
    stdout: Path
    stderr: Path


async def handshake(fd: int, seconds: float) -> dict[str, Any] | None:
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


def terminate(watch: Watch) -> None:
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


def kill_now(watch: Watch) -> None:
    """(worker thread) SIGKILL every process of the command and its supervisor."""
    alive = process_identity(watch.supervisor_pid) == watch.supervisor_identity
    if alive or watch.token is None:
        signal_members(watch.supervisor_pid, signal.SIGKILL)
    if alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(watch.supervisor_pid, signal.SIGKILL)


def read_end(watch: Watch) -> tuple[Mapping[str, Any] | None, str]:
    """(worker thread) How a watched command ended, and the tail of a setup's stderr."""
    tail = ""
    if watch.role == "setup":
        tail = disk.read_tail(watch.workdir / "setup.stderr.log", _STDERR_TAIL)
    if watch.token is None:
        return legacy_exit(watch.workdir), tail
    spawn = disk.inspect(watch.workdir, watch.role, wait=False)
    if spawn is None or spawn.token != watch.token:
        return None, tail
    if spawn.exit is None and spawn.started:
        disk.kill_supervised(watch.workdir, watch.role, spawn)  # its supervisor was killed
    return spawn.exit, tail


def reset_for_prepare(workdir: Path, check: Check) -> disk.DiskSpawn | None:
    """(worker thread) Clear an earlier attempt's spawns; return a setup still running.

    ``check`` (the call's fence) runs right before anything is killed or removed.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    earlier = disk.inspect(workdir, "kernel", wait=False)
    if earlier is not None:
        check()
        if earlier.alive or earlier.started:
            disk.kill_supervised(workdir, "kernel", earlier)
        disk.remove(workdir, "kernel")
    setup = disk.inspect(workdir, "setup")
    if setup is not None and setup.alive and setup.supervisor is not None:
        return setup
    if setup is not None:
        check()
        if setup.started:
            disk.kill_supervised(workdir, "setup", setup)
        disk.remove(workdir, "setup")
    return None


def legacy_exit(workdir: Path) -> dict[str, Any] | None:
    try:
        return {"exit_code": int((workdir / LEGACY_EXIT_FILE).read_text().strip())}
    except (OSError, ValueError):
        return None


def lost_reason(spawn: disk.DiskSpawn | None) -> str:
    if spawn is not None and not spawn.this_boot:
        return "the machine restarted after it was started; it is not run again"
    return "its process is gone and left no exit status; it is not run again"


def runtime_of(workdir: Path, state: Mapping[str, Any], role: str) -> dict[str, Any]:
    """What the database keeps about a kernel's process (the ``runtime`` column)."""
    runtime: dict[str, Any] = {"workdir": str(workdir), **log_paths(workdir)}
    devices = recorded_devices(workdir)
    if devices:
        runtime["devices"] = devices
    if role == "setup":
        return runtime
    for key in ("pid", "identity", "supervisor_pid", "supervisor_identity", "token"):
        if key in state:
            runtime[key] = state[key]
    port = recorded_port(workdir)
    if port is not None:
        runtime["port"] = port
    return runtime


#: The file holding the kernel's ``$PORT`` (kept with the kernel, for adoption).
PORT_FILE = "port"
#: The file holding the kernel's devices of this attempt (``{"gpu": ["1"]}``).
DEVICES_FILE = "devices.json"


def recorded_devices(workdir: Path) -> dict[str, list[str]]:
    """The devices this attempt of the kernel was given (``{}`` if none)."""
    try:
        found = json.loads((workdir / DEVICES_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return devices_of({"devices": found})


def record_devices(workdir: Path, devices: Mapping[str, list[str]]) -> None:
    """(worker thread) Record the devices of this attempt; none: remove the record."""
    path = workdir / DEVICES_FILE
    if not devices:
        path.unlink(missing_ok=True)
        return
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(dict(devices)))
    partial.replace(path)


def recorded_port(workdir: Path) -> int | None:
    """The ``$PORT`` a kernel of ``workdir`` was given, if any."""
    try:
        return int((workdir / PORT_FILE).read_text())
    except (OSError, ValueError):
        return None


def kernel_port(workdir: Path) -> int:
    """The kernel's ``$PORT``: the one it was given before (a re-run or an adopted kernel
    keeps it), else a TCP port on 127.0.0.1 that nothing listens on now.

    The kernel binds it moments later; another process could take it in
    between, which a replica's health check then reports.
    """
    known = recorded_port(workdir)
    if known is not None:
        return known
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / PORT_FILE).write_text(str(port))
    return port
