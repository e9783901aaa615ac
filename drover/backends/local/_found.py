"""What a kernel's spawns found on disk mean: a supervisor to watch, or how it ended.

Private to the local backend. The same judgement serves wherever a spawn is
found: at start-up (the last daemon's kernels and setups), on ``create`` (a
spawn that already ran) and on ``destroy`` (a command nobody watches). These
functions decide; the backend keeps the watches and sends the reports.
"""

from __future__ import annotations

import logging
from pathlib import Path

import attrs

import drover.backends.local._disk as disk
from drover.backends.local._outcome import (
    RUNNING_EXPECTED,
    WANTS_PROCESS,
    kernel_ends,
    setup_ends,
)
from drover.backends.local._proc import process_identity
from drover.backends.local._watch import Check, Watch, legacy_exit, lost_reason, runtime_of
from drover.kinds.sessions.values import KernelInfo, KernelReport, KernelStatus

__all__ = [
    "Resumed",
    "ended_reports",
    "for_destroy",
    "resume",
    "settled",
    "survey",
    "watch_of",
]

log = logging.getLogger("drover.backends.local")

_K = KernelStatus
_STDERR_TAIL = 2000


@attrs.frozen
class Resumed:
    """What start-up does with one kernel: ``word`` for the log, the ``reports`` to send,
    a ``watch`` to keep, or ``restart``: carry on its interrupted preparation."""

    word: str
    reports: tuple[KernelReport, ...] = ()
    watch: Watch | None = None
    restart: bool = False


def watch_of(
    kernel_id: str,
    role: str,
    workdir: Path,
    spawn: disk.DiskSpawn,
    grace: float,
    *,
    own: bool = False,
    confirmed: bool = False,
) -> Watch:
    """The watch of a live spawn (``grace``: the supervisor's, if it recorded none)."""
    assert spawn.supervisor is not None
    return Watch(
        kernel_id, role, workdir, spawn.supervisor, own=own, confirmed=confirmed,
        runtime=runtime_of(workdir, spawn.state or {}, role), token=spawn.token,
        grace=float((spawn.state or {}).get("grace", grace)),
    )  # fmt: skip


def _legacy_watch(kernel: KernelInfo, workdir: Path, grace: float) -> Watch | None:
    """The watch of a command an older drover started under an ``sh`` wrapper, if it lives."""
    runtime = kernel.runtime or {}
    pid, identity = runtime.get("pid"), runtime.get("identity")
    if not isinstance(pid, int) or not isinstance(identity, str):
        return None
    if process_identity(pid) != identity:
        return None
    return Watch(
        kernel.id, "kernel", workdir, (pid, identity), own=False, runtime=runtime,
        token=None, grace=grace, confirmed=True,
    )  # fmt: skip


def settled(
    kernel_id: str, workdir: Path, spawn: disk.DiskSpawn, grace: float, *, own: bool
) -> tuple[Watch | None, list[KernelReport]]:
    """A kernel's command spawn found on disk: a live one is watched from now on (and
    reported RUNNING), an ended one reported from its exit record."""
    if spawn.alive:
        if spawn.supervisor is None:
            log.error("kernel %s: its supervisor lives but recorded nothing", kernel_id)
            return None, []
        watch = watch_of(kernel_id, "kernel", workdir, spawn, grace, own=own)
        return watch, [watch.running_report()]
    return None, ended_reports(kernel_id, workdir, spawn, destroying=False, unstarted=True)


