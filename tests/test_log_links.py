"""Issue 24, point 5: a kernel cannot make drover serve (or write) a file through a link.

A kernel runs as the daemon's user in its own directory: it can replace its
``stdout.log`` with a symbolic link to any file that user can read. `drover
logs`, the session page and ``/sessions/ID/kernels/N/stdout`` refuse such a
log in one clear message; a link planted by a setup where the log goes is
never written through. Real daemon, local backend, both databases.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from daemon_helpers import running_daemon, wait_for
from slurm_helpers import (  # noqa: F401  (fixtures)
    job_prefix_fixture,
    slurm_cluster_fixture,
    slurm_settings,
)
from starlette.testclient import TestClient

from drover.app import App
from drover.backends.logfiles import UnsafeLogError, create_log, open_log, read_log, tail_log
from drover.cli import main
from drover.config import load_config
from drover.kinds.sessions.values import KernelStatus, SessionStatus
from drover.web import create_app

SECRET = "root:$6$very-secret-hash:19000:0:99999:7:::\n"


def _kernel(command: list[str], **extra: object) -> dict[str, object]:
    return {"command": command, "cpu": 1, "mem": 64, **extra}


async def _ended(app: App, sid: str):
    session = await app.repository.get_session(sid)
    return session if session.status == SessionStatus.TERMINATED else None


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file outside every kernel's directory that the daemon's user can read."""
    path = tmp_path / "shadow"
    path.write_text(SECRET)
    return path


async def _run_replacing_kernel(database, data: Path, secret: Path) -> tuple[str, dict]:
    """A kernel that writes a line, then replaces its stdout.log with a link to ``secret``."""
    swap = (
        f"echo mine; rm stdout.log stderr.log; ln -s {secret} stdout.log; ln -s {secret} stderr.log"
    )
    async with running_daemon(database, data) as (app, _daemon):
        (sid,) = await app.repository.create_sessions([{"kernels": [_kernel(["sh", "-c", swap])]}])
        session = await wait_for(lambda: _ended(app, sid), what="TERMINATED")
    (kernel,) = session.kernels
    assert Path(kernel.runtime["stdout"]).is_symlink()
    return sid, kernel.runtime


def test_a_kernel_that_links_its_log_elsewhere_is_refused_everywhere(
    database, tmp_path, secret, monkeypatch
):
    """`drover logs`, the session page and the raw log: a clear refusal, never the file."""
    sid, runtime = asyncio.run(_run_replacing_kernel(database, tmp_path / "data", secret))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DROVER_DATABASE_URL", database.url)
    monkeypatch.setenv("DROVER_DATABASE_SCHEMA", database.schema or "")
    result = CliRunner().invoke(main, ["logs", sid], catch_exceptions=False)
    assert result.exit_code == 1
    assert "very-secret" not in result.output
    (line,) = result.output.strip().splitlines()
    assert line == (
        f"Error: {runtime['stdout']} is a symbolic link: drover does not follow links in a "
        "kernel's logs (the kernel replaced its log)"
    )
    for stream in ("--stderr",):
        other = CliRunner().invoke(main, ["logs", sid, stream], catch_exceptions=False)
        assert other.exit_code == 1
        assert "is a symbolic link" in other.output
        assert "very-secret" not in other.output

    flags = {"database_url": database.url, "database_schema": database.schema or ""}
    web = create_app(App(load_config(None, environ={}, flags=flags)), close_app_on_shutdown=True)
    with TestClient(web, base_url="http://127.0.0.1:8080") as client:
        page = client.get(f"/sessions/{sid}")
        assert page.status_code == 200
        assert "very-secret" not in page.text
        assert "refused: " in page.text
        assert "is a symbolic link: drover does not follow links" in page.text
        for stream in ("stdout", "stderr"):
            raw = client.get(f"/sessions/{sid}/kernels/1/{stream}")
            assert raw.status_code == 403
            assert "very-secret" not in raw.text
            assert "is a symbolic link" in raw.text


async def test_a_link_planted_by_the_setup_is_never_written_through(database, tmp_path, secret):
    """A setup that links stdout.log to a file: the command does not start, the file is intact."""
    plant = f"ln -s {secret} stdout.log"
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        (sid,) = await app.repository.create_sessions(
            [{"kernels": [_kernel(["sh", "-c", "echo overwritten"], setup=plant)]}]
        )

        async def ended():
            s = await app.repository.get_session(sid)
            return s if s.status in (SessionStatus.TERMINATED, SessionStatus.ERROR) else None

        session = await wait_for(ended, timeout=60, what="the session to end")
    (kernel,) = session.kernels
    assert kernel.status == KernelStatus.ERROR
    assert "is a symbolic link" in (kernel.status_info or ""), kernel.status_info
    assert secret.read_text() == SECRET


