"""The operator CLI: text and --json output, errors, and configuration."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path

import asyncpg
import attrs
import pytest
from click.testing import CliRunner
from conftest import PG_URL, SKIP_PG
from sqlalchemy.engine import make_url

from drover.cli import main
from drover.cli.group import main as group
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
    assert [(h["handler"], h["result"], h["to_status"]) for h in shown["history"]] == [
        ("api", "CREATED", "PENDING"),
        ("schedule-sessions", "SUCCESS", "SCHEDULED"),
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


def test_terminate_with_a_mode_the_kind_lacks_is_one_line_and_writes_nothing(cli, harness):
    """Sessions declare no termination mode: --mode abort names the problem, exits 1,
    and the session is untouched. --help shows an example with --mode."""
    sid = harness(lambda h: h.create_session())
    result = cli("terminate", sid, "--mode", "abort")
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"Error: {sid} is a session: no termination mode 'abort' (its modes: none)"
    ]
    found = harness(lambda h: h.session(sid))
    assert (found.status, found.result) == ("PENDING", None)
    assert [r.result for r in harness(lambda h: h.history(sid))] == ["CREATED"]
    assert "drover terminate 01b7c9 --mode abort" in cli("terminate", "--help").output


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
        (["submit", "-r", "gpu", "--", "true"], "'gpu' is not SLOT=AMOUNT"),
        (["submit", "-r", "gpu=lots", "--", "true"], "'lots' is not a finite number >= 0"),
        (["submit", "-r", "gpu=-1", "--", "true"], "'-1' is not a finite number >= 0"),
        (["submit", "-r", "gpu=inf", "--", "true"], "'inf' is not a finite number >= 0"),
        (["submit", "-r", "gpu=1", "-r", "gpu=2", "--", "true"], "gpu is given twice"),
        (["submit", "-r", "command=1", "--", "true"], "'command' is a kernel setting"),
        (["submit", "--resource", "tpu=1", "--", "true"], "'tpu'"),
        (["show", "no-such-id"], "no entity with id or name 'no-such-id'"),
        (["terminate", "no-such-id"], "no entity with id or name 'no-such-id'"),
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


async def _ended_three_ways(h: CoordinatorHarness) -> None:
    """Two TERMINATED SUCCESS, one TERMINATED FAILURE, one TERMINATED CANCELLED (stopped
    while running), one CANCELLED CANCELLED (cancelled while pending)."""
    for code in (0, 0, 3):
        await h.create_session(kernels=[{"cpu": 1, "sim": {"run_for": 1, "exit_code": code}}])
    stopped = await h.create_session(kernels=[{"cpu": 1}])
    await h.run_until_settled()
    h.clock.advance(2)
    await h.run_until_settled()
    await h.request_termination(stopped)
    await h.request_termination(await h.create_session(kernels=[{"cpu": 1}]))
    await h.run_until_settled()


def test_status_counts_ended_sessions_by_result(cli, harness):
    """Issue 35: beside each status, how its sessions ended (TERMINATED: 2 SUCCESS, 1
    FAILURE, 1 CANCELLED): a stop somebody asked for is not hidden in TERMINATED."""
    harness(_ended_three_ways)
    data = json.loads(cli("status", "--json").output)
    assert (data["sessions"]["TERMINATED"], data["sessions"]["CANCELLED"]) == (4, 1)
    assert data["session_results"] == {
        "TERMINATED": {"SUCCESS": 2, "FAILURE": 1, "CANCELLED": 1},
        "CANCELLED": {"CANCELLED": 1},
    }
    text = cli("status").output.splitlines()
    assert "status\tsessions\tresults" in text
    assert "TERMINATED\t4\t2 SUCCESS, 1 FAILURE, 1 CANCELLED" in text
    assert "CANCELLED\t1\t1 CANCELLED" in text
    assert "PENDING\t0\t" in text


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


# -- input checked where it enters ----------------------------------------------------------


def _one_error_line(result, message: str) -> None:
    """A refused input: non-zero exit, one line naming the problem, no traceback.

    A flag click itself refuses also gets click's usage reminder above that line.
    """
    assert result.exit_code != 0, result.output
    lines = [line for line in result.output.strip().splitlines() if line]
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    assert message in errors[0], result.output
    others = [line for line in lines if line not in errors]
    assert all(line.startswith(("Usage: ", "Try ")) for line in others), result.output


def _session_file(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "session.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)


_KERNEL = '[[kernels]]\ncommand = ["true"]\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # The engine's own fields: once, a phantom RUNNING kernel holding an agent's capacity.
        (
            _KERNEL + 'status = "RUNNING"\nagent_id = "node-1"\n',
            "kernel 1: 'agent_id', 'status' are set by drover, not by a kernel spec",
        ),
        (_KERNEL + "exit_code = 0\n", "kernel 1: 'exit_code' is set by drover"),
        # Every slot is a finite amount >= 0.
        (_KERNEL + "gpu = -1000\n", "kernel 1: resource 'gpu' must be a finite number >= 0"),
        (_KERNEL + "cpu = nan\n", "kernel 1: resource 'cpu' must be a finite number >= 0"),
        (_KERNEL + "mem = inf\n", "kernel 1: resource 'mem' must be a finite number >= 0"),
        # A slot no agent has would wait PENDING forever.
        (
            _KERNEL + "cpus = 2\n",
            "kernel 1: no agent has the resource slot(s) 'cpus'; the known slots are cpu, mem",
        ),
        # Options only for handlers that are loaded.
        (
            "[options.prepare-sesions]\ntimeout = 5\n" + _KERNEL,
            "options for unknown handler(s) 'prepare-sesions'; the loaded handlers are "
            "check-pending-deployment, check-replica-deployment, destroying-deployment, "
            "detect-start-failure, detect-termination, ",
        ),
        # What PostgreSQL would refuse, refused on SQLite too.
        ("priority = 2147483648\n" + _KERNEL, "priority 2147483648 is out of range"),
        (f'name = "{"n" * 256}"\n' + _KERNEL, "name is 256 characters long; at most 255"),
        ('name = "a\\u0000b"\n' + _KERNEL, "name 'a\\x00b' contains a NUL character"),
        (_KERNEL + 'env = { A = "\\u0000" }\n', "kernel 1 spec: the text '\\x00' contains a NUL"),
        ('spec = "fast"\n' + _KERNEL, "'spec' must be a table, got 'fast'"),
        ("[spec]\nwhen = 2024-01-01\n" + _KERNEL, "session spec is not JSON-serializable: date"),
        # Not a text file at all.
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not a UTF-8 text file (byte 0x89 at offset 0)"),
        (b'name = "caf\xe9"\n', "not a UTF-8 text file (byte 0xe9 at offset 11)"),
    ],
)
def test_submit_file_refuses_bad_input_in_one_line_and_writes_nothing(
    cli, harness, tmp_path, text, message
):
    """Each bad session file: exit 1, one line naming the problem, and no session written."""
    result = cli("submit", "--file", _session_file(tmp_path, text))
    _one_error_line(result, message)
    assert harness(lambda h: h.repository.list_sessions()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--priority", "2147483648"], "2147483648 is not in the range"),
        (["--cpu", "nan"], "kernel 1: resource 'cpu' must be a finite number >= 0"),
        (["--mem", "inf"], "kernel 1: resource 'mem' must be a finite number >= 0"),
        (["--option", "prepare-sesions.timeout=5"], "options for unknown handler(s)"),
        (["--option", "prepare-sessions.timeout=nan"], "'timeout'] must be a finite number"),
        (["--name", "x" * 300], "name is 300 characters long; at most 255"),
        (["--name", "caf\udce9"], "is not valid UTF-8 text"),
        (["--env", "A=\udcff"], "kernel 1 spec: the text '\\udcff' is not valid UTF-8 text"),
    ],
)
def test_submit_flags_refuse_bad_input_in_one_line_and_write_nothing(cli, harness, args, message):
    """The same checks for flags (a non-UTF-8 argument arrives as lone surrogates)."""
    result = cli("submit", *args, "--", "true")
    _one_error_line(result, message)
    assert harness(lambda h: h.repository.list_sessions()) == []


def test_submit_names_the_loaded_handlers_for_an_unknown_option(cli, harness):
    """The message lists every loaded handler, so the typo is easy to see."""
    result = cli("submit", "--option", "shedule-sessions.timeout=5", "--", "true")
    _one_error_line(result, "options for unknown handler(s) 'shedule-sessions'")
    for name in ("prepare-sessions", "schedule-sessions", "start-sessions", "terminate-sessions"):
        assert name in result.output


def test_slots_are_those_of_the_configured_agents(cli, harness, tmp_path):
    """With an agent offering gpu, gpu is a slot; gpu=-1 is still refused; tpu is unknown."""
    (tmp_path / "drover.toml").write_text(
        '[[backend.agents]]\nid = "node-a"\ncpu = 8\nmem = 4096\ngpu = 1\n'
    )
    ok = cli("submit", "--file", _session_file(tmp_path, _KERNEL + "gpu = 1\n"))
    assert ok.exit_code == 0, ok.output
    (s,) = harness(lambda h: h.repository.list_sessions())
    assert s.kernels[0].spec["gpu"] == 1
    for line, message in (
        ("gpu = -1\n", "resource 'gpu' must be a finite number >= 0"),
        ("tpu = 1\n", "no agent has the resource slot(s) 'tpu'; the known slots are cpu, gpu, mem"),
    ):
        _one_error_line(cli("submit", "--file", _session_file(tmp_path, _KERNEL + line)), message)
    assert len(harness(lambda h: h.repository.list_sessions())) == 1


def test_file_kernels_get_the_same_defaults_as_flags(cli, harness, tmp_path):
    """A --file kernel without cpu or mem asks for what `--` kernels ask by default."""
    by_flags = cli("submit", "--", "true").output.strip()
    by_file = cli("submit", "--file", _session_file(tmp_path, _KERNEL)).output.strip()
    own = cli("submit", "--file", _session_file(tmp_path, _KERNEL + "cpu = 0.5\n")).output.strip()
    flags, file, mine = (
        harness(lambda h, sid=sid: h.session(sid)) for sid in (by_flags, by_file, own)
    )
    assert (
        flags.kernels[0].spec
        == file.kernels[0].spec
        == {
            "command": ["true"],
            "cpu": 1.0,
            "mem": 256.0,
        }
    )
    assert mine.kernels[0].spec == {"command": ["true"], "cpu": 0.5, "mem": 256.0}


# -- configuration, database and plugins: one line, never a traceback -------------------------


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("safety_interval = 0\n", "safety_interval = 0.0 (from file drover.toml): must be a"),
        ("heartbeat_interval = -1\n", "heartbeat_interval = -1.0 (from file drover.toml)"),
        ("heartbeat_interval = nan\n", "heartbeat_interval = nan (from file drover.toml)"),
        (
            "[handlers.schedule-sessions]\ninterval = 0\n",
            "handlers.schedule-sessions.interval = 0.0 (from file drover.toml): must be a "
            "finite number of seconds > 0",
        ),
        ("shutdown_grace = -5\n", "shutdown_grace = -5.0 (from file drover.toml)"),
        (
            'log_level = "LOUD"\n',
            "log_level = 'LOUD' (from file drover.toml): expected one of DEBUG, INFO, WARNING",
        ),
        (
            '[[backend.agents]]\nid = "a"\ncpu = 4\nmem = 64\ngpu = -1\n',
            "agent 'a' offers gpu = -1.0",
        ),
    ],
)
def test_configuration_values_that_make_no_sense_stop_the_daemon(
    tmp_path, monkeypatch, toml, message
):
    """A zero interval (a busy loop), an unknown log level…: one line before anything starts.

    `drover run` runs in a process of its own, with a time limit: a daemon
    that accepted the value would not stop by itself.
    """
    (tmp_path / "drover.toml").write_text(toml)
    db = f"sqlite+aiosqlite:///{tmp_path}/d.db"
    result = subprocess.run(
        [sys.executable, "-m", "drover", "--database", db, "run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout == ""
    _one_error_line(_Outcome(result.returncode, result.stderr), message)
    assert not (tmp_path / "d.db").exists()


@attrs.frozen
class _Outcome:
    """What _one_error_line reads, for a command run in a subprocess."""

    exit_code: int
    output: str


def test_log_level_from_the_environment_is_checked_too(tmp_path, monkeypatch):
    """DROVER_LOG_LEVEL=verbose names its source; a lower-case level is fine."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DROVER_LOG_LEVEL", "verbose")
    result = CliRunner().invoke(group, ["config", "show"], catch_exceptions=False)
    _one_error_line(result, "log_level = 'verbose' (from env DROVER_LOG_LEVEL)")
    monkeypatch.setenv("DROVER_LOG_LEVEL", "debug")
    assert CliRunner().invoke(group, ["config", "show"]).exit_code == 0


