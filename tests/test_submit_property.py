"""A property test of ``drover submit`` (issue 11), on SQLite and on PostgreSQL.

Hypothesis builds random requests, through the flags or as a session file
(names, priorities, resource amounts including NaN, infinities, negatives and
slots no agent has, engine-owned keys, handler options with good and bad
handler names and values, text with NUL characters and lone surrogates), and
runs the real command on them. Every outcome must be one of two:

* refused: a non-zero exit, one ``Error:`` line (click's usage reminder may
  stand above it for a flag click itself refuses), and nothing written;
* accepted: a session that the coordinator (the built-in handlers on a
  simulated backend with the same agents as the configuration ``submit``
  read) carries to an end once it is asked to terminate: a terminal status,
  every kernel terminal, and no capacity left held on any agent.

Both databases take exactly the same input: an example that one accepts and
the other refuses fails on the second.

Issue 24 extends the same treatment, driven by what the code declares so that
a new field, flag or route is covered without a new test: configuration files
(every attrs field of ``Config``, its values around the declared type), the
flags of ``drover deploy`` and ``drover scale`` (every click parameter), and
the dashboard's paths (every route with parameters, its parameters hostile
text): a one-line refusal with nothing written, or something that works, and
never an HTTP 500.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import PG_URL, SKIP_PG, Database, pg_schema
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from drover.backends.base import AgentInfo
from drover.backends.simulated import SimulatedBackend
from drover.cli import main
from drover.kinds.sessions.values import TERMINAL_KERNEL_STATUSES, TERMINAL_SESSION_STATUSES
from drover.testing import CoordinatorHarness

AGENTS = [AgentInfo(f"sim-{i}", {"cpu": 8.0, "mem": 32768.0, "gpu": 1.0}) for i in (1, 2)]
CONFIG = "".join(
    f'[[backend.agents]]\nid = "{a.id}"\ncpu = 8\nmem = 32768\ngpu = 1\n' for a in AGENTS
)
HANDLERS = ["prepare-sessions", "schedule-sessions", "start-sessions", "terminate-sessions"]

# Text as people and programs make it: mostly plain, sometimes NUL, lone
# surrogates (what Python makes of bytes that are not UTF-8) or long.
TEXT = st.one_of(
    st.text(alphabet="abcdefgh-_ ", max_size=12),
    st.text(st.characters(codec=None, categories=None), max_size=8),
    st.sampled_from(["a\x00b", "caf\udce9", "x" * 256, "é" * 255, ""]),
)
NUMBER = st.one_of(
    st.integers(-3, 12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 0.5, 1, 2**31, 10**400, -1000]),
)
PRIORITY = st.one_of(
    st.integers(-5, 5), st.sampled_from([2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 10**20])
)
SLOT = st.sampled_from(["cpu", "mem", "gpu", "cpus", "tpu"])
ENGINE_KEY = st.sampled_from(["status", "agent_id", "exit_code", "pid"])
OPTION_HANDLER = st.one_of(st.sampled_from(HANDLERS), st.sampled_from(["prepare-sesions", "x"]))
OPTION_VALUE = st.one_of(st.none(), NUMBER, st.booleans(), TEXT)


def toml_value(value: Any) -> str:
    """``value`` as TOML (JSON's string escapes are TOML's too)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"


def toml_table(header: str, table: dict[str, Any]) -> str:
    return header + "\n" + "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in table.items())


@st.composite
def kernel_tables(draw: st.DrawFn) -> dict[str, Any]:
    kernel: dict[str, Any] = {"command": ["true"]}
    for slot in draw(st.lists(SLOT, max_size=3, unique=True)):
        kernel[slot] = draw(NUMBER)
    if draw(st.booleans()):
        kernel["env"] = {"MODE": draw(TEXT)}
    if draw(st.integers(0, 9)) == 0:
        kernel[draw(ENGINE_KEY)] = draw(st.sampled_from(["RUNNING", "sim-1", 0]))
    return kernel


