"""The local backend with real processes, under the real daemon, on both databases.

Each test asserts what an operator would see: statuses, exit codes, kernel
history, the output of `drover show` / `drover why`, and, through /proc,
that no process of a kernel is left behind.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from daemon_helpers import ends_on_word, live_processes, running_daemon, wait_for
from sqlalchemy.exc import OperationalError

from drover import KernelStatus, SessionStatus

S = SessionStatus
K = KernelStatus


def kernel(command: list[str], **extra: object) -> dict[str, object]:
    return {"command": command, "cpu": 0.5, "mem": 64, **extra}


async def _in(app, sid, *statuses):
    s = await app.repository.get_session(sid)
    return s if s.status in statuses else None


async def drover_cli(database, *args: str) -> str:
    """Run the real `drover` command on the test's database; return its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DROVER_")}
    env["DROVER_DATABASE_URL"] = database.url
    if database.schema:
        env["DROVER_DATABASE_SCHEMA"] = database.schema
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drover", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


def shown_kernels(out: str) -> list[dict[str, str]]:
    """The kernels table of `drover show` (tab-separated when not on a terminal)."""
    lines = out.splitlines()
    start = lines.index("# kernels") + 1
    header = lines[start].split("\t")
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("# "):
            break
        rows.append(dict(zip(header, line.split("\t"), strict=True)))
    return rows


async def test_terminate_escalates_to_sigkill_and_waits_for_the_whole_group(
    database, tmp_path: Path
):
    """A command ignoring SIGTERM (and its child) is SIGKILLed after the grace; the kernel is
    reported ended only once no process of its group is left."""
    grace = 1.0
    async with running_daemon(database, tmp_path / "data", **{"backend.kill_grace": grace}) as (
        app,
        _daemon,
    ):
        (sid,) = await app.repository.create_sessions(
            [{"kernels": [kernel(["bash", "-c", 'trap "" TERM; sleep 45 & sleep 45'])]}]
        )
        s = await wait_for(lambda: _in(app, sid, S.RUNNING), what="RUNNING")
        pgid = s.kernels[0].runtime["pid"]
        await wait_for(lambda: _async(len(live_processes(pgid=pgid)) >= 2), what="both sleeps")
        asked = time.monotonic()
        await app.repository.request_termination([sid])
        s = await wait_for(lambda: _in(app, sid, S.TERMINATED), timeout=30, what="TERMINATED")
        took = time.monotonic() - asked
        assert live_processes(pgid=pgid) == [], "a process of the kernel's group survived"
        (k,) = s.kernels
        assert (k.status, k.exit_code, k.status_info) == (
            K.TERMINATED,
            -9,
            "destroyed; killed by SIGKILL",
        )
        assert took >= grace, took
        assert k.runtime["signal"] == "SIGKILL"
        rows = await app.repository.kernel_history(kernel_id=k.id)
        assert [(r.source, r.to_status, r.message) for r in rows][-1] == (
            "backend",
            K.TERMINATED,
            "destroyed; killed by SIGKILL",
        )


async def _async(value):
    return value


async def test_exit_statuses_are_the_commands_own_when_terminated(database, tmp_path: Path):
    """On SIGTERM a command may exit 143 or 0 by itself: that is what is recorded; one that
    dies of the signal is recorded as the signal (-15, "killed by SIGTERM")."""
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        (sid,) = await app.repository.create_sessions(
            [
                {
                    "kernels": [
                        kernel(["sh", "-c", 'trap "exit 143" TERM; sleep 30 & wait']),
                        kernel(["sh", "-c", 'trap "exit 0" TERM; sleep 30 & wait']),
                        kernel(["sleep", "30"]),
                    ]
                }
            ]
        )
        s = await wait_for(lambda: _in(app, sid, S.RUNNING), what="RUNNING")
        pids = [k.runtime["pid"] for k in s.kernels]
        await asyncio.sleep(0.3)  # the shells have set their traps
        await app.repository.request_termination([sid])
        s = await wait_for(lambda: _in(app, sid, S.TERMINATED), what="TERMINATED")
        assert [(k.status, k.exit_code, k.status_info) for k in s.kernels] == [
            (K.TERMINATED, 143, "destroyed; exited with code 143"),
            (K.TERMINATED, 0, "destroyed; exited with code 0"),
            (K.TERMINATED, -15, "destroyed; killed by SIGTERM"),
        ]
        assert all(live_processes(pgid=pid) == [] for pid in pids)
        out = await drover_cli(database, "show", sid)
        assert [(k["exit"], k["status_info"]) for k in shown_kernels(out)] == [
            ("143", "destroyed; exited with code 143"),
            ("0", "destroyed; exited with code 0"),
            ("SIGTERM", "destroyed; killed by SIGTERM"),
        ], out