def ended_reports(
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


def survey(workdir: Path) -> tuple[disk.DiskSpawn | None, disk.DiskSpawn | None]:
    """(worker thread) The kernel's command and setup spawns on disk; leftovers of dead
    supervisors killed."""
    spawns = (disk.inspect(workdir, "kernel"), disk.inspect(workdir, "setup"))
    for role, spawn in zip(("kernel", "setup"), spawns, strict=True):
        if spawn is not None and not spawn.alive and spawn.exit is None and spawn.started:
            disk.kill_supervised(workdir, role, spawn)
    return spawns


def resume(
    kernel: KernelInfo,
    workdir: Path,
    spawn: disk.DiskSpawn | None,
    setup: disk.DiskSpawn | None,
    grace: float,
) -> Resumed:
    """What start-up does with one kernel, given its spawns on disk."""
    runtime = kernel.runtime or {}
    if kernel.status in (_K.PREPARING, _K.PULLING):
        if setup is not None and setup.alive and setup.supervisor is not None:
            return Resumed("adopted", watch=watch_of(kernel.id, "setup", workdir, setup, grace))
        if setup is not None and setup.exit is not None:
            tail = disk.read_tail(workdir / "setup.stderr.log", _STDERR_TAIL)
            ends = setup_ends(kernel.id, setup.exit, destroying=False, stderr_tail=tail)
            return Resumed("ended", tuple(ends))
        # No tick asked for it: a restart carries on an interrupted preparation.
        return Resumed("restarted", restart=True)
    if kernel.status == _K.PREPARED:
        # Its session is PREPARED too: start-sessions calls create(), which
        # adopts what was started (reporting RUNNING now would leave the
        # session where no handler looks for it).
        return Resumed("left to start-sessions")
    if kernel.status == _K.CREATING:
        if spawn is None or (not spawn.started and not spawn.alive and spawn.this_boot):
            return Resumed("never started")
        watch, reports = settled(kernel.id, workdir, spawn, grace, own=False)
        word = "adopted" if spawn.alive else "ended" if spawn.exit is not None else "lost"
        return Resumed(word, tuple(reports), watch)
    # RUNNING or TERMINATING: its RUNNING report committed.
    if runtime.get("token") is None and isinstance(runtime.get("pid"), int):
        return _resume_legacy(kernel, workdir, grace)
    if spawn is None or spawn.token != runtime.get("token"):
        spawn = None
    if spawn is not None and spawn.alive and spawn.supervisor is not None:
        return Resumed(
            "adopted", watch=watch_of(kernel.id, "kernel", workdir, spawn, grace, confirmed=True)
        )
    record = spawn.exit if spawn is not None else None
    ends = kernel_ends(
        kernel.id, record, destroying=False, runtime=runtime, lost=lost_reason(spawn)
    )
    return Resumed("ended" if record is not None else "lost", tuple(ends))


def _resume_legacy(kernel: KernelInfo, workdir: Path, grace: float) -> Resumed:
    runtime = kernel.runtime or {}
    workdir = Path(runtime.get("workdir", workdir))
    watch = _legacy_watch(kernel, workdir, grace)
    if watch is not None:
        return Resumed("adopted", watch=watch)
    record = legacy_exit(workdir)
    ends = kernel_ends(kernel.id, record, destroying=False, runtime=runtime, lost=lost_reason(None))
    return Resumed("ended" if record is not None else "lost", tuple(ends))


def for_destroy(
    kernel: KernelInfo, workdir: Path, grace: float, check: Check
) -> tuple[Watch | None, list[KernelReport]]:
    """(worker thread) The command of a live kernel this daemon does not watch (any more),
    for destroy: its watch if it lives (destroy stops it), else how it ended.

    A command of the kernel's current attempt that already ended is reported
    from its exit record; a supervisor that died without recording the end
    may have left processes, which are killed (``check``, the destroy's
    fence, first), as destroy promises.
    """
    runtime = kernel.runtime or {}
    if runtime.get("token") is None and "pid" in runtime:
        return _legacy_for_destroy(kernel, workdir, grace)
    # Waiting lets a supervisor spawned a moment ago record its command,
    # which is then adopted and stopped instead of escaping the destroy.
    spawn = disk.inspect(workdir, "kernel")
    # A kernel never reported RUNNING (a crash came first) has no token in
    # the database; its spawn on disk is the current attempt's.
    if spawn is None or runtime.get("token") not in (None, spawn.token):
        return None, []
    unstarted = kernel.status in RUNNING_EXPECTED
    if spawn.alive:
        if spawn.supervisor is None:
            return None, []
        return watch_of(kernel.id, "kernel", workdir, spawn, grace, confirmed=not unstarted), []
    # Only a kernel that wants a process has its current attempt's spawn
    # on disk: an earlier attempt's would be reset by its preparation.
    if kernel.status not in WANTS_PROCESS or not (spawn.started or spawn.exit is not None):
        return None, []
    if spawn.exit is None and spawn.started:
        check()
        disk.kill_supervised(workdir, "kernel", spawn)
    return None, ended_reports(kernel.id, workdir, spawn, destroying=True, unstarted=unstarted)


def _legacy_for_destroy(
    kernel: KernelInfo, workdir: Path, grace: float
) -> tuple[Watch | None, list[KernelReport]]:
    runtime = kernel.runtime or {}
    if not isinstance(runtime.get("pid"), int) or not isinstance(runtime.get("identity"), str):
        return None, []
    workdir = Path(runtime.get("workdir", workdir))
    watch = _legacy_watch(kernel, workdir, grace)
    if watch is not None:
        return watch, []
    # An older drover's wrapper that ended: its exit file, if it wrote one.
    record = legacy_exit(workdir)
    if record is None:
        return None, []
    return None, kernel_ends(kernel.id, record, destroying=True, runtime=runtime)
