"""SIGTERM to a real `drover run` process mid-run, then a restart: nothing lost or stuck."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest
from daemon_helpers import (
    AGENT,
    daemon_flags,
    ends_on_word,
    live_processes,
    process_alive,
    running_daemon,
    wait_for,
)
from sqlalchemy.exc import OperationalError

from drover import KernelReport, KernelStatus, SessionStatus
from drover.app import App
from drover.config import load_config

S = SessionStatus
K = KernelStatus


def _write_config(path: Path, database, data_dir: Path) -> None:
    agents = "\n".join(
        f'[[backend.agents]]\nid = "{a["id"]}"\ncpu = {a["cpu"]}\nmem = {a["mem"]}\n' for a in AGENT
    )
    path.write_text(
        f'database_url = "{database.url}"\n'
        f'database_schema = "{database.schema or ""}"\n'
        f'data_dir = "{data_dir}"\n'
        "heartbeat_interval = 0.5\n"
        # A daemon killed with -9 leaves its claims (PostgreSQL) until they expire.
        "claim_ttl = 3.0\n"
        "safety_interval = 2.0\n"
        "shutdown_grace = 5.0\n"
        'log_format = "json"\n'
        "[backend]\n"
        'name = "local"\n'
        "kill_grace = 2.0\n" + agents
    )


async def _start(config: Path, log: Path) -> asyncio.subprocess.Process:
    with open(log, "ab") as handle:  # the child keeps its own copy of the descriptor
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "drover",
            "--config",
            str(config),
            "run",
            stdout=handle,
            stderr=handle,
            env={k: v for k, v in os.environ.items() if not k.startswith("DROVER_")},
        )


async def _stop(proc: asyncio.subprocess.Process) -> int:
    proc.send_signal(signal.SIGTERM)
    return await asyncio.wait_for(proc.wait(), timeout=30)


async def test_sigterm_then_restart_adopts_live_kernels_and_judges_dead_ones(
    database, tmp_path: Path
):
    """A kernel killed while no daemon runs is judged from its supervisor's record
    (ERROR, killed by SIGKILL); one that left no record at all is lost (ERROR)."""
    config = tmp_path / "drover.toml"
    log = tmp_path / "daemon.log"
    _write_config(config, database, tmp_path / "data")
    app = App(load_config(config, environ={}))
    await app.check_schema(auto_upgrade=True)
    repo = app.repository
    try:
        first = await _start(config, log)
        survivor, victim, vanished = await repo.create_sessions(
            [
                {"name": "survivor", "kernels": [{"command": ["sleep", "10"], "cpu": 1}]},
                {"name": "victim", "kernels": [{"command": ["sleep", "300"], "cpu": 1}]},
                {"name": "vanished", "kernels": [{"command": ["sleep", "300"], "cpu": 1}]},
            ]
        )

        async def all_running():
            found = [await repo.get_session(s) for s in (survivor, victim, vanished)]
            return found if all(s.status == S.RUNNING for s in found) else None

        running = await wait_for(all_running, timeout=30, what="all sessions RUNNING")
        survivor_pid = running[0].kernels[0].runtime["pid"]
        victim_pid = running[1].kernels[0].runtime["pid"]
        vanished_runtime = running[2].kernels[0].runtime

        assert await _stop(first) == 0
        assert await repo.coordinators(alive_within=60) == []  # it said it stopped
        assert process_alive(survivor_pid), "kernels outlive the daemon"

        # While no daemon runs: one kernel dies, and a new session is submitted.
        os.killpg(victim_pid, signal.SIGKILL)
        await wait_for(lambda: _dead(victim_pid), what="the victim to die")
        # The other one loses its supervisor first, so nothing records its end.
        os.kill(vanished_runtime["supervisor_pid"], signal.SIGKILL)
        os.killpg(vanished_runtime["pid"], signal.SIGKILL)
        await wait_for(lambda: _dead(vanished_runtime["pid"]), what="the vanished one to die")
        (late,) = await repo.create_sessions(
            [{"name": "late", "kernels": [{"command": ["true"], "cpu": 1}]}]
        )

        second = await _start(config, log)
        try:
            v = await wait_for(
                lambda: _in(repo, victim, S.TERMINATED), timeout=30, what="victim TERMINATED"
            )
            assert [(k.status, k.exit_code, k.status_info) for k in v.kernels] == [
                (K.ERROR, -9, "killed by SIGKILL")
            ]
            assert v.status_info == "ABNORMAL_TERMINATION"
            gone = await wait_for(
                lambda: _in(repo, vanished, S.TERMINATED), timeout=30, what="vanished TERMINATED"
            )
            (k,) = gone.kernels
            assert (k.status, k.exit_code) == (K.ERROR, None)
            assert k.status_info.startswith("lost: "), k.status_info
            s = await wait_for(
                lambda: _in(repo, survivor, S.TERMINATED), timeout=30, what="survivor ends"
            )
            # adopted, watched until it exited, exit code read from its exit file
            assert (s.result, s.kernels[0].exit_code) == ("SUCCESS", 0)
            ll = await wait_for(lambda: _in(repo, late, S.TERMINATED), timeout=30, what="late")
            assert ll.result == "SUCCESS"
            assert len(await repo.coordinators(alive_within=60)) == 1
        finally:
            assert await _stop(second) == 0
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
        assert any("adopted=1 ended=1 lost=1" in line["message"] for line in lines), log.read_text()
        # nothing half-written: every session is terminal with terminal kernels
        for session in await repo.list_sessions():
            assert session.status == S.TERMINATED
            assert all(k.status in (K.TERMINATED, K.ERROR) for k in session.kernels)
    finally:
        await app.close()


async def _dead(pid: int) -> bool:
    return not process_alive(pid)


async def _in(repo, sid, status):
    s = await repo.get_session(sid)
    return s if s.status == status else None


# -- crashes and restarts of the local backend (issue 11) ---------------------------------

# A real `drover run` that dies (SIGKILL, as in a crash) the moment it is about to
# commit a RUNNING report: after the spawn, before the commit.
_CRASH_BEFORE_RUNNING_COMMITS = """
import os, signal, sys
from drover.kinds.sessions.store import SessionRepository as Repository