def _plain(url: str) -> str:
    """The URL without its ``+driver``: what people copy from elsewhere."""
    scheme, rest = url.split("://", 1)
    return f"{scheme.split('+')[0]}://{rest}"


def test_a_plain_database_url_gets_the_async_driver(cli, harness, database):
    """postgresql://… and sqlite:///… work: drover picks asyncpg or aiosqlite."""
    result = cli("--database", _plain(database.url), "submit", "--name", "plain", "--", "true")
    assert result.exit_code == 0, result.output
    assert [s.name for s in harness(lambda h: h.repository.list_sessions())] == ["plain"]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "postgresql+psycopg2://me:secret@db.internal/drover",
            "database_url 'postgresql+psycopg2://me:***@db.internal/drover' names the driver "
            "'psycopg2', which is not an asyncio driver; write "
            "'postgresql+asyncpg://me:***@db.internal/drover'",
        ),
        (
            "sqlite+pysqlite:///./x.db",
            "which is not an asyncio driver; write 'sqlite+aiosqlite:///./x.db'",
        ),
        ("mysql://me@db/drover", "drover keeps its data in SQLite or PostgreSQL, not mysql"),
        ("drover.db", "database_url 'drover.db' is not a database URL; write sqlite+aiosqlite"),
    ],
)
def test_a_database_url_drover_cannot_use_says_what_to_write(tmp_path, monkeypatch, url, message):
    """A sync driver, another database or no URL at all: one line with the URL to write."""
    monkeypatch.chdir(tmp_path)
    for command in (["sessions"], ["run"], ["db", "upgrade"], ["submit", "--", "true"]):
        result = CliRunner().invoke(group, ["--database", url, *command], catch_exceptions=False)
        _one_error_line(result, message)
        assert "secret" not in result.output