@st.composite
def session_files(draw: st.DrawFn) -> bytes:
    """A session file: usually TOML, sometimes not text at all."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.binary(min_size=1, max_size=16))
    top: dict[str, Any] = {}
    if draw(st.booleans()):
        top["name"] = draw(TEXT)
    if draw(st.booleans()):
        top["priority"] = draw(PRIORITY)
    text = "".join(f"{k} = {toml_value(v)}\n" for k, v in top.items())
    for handler in draw(st.lists(OPTION_HANDLER, max_size=2, unique=True)):
        field = draw(st.sampled_from(["timeout", "max_retries"]))
        value = draw(OPTION_VALUE)
        if value is not None:
            text += toml_table(f'[options."{handler}"]', {field: value})
    for kernel in draw(st.lists(kernel_tables(), min_size=1, max_size=3)):
        text += toml_table("[[kernels]]", kernel)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate cannot be written; bytes that are not UTF-8
        return text.encode("utf-8", "surrogateescape")


@st.composite
def flag_arguments(draw: st.DrawFn) -> list[str]:
    args: list[str] = []
    if draw(st.booleans()):
        args += ["--name", draw(TEXT.filter(lambda t: not t.startswith("-")))]
    if draw(st.booleans()):
        args += ["--priority", str(draw(PRIORITY))]
    for flag in ("--cpu", "--mem"):
        if draw(st.booleans()):
            args += [flag, str(draw(NUMBER))]
    if draw(st.booleans()):
        args += ["--kernels", str(draw(st.integers(1, 3)))]
    for handler in draw(st.lists(OPTION_HANDLER, max_size=2, unique=True)):
        field = draw(st.sampled_from(["timeout", "max_retries"]))
        args += ["--option", f"{handler}.{field}={draw(OPTION_VALUE)}"]
    if draw(st.booleans()):
        args += ["--env", f"MODE={draw(TEXT)}"]
    return [*args, "--", "true"]


async def _in_harness(database: Database, work: Any) -> Any:
    async with CoordinatorHarness(
        database_url=database.url,
        database_schema=database.schema,
        backend=SimulatedBackend(AGENTS),
    ) as h:
        return await work(h)


async def _count(h: CoordinatorHarness) -> int:
    return sum((await h.repository.count_by_status()).values())


async def _carry_to_an_end(h: CoordinatorHarness, sid: str) -> None:
    """Run the handlers, ask the session to end, run them again; check it ended."""
    await h.run_until_settled()
    await h.request_termination(sid)
    await h.run_until_settled()
    session = await h.session(sid)
    assert session.status in TERMINAL_SESSION_STATUSES, session
    assert all(k.status in TERMINAL_KERNEL_STATUSES for k in session.kernels), session
    usage = await h.repository.agent_usage(["cpu", "mem", "gpu"])
    assert all(v == 0 for amounts in usage.values() for v in amounts.values()), usage


@pytest.fixture
async def databases(tmp_path: Path) -> AsyncIterator[list[Database]]:
    """A SQLite file and (unless deselected) a PostgreSQL schema, both upgraded."""
    sqlite = Database("sqlite", f"sqlite+aiosqlite:///{tmp_path}/drover.db")
    if SKIP_PG:
        found = [sqlite]
        for db in found:
            await _in_harness(db, lambda h: asyncio.sleep(0))
        yield found
        return
    async with pg_schema("s") as schema:
        found = [sqlite, Database("postgresql", PG_URL, schema)]
        for db in found:
            await _in_harness(db, lambda h: asyncio.sleep(0))  # upgrade the schema
        yield found


def _submit(database: Database, cwd: Path, args: list[str]) -> Any:
    """`drover submit ARGS` on ``database``, with the agents above in ./drover.toml."""
    env = {"DROVER_DATABASE_URL": database.url, "DROVER_DATABASE_SCHEMA": database.schema or ""}
    return CliRunner().invoke(main, ["submit", *args], env=env, catch_exceptions=False)


def _refusal(output: str) -> str:
    """The one error line of a refusal (click's usage reminder may stand above it)."""
    lines = [line for line in output.strip().splitlines() if line]
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1, output
    assert all(line.startswith(("Usage: ", "Try ", "Error: ")) for line in lines), lines
    return errors[0]


#: The query parameters the dashboard reads (drover.web.params and the pages).
QUERY_KEYS = [
    "limit",
    "since",
    "until",
    "sort",
    "status",
    "bytes",
    "kind",
    "handler",
    "result",
    "kernel",
    "name",
    "session",
]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_submit_refuses_in_one_line_or_creates_a_session_that_ends(
    databases, tmp_path, monkeypatch, data
):
    """Random flags and session files: on every database the same one-line refusal with
    nothing written, or a session the coordinator carries to an end."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "drover.toml").write_text(CONFIG)
    if data.draw(st.booleans(), label="from a file"):
        path = tmp_path / "session.toml"
        path.write_bytes(data.draw(session_files(), label="file"))
        args = ["--file", str(path)]
    else:
        args = data.draw(flag_arguments(), label="flags")
    outcomes = []
    for database in databases:
        before = asyncio.run(_in_harness(database, _count))
        result = _submit(database, tmp_path, args)
        if result.exit_code != 0:
            outcomes.append(("refused", _refusal(result.output)))
            assert asyncio.run(_in_harness(database, _count)) == before, database.kind
            continue
        outcomes.append(("accepted", ""))
        sid = result.stdout.strip()
        assert asyncio.run(_in_harness(database, _count)) == before + 1
        asyncio.run(_in_harness(database, lambda h, sid=sid: _carry_to_an_end(h, sid)))
    assert len(set(outcomes)) == 1, dict(zip([d.kind for d in databases], outcomes, strict=True))
    event(outcomes[0][0])


# -- issue 24: configuration files, deploy/scale flags and dashboard paths ----------------------
#
# Each strategy below is built from what the code declares (the configuration's attrs
# fields, the commands' click parameters, the dashboard's routes), so a field, a flag or
# a route added later gets the same treatment without a new test.

HUGE_INTS = st.sampled_from([2**31, 2**63 - 1, 2**63, -(2**63), 10**30, -1, -2])
HOSTILE_TEXT = st.one_of(
    TEXT,
    # 60,000: past SQLite's LIKE pattern limit (50,000), within an HTTP client's URL limit.
    st.sampled_from(["x" * 60_000, "a\r\nb", "%", "../..", "a/b", "-1", "nan", "1e30", " "]),
)


def _config_value(kind: Any) -> st.SearchStrategy[Any]:
    """Random values around the declared type ``kind`` of one configuration field."""
    import types
    import typing

    import attrs as _attrs

    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return st.one_of(*(_config_value(a) for a in args if a is not type(None)))
    if _attrs.has(kind):
        return _config_table(kind)
    if kind is bool:
        return st.one_of(st.booleans(), TEXT)
    if kind is int:
        return st.one_of(st.integers(-3, 2000), HUGE_INTS, st.floats(), TEXT)
    if kind is float:
        return st.one_of(NUMBER, TEXT)
    if kind is str:
        return TEXT
    origin = typing.get_origin(kind)
    if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        # TOML has arrays only: a tuple[X, ...] field is written as one.
        item = args[0]
        return st.one_of(st.lists(_config_value(item), max_size=3), _config_value(item))
    if origin is dict:
        _key, value = args
        keys = st.sampled_from([*HANDLERS, "session", "deployment", "x"])
        if value is Any:
            return st.dictionaries(keys, st.one_of(NUMBER, TEXT), max_size=2)
        return st.dictionaries(keys, _config_value(value), max_size=2)
    raise AssertionError(f"no strategy for configuration type {kind!r}: add one")


def _config_table(cls: type) -> st.SearchStrategy[dict[str, Any]]:
    """A table of some of ``cls``'s declared fields, with random values."""
    import typing

    import attrs as _attrs

    hints = typing.get_type_hints(cls)
    fields = {f.name: hints[f.name] for f in _attrs.fields(cls)}
    # Where the database is comes from the environment (which wins over the file).
    fields.pop("database_url", None)
    fields.pop("database_schema", None)
    fields.pop("extra", None)  # an agent's other slots are its free-form keys

    @st.composite
    def table(draw: st.DrawFn) -> dict[str, Any]:
        chosen = draw(st.lists(st.sampled_from(sorted(fields)), max_size=4, unique=True))
        out = {}
        for name in chosen:
            if name == "name" and cls.__name__ == "BackendConfig":
                out[name] = draw(st.sampled_from(["local", "simulated", "nope"]))
            else:
                out[name] = draw(_config_value(fields[name]))
        return out

    return table()


def _toml_document(data: dict[str, Any]) -> str:
    """``data`` as a TOML document (tables as inline tables, which TOML allows anywhere)."""
    return "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in data.items())


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_configuration_file_is_one_line_or_a_working_submit(
    databases, tmp_path, monkeypatch, data
):
    """A random drover.toml built from the declared fields: `drover submit` refuses it in one
    line with nothing written, or creates the session; the same on both databases."""
    from drover.config import Config

    monkeypatch.chdir(tmp_path)
    document = data.draw(_config_table(Config), label="configuration")
    if data.draw(st.integers(0, 9), label="deep") == 0:
        document["deep"] = [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]
    text = CONFIG + _toml_document(document)
    try:
        (tmp_path / "drover.toml").write_bytes(text.encode("utf-8"))
    except UnicodeEncodeError:
        (tmp_path / "drover.toml").write_bytes(text.encode("utf-8", "surrogateescape"))
    outcomes = []
    for database in databases:
        before = asyncio.run(_in_harness(database, _count))
        result = _submit(database, tmp_path, ["--", "true"])
        if result.exit_code != 0:
            outcomes.append(("refused", _refusal(result.output)))
            assert asyncio.run(_in_harness(database, _count)) == before, database.kind
            continue
        outcomes.append(("accepted", ""))
        assert asyncio.run(_in_harness(database, _count)) == before + 1
    assert len(set(outcomes)) == 1, dict(zip([d.kind for d in databases], outcomes, strict=True))
    event(outcomes[0][0])


def _flag_values(param: Any) -> st.SearchStrategy[str]:
    """Random command-line text for one declared click parameter."""
    import click

    if isinstance(param.type, click.types.IntParamType):
        return st.one_of(st.integers(-2, 1200).map(str), HUGE_INTS.map(str), HOSTILE_TEXT)
    if isinstance(param.type, click.types.FloatParamType):
        return st.one_of(NUMBER.map(str), HUGE_INTS.map(str), HOSTILE_TEXT)
    return HOSTILE_TEXT


_NAMES = itertools.count()
_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _same_refusal(output: str) -> str:
    """The refusal line with entity ids left out (each database makes its own)."""
    return _ID.sub("<id>", _refusal(output))


@st.composite
def deploy_arguments(draw: st.DrawFn) -> tuple[str, list[str], list[str]]:
    """``drover deploy`` NAME, options and command: every declared option may appear."""
    from drover.kinds.deployments.cli import deploy

    options: list[str] = []
    for param in deploy.params:
        if param.param_type_name != "option" or param.is_flag or param.name == "database_url":
            continue
        if draw(st.booleans()):
            options += [param.opts[0], draw(_flag_values(param))]
    name = draw(
        st.one_of(
            st.builds(lambda: f"web-{next(_NAMES)}"),
            HOSTILE_TEXT.filter(lambda t: not t.startswith("-")),
        )
    )
    command = draw(st.one_of(st.just(["true"]), st.lists(HOSTILE_TEXT, min_size=1, max_size=2)))
    return name, options, command


async def _deployments(h: CoordinatorHarness) -> dict[str, Any]:
    return {d.id: d for d in await h.repository.list_entities("deployment", limit=None)}


async def _scale_up(h: CoordinatorHarness, deployment_id: str) -> None:
    """The accepted deployment's first ticks: no handler error, its routes as many as wanted."""
    for handler in ("check-pending-deployment", "scaling-deployment"):
        report = await h.tick(handler)
        assert report.error is None, report.error
    found = await h.get(deployment_id)
    assert len(found.children) == found.spec["replicas"] <= 1000, found


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_deploy_and_scale_flags_are_one_line_or_a_deployment_that_scales(
    databases, tmp_path, monkeypatch, data
):
    """Random `drover deploy` and `drover scale` flags (from the commands' declared
    parameters): a one-line refusal with nothing written or changed, or a deployment whose
    replicas the handlers create; the same on both databases."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "drover.toml").write_text(CONFIG)
    name, options, command = data.draw(deploy_arguments(), label="deploy")
    scale_to = data.draw(_flag_values(_scale_param()), label="scale")
    outcomes = []
    for database in databases:
        env = {"DROVER_DATABASE_URL": database.url, "DROVER_DATABASE_SCHEMA": database.schema or ""}
        before = asyncio.run(_in_harness(database, _deployments))
        args = ["deploy", name, *options, "--", *command]
        result = CliRunner().invoke(main, args, env=env, catch_exceptions=False)
        if result.exit_code != 0:
            outcomes.append(("refused", _same_refusal(result.output)))
            assert asyncio.run(_in_harness(database, _deployments)) == before, database.kind
            continue
        deployment_id = result.stdout.strip()  # stderr may say "unchanged"
        deployed = asyncio.run(_in_harness(database, _deployments))[deployment_id]
        scaled = CliRunner().invoke(
            main, ["scale", deployment_id, scale_to], env=env, catch_exceptions=False
        )
        dep = asyncio.run(_in_harness(database, _deployments))[deployment_id]
        if scaled.exit_code != 0:
            outcomes.append(("accepted", _refusal(scaled.output)))
            assert dep.spec == deployed.spec, "a refused scale changes nothing"
        else:
            outcomes.append(("accepted", "scaled"))
            assert dep.spec["replicas"] == int(scale_to)
        asyncio.run(_in_harness(database, lambda h, i=deployment_id: _scale_up(h, i)))
    assert len(set(outcomes)) == 1, dict(zip([d.kind for d in databases], outcomes, strict=True))
    event(outcomes[0][0])


#: The longest URL the test client sends (httpx2 refuses longer ones, "URL too long").
_CLIENT_URL_LIMIT = 65_536 - 1_024


def _scale_param() -> Any:
    from drover.kinds.deployments.cli import scale

    (param,) = [p for p in scale.params if p.name == "replicas"]
    return param


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_dashboard_path_is_a_server_error(databases, tmp_path, monkeypatch, data):
    """Every route of the dashboard (drover's and the kind packages'), its path parameters
    random text (100,000 characters, NUL, slashes, an existing id's prefix…): an answer
    below 500, on both databases."""
    from urllib.parse import quote

    from starlette.testclient import TestClient

    from drover.app import App
    from drover.config import load_config
    from drover.web import create_app

    monkeypatch.chdir(tmp_path)
    for database in databases:
        flags = {"database_url": database.url, "database_schema": database.schema or ""}
        app = App(load_config(None, environ={}, flags=flags))
        web = create_app(app, close_app_on_shutdown=True)
        routes = [r for r in web.routes if getattr(r, "param_convertors", None)]
        assert routes, "the dashboard has routes with parameters"
        route = data.draw(st.sampled_from(sorted(routes, key=lambda r: r.path)), label="route")
        path = route.path
        for param in route.param_convertors:
            value = data.draw(st.one_of(HOSTILE_TEXT, st.just("0"), st.just("1")), label=param)
            # Lone surrogates: bytes that are not UTF-8, as a hostile client may send.
            encoded = quote(value.encode("utf-8", "surrogatepass"), safe="")
            path = path.replace("{" + param + "}", encoded or "x")
        keys = st.one_of(st.sampled_from(QUERY_KEYS), HOSTILE_TEXT)
        values = st.one_of(HOSTILE_TEXT, HUGE_INTS.map(str))
        query = data.draw(st.dictionaries(keys, values, max_size=2), label="query")
        if query:
            path += "?" + "&".join(
                f"{quote(k.encode('utf-8', 'surrogatepass'), safe='')}="
                f"{quote(v.encode('utf-8', 'surrogatepass'), safe='')}"
                for k, v in query.items()
            )
        # Past 64 KiB the test client itself refuses the URL (and a real server answers
        # before the dashboard sees it): such a draw tells nothing about the dashboard.
        assume(len(path) < _CLIENT_URL_LIMIT)
        with TestClient(web, base_url="http://127.0.0.1:8080") as client:
            answer = client.get(path)
        assert answer.status_code < 500, (path[:200], answer.status_code, answer.text[:300])