original = Repository.report_kernel_statuses

async def crash_before_running_commits(self, reports):
    if any(r.status == "RUNNING" for r in reports):
        os.kill(os.getpid(), signal.SIGKILL)
    return await original(self, reports)

Repository.report_kernel_statuses = crash_before_running_commits
sys.argv = ["drover", "--config", sys.argv[1], "run"]
from drover.cli.group import main
main()
"""


def _kernel(command: list[str], **extra: object) -> dict[str, object]:
    return {"command": command, "cpu": 0.1, "mem": 16, **extra}


def _with_env(marker: str) -> list[int]:
    """Pids of live processes whose environment holds ``marker`` (``NAME=value``)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in environ and process_alive(int(name)):
            found.append(int(name))
    return found


async def _crash_before_running_commits(config: Path, tmp_path: Path) -> None:
    """Run a daemon on ``config`` that is killed with -9 before its RUNNING report commits."""
    script = tmp_path / "crashing_daemon.py"
    script.write_text(_CRASH_BEFORE_RUNNING_COMMITS)
    with open(tmp_path / "daemon.log", "ab") as handle:
        crashing = await asyncio.create_subprocess_exec(
            sys.executable, str(script), str(config), stdout=handle, stderr=handle,
            env={k: v for k, v in os.environ.items() if not k.startswith("DROVER_")},
        )  # fmt: skip
    assert await asyncio.wait_for(crashing.wait(), timeout=60) == -signal.SIGKILL


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


