"""Processes as ``/proc`` shows them: identities, sessions and groups, signal names.

Private to the local backend (Linux only). A pid alone never identifies a
process: pids are reused. A process is named by its *identity*, the boot id
and its start time in clock ticks since boot, which no other process of any
boot shares.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
from pathlib import Path

import attrs

__all__ = [
    "ProcStat",
    "boot_id",
    "describe_signal",
    "process_identity",
    "read_stat",
    "session_members",
    "signal_members",
]


@functools.cache
def boot_id() -> str:
    """This boot's id (it cannot change while this process lives)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown-boot"


@attrs.frozen
class ProcStat:
    """The fields of ``/proc/PID/stat`` the backend needs."""

    pid: int
    state: str
    pgid: int
    sid: int
    start_time: str

    @property
    def live(self) -> bool:
        """Not a zombie: a zombie has exited and only waits to be reaped."""
        return self.state not in {"Z", "X"}


def read_stat(pid: int) -> ProcStat | None:
    """The process's stat line, or ``None`` if there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ")".
    fields = text[text.rindex(")") + 2 :].split()
    return ProcStat(pid, fields[0], int(fields[2]), int(fields[3]), fields[19])


def process_identity(pid: int) -> str | None:
    """``boot_id:starttime`` of a live (non-zombie) process, or ``None`` if it is gone."""
    stat = read_stat(pid)
    if stat is None or not stat.live:
        return None
    return f"{boot_id()}:{stat.start_time}"


def _all_stats() -> list[ProcStat]:
    found = []
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit():
                stat = read_stat(int(entry.name))
                if stat is not None:
                    found.append(stat)
    return found


def session_members(sid: int) -> list[ProcStat]:
    """The live processes of session ``sid``, its leader excepted.

    A kernel's supervisor leads a session of its own, and everything the
    command starts stays in it unless it calls ``setsid`` itself. While any
    of these processes exists, ``sid`` cannot be given to a new process, so
    the list can only name the kernel's own processes.
    """
    return [s for s in _all_stats() if s.sid == sid and s.pid != sid and s.live]


def signal_members(sid: int, sig: int) -> int:
    """Send ``sig`` to every process group of session ``sid`` but the leader's; return how many."""
    groups = {s.pgid for s in session_members(sid) if s.pgid != sid}
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    # A member in the leader's own group (it never happens with drover's
    # supervisor, which starts the command in a group of its own) is signalled
    # alone, so that the leader is not.
    for stat in session_members(sid):
        if stat.pgid == sid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(stat.pid, sig)
    return len(groups)


def describe_signal(number: int) -> str:
    """``SIGTERM`` for 15; ``signal 99`` for a number with no name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
