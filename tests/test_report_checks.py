"""Issue 36, points 2 and 3: a report API that checks what it accepts, and reports that
never leave an entity where nothing resolves it.

``POST /api/report``, ``drover report`` and ``Repository.report`` go through one check
(:mod:`drover.model.reporting`): every field's type and size, NUL, JSON depth and
64-bit integers, a capped body (413), and ``source`` in a namespace of its own
(``api:NAME``). A kind declares which moves outside reports may make: a session only
ends by one, a kernel moves only as backends move it; the kernels of a session a report
ends are recorded destroyed, with how. Each test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

from drover import InvalidSpecError
from drover.app import App
from drover.cli.group import main
from drover.config import load_config
from drover.kinds.sessions.values import KernelReport
from drover.kinds.sessions.values import KernelStatus as K
from drover.kinds.sessions.values import SessionStatus as S
from drover.model.values import Report
from drover.testing import CoordinatorHarness
from drover.web import create_app
from drover.web.report import MAX_REPORT_BODY

TOKEN = {"Authorization": "Bearer t0ken"}
DEEP = "[" * 5000 + "]" * 5000


def run(database, fn):
    """``await fn(h)`` on a harness over the test's database."""

    async def go():
        async with CoordinatorHarness(
            database_url=database.url, database_schema=database.schema
        ) as h:
            return await fn(h)

    return asyncio.run(go())


async def _running(h, kernels=1):
    """A RUNNING session with RUNNING kernels placed on agent-1: (session, kernel ids)."""
    spec = {"cpu": 1, "mem": 1, "status": K.RUNNING, "agent_id": "agent-1"}
    sid = await h.create_session(status=S.RUNNING, kernels=[spec] * kernels)
    return sid, [k.id for k in (await h.session(sid)).kernels]


async def _state(h, eid):
    """What a refused report must leave alone: status, status_info, data, history."""
    found = await h.get(eid)
    return found.status, found.status_info, found.data, len(await h.history(eid))


@pytest.fixture
def world(database):
    """A RUNNING session with one RUNNING kernel: (session, kernel)."""

    async def make(h):
        sid, (kid,) = await _running(h)
        return sid, kid

    return run(database, make)


@pytest.fixture
def client(database):
    """A dashboard with a token over the test's database."""
    flags = {"database_url": database.url, "database_schema": database.schema or ""}
    app = App(load_config(None, environ={}, flags=flags))
    from starlette.testclient import TestClient

    with TestClient(
        create_app(app, close_app_on_shutdown=True, auth_token="t0ken"),
        base_url="http://127.0.0.1:8080",
    ) as c:
        yield c


@pytest.fixture
def cli(database, monkeypatch, tmp_path):
    """`drover` against this test's database."""
    monkeypatch.chdir(tmp_path)
    for var in ("DROVER_CONFIG", "DROVER_LOG_FORMAT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DROVER_DATABASE_URL", database.url)
    monkeypatch.setenv("DROVER_DATABASE_SCHEMA", database.schema or "")
    runner = CliRunner()
    return lambda *args: runner.invoke(main, list(args), catch_exceptions=False)


def one_error_line(result, message: str, code: int = 1) -> None:
    """Exit ``code`` with one ``Error:`` line naming ``message``, never a traceback."""
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.strip().splitlines() if line]
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    assert all(line.startswith(("Usage: ", "Try ", "Error: ")) for line in lines), lines
    assert message in errors[0], errors[0]


# -- 2. every field checked, over HTTP ---------------------------------------------------------


