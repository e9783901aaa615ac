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
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import PG_URL, SKIP_PG, Database, pg_schema
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from drover.backends.base import AgentInfo
from drover.backends.simulated import SimulatedBackend
from drover.cli import main
from drover.model.status import TERMINAL_KERNEL_STATUSES, TERMINAL_SESSION_STATUSES
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
        sid = result.output.strip()
        assert asyncio.run(_in_harness(database, _count)) == before + 1
        asyncio.run(_in_harness(database, lambda h, sid=sid: _carry_to_an_end(h, sid)))
    assert len(set(outcomes)) == 1, dict(zip([d.kind for d in databases], outcomes, strict=True))
    event(outcomes[0][0])
