"""The supervisor of one local kernel command (or setup): a script, never imported by drover.

``python -I -S _supervisor.py PREFIX TOKEN CWD GRACE COMMAND...``

The local backend starts one supervisor per command, as the leader of a new
session, with the intent file it locked on fd 3 (the lock is held for the
supervisor's whole life, so "the lock is taken" means "a supervisor of this
spawn is alive", even to a daemon that restarted) and a pipe on fd 4 for the
start-up handshake. The supervisor

1. writes ``PREFIX.state`` with its own pid and identity, then starts COMMAND
   in CWD, in a process group of its own, with every signal at its default
   disposition and none blocked;
2. rewrites ``PREFIX.state`` with the command's pid and identity, or writes
   the OS error that prevented the start to ``PREFIX.exit``, and sends the
   same record as one line on fd 4;
3. waits for the command *without reaping it* (a zombie keeps its pid and so
   its process group id from being reused), then writes how it ended to
   ``PREFIX.exit``: ``exit_code``, or ``signal`` (and ``core_dumped``);
4. sends SIGTERM to what is left of the command's process group (to every
   group of the session, if any is left), SIGKILL after GRACE seconds, and
   exits once no process of the session is left.

SIGTERM, SIGINT or SIGHUP to the supervisor stop the command the same way:
SIGTERM to every process group of the session, SIGKILL after GRACE seconds.

Every record carries TOKEN, so that files of an older spawn are never taken
for this one's. Records are written whole (a temporary file renamed over the
old one); the two written after the command starts go into temporary files
whose room is taken before it starts, so a full disk cannot lose how it
ended. Only builtin modules are used and ``json`` is not: starting the
supervisor must cost as little as possible.
"""

import _signal as signal  # type: ignore[import-not-found]
import errno
import os
import sys
import time

_HANDSHAKE_FD = 4

_stop = {"requested": False, "sent": False}
_leader = {"pid": 0}
_grace = {"seconds": 10.0}
#: Bytes reserved for a record written after the command started (records are far shorter).
_RESERVE = 4096
#: Descriptors of reserved temporary files, by the record's path.
_reserved: dict[str, int] = {}


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return "unknown-boot"


def _stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (state, ppid, pgrp, session, …), or None."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _identity(pid: int) -> str | None:
    fields = _stat(pid)
    return None if fields is None else f"{_boot_id()}:{fields[19]}"