async def test_a_crash_between_spawn_and_running_report_never_runs_a_kernel_twice(
    database, tmp_path: Path
):
    """The daemon dies after spawning a 20-kernel session and before its RUNNING report
    commits; the next daemon adopts the 20 processes instead of spawning 20 more."""
    config = tmp_path / "drover.toml"
    _write_config(config, database, tmp_path / "data")
    runs = tmp_path / "runs.txt"
    app = App(load_config(config, environ={}))
    await app.check_schema(auto_upgrade=True)
    repo = app.repository
    try:
        command = ["sh", "-c", f"echo $$ >> {runs}; exec sleep 60"]
        (sid,) = await repo.create_sessions([{"kernels": [_kernel(command)] * 20}])
        await _crash_before_running_commits(config, tmp_path)
        s = await repo.get_session(sid)
        assert {k.status for k in s.kernels} == {K.PREPARED}, "nothing committed RUNNING"
        await wait_for(lambda: _now(len(_lines(runs)) == 20), what="20 commands started")
        first = {int(p) for p in _lines(runs)}

        async with running_daemon(database, tmp_path / "data") as (second, _daemon):
            s = await wait_for(lambda: _in(second.repository, sid, S.RUNNING), what="RUNNING")
            assert {k.runtime["pid"] for k in s.kernels} == first, "the same processes"
            await asyncio.sleep(1.0)  # time enough to spawn anything twice
            assert len(_lines(runs)) == 20, _lines(runs)
            assert all(process_alive(pid) for pid in first)
            await second.repository.request_termination([sid])
            s = await wait_for(
                lambda: _in(second.repository, sid, S.TERMINATED), timeout=30, what="end"
            )
        assert all(live_processes(pgid=pid) == [] for pid in first)
        assert len(_lines(runs)) == 20
        assert {(k.status, k.exit_code) for k in s.kernels} == {(K.TERMINATED, -15)}
    finally:
        await app.close()


async def test_a_kernel_that_ended_before_its_running_report_keeps_its_exit_code_when_destroyed(
    database, tmp_path: Path
):
    """The kill campaign's lost exit codes. A daemon spawns a session's commands and is
    killed before their RUNNING report commits; the commands exit (3 and 0) and the user
    terminates the session, still PREPARED. The next daemon's terminate-sessions destroys
    kernels whose processes are gone: their exit codes, read from the supervisors' exit
    records, are committed before the session's transition ends the kernels."""
    config = tmp_path / "drover.toml"
    _write_config(config, database, tmp_path / "data")
    exits = tmp_path / "exits.txt"
    app = App(load_config(config, environ={}))
    await app.check_schema(auto_upgrade=True)
    repo = app.repository
    try:
        commands = [["sh", "-c", f"echo {code} >> {exits}; exit {code}"] for code in (3, 0)]
        (sid,) = await repo.create_sessions([{"kernels": [_kernel(c) for c in commands]}])
        await _crash_before_running_commits(config, tmp_path)
        await wait_for(lambda: _now(len(_lines(exits)) == 2), what="both commands to exit")
        s = await repo.get_session(sid)
        assert (s.status, {k.status for k in s.kernels}) == (S.PREPARED, {K.PREPARED})
        await repo.request_termination([sid])

        async with running_daemon(database, tmp_path / "data") as (second, _daemon):
            s = await wait_for(
                lambda: _in(second.repository, sid, S.TERMINATED), timeout=30, what="the end"
            )
            history = [
                [
                    (r.source, r.from_status, r.to_status)
                    for r in await second.repository.kernel_history(kernel_id=k.id)
                ]
                for k in s.kernels
            ]
        assert [(k.status, k.exit_code, k.status_info) for k in s.kernels] == [
            (K.TERMINATED, 3, "destroyed; exited with code 3"),
            (K.TERMINATED, 0, "destroyed; exited with code 0"),
        ]
        assert (s.status_info, s.result) == ("USER_REQUESTED", "CANCELLED")
        for rows in history:  # it ran: RUNNING (never committed by the first daemon) first
            assert rows[-2:] == [
                ("backend", K.PREPARED, K.RUNNING),
                ("backend", K.RUNNING, K.TERMINATED),
            ], rows
        assert len(_lines(exits)) == 2, "nothing ran twice"
    finally:
        await app.close()


