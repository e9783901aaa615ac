"""The operator CLI: text and --json output, errors, and configuration."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from drover.cli import main
from drover.cli.main import main as group
from drover.testing import CoordinatorHarness


@pytest.fixture
def harness(database):
    """Run ``await fn(h)`` on a harness over the same database, in its own event loop.

    The CLI runs its own event loop, so these tests are synchronous.
    """

    def call(fn):
        async def go():
            async with CoordinatorHarness(
                database_url=database.url, database_schema=database.schema
            ) as h:
                return await fn(h)

        return asyncio.run(go())

    return call


@pytest.fixture
def cli(database, harness, monkeypatch, tmp_path):
    """Invoke `drover` against this test's (migrated) database and PostgreSQL schema."""
    harness(lambda h: asyncio.sleep(0))  # entering the harness upgrades the schema
    monkeypatch.chdir(tmp_path)  # no stray ./drover.toml
    for var in ("DROVER_CONFIG", "DROVER_DATABASE_URL", "DROVER_LOG_FORMAT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DROVER_DATABASE_URL", database.url)
    if database.schema:
        monkeypatch.setenv("DROVER_DATABASE_SCHEMA", database.schema)
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(main, list(args), catch_exceptions=False)

    return invoke


def test_submit_then_sessions_show_and_terminate(cli, harness):
    """submit prints an id; sessions/show list it in text and JSON; terminate cancels it."""
    result = cli(
        "submit", "--name", "hello", "--kernels", "2", "--cpu", "2", "--mem", "128",
        "--env", "A=1", "--option", "prepare-sessions.timeout=60", "--", "echo", "hi",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    sid = result.output.strip()
    s = harness(lambda h: h.session(sid))
    assert s.name == "hello"
    assert s.spec == {"options": {"prepare-sessions": {"timeout": 60}}}
    assert [k.spec for k in s.kernels] == [
        {"command": ["echo", "hi"], "cpu": 2.0, "mem": 128.0, "env": {"A": "1"}}
    ] * 2

    listed = json.loads(cli("sessions", "--json").output)
    assert [(x["id"], x["name"], x["status"], len(x["kernels"])) for x in listed] == [
        (sid, "hello", "PENDING", 2)
    ]
    assert set(listed[0]) >= {"id", "name", "status", "status_info", "result", "kernels"}
    text = cli("sessions").output.splitlines()
    assert text[0].split("\t") == [
        "id", "name", "status", "kernels", "result", "status_info", "since"
    ]  # fmt: skip
    assert text[1].split("\t")[:4] == [sid, "hello", "PENDING", "2"]

    harness(lambda h: h.tick("schedule-sessions"))
    shown = json.loads(cli("show", sid[:20], "--json").output)
    assert shown["status"] == "SCHEDULED"
    assert [k["agent_id"] for k in shown["kernels"]] == ["sim-2", "sim-1"] or all(
        k["agent_id"] for k in shown["kernels"]
    )
    assert [(h["handler"], h["to_status"]) for h in shown["history"]] == [
        ("schedule-sessions", "SCHEDULED")
    ]
    text = cli("show", sid).output
    assert f"session      {sid}  (hello)" in text
    assert "schedule-sessions\tSUCCESS\tPENDING → SCHEDULED" in text

    out = json.loads(cli("terminate", sid, "--json").output)
    assert out == [
        {
            "id": sid,
            "kind": "session",
            "from_status": "SCHEDULED",
            "to_status": "TERMINATING",
            "changed": True,
        }
    ]
    again = cli("terminate", sid)
    assert again.output.strip() == f"{sid}: already TERMINATING, nothing to do"


def test_submit_from_a_file_with_different_kernels(cli, harness, tmp_path: Path):
    """--file session.toml allows kernels that differ, and per-session options."""
    path = tmp_path / "session.toml"
    path.write_text(
        'name = "mixed"\npriority = 3\n'
        "[options.start-sessions]\ntimeout = 30\n"
        '[[kernels]]\ncommand = ["python", "-c", "print(1)"]\ncpu = 2\nmem = 512\n'
        '[[kernels]]\ncommand = ["sleep", "1"]\ncpu = 1\nmem = 64\nsetup = "true"\n'
    )
    result = cli("submit", "--file", str(path), "--json")
    assert result.exit_code == 0, result.output
    s = harness(lambda h: h.session(json.loads(result.output)["id"]))
    assert (s.name, s.priority) == ("mixed", 3)
    assert s.spec == {"options": {"start-sessions": {"timeout": 30}}}
    assert [k.spec["cpu"] for k in s.kernels] == [2, 1]
    assert s.kernels[1].spec["setup"] == "true"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["submit"], "nothing to run"),
        (["submit", "--env", "NOEQUALS", "--", "true"], "'NOEQUALS' is not NAME=VALUE"),
        (["submit", "--option", "timeout=3", "--", "true"], "is not HANDLER.FIELD=VALUE"),
        (["submit", "--option", "x.timeout=soon", "--", "true"], "'soon' is not a number"),
        (["submit", "--option", "x.retries=1", "--", "true"], "unknown option 'retries'"),
        (["show", "no-such-id"], "no session with id 'no-such-id'"),
        (["terminate", "no-such-id"], "no session with id 'no-such-id'"),
    ],
)
def test_bad_input_gets_one_clear_line_and_writes_nothing(cli, harness, args, message):
    """Errors name the problem, exit non-zero, and create nothing."""
    result = cli(*args)
    assert result.exit_code != 0
    assert message in result.output
    assert harness(lambda h: h.repository.list_sessions()) == []