def _members(sid: int) -> list[tuple[int, int]]:
    """(pid, pgid) of the live processes of session ``sid``, the leader excepted."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == sid:
            continue
        fields = _stat(int(name))
        if fields is not None and fields[0] not in ("Z", "X") and int(fields[3]) == sid:
            found.append((int(name), int(fields[2])))
    return found


def _signal_session(sig: int) -> None:
    """Signal every process group of our session but our own."""
    me = os.getpid()
    groups = {pgid for _pid, pgid in _members(me)}
    if _leader["pid"]:
        # The command's group, always: its unreaped leader keeps the id ours.
        groups.add(_leader["pid"])
    for pgid in groups:
        if pgid == me:
            continue
        try:  # noqa: SIM105 (contextlib would cost start-up time)
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _begin_stop() -> None:
    if _stop["sent"] or not _leader["pid"]:
        return
    _stop["sent"] = True
    _signal_session(signal.SIGTERM)
    signal.setitimer(signal.ITIMER_REAL, max(_grace["seconds"], 0.001))


def _on_stop(_signum: int, _frame: object) -> None:
    _stop["requested"] = True
    _begin_stop()


def _on_alarm(_signum: int, _frame: object) -> None:
    _signal_session(signal.SIGKILL)


def _json(value: object) -> str:
    """JSON text of a small record (str, int, float, bool, None, dict)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_json(str(k))}:{_json(v)}" for k, v in value.items()) + "}"
    text = str(value)
    out = []
    for char in text:
        code = ord(char)
        if char in '"\\' or code < 0x20 or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _write(path: str, record: dict[str, object]) -> None:
    data = (_json(record) + "\n").encode("utf-8")
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = _reserved.pop(path, -1)
    if fd >= 0 and len(data) <= _RESERVE:
        # Into blocks reserved before the command started: a disk that filled
        # meanwhile cannot lose the record (JSON allows the trailing blanks).
        try:
            os.pwrite(fd, data.ljust(_RESERVE, b" "), 0)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        return
    if fd >= 0:
        os.close(fd)
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError:
        # No empty temporary file left behind (a full disk): the record is lost either way.
        _unlink(temporary)
        raise


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _reserve(path: str) -> None:
    """Take the blocks of ``path``'s next record now, while the disk has room."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    except OSError:
        return
    try:
        _write_all(fd, b" " * _RESERVE)
    except OSError:
        os.close(fd)
        _unlink(temporary)
        return
    _reserved[path] = fd


def _unlink(path: str) -> None:
    try:  # noqa: SIM105 (contextlib is not imported: starting must be cheap)
        os.unlink(path)
    except OSError:
        pass


def _handshake(record: dict[str, object]) -> None:
    try:
        os.write(_HANDSHAKE_FD, (_json(record) + "\n").encode("utf-8"))
        os.close(_HANDSHAKE_FD)
    except OSError:
        pass  # the daemon that started us is gone: the files say it all


def _which(name: str) -> str | None:
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _spawn(command: list[str]) -> int:
    defaults = set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}
    try:
        return os.posix_spawnp(
            command[0], command, os.environ, setpgroup=0, setsigdef=defaults, setsigmask=()
        )
    except OSError as error:
        if error.errno != errno.ENOEXEC:
            raise
        # A file without "#!": run it with sh, as a shell's exec would.
        path = command[0] if "/" in command[0] else _which(command[0])
        if path is None:
            raise
        argv = ["/bin/sh", path, *command[1:]]
        return os.posix_spawn(
            "/bin/sh", argv, os.environ, setpgroup=0, setsigdef=defaults, setsigmask=()
        )


def _failure(stage: str, error: OSError, subject: str) -> dict[str, object]:
    return {
        "stage": stage,
        "subject": subject,
        "errno": error.errno or 0,
        "errno_name": errno.errorcode.get(error.errno or 0, ""),
        "strerror": error.strerror or str(error),
    }


def main(argv: list[str]) -> int:
    """Supervise one command (see the module docstring); always exit 0 when done."""
    try:
        return _supervise(argv)
    finally:
        # Room reserved for a record that was never written (the command did not start).
        for path, fd in list(_reserved.items()):
            os.close(fd)
            _unlink(f"{path}.{os.getpid()}.tmp")
        _reserved.clear()


def _supervise(argv: list[str]) -> int:
    prefix, token, cwd, grace = argv[1], argv[2], argv[3], float(argv[4])
    command = argv[5:]
    _grace["seconds"] = grace
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_stop)
    signal.signal(signal.SIGALRM, _on_alarm)
    # Nothing but stdin, stdout and stderr may reach the command: not our
    # lock (the command would hold it after we are gone), nor anything the
    # daemon let leak.
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2:
            try:  # noqa: SIM105 (the listing's own descriptor is gone by now)
                os.set_inheritable(int(name), False)
            except OSError:
                pass
    me = os.getpid()
    record: dict[str, object] = {
        "token": token,
        "supervisor_pid": me,
        "supervisor_identity": _identity(me),
        "grace": grace,
    }
    # Written before the command starts: a supervisor that left this file may
    # have started it, one that did not certainly did not.
    _write(prefix + ".state", record)
    # The records written once the command runs get their room now: a command
    # that fills the disk (or a disk filled meanwhile) must not cost its exit code.
    _reserve(prefix + ".state")
    _reserve(prefix + ".exit")
    if _stop["requested"]:
        ended: dict[str, object] = {"token": token, "cancelled": True}
        _write(prefix + ".exit", ended)
        _handshake(ended)
        return 0
    try:
        os.chdir(cwd)
    except OSError as error:
        ended = {"token": token, "error": _failure("cwd", error, cwd)}
        _write(prefix + ".exit", ended)
        _handshake(ended)
        return 0
    try:
        pid = _spawn(command)
    except OSError as error:
        ended = {"token": token, "error": _failure("exec", error, command[0])}
        _write(prefix + ".exit", ended)
        _handshake(ended)
        return 0
    _leader["pid"] = pid
    record.update(pid=pid, identity=_identity(pid))
    _write(prefix + ".state", record)
    _handshake(record)
    if _stop["requested"]:
        _begin_stop()
    # Observe the exit without reaping: until we reap it, the command's pid
    # (its process group id) cannot be reused, so signalling the group is safe.
    result = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    ended = {"token": token}
    if result is None or result.si_code == os.CLD_EXITED:
        ended["exit_code"] = result.si_status if result is not None else None
    else:
        ended["signal"] = result.si_status
        ended["core_dumped"] = result.si_code == os.CLD_DUMPED
    _write(prefix + ".exit", ended)
    # The command is over; so is everything it left behind. Most commands
    # leave nothing: signal 0 to their group says so without reading all of
    # /proc. (Reaping first un-pins the group id, but a group with members
    # keeps it, and an empty one is not signalled.)
    os.waitpid(pid, 0)
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        leftovers = False
    else:
        leftovers = bool(_members(me))
    if leftovers:
        _begin_stop()
        delay = 0.01
        while _members(me):
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
    signal.setitimer(signal.ITIMER_REAL, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