def _deep(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"data": {"a": _deep(100)}}, "data is nested more than 64 levels deep"),
        ({"status_info": {"a": 1}}, "status_info must be text, got dict"),
        ({"status_info": 7}, "status_info must be text, got int"),
        ({"status_info": "a\x00b"}, "status_info contains a NUL character"),
        ({"message": ["a", "b"]}, "message must be text, got list"),
        ({"message": "x" * 5000}, "message is 5000 characters long; at most 4096"),
        ({"message": "a\x00"}, "message contains a NUL character"),
        ({"data": {"k": "a\x00"}}, "contains a NUL character"),
        ({"data": {"a\x00": 1}}, "the key 'a\\x00' contains a NUL character"),
        ({"data": {"n": 10**400}}, "an integer of 1329 bits is not a finite number"),
        ({"data": {"n": 2**1024}}, "(SQLite would read it as infinity)"),
        ({"data": {"blob": "x" * 70000}}, "bytes as JSON; at most 65536 are allowed"),
        ({"data": [1]}, "data must be a JSON object, got list"),
        ({"source": {"name": "x"}}, "source must be text, got dict"),
        ({"source": "a b"}, "source 'a b' must be 1-64 letters"),
        ({"source": "x\x00"}, "must be 1-64 letters"),
        ({"entity_id": 12}, "entity_id must be text, got int"),
        ({"status": None}, "status must be text, got NoneType"),
        ({"expected": "RUNNING"}, "expected must be a list of statuses, got str"),
        ({"expected": ["RUNING"]}, "expected names unknown status(es) ['RUNING']"),
    ],
)
def test_a_field_outside_the_rules_is_a_400_and_writes_nothing(
    database, world, client, fields, message
):
    """Each value the campaign found a 500 or silently stored: a 400 naming the field."""
    _, kid = world
    before = run(database, lambda h: _state(h, kid))
    body = {"entity_id": kid, "status": "RUNNING", "data": {"beat": 1}, **fields}
    answer = client.post(
        "/api/report", content=json.dumps(body).encode(), headers=TOKEN
    )  # json.dumps: 10**400 is JSON as text
    assert answer.status_code == 400, answer.text
    assert message in answer.json()["error"]
    assert run(database, lambda h: _state(h, kid)) == before


def test_a_body_nested_5000_deep_or_past_its_cap_is_refused_without_reading_on(
    database, world, client
):
    _, kid = world
    before = run(database, lambda h: _state(h, kid))
    deep = f'{{"entity_id": "{kid}", "status": "RUNNING", "data": {{"a": {DEEP}}}}}'
    answer = client.post("/api/report", content=deep.encode(), headers=TOKEN)
    assert (answer.status_code, answer.json()["error"]) == (
        400,
        "the body is nested more than 64 levels deep",
    )
    huge = json.dumps({"entity_id": kid, "status": "RUNNING", "data": {"x": "y" * MAX_REPORT_BODY}})
    answer = client.post("/api/report", content=huge.encode(), headers=TOKEN)
    assert answer.status_code == 413
    assert answer.json()["error"] == f"the body is larger than {MAX_REPORT_BODY} bytes"

    # Without a Content-Length (a chunked upload), the cap holds as the body streams in.
    def chunks():
        for _ in range(MAX_REPORT_BODY // 65536 + 2):
            yield b" " * 65536

    answer = client.post("/api/report", content=chunks(), headers=TOKEN)
    assert answer.status_code == 413
    answer = client.post("/api/report", content=b"\xff\xfe", headers=TOKEN)
    assert (answer.status_code, answer.json()["error"]) == (400, "the body is not UTF-8 text")
    assert run(database, lambda h: _state(h, kid)) == before


def test_an_outside_source_is_recorded_in_its_own_namespace(database, client):
    """`schedule-sessions` or `backend` as a source no longer writes rows under a handler's
    or the backend's name."""

    async def make(h):
        spec = {"cpu": 1, "mem": 1, "status": K.CREATING, "agent_id": "agent-1"}
        sid = await h.create_session(status=S.CREATING, kernels=[spec])
        return sid, (await h.session(sid)).kernels[0].id

    sid, kid = run(database, make)
    body = {"entity_id": kid, "status": "RUNNING", "source": "backend"}
    assert client.post("/api/report", json=body, headers=TOKEN).json()["applied"] is True
    body = {"entity_id": sid, "status": "ERROR", "source": "schedule-sessions", "message": "m"}
    assert client.post("/api/report", json=body, headers=TOKEN).json()["applied"] is True

    async def check(h):
        (*_, last) = await h.history(sid)
        assert (last.handler, last.to_status, last.message) == (
            "api:schedule-sessions",
            S.ERROR,
            "m",
        )
        moves = [(c.source, c.to_status) for c in await h.kernel_history(kid)]
        assert moves == [("api:backend", K.RUNNING), ("api:schedule-sessions", K.ERROR)]

    run(database, check)


# -- 2. the same refusals on the command line and for a plugin ----------------------------------


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        (["--data", DEEP], "Invalid value for --data: the JSON is nested more than 64", 2),
        (["--data", '{"n": 1%s}' % ("0" * 400)], "an integer of 1329 bits is not a finite", 2),
        (["--data", '{"n": 1e400}'], "the JSON: inf is not a finite number", 2),
        (["--data", '{"n": NaN}'], "the JSON: nan is not a finite number", 2),
        (["--source", "a b"], "Invalid value for --source: source 'a b' must be 1-64", 2),
        (["--info", "a\x00b"], "status_info contains a NUL character", 1),
        (["--message", "m" * 5000], "message is 5000 characters long; at most 4096", 1),
    ],
)
def test_drover_report_refuses_the_same_in_one_line(database, world, cli, args, message, code):
    _, kid = world
    before = run(database, lambda h: _state(h, kid))
    one_error_line(cli("report", kid, "RUNNING", *args), message, code)
    assert run(database, lambda h: _state(h, kid)) == before