pg_only = pytest.mark.skipif(SKIP_PG, reason="DROVER_TEST_SKIP_PG=1")


@pg_only
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"database": "drover_no_such_database"},
            'PostgreSQL says: database "drover_no_such_database" does not exist; create it '
            "(createdb drover_no_such_database) or fix database_url",
        ),
        (
            {"username": "drover_no_such_role"},
            'PostgreSQL says: role "drover_no_such_role" does not exist; create it '
            "(createuser drover_no_such_role) or fix the user in database_url",
        ),
    ],
)
def test_a_missing_postgresql_database_or_role_is_one_line(tmp_path, monkeypatch, change, message):
    """Nothing to connect to: one line naming what is missing and how to make it."""
    monkeypatch.chdir(tmp_path)
    url = make_url(PG_URL).set(**change).render_as_string(hide_password=False)
    for command in (["sessions"], ["db", "upgrade"], ["run"]):
        result = CliRunner().invoke(group, ["--database", url, *command], catch_exceptions=False)
        _one_error_line(result, message)


@pg_only
def test_a_schema_that_does_not_exist_is_created_by_upgrade(tmp_path, monkeypatch):
    """database_schema names a new schema: commands say so in one line; db upgrade creates it."""
    monkeypatch.chdir(tmp_path)
    schema = f"fresh_{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("DROVER_DATABASE_URL", PG_URL)
    monkeypatch.setenv("DROVER_DATABASE_SCHEMA", schema)
    try:
        result = CliRunner().invoke(group, ["sessions"], catch_exceptions=False)
        _one_error_line(
            result,
            f"the PostgreSQL schema '{schema}' (database_schema, env DROVER_DATABASE_SCHEMA) "
            "does not exist: `drover db upgrade` creates it",
        )
        upgraded = CliRunner().invoke(group, ["db", "upgrade"], catch_exceptions=False)
        assert upgraded.exit_code == 0, upgraded.output
        assert "upgraded empty database ->" in upgraded.output
        submitted = CliRunner().invoke(group, ["submit", "--", "true"], catch_exceptions=False)
        assert submitted.exit_code == 0, submitted.output
        listed = CliRunner().invoke(group, ["sessions", "--json"], catch_exceptions=False)
        assert [s["id"] for s in json.loads(listed.output)] == [submitted.output.strip()]
    finally:
        asyncio.run(_drop_schema(schema))