async def test_a_death_by_signal_is_recorded_as_the_signal(database, tmp_path: Path):
    """A command killed by a signal is ERROR "killed by SIGTERM", exit code -15; a command
    that returns 143 itself is "exited with code 143". show and why say which is which."""
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        go = tmp_path / "go"
        by_signal, by_code = await app.repository.create_sessions(
            [
                {"kernels": [kernel(ends_on_word(go, then="kill -TERM $$"))]},
                {"kernels": [kernel(["sh", "-c", "exit 143"])]},
            ]
        )
        await wait_for(lambda: _in(app, by_signal, S.RUNNING), what="RUNNING")
        go.touch()
        s = await wait_for(lambda: _in(app, by_signal, S.TERMINATED), what="TERMINATED")
        (k,) = s.kernels
        assert (k.status, k.exit_code, k.status_info) == (K.ERROR, -15, "killed by SIGTERM")
        assert (s.result, s.status_info) == ("FAILURE", "ABNORMAL_TERMINATION")
        c = await wait_for(lambda: _in(app, by_code, S.TERMINATED), what="TERMINATED")
        (kc,) = c.kernels
        assert (kc.status, kc.exit_code, kc.status_info) == (K.ERROR, 143, "exited with code 143")
        shown = await drover_cli(database, "show", by_signal)
        assert [(k["exit"], k["status_info"]) for k in shown_kernels(shown)] == [
            ("SIGTERM", "killed by SIGTERM")
        ], shown
        why = await drover_cli(database, "why", by_signal)
        assert "k1 ERROR (killed by SIGTERM)" in why, why
        why = await drover_cli(database, "why", by_code)
        assert "k1 ERROR (exit 143)" in why, why


async def test_an_exit_is_kept_until_its_report_commits(database, tmp_path: Path, monkeypatch):
    """The database refuses reports while the kernel exits; the exit is retried with backoff
    and lands once the database is writable again: the session does not stay RUNNING."""
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        go = tmp_path / "go"
        (sid,) = await app.repository.create_sessions(
            [{"kernels": [kernel(ends_on_word(go, then="exit 3"))]}]
        )
        await wait_for(lambda: _in(app, sid, S.RUNNING), what="RUNNING")
        original = app.repository.report_kernel_statuses
        refused = []
        until = time.monotonic() + 3.0

        async def unwritable(reports):
            if time.monotonic() < until:
                refused.append([r.status for r in reports])
                raise OperationalError(
                    "UPDATE entities", {}, Exception("attempt to write a readonly database")
                )
            return await original(reports)

        monkeypatch.setattr(app.repository, "report_kernel_statuses", unwritable)
        go.touch()
        s = await wait_for(lambda: _in(app, sid, S.TERMINATED), timeout=30, what="TERMINATED")
        assert len(refused) >= 2, refused  # retried, not dropped after one failure
        # The kernel's own verdict, then the destroy's (applies only to a TERMINATING kernel).
        assert all(statuses == [K.ERROR, K.TERMINATED] for statuses in refused), refused
        (k,) = s.kernels
        assert (k.status, k.exit_code, k.status_info) == (K.ERROR, 3, "exited with code 3")
        assert s.status_info == "ABNORMAL_TERMINATION"


async def test_a_kernel_that_ended_before_its_end_was_reported_keeps_its_exit_code_when_destroyed(
    database, tmp_path: Path, monkeypatch
):
    """The command exits 3 and the daemon has seen it end, but has not yet read how (the
    read is held up); the session is terminated right then. destroy finds no process left
    to stop, reads the exit record itself and commits it: the kernel is not ended by the
    session's transition with no exit code, and the late report is simply refused."""
    from drover.backends.local import backend as local_backend

    go = tmp_path / "go"
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        command = ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 3"]
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel(command)]}])
        s = await wait_for(lambda: _in(app, sid, S.RUNNING), what="RUNNING")
        (k,) = s.kernels
        original = local_backend.read_end
        entered = threading.Event()

        def held_up(watch):  # runs in a worker thread
            if watch.kernel_id == k.id:
                entered.set()
                time.sleep(5.0)
            return original(watch)

        monkeypatch.setattr(local_backend, "read_end", held_up)
        go.touch()
        await wait_for(lambda: _async(entered.is_set()), what="the end to be seen")
        await app.repository.request_termination([sid])
        s = await wait_for(lambda: _in(app, sid, S.TERMINATED), timeout=30, what="TERMINATED")
        (k,) = s.kernels
        assert (k.status, k.exit_code, k.status_info) == (
            K.TERMINATED,
            3,
            "destroyed; exited with code 3",
        )
        assert (s.status_info, s.result) == ("USER_REQUESTED", "CANCELLED")
        rows = await app.repository.kernel_history(kernel_id=k.id)
        assert [(r.source, r.from_status, r.to_status) for r in rows][-1] == (
            "backend",
            K.RUNNING,
            K.TERMINATED,
        )


