"""Retention: tick records and ended kernels' files do not grow without bound (issue 22)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from click.testing import CliRunner
from daemon_helpers import running_daemon, wait_for

from drover.cli import main
from drover.config import load_config
from drover.kinds.sessions.values import SessionStatus as S


def test_retention_is_on_by_default_and_shown_by_config_show(tmp_path, monkeypatch):
    """Tick records keep 3 days and kernel files 7 days unless configured; config show says so."""
    monkeypatch.chdir(tmp_path)
    history = load_config(None, environ={}).config.history
    assert (history.ticks_retention, history.kernel_files_retention) == ("3d", "7d")
    result = CliRunner().invoke(main, ["config", "show"], env={"DROVER_CONFIG": None})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert 'history.ticks_retention\t"3d"\tdefault' in lines, lines
    assert 'history.kernel_files_retention\t"7d"\tdefault' in lines, lines


def test_a_retention_that_is_not_a_duration_is_one_line(tmp_path):
    """The key, where it came from, and what a duration looks like."""
    config = tmp_path / "drover.toml"
    config.write_text('[history]\nticks_retention = "a while"\n')
    result = CliRunner().invoke(main, ["--config", str(config), "config", "show"])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"Error: history.ticks_retention (from file {config}): 'a while' is not a duration "
        "like 45s, 15m, 1h30m, 30d or 2w"
    )


async def test_the_daemon_deletes_old_tick_records_and_ended_kernels_files(database, tmp_path):
    """Old handler_ticks rows go; an ended kernel's directory goes, a running one's stays."""
    data = tmp_path / "data"
    async with running_daemon(database, data) as (app, _daemon):
        done, live = await app.repository.create_sessions(
            [
                {"kernels": [{"command": ["true"], "cpu": 1, "mem": 64}]},
                {"kernels": [{"command": ["sleep", "60"], "cpu": 1, "mem": 64}]},
            ]
        )

        async def settled():
            a, b = await app.repository.get_session(done), await app.repository.get_session(live)
            return a.status == S.TERMINATED and b.status == S.RUNNING and (a, b)

        ended, running = await wait_for(settled, what="one TERMINATED, one RUNNING")
        dirs = {s.id: data / "kernels" / s.kernels[0].id for s in (ended, running)}
        assert all(d.is_dir() for d in dirs.values())
        # Make both directories look two hours old: only the ended kernel's may go.
        old = time.time() - 7200
        for d in dirs.values():
            for path in (d, *d.rglob("*")):
                os.utime(path, (old, old), follow_symlinks=False)
        await app.repository.record_ticks(
            [{"handler": "ancient", "started_at": old, "duration": 0.1, "fetched": 1, "counts": {}}]
        )
    flags = {
        "history.ticks_retention": "1h",
        "history.kernel_files_retention": "1h30m",
        "history.prune_interval": 0.2,
    }
    async with running_daemon(database, data, **flags) as (app, _daemon):

        async def pruned():
            rows = await app.repository.tick_rows(None)
            gone = not dirs[done].exists() and "ancient" not in {h for h, _d, _c in rows}
            return gone

        await wait_for(pruned, what="the old tick row and the ended kernel's files to go")
        assert Path(dirs[live]).is_dir()
        assert (await app.repository.get_session(live)).status == S.RUNNING
        await app.repository.request_termination([live])
        await wait_for(lambda: _terminated(app, live), what="the live session to end", timeout=30)


async def _terminated(app, sid):
    return (await app.repository.get_session(sid)).status == S.TERMINATED


def test_logs_of_a_kernel_whose_files_were_pruned_say_why(database, tmp_path, monkeypatch):
    """`drover logs` of an ended kernel whose log is gone names the retention, not nothing."""
    import asyncio

    from drover.kinds.sessions.values import KernelReport, KernelStatus
    from drover.testing import CoordinatorHarness

    async def build() -> str:
        async with CoordinatorHarness(
            database_url=database.url, database_schema=database.schema
        ) as h:
            sid = await h.create_session(
                status=S.RUNNING, kernels=[{"command": ["true"], "status": "RUNNING"}]
            )
            (kernel,) = (await h.session(sid)).kernels
            gone = {"stdout": str(tmp_path / "gone" / "stdout.log")}
            report = KernelReport(
                kernel.id, KernelStatus.TERMINATED, (KernelStatus.RUNNING,), 0, None, gone
            )
            assert await h.repository.report_kernel_statuses([report]) == [True]
            return sid

    sid = asyncio.run(build())
    monkeypatch.setenv("DROVER_DATABASE_URL", database.url)
    monkeypatch.setenv("DROVER_DATABASE_SCHEMA", database.schema or "")
    result = CliRunner().invoke(main, ["logs", sid])
    assert result.exit_code == 1
    assert "log " in result.output
    assert "is gone (the daemon deletes an ended kernel's files after" in result.output
    assert "history.kernel_files_retention" in result.output
