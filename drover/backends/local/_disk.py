"""A local kernel's durable state in its working directory, and starting its supervisor.

Private to the local backend. Everything here is synchronous file and
process work: the backend runs it in a worker thread (``asyncio.to_thread``),
never in the event loop.

Each spawn of a command (role ``kernel``, or ``setup`` for a kernel's setup
command) leaves three files in ``<workdir>/.drover/``:

* ``ROLE.intent`` is written and fsynced by the daemon *before* the spawn
  (spawn token, boot id), and locked with ``flock``. The supervisor inherits
  the locked file and holds it until it exits, so the lock is taken exactly
  while a supervisor of that spawn lives, whatever happened to the daemon.
* ``ROLE.state`` is written by the supervisor: its pid and identity first,
  then the command's pid and identity once it started.
* ``ROLE.exit`` is written by the supervisor: how the command ended, or why
  it could not start.

The token ties them together: a file with another token belongs to an older
spawn and is ignored.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from drover.backends.local._proc import boot_id, process_identity, read_stat, signal_members
from drover.backends.logfiles import UnsafeLogError, create_log, tail_log

__all__ = [
    "SUPERVISOR",
    "DiskSpawn",
    "SupervisorAliveError",
    "inspect",
    "kill_supervised",
    "new_token",
    "read_tail",
    "remove",
    "spawn_supervisor",
    "state_dir",
]

#: The supervisor script, run with ``python -I -S`` (see its docstring).
SUPERVISOR = str(Path(__file__).with_name("_supervisor.py"))

# Seconds a restarted daemon waits for a live supervisor to record what it
# started (it may have been spawned a moment before the old daemon died).
_STATE_WAIT = 20.0


class SupervisorAliveError(Exception):
    """A supervisor of an earlier spawn of this role still holds the intent lock."""


def state_dir(workdir: Path) -> Path:
    """Where a kernel's spawn records live."""
    return workdir / ".drover"


def new_token() -> str:
    """A fresh spawn token."""
    return secrets.token_hex(8)


@attrs.frozen
class DiskSpawn:
    """What the files of one role say about its latest spawn.

    ``alive``: its supervisor holds the intent lock. ``state`` and ``exit``
    are the supervisor's records of *this* spawn (same token), if written.
    """

    token: str
    boot_id: str
    alive: bool
    state: Mapping[str, Any] | None
    exit: Mapping[str, Any] | None

    @property
    def started(self) -> bool:
        """The supervisor ran far enough that the command may have started."""
        return self.state is not None

    @property
    def this_boot(self) -> bool:
        """Spawned since the machine last booted."""
        return self.boot_id == boot_id()

    @property
    def supervisor(self) -> tuple[int, str] | None:
        """The supervisor's pid and identity, when recorded."""
        if self.state is None:
            return None
        pid, identity = self.state.get("supervisor_pid"), self.state.get("supervisor_identity")
        return (pid, identity) if isinstance(pid, int) and isinstance(identity, str) else None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _lock_taken(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a lock we took
    return False


def inspect(workdir: Path, role: str, *, wait: bool = True) -> DiskSpawn | None:
    """The latest spawn of ``role`` in ``workdir``, or ``None`` if it was never spawned.

    With ``wait``, a live supervisor that has not yet recorded the command's
    start (or failure) is given up to 20 s to do so.
    """
    base = state_dir(workdir)
    intent = _read_json(base / f"{role}.intent")
    if intent is None or not isinstance(intent.get("token"), str):
        return None
    token = intent["token"]
    deadline = time.monotonic() + _STATE_WAIT
    while True:
        alive = _lock_taken(base / f"{role}.intent")
        state = _read_json(base / f"{role}.state")
        done = _read_json(base / f"{role}.exit")
        state = state if state is not None and state.get("token") == token else None
        done = done if done is not None and done.get("token") == token else None
        settled = not alive or done is not None or (state is not None and "pid" in state)
        if settled or not wait or time.monotonic() > deadline:
            return DiskSpawn(token, str(intent.get("boot_id")), alive, state, done)
        time.sleep(0.02)


def remove(workdir: Path, role: str) -> None:
    """Forget every record of ``role`` (a new preparation starts from scratch)."""
    base = state_dir(workdir)
    for suffix in ("intent", "state", "exit"):
        (base / f"{role}.{suffix}").unlink(missing_ok=True)


def kill_supervised(workdir: Path, role: str, spawn: DiskSpawn, *, wait: float = 5.0) -> None:
    """SIGKILL a spawn's processes, its supervisor included; wait until its lock is free.

    Used for a spawn nobody wants any more (an earlier attempt of a kernel
    that is being prepared again), or one whose supervisor died and left
    processes behind.
    """
    supervisor = spawn.supervisor
    if supervisor is not None and spawn.this_boot:
        pid, identity = supervisor
        stat = read_stat(pid)
        # A live process with another identity has taken the pid: the
        # supervisor's session ended long ago, and the new one is not ours.
        if stat is None or not stat.live or process_identity(pid) == identity:
            signal_members(pid, signal.SIGKILL)
            if stat is not None and stat.live:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    path = state_dir(workdir) / f"{role}.intent"
    deadline = time.monotonic() + wait
    while _lock_taken(path) and time.monotonic() < deadline:
        time.sleep(0.02)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _high(fd: int) -> int:
    """A copy of ``fd`` numbered 10 or more, so that dup2 onto 0-4 never meets itself."""
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)