async def test_an_exit_while_the_daemon_was_down_is_judged_like_any_other(database, tmp_path: Path):
    """Exit 3 while no daemon runs: ERROR (not TERMINATED); exit 0: TERMINATED, SUCCESS. A
    kernel adopted by the next daemon and terminated keeps its own exit code (143)."""
    data = tmp_path / "data"
    async with running_daemon(database, data) as (app, _daemon):
        failing, succeeding, trapping = await app.repository.create_sessions(
            [
                {"kernels": [_kernel(["sh", "-c", "sleep 1.5; exit 3"])]},
                {"kernels": [_kernel(["sh", "-c", "sleep 1.5"])]},
                {"kernels": [_kernel(["sh", "-c", 'trap "exit 143" TERM; sleep 60 & wait'])]},
            ]
        )
        running = [
            await wait_for(lambda sid=sid: _in(app.repository, sid, S.RUNNING), what="RUNNING")
            for sid in (failing, succeeding, trapping)
        ]
        pids = [s.kernels[0].runtime["pid"] for s in running]
    for pid in pids[:2]:
        await wait_for(lambda pid=pid: _dead(pid), what=f"pid {pid} to exit")
    async with running_daemon(database, data) as (app, _daemon):
        repo = app.repository
        f = await wait_for(lambda: _in(repo, failing, S.TERMINATED), what="failing ends")
        assert [(k.status, k.exit_code, k.status_info) for k in f.kernels] == [
            (K.ERROR, 3, "exited with code 3")
        ]
        assert (f.status_info, f.result) == ("ABNORMAL_TERMINATION", "FAILURE")
        ok = await wait_for(lambda: _in(repo, succeeding, S.TERMINATED), what="succeeding")
        assert [(k.status, k.exit_code) for k in ok.kernels] == [(K.TERMINATED, 0)]
        assert (ok.status_info, ok.result) == ("KERNEL_EXITED", "SUCCESS")
        assert (await repo.get_session(trapping)).status == S.RUNNING  # adopted
        await repo.request_termination([trapping])
        t = await wait_for(lambda: _in(repo, trapping, S.TERMINATED), what="trapping ends")
        assert [(k.status, k.exit_code, k.status_info) for k in t.kernels] == [
            (K.TERMINATED, 143, "destroyed; exited with code 143")
        ]
        assert live_processes(pgid=pids[2]) == []


async def test_an_exit_not_committed_before_shutdown_is_reported_at_the_next_start(
    database, tmp_path: Path, monkeypatch
):
    """The database refuses the exit report until the daemon stops; the next daemon reads
    the exit record at start-up and reports it (ERROR, exit 3)."""
    data = tmp_path / "data"
    async with running_daemon(database, data) as (app, _daemon):
        go = tmp_path / "go"
        (sid,) = await app.repository.create_sessions(
            [{"kernels": [_kernel(ends_on_word(go, then="exit 3"))]}]
        )
        s = await wait_for(lambda: _in(app.repository, sid, S.RUNNING), what="RUNNING")
        refused = []

        async def unwritable(reports):
            refused.append(reports)
            raise OperationalError("UPDATE entities", {}, Exception("readonly database"))

        monkeypatch.setattr(app.repository, "report_kernel_statuses", unwritable)
        go.touch()
        await wait_for(lambda: _dead(s.kernels[0].runtime["pid"]), what="the exit")
        await wait_for(lambda: _now(len(refused) >= 2), what="the report to be retried")
    assert (await app.repository.get_session(sid)).status == S.RUNNING  # nothing committed
    async with running_daemon(database, data) as (app, _daemon):
        s = await wait_for(lambda: _in(app.repository, sid, S.TERMINATED), what="TERMINATED")
        assert [(k.status, k.exit_code, k.status_info) for k in s.kernels] == [
            (K.ERROR, 3, "exited with code 3")
        ]