def test_a_slurm_job_that_links_its_log_elsewhere_is_refused(
    database, tmp_path, secret, monkeypatch, job_prefix
):
    """The slurm backend: its logs (created before sbatch) are read the same way."""
    swap = f"echo mine; rm stdout.log; ln -s {secret} stdout.log"

    async def run() -> tuple[str, dict]:
        flags = slurm_settings(job_prefix)
        async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
            kernel = _kernel(["sh", "-c", swap])
            (sid,) = await app.repository.create_sessions([{"kernels": [kernel]}])
            session = await wait_for(lambda: _ended(app, sid), timeout=60, what="TERMINATED")
        (k,) = session.kernels
        return sid, k.runtime

    sid, runtime = asyncio.run(run())
    assert runtime["backend"] == "slurm"
    assert Path(runtime["stdout"]).is_symlink()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DROVER_DATABASE_URL", database.url)
    monkeypatch.setenv("DROVER_DATABASE_SCHEMA", database.schema or "")
    result = CliRunner().invoke(main, ["logs", sid], catch_exceptions=False)
    assert result.exit_code == 1
    assert "very-secret" not in result.output
    assert f"{runtime['stdout']} is a symbolic link" in result.output


def test_the_shared_helper_refuses_links_fifos_and_linked_directories(tmp_path, secret):
    """What every backend and reader uses: regular files only, no link in the last two steps."""
    kernel = tmp_path / "kernels" / "k1"
    kernel.mkdir(parents=True)
    (kernel / "stdout.log").write_text("line\n")
    assert read_log(kernel / "stdout.log") == b"line\n"
    assert read_log(kernel / "stdout.log", 2) == b"ne\n"
    assert tail_log(kernel / "stdout.log", 3) == (b"ne\n", 5)
    assert read_log(kernel / "missing.log") == b""
    assert tail_log(kernel / "missing.log", 3) is None
    (kernel / "stderr.log").symlink_to(secret)
    with pytest.raises(UnsafeLogError, match=r"stderr\.log is a symbolic link"):
        read_log(kernel / "stderr.log")
    with pytest.raises(UnsafeLogError, match="is a symbolic link"):
        create_log(kernel / "stderr.log")
    os.mkfifo(kernel / "fifo.log")
    with pytest.raises(UnsafeLogError, match=r"fifo\.log is not a regular file"):
        open_log(kernel / "fifo.log")
    # A kernel directory replaced by a link to a directory holding a log of that name.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "stdout.log").write_text(SECRET)
    (tmp_path / "kernels" / "k2").symlink_to(elsewhere)
    with pytest.raises(UnsafeLogError, match="k2 is a symbolic link or not a directory"):
        read_log(tmp_path / "kernels" / "k2" / "stdout.log")
    assert secret.read_text() == SECRET


def test_the_container_backend_never_writes_its_logs_through_a_link(tmp_path, secret):
    """The container backend copies a container's output to the kernel's log files: a link
    planted where a log (or its partial copy) goes is refused, the linked file untouched."""
    from drover.backends.container._logs import open_log as _open_log
    from drover.backends.container._logs import write_whole as _write_whole

    kernel = tmp_path / "kernels" / "k1"
    kernel.mkdir(parents=True)
    _write_whole(kernel / "stdout.log", "whole\n")
    assert (kernel / "stdout.log").read_text() == "whole\n"
    handle = _open_log(kernel / "stderr.log")
    handle.write("followed\n")
    handle.close()
    assert (kernel / "stderr.log").read_text() == "followed\n"
    (kernel / "stdout.log.partial").symlink_to(secret)
    with pytest.raises(UnsafeLogError, match="is a symbolic link"):
        _write_whole(kernel / "stdout.log", "overwritten\n")
    (kernel / "stderr.log").unlink()
    (kernel / "stderr.log").symlink_to(secret)
    with pytest.raises(UnsafeLogError, match="is a symbolic link"):
        _open_log(kernel / "stderr.log")
    assert secret.read_text() == SECRET