def spawn_supervisor(
    workdir: Path,
    role: str,
    token: str,
    *,
    command: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    grace: float,
    stdout: Path,
    stderr: Path,
) -> tuple[int, int]:
    """Record the intent durably, then start the supervisor of ``command``.

    Returns the supervisor's pid and the read end of its handshake pipe. The
    intent file is fsynced (and its directory) before anything is spawned,
    and it is locked by the time the supervisor exists: the lock passes to
    it with the spawn itself. Raises :class:`SupervisorAliveError` if a
    supervisor of an earlier spawn of ``role`` still holds the lock.
    """
    base = state_dir(workdir)
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"{role}.intent"
    opened: list[int] = []
    try:
        lock = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        opened.append(lock)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SupervisorAliveError(f"a supervisor of {path} is still running") from None
        for suffix in ("state", "exit"):
            (base / f"{role}.{suffix}").unlink(missing_ok=True)
        intent = {"token": token, "boot_id": boot_id(), "role": role, "created_at": time.time()}
        os.ftruncate(lock, 0)
        os.pwrite(lock, json.dumps(intent).encode() + b"\n", 0)
        os.fsync(lock)
        _fsync_dir(base)
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        opened.append(write_end)
        # Never through a link a setup may have planted where the log goes.
        out = create_log(stdout)
        opened.append(out)
        err = create_log(stderr)
        opened.append(err)
        high = [_high(fd) for fd in (out, err, lock, write_end)]
        opened.extend(high)
        argv = [sys.executable, "-I", "-S", SUPERVISOR, str(base / role), token, str(cwd)]
        argv += [repr(float(grace)), *command]
        try:
            pid = os.posix_spawn(
                sys.executable,
                argv,
                dict(env),
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, high[0], 1),
                    (os.POSIX_SPAWN_DUP2, high[1], 2),
                    (os.POSIX_SPAWN_DUP2, high[2], 3),
                    (os.POSIX_SPAWN_DUP2, high[3], 4),
                ],
                setsid=True,
                setsigmask=(),
                setsigdef=set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP},
            )
        except BaseException:
            os.close(read_end)
            raise
    finally:
        for fd in opened:
            os.close(fd)
    return pid, read_end


def read_tail(path: Path, chars: int) -> str:
    """The last ``chars`` characters of a text file ('' if unreadable or a link)."""
    try:
        found = tail_log(path, chars * 4)
    except (OSError, UnsafeLogError):
        return ""
    if found is None:
        return ""
    return found[0].decode(errors="replace")[-chars:].strip()