@pytest.mark.parametrize("setup_survives", [True, False], ids=["adopted", "restarted"])
async def test_a_setup_interrupted_by_a_crash_is_adopted_or_restarted(
    database, tmp_path: Path, setup_survives: bool
):
    """The daemon is killed while a kernel's setup runs. The next daemon adopts the setup if
    it still runs (it runs once), or restarts the preparation if it died with the daemon;
    either way the session completes, long before prepare-sessions' 900 s timeout."""
    config = tmp_path / "drover.toml"
    log = tmp_path / "daemon.log"
    _write_config(config, database, tmp_path / "data")
    runs = tmp_path / "setup-runs.txt"
    app = App(load_config(config, environ={}))
    await app.check_schema(auto_upgrade=True)
    repo = app.repository
    try:
        setup = f"echo $$ >> {runs}; sleep 3"
        (sid,) = await repo.create_sessions([{"kernels": [_kernel(["true"], setup=setup)]}])
        first = await _start(config, log)

        async def pulling():
            s = await repo.get_session(sid)
            return s if s.kernels[0].status == K.PULLING and _lines(runs) else None

        s = await wait_for(pulling, timeout=30, what="the setup to run")
        kernel_id = s.kernels[0].id
        first.kill()  # a crash: no shutdown of any kind
        await first.wait()
        setup_processes = _with_env(f"DROVER_KERNEL_ID={kernel_id}")
        assert setup_processes, "the setup outlives the daemon"
        if not setup_survives:
            for pid in setup_processes:
                os.kill(pid, signal.SIGKILL)
            await wait_for(lambda: _now(not _with_env(f"DROVER_KERNEL_ID={kernel_id}")))
        async with running_daemon(database, tmp_path / "data") as (second, _daemon):
            s = await wait_for(
                lambda: _in(second.repository, sid, S.TERMINATED), timeout=30, what="the end"
            )
        assert (s.result, s.kernels[0].status, s.kernels[0].exit_code) == (
            "SUCCESS",
            K.TERMINATED,
            0,
        )
        assert len(_lines(runs)) == (1 if setup_survives else 2), _lines(runs)
        assert _with_env(f"DROVER_KERNEL_ID={kernel_id}") == []
    finally:
        await app.close()


async def _now(value):
    return value


# How drover ran kernels before the supervisor: an `sh` wrapper that writes the exit code.
_OLD_WRAPPER = (
    'cd "$1" || exit 126; exitfile="$2"; shift 2; '
    '"$@"; code=$?; echo $code > "$exitfile"; exit $code'
)


async def test_kernels_started_by_an_older_drover_are_adopted(database, tmp_path: Path):
    """An upgrade: RUNNING kernels run by the old `sh` wrapper (pid and identity in runtime,
    no spawn token) are adopted; one exits 3 (ERROR, read from its exit file), the other is
    terminated with its whole group."""
    from drover.backends.local import process_identity

    data = tmp_path / "data"
    app = App(load_config(None, environ={}, flags=daemon_flags(database, data)))
    await app.check_schema(auto_upgrade=True)
    try:
        repo = app.repository
        exits, stays = await repo.seed_sessions(
            [
                {
                    "status": "CREATING",
                    "kernels": [_kernel(["x"], status="CREATING", agent_id=AGENT[0]["id"])],
                }
                for _ in range(2)
            ]
        )
        pids = []
        for sid, command in ((exits, ["sh", "-c", "sleep 1; exit 3"]), (stays, ["sleep", "30"])):
            (k,) = (await repo.get_session(sid)).kernels
            workdir = data / "kernels" / k.id
            workdir.mkdir(parents=True)
            argv = ["/bin/sh", "-c", _OLD_WRAPPER, "drover-kernel", str(workdir)]
            argv += [str(workdir / ".drover-exit"), *command]
            pid = await asyncio.to_thread(
                os.posix_spawn, "/bin/sh", argv, dict(os.environ), setsid=True
            )
            pids.append(pid)
            runtime = {"pid": pid, "identity": process_identity(pid), "workdir": str(workdir)}
            await repo.report_kernel_statuses([KernelReport(k.id, K.RUNNING, runtime=runtime)])
    finally:
        await app.close()
    async with running_daemon(database, data) as (app, _daemon):
        repo = app.repository
        e = await wait_for(lambda: _in(repo, exits, S.TERMINATED), what="the exit")
        assert [(k.status, k.exit_code, k.status_info) for k in e.kernels] == [
            (K.ERROR, 3, "exited with code 3")
        ]
        await wait_for(lambda: _in(repo, stays, S.RUNNING), what="RUNNING")
        await repo.request_termination([stays])
        t = await wait_for(lambda: _in(repo, stays, S.TERMINATED), timeout=30, what="the end")
        assert t.kernels[0].status == K.TERMINATED
        assert live_processes(sid=pids[1]) == []
