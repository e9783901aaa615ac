"""SIGTERM to a real `drover run` process mid-run, then a restart: nothing lost or stuck."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from daemon_helpers import AGENT, process_alive, wait_for

from drover import KernelStatus, SessionStatus
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
                {"name": "survivor", "kernels": [{"command": ["sleep", "4"], "cpu": 1}]},
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
