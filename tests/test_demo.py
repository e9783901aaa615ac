"""The demo behind ``make demo``: daemon, real processes and CLI reach the documented outcome."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
from pathlib import Path

from drover.demo import paste_commands, run_demo
from drover.testing import CoordinatorHarness


def test_demo_sessions_settle_as_documented(database, tmp_path, capsys):
    """Each demo session ends as the README says, and the daemon stops with exit code 0."""
    if database.schema:  # the demo's CLI calls need the schema migrated first

        async def migrate() -> None:
            async with CoordinatorHarness(
                database_url=database.url, database_schema=database.schema
            ):
                pass

        asyncio.run(migrate())
    finals = run_demo(tmp_path / "demo", database_url=database.url, schema=database.schema or "")
    service = finals.pop("service")
    assert service["status"] == "DESTROYED"
    # Two replicas, one killed and replaced: three routes, all ended by the destroy.
    assert list(service["routes"].values()) == ["TERMINATED"] * 3
    assert service["replaced"] in service["routes"]
    summary = {name: (s["status"], s["result"], s["status_info"]) for name, s in finals.items()}
    assert summary == {
        "succeeds": ("TERMINATED", "SUCCESS", "KERNEL_EXITED"),
        "exits-non-zero": ("TERMINATED", "FAILURE", "ABNORMAL_TERMINATION"),
        "stopped-by-user": ("TERMINATED", "CANCELLED", "USER_REQUESTED"),
        "waits-for-room": ("TERMINATED", "SUCCESS", "KERNEL_EXITED"),
    }
    out = capsys.readouterr().out
    _check_pasteable(out, tmp_path / "demo", finals)
    assert "daemon exited with code 0" in out
    assert (
        "Error: kernel 1 needs cpu=64 mem=256: no agent is that large even when idle "
        "(the largest, demo-agent, has cpu=4 mem=4096)"
    ) in out
    assert "insufficient resources: kernel 1/1 needs cpu=4 mem=256, the largest free agent" in out
    assert (
        "hello from drover"
        in (tmp_path / "demo" / "data")
        .joinpath(
            "kernels",
            finals["succeeds"]["kernels"][0]["id"],
            "stdout.log",
        )
        .read_text()
    )


def _check_pasteable(out: str, workdir, finals) -> None:
    """Every command the demo printed runs as printed: quoted, with the demo's --config."""
    printed = [line[2:].split("   # ")[0] for line in out.splitlines() if line.startswith("$ ")]
    drover_lines = [shlex.split(line) for line in printed if "--config" in line]
    assert len(drover_lines) >= 10, printed
    for argv in drover_lines:
        assert os.access(argv[0], os.X_OK), argv  # a path to this environment's drover
        assert argv[1] == "--config", argv
        assert Path(argv[2]).resolve() == (workdir / "drover.toml").resolve(), argv
    submit = next(a for a in drover_lines if "submit" in a and "succeeds" in a)
    assert submit[-4:] == ["--", "sh", "-c", "echo hello from drover; sleep 1"]
    # The commands offered at the end run as printed, on the demo's database.
    config = str(workdir / "drover.toml")
    for args, _note in paste_commands(finals):
        if args[0] in ("run", "serve"):
            continue  # they run until stopped
        argv = [drover_lines[0][0], "--config", config, *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, (argv, done.stderr)