async def test_spawn_failures_are_kernel_failures_with_the_os_error(database, tmp_path: Path):
    """A missing command or a file without execute permission: the kernel is ERROR with the
    OS error ("command not found", "permission denied"), never RUNNING, and show/why say so."""
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        missing, denied = await app.repository.create_sessions(
            [
                {"kernels": [kernel(["drover-test-no-such-command", "x"])]},
                {"kernels": [kernel([str(script)])]},
            ]
        )
        m = await wait_for(lambda: _in(app, missing, S.TERMINATED), what="TERMINATED")
        d = await wait_for(lambda: _in(app, denied, S.TERMINATED), what="TERMINATED")
        (mk,), (dk,) = m.kernels, d.kernels
        assert (mk.status, mk.exit_code) == (K.ERROR, None)
        assert mk.status_info == (
            "failed to start: cannot run 'drover-test-no-such-command': command not found "
            "([Errno 2] No such file or directory)"
        )
        assert (dk.status, dk.exit_code) == (K.ERROR, None)
        assert dk.status_info == (
            f"failed to start: cannot run {str(script)!r}: permission denied "
            "([Errno 13] Permission denied)"
        )
        for k in (mk, dk):
            rows = await app.repository.kernel_history(kernel_id=k.id)
            assert K.RUNNING not in [r.to_status for r in rows]
        assert m.status_info == "START_FAILED" or m.status_info == "ABNORMAL_TERMINATION"
        shown = shown_kernels(await drover_cli(database, "show", missing))
        assert [(k["status"], k["exit"]) for k in shown] == [("ERROR", "")]
        assert "command not found" in shown[0]["status_info"]
        why = await drover_cli(database, "why", missing)
        assert "command not found" in why, why
        assert "exited with code 127" not in why


async def test_a_nul_byte_in_the_command_is_refused_where_it_enters(database, tmp_path: Path):
    """A NUL byte cannot reach the backend: it is refused at submission, in one line, on
    both databases (PostgreSQL's jsonb cannot store it), and nothing is written."""
    from drover.model.errors import InvalidSpecError

    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        with pytest.raises(InvalidSpecError, match="contains a NUL character"):
            await app.repository.create_sessions([{"kernels": [kernel(["echo", "a\x00b"])]}])
        assert await app.repository.list_sessions() == []


async def test_a_bad_environment_name_is_refused_where_it_enters(database, tmp_path: Path):
    """An env name with '=' could only fail once started: refused at submission (issue 24)."""
    from drover.model.errors import InvalidSpecError

    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        with pytest.raises(InvalidSpecError, match="env name 'A=B' must be non-empty text"):
            await app.repository.create_sessions(
                [{"kernels": [kernel(["true"], env={"A=B": "1"})]}]
            )
        assert await app.repository.list_sessions() == []


@pytest.mark.parametrize("setting", ["cwd"])
async def test_other_unstartable_specs_are_kernel_failures(database, tmp_path: Path, setting):
    """A working directory that cannot be created: ERROR with why.

    (A missing working directory is created before the setup runs; one under
    /proc cannot be. A bad environment name is refused at submission.)"""
    extra: dict[str, object] = {"cwd": "/proc/no/such/dir"}
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel(["true"], **extra)]}])
        s = await wait_for(lambda: _in(app, sid, S.TERMINATED), what="TERMINATED")
        (k,) = s.kernels
        assert k.status == K.ERROR
        expected = (
            "cannot enter working directory" if setting == "cwd" else "environment variable name"
        )
        assert expected in k.status_info, k.status_info


async def test_a_kernel_terminated_while_it_is_being_started_keeps_its_exit_code(
    database, tmp_path: Path
):
    """A termination that lands while the kernel's command is being started waits for the
    start: the command is stopped, and its own exit code is what is recorded (a destroy that
    looked at the kernel's disk before its spawn record existed recorded no code at all)."""
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        starter = app.backend._starter
        real_start = starter.start
        starting = asyncio.Event()

        async def slow_start(*args, **kwargs):
            starting.set()
            await asyncio.sleep(2.0)  # the start of a slow machine
            return await real_start(*args, **kwargs)

        starter.start = slow_start
        (sid,) = await app.repository.create_sessions(
            [{"kernels": [kernel(["sh", "-c", 'trap "exit 3" TERM; sleep 30 & wait'])]}]
        )
        await asyncio.wait_for(starting.wait(), timeout=20)
        await app.repository.request_termination([sid])
        s = await wait_for(lambda: _in(app, sid, S.TERMINATED), timeout=40, what="TERMINATED")
        (k,) = s.kernels
        assert (k.status, k.exit_code) == (K.TERMINATED, 3), (k.status_info, k.runtime)
        assert live_processes(pgid=k.runtime["pid"]) == []
