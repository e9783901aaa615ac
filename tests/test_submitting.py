"""Submitting (issue 22): the working directory exists before the setup runs, and
``drover submit --cwd``; a kernel no agent could ever hold is refused at submit; a
multi-kernel session's pending reason compares the session with what is free."""

from __future__ import annotations

from pathlib import Path

from daemon_helpers import running_daemon, wait_for
from test_cli import cli, harness  # noqa: F401  (fixtures: the CLI on this test's database)
from test_local_backend import drover_cli

from drover import SessionStatus

S = SessionStatus


async def test_setup_and_command_run_in_a_cwd_created_first(database, tmp_path: Path):
    """A session file with cwd = "sub" and a setup that makes sub (the issue's case), and
    `drover submit --cwd`: both start, and setup and command both run in the cwd."""
    session_file = tmp_path / "session.toml"
    session_file.write_text(
        'name = "from-file"\n'
        "[[kernels]]\n"
        'command = ["sh", "-c", "pwd > command-ran-in"]\n'
        'cwd = "sub"\n'
        'setup = "mkdir -p sub && pwd > setup-ran-in"\n'
        "cpu = 0.5\nmem = 64\n"
    )
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        from_file = (await drover_cli(database, "submit", "--file", str(session_file))).strip()
        flags = ["--cwd", "a/b", "--cpu", "0.5", "--mem", "64", "--setup", "pwd > setup-ran-in"]
        command = ["--", "sh", "-c", "pwd > command-ran-in"]
        from_flags = (await drover_cli(database, "submit", *flags, *command)).strip()
        for sid, cwd in ((from_file, "sub"), (from_flags, "a/b")):

            async def ended(sid: str = sid) -> object:
                s = await app.repository.get_session(sid)
                return s if s.status in (S.TERMINATED, S.ERROR, S.CANCELLED) else None

            s = await wait_for(ended, timeout=60, what=f"{sid} to end")
            assert (s.status, s.result) == (S.TERMINATED, "SUCCESS"), s
            (k,) = s.kernels
            assert k.spec["cwd"] == cwd
            where = Path(k.runtime["workdir"]) / cwd
            assert (where / "setup-ran-in").read_text().strip() == str(where)
            assert (where / "command-ran-in").read_text().strip() == str(where)


def test_a_kernel_larger_than_every_agent_is_refused_at_submit(cli, harness):  # noqa: F811
    """Issue 22: `--cpu 64` on a small machine was accepted and waited forever."""
    result = cli("submit", "--cpu", "100000", "--mem", "64", "--", "true")
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(
        "Error: kernel 1 needs cpu=100000 mem=64: no agent is that large even when idle "
        "(the largest, "
    )
    assert harness(lambda h: h.repository.list_sessions()) == []
    # A kernel that fits an idle agent is accepted, busy or not.
    assert cli("submit", "--cpu", "0.5", "--mem", "64", "--", "true").exit_code == 0