def test_drover_report_records_its_source_as_api_name(database, cli):
    async def make(h):
        spec = {"cpu": 1, "mem": 1, "status": K.CREATING, "agent_id": "agent-1"}
        sid = await h.create_session(status=S.CREATING, kernels=[spec])
        return sid, (await h.session(sid)).kernels[0].id

    sid, kid = run(database, make)
    done = cli("report", kid, "running", "--source", "backend")
    assert done.exit_code == 0, done.output

    async def check(h):
        assert [c.source for c in await h.kernel_history(kid)] == ["api:backend"]
        # A plugin's own source is its own (it is code, not a request).
        assert await h.repository.report(sid, S.TERMINATED, source="webhook")
        return [r.handler for r in await h.history(sid)][-1]

    assert run(database, check) == "webhook"


def test_a_plugin_gets_the_same_refusals_and_nothing_is_written(database):
    async def check(h):
        _, (kid,) = await _running(h)
        before = await _state(h, kid)
        for call, message in [
            (lambda: h.repository.report(kid, K.RUNNING, status_info={"a": 1}), "got dict"),
            (lambda: h.repository.report(kid, K.RUNNING, data={"n": 10**400}), "not a finite"),
            (lambda: h.repository.report(kid, K.RUNNING, source="x" * 200), "at most 128"),
            (
                lambda: h.repository.report_many([Report(kid, K.ERROR, message=["m"])]),
                "message must be text",
            ),
            (
                lambda: h.repository.report_many([Report(kid, K.ERROR, exit_code=2**40)]),
                "exit_code must be a 32-bit integer",
            ),
        ]:
            with pytest.raises(InvalidSpecError, match=message):
                await call()
        assert await _state(h, kid) == before

    run(database, check)


# -- 3. a report never leaves an entity where nothing resolves it ---------------------------------


def test_a_report_may_only_end_a_session(database, client, cli):
    """PENDING -> RUNNING by a report left the session RUNNING with a PENDING kernel, stuck
    until terminated: refused, everywhere, naming what a report may do."""

    async def make(h):
        return await h.create_session()

    sid = run(database, make)
    refusal = (
        f"{sid} is a session: a report may not move it to RUNNING; reports may only end it "
        "(TERMINATED, CANCELLED, ERROR): drover moves it to the others"
    )
    body = {"entity_id": sid, "status": "RUNNING"}
    answer = client.post("/api/report", json=body, headers=TOKEN)
    assert answer.status_code == 400
    assert refusal in answer.json()["error"]
    one_error_line(cli("report", sid, "running"), refusal)

    async def settle(h):
        with pytest.raises(InvalidSpecError, match="drover moves it to the others"):
            await h.repository.report(sid, S.RUNNING)
        # A heartbeat's data is no move: it still applies.
        assert await h.repository.report(sid, S.PENDING, data={"seen": True})
        await h.run_until_settled()
        session = await h.session(sid)
        return session.status, [k.status for k in session.kernels]

    assert run(database, settle) == (S.RUNNING, [K.RUNNING])