async def _drop_schema(schema: str) -> None:
    conn = await asyncpg.connect(
        make_url(PG_URL).set(drivername="postgresql").render_as_string(hide_password=False)
    )
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


@pytest.fixture
def broken_plugin(tmp_path, monkeypatch):
    """An installed plugin (entry point group ``drover``) whose module fails to import."""
    site = tmp_path / "site"
    dist = site / "drover_broken-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: drover-broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[drover]\nbroken = drover_broken_mod\n")
    (site / "drover_broken_mod.py").write_text("import drover_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(site))
    return "broken"


@pytest.mark.parametrize("command", [["submit", "--", "true"], ["run"], ["plugins"], ["graph"]])
def test_a_plugin_that_fails_to_import_is_one_line(cli, harness, broken_plugin, command):
    """The plugin is named with its module and the import error; nothing is written."""
    result = cli(*command)
    _one_error_line(
        result,
        "plugin 'broken' (drover_broken_mod) failed to import: ModuleNotFoundError: No module "
        "named 'drover_no_such_dependency'; fix or uninstall it, or leave it out with "
        "plugins.block / DROVER_DISABLE_PLUGINS=broken",
    )
    assert harness(lambda h: h.repository.list_sessions()) == []


def test_sessions_are_listed_newest_first_unless_sorted_otherwise(cli, harness):
    """drover sessions: newest first by default; --sort oldest and --sort priority."""

    async def make(h):
        ids = []
        for name, priority in (("first", 0), ("second", 5), ("third", 1)):
            ids.append(await h.create_session(name=name, priority=priority))
            h.clock.advance(1)
        return ids

    harness(make)

    def names(*args):
        return [s["name"] for s in json.loads(cli("sessions", "--json", *args).output)]

    assert names() == ["third", "second", "first"]
    assert names("--sort", "newest") == ["third", "second", "first"]
    assert names("--sort", "oldest") == ["first", "second", "third"]
    assert names("--sort", "priority") == ["second", "third", "first"]
    _one_error_line(cli("sessions", "--sort", "size"), "'size' is not one of")


def test_the_drover_group_is_what_drover_cli_main_names_after_its_module_is_imported():
    """``from drover.cli import main`` is the ``drover`` group even once the module that
    defines it was imported (a submodule named ``main`` would have shadowed it)."""
    import importlib

    import click

    importlib.import_module("drover.cli.group")
    from drover.cli import main as named

    assert isinstance(named, click.Group)
    assert named.name == "main"


_GPU_AGENT = '[[backend.agents]]\nid = "a"\ncpu = 8\nmem = 8192\ngpu = 2\n"cuda.device" = 4\n'


def test_submit_asks_for_any_resource_slot(cli, harness, tmp_path):
    """``-r SLOT=AMOUNT`` (``--resource``, repeatable) asks each kernel for any slot some
    agent offers, as a session file would; -r cpu=… is --cpu."""
    (tmp_path / "drover.toml").write_text(_GPU_AGENT)
    result = cli(
        "submit", "--kernels", "2", "-r", "gpu=1", "--resource", "cuda.device=0.5",
        "-r", "cpu=2", "--", "python3", "train.py",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    s = harness(lambda h: h.session(result.output.strip()))
    assert [k.spec for k in s.kernels] == [
        {"command": ["python3", "train.py"], "cpu": 2.0, "mem": 256.0, "gpu": 1.0,
         "cuda.device": 0.5}
    ] * 2  # fmt: skip
    # A slot no agent has is refused before anything is written.
    (tmp_path / "drover.toml").write_text("")
    refused = cli("submit", "-r", "gpu=1", "--", "true")
    assert refused.exit_code == 1
    assert "'gpu'" in refused.output
    assert len(refused.output.strip().splitlines()) == 1


def test_group_options_are_taken_after_the_command_too(cli, harness, tmp_path):
    """``drover run --config c.toml``, ``drover sessions --config c.toml``: every command
    takes the group's --config (and --database) after its name as well as before it."""
    (tmp_path / "c.toml").write_text(_GPU_AGENT)
    assert cli("submit", "-r", "gpu=1", "--", "true").exit_code == 1  # no gpu without c.toml
    result = cli("submit", "-r", "gpu=1", "--config", "c.toml", "--", "true")
    assert result.exit_code == 0, result.output
    shown = cli("config", "show", "--config", "c.toml", "--json").output
    assert json.loads(shown)["file"].endswith("c.toml")
    assert cli("db", "current", "--config", "c.toml").exit_code == 0
    assert cli("history", "--config", "c.toml", "--limit", "1").exit_code == 0
    missing = cli("sessions", "--config", "nope.toml")
    assert missing.exit_code != 0
    assert "nope.toml" in missing.output
    for command in (["run"], ["serve"], ["plugins"], ["graph"], ["why", "x"]):
        help_text = cli(*command, "--help").output
        assert "--config" in help_text, command
        assert "--database" in help_text, command