def test_status_shows_counts_and_no_live_coordinator(cli, harness):
    """status counts sessions by status and says when no daemon is alive."""
    harness(lambda h: h.create_session())
    harness(lambda h: h.create_session())
    data = json.loads(cli("status", "--json").output)
    assert data["coordinators"] == []
    assert data["sessions"]["PENDING"] == 2
    assert set(data["sessions"]) >= {"PENDING", "RUNNING", "TERMINATED"}
    text = cli("status").output
    assert "no live coordinator" in text
    assert "PENDING\t2" in text


def test_a_database_that_is_not_upgraded_is_one_clear_line(tmp_path, monkeypatch):
    """Commands other than run/db upgrade refuse an empty database, saying what to do."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        group, ["--database", f"sqlite+aiosqlite:///{tmp_path}/new.db", "sessions"]
    )
    assert result.exit_code == 1
    assert "run `drover db upgrade` first" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_bad_configuration_names_the_key_and_the_file(tmp_path, monkeypatch):
    """An unknown key or a wrong type stops the daemon before it starts."""
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "drover.toml"
    bad.write_text('databse_url = "x"\n[handlers.prepare-sessions]\ntimeout = "soon"\n')
    result = CliRunner().invoke(group, ["run"])
    assert result.exit_code == 1
    assert "unknown key 'databse_url' (from file drover.toml)" in result.output
    assert (
        "handlers.prepare-sessions.timeout: invalid value for type, expected float | None, "
        "got 'soon' (from file drover.toml)"
    ) in result.output
    bad.write_text("log_format = 'xml'\n")
    result = CliRunner().invoke(group, ["run"])
    assert "log_format = 'xml' (from file drover.toml): expected one of ['json', 'text']" in (
        result.output
    )
    result = CliRunner().invoke(group, ["--config", "missing.toml", "run"])
    assert "configuration file missing.toml does not exist" in result.output


def test_config_show_says_where_each_value_came_from(tmp_path, monkeypatch):
    """flags > environment > file > defaults, each value labelled with its source."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "drover.toml").write_text(
        'log_level = "DEBUG"\ndata_dir = "/from/file"\n[handlers.prepare-sessions]\ntimeout = 60\n'
    )
    monkeypatch.setenv("DROVER_DATA_DIR", "/from/env")
    monkeypatch.setenv("DROVER_HANDLERS__PREPARE_SESSIONS__MAX_RETRIES", "2")
    result = CliRunner().invoke(
        group, ["--database", "sqlite+aiosqlite:///flag.db", "config", "show", "--json"]
    )
    values = json.loads(result.output)["values"]
    assert values["database_url"] == {
        "value": "sqlite+aiosqlite:///flag.db",
        "source": "flag database_url",
    }
    assert values["data_dir"] == {"value": "/from/env", "source": "env DROVER_DATA_DIR"}
    assert values["log_level"] == {"value": "DEBUG", "source": "file drover.toml"}
    assert values["log_format"] == {"value": "text", "source": "default"}
    assert values["handlers.prepare-sessions.timeout"]["source"] == "file drover.toml"
    assert values["handlers.prepare-sessions.max_retries"] == {
        "value": 2,
        "source": "env DROVER_HANDLERS__PREPARE_SESSIONS__MAX_RETRIES",
    }


def test_every_command_has_help_with_an_example():
    """--help of every command and group shows an example."""
    runner = CliRunner()

    def walk(command, path):
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])

    for path, _command in walk(group, []):
        result = runner.invoke(group, [*path, "--help"])
        assert result.exit_code == 0, path
        assert "Example" in result.output, f"`drover {' '.join(path)} --help` has no example"