def test_a_kernel_moves_by_a_report_only_as_backends_move_it(database, client, cli):
    """A kernel reported RUNNING while its session is PENDING stayed stuck: the report does
    not apply (409, exit 1, False), and the session goes on as if it never came."""

    async def make(h):
        sid = await h.create_session()
        return sid, (await h.session(sid)).kernels[0].id

    sid, kid = run(database, make)
    body = {"entity_id": kid, "status": "RUNNING"}
    answer = client.post("/api/report", json=body, headers=TOKEN)
    assert (answer.status_code, answer.json()["applied"]) == (409, False)
    refused = cli("report", kid, "running")
    assert refused.exit_code == 1
    assert (
        f"{kid}: not applied: the kernel is PENDING (a report moves it to RUNNING only "
        "from CREATING, PREPARED)" in refused.output
    )
    answer = client.post(
        "/api/report", json={"entity_id": kid, "status": "TERMINATING"}, headers=TOKEN
    )
    assert answer.status_code == 400
    assert answer.json()["error"] == (
        f"{kid} is a kernel: a report may not move it to TERMINATING; reports may move it to "
        "PREPARING, PULLING, PREPARED, RUNNING, or end it (TERMINATED, CANCELLED, ERROR): "
        "drover moves it to the others"
    )

    async def settle(h):
        assert not await h.repository.report(kid, K.RUNNING)
        await h.run_until_settled()
        session = await h.session(sid)
        return session.status, [k.status for k in session.kernels]

    assert run(database, settle) == (S.RUNNING, [K.RUNNING])


def test_what_backends_report_still_applies_from_outside_and_from_backends(database):
    async def check(h):
        sid = await h.create_session(
            status=S.CREATING,
            kernels=[{"cpu": 1, "mem": 1, "status": K.CREATING, "agent_id": "agent-1"}] * 2,
        )
        k1, k2 = [k.id for k in (await h.session(sid)).kernels]
        # The move a backend makes, made from outside: allowed.
        assert await h.repository.report(k1, K.RUNNING, source="watcher")
        # A backend's own reports are drover's: any move (its destroy intent too).
        report = KernelReport(k2, K.TERMINATING, expected=frozenset({K.CREATING}))
        assert await h.repository.report_kernel_statuses([report]) == [True]
        # Ending a kernel is always allowed.
        assert await h.repository.report(k2, K.ERROR, status_info="OOM", source="watcher")
        return [(k.status, k.status_info) for k in (await h.session(sid)).kernels]

    assert run(database, check) == [(K.RUNNING, None), (K.ERROR, "OOM")]


def test_the_kernels_of_a_session_a_report_ends_are_recorded_destroyed(database, client):
    """As `drover terminate` records its kernels destroyed, with how they ended."""

    async def make(h):
        return await _running(h, kernels=2)

    sid, _ = run(database, make)
    body = {"entity_id": sid, "status": "ERROR", "source": "ci", "status_info": "LOST"}
    assert client.post("/api/report", json=body, headers=TOKEN).json()["applied"] is True

    async def check(h):
        session = await h.session(sid)
        assert (session.status, session.status_info, session.result) == (
            S.ERROR,
            "LOST",
            "FAILURE",
        )
        for kernel in session.kernels:
            assert (kernel.status, kernel.status_info) == (
                K.ERROR,
                "destroyed: its session was reported ERROR by api:ci",
            )
            (*_, end) = await h.kernel_history(kernel.id)
            assert (end.source, end.from_status, end.to_status) == ("api:ci", K.RUNNING, K.ERROR)

    run(database, check)


def test_a_new_entitys_spec_is_held_to_the_same_integers(database):
    """The bound is the JSON check's: a spec's 10**400 is refused as a report's is."""

    async def check(h):
        with pytest.raises(
            InvalidSpecError, match="an integer of 1329 bits is not a finite number"
        ):
            await h.repository.create_session(kernels=[{"cpu": 1, "mem": 1}], spec={"n": 10**400})
        return await h.repository.list_sessions()

    assert run(database, check) == []
