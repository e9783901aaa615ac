"""The web dashboard: JSON API, token gate, /metrics and /healthz, on SQLite and PostgreSQL.

Starlette's TestClient runs the app in its own event loop, so these tests are
synchronous and build their data with ``asyncio.run`` on a harness over the
same database, as the CLI tests do.
"""

from __future__ import annotations

import asyncio
import csv
import io
import os
import re
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.testclient import TestClient

from drover import hookimpl, make_plugin_manager
from drover.app import App
from drover.config import load_config
from drover.kinds.sessions.store import SessionRepository as Repository
from drover.kinds.sessions.values import KernelReport, KernelStatus, SessionStatus
from drover.model.clock import ManualClock
from drover.model.errors import InvalidHandlerError
from drover.model.values import CoordinatorInfo
from drover.plugins.graph import edges_of
from drover.plugins.manager import collect_kinds, collect_web
from drover.serialization import session_json
from drover.storage.stats import BUCKETS
from drover.testing import CoordinatorHarness
from drover.web import create_app, dashboard_of, page
from drover.web.palette import STATUS_COLOURS, with_plugin_colours
from drover.web.security import public_bind_warning
from drover.web.svg_graph import dot_source, render_svg

TOKEN = "s3cret-token"


@pytest.fixture
def harness(database):
    """Run ``await fn(h)`` on a harness over this test's database, in its own event loop."""

    def call(fn):
        async def go():
            async with CoordinatorHarness(
                database_url=database.url, database_schema=database.schema
            ) as h:
                return await fn(h)

        return asyncio.run(go())

    return call


@pytest.fixture
def make_client(database, monkeypatch, tmp_path):
    """A TestClient for the dashboard over this test's database (``with make_client() as c``)."""
    monkeypatch.chdir(tmp_path)  # no stray ./drover.toml

    def factory(**kwargs):
        flags = {"database_url": database.url, "database_schema": database.schema or ""}
        app = App(load_config(None, environ={}, flags=flags))
        web = create_app(app, close_app_on_shutdown=True, **kwargs)
        # The dashboard answers only the Host it is bound to: 127.0.0.1 by default.
        return TestClient(web, base_url="http://127.0.0.1:8080")

    return factory


async def _scenario(h: CoordinatorHarness) -> dict[str, str]:
    """alpha RUNNING; beta PENDING, skipped three times (too big); gamma CANCELLED."""
    alpha = await h.create_session(name="alpha", kernels=[{"cpu": 1, "mem": 64}] * 2)
    await h.run_until_settled()
    beta = await h.create_session(name="beta-big", kernels=[{"cpu": 100000, "mem": 64}])
    for _ in range(3):
        await h.tick("schedule-sessions")
        h.clock.advance(1)
    gamma = await h.create_session(name="gamma")
    await h.request_termination(gamma)
    return {"alpha": alpha, "beta": beta, "gamma": gamma}


def test_api_sessions_and_filters(harness, make_client):
    """/api/sessions: session_json's fields; status, name, handler and time filters."""
    ids = harness(_scenario)
    expected = harness(
        lambda h: asyncio.gather(*(h.session(ids[n]) for n in ("alpha", "beta", "gamma")))
    )
    with make_client() as client:
        response = client.get("/api/sessions")
        assert response.status_code == 200
        listed = response.json()
        assert {s["name"]: s["status"] for s in listed} == {
            "alpha": "RUNNING",
            "beta-big": "PENDING",
            "gamma": "CANCELLED",
        }
        # the very shape `drover sessions --json` prints
        by_id = {s["id"]: s for s in listed}
        for session in expected:
            assert by_id[session.id] == session_json(session)

        def names(**params):
            got = client.get("/api/sessions", params=params)
            assert got.status_code == 200, got.text
            return sorted(s["name"] for s in got.json())

        assert names(status="RUNNING") == ["alpha"]
        assert names(status=["PENDING", "CANCELLED"]) == ["beta-big", "gamma"]
        assert names(status="pending,running") == ["alpha", "beta-big"]
        assert names(name="BETA") == ["beta-big"]
        assert names(handler="schedule-sessions") == ["beta-big"]
        assert names(handler="api") == ["gamma"]
        assert names(handler="promote-to-running") == ["alpha"]
        assert names(since="1h") == ["alpha", "beta-big", "gamma"]
        assert names(until="2000-01-01T00:00:00") == []
        assert names(limit="1") == [listed[0]["name"]]
        bad = client.get("/api/sessions", params={"status": "SLEEPING"})
        assert bad.status_code == 400
        assert "SLEEPING" in bad.json()["error"]
        assert client.get("/api/sessions", params={"since": "yesterday"}).status_code == 400


def test_api_session_history_stats_and_graph(harness, make_client):
    """A session (with history, as `show --json`), history search, stats and the graph."""
    ids = harness(_scenario)
    beta = ids["beta"]
    with make_client() as client:
        data = client.get(f"/api/sessions/{beta[:20]}").json()
        assert data["id"] == beta
        assert data["status"] == "PENDING"
        assert [(r["handler"], r["result"], r["attempts"]) for r in data["history"]] == [
            ("api", "CREATED", 1),
            ("schedule-sessions", "SKIPPED", 3),
        ]
        assert set(data["history"][0]) == {
            "id", "entity_id", "session_id", "kind", "handler", "result", "from_status",
            "to_status", "error_code", "message", "attempts", "created_at", "updated_at",
        }  # fmt: skip
        assert client.get("/api/sessions/nope").status_code == 404
        assert client.get("/api/sessions/nope").json() == {"error": "no session 'nope'"}

        why = client.get(f"/api/sessions/{beta}/why").json()
        assert why["session_id"] == beta
        assert why["status"] == "PENDING"
        assert any("PENDING" in line for line in why["lines"])

        tl = client.get(f"/api/sessions/{ids['alpha']}/timeline").json()
        assert {item["kind"] for item in tl} == {"session", "kernel"}

        history = client.get("/api/history").json()
        assert [r["id"] for r in history] == sorted(r["id"] for r in history)  # latest last
        # The sessions' rows, and their kernels' CREATED rows.
        assert {r["session_id"] for r in history if r["kind"] == "session"} == set(ids.values())
        assert {r["result"] for r in history if r["kind"] == "kernel"} == {"CREATED"}
        skipped = client.get("/api/history", params={"result": "skipped"}).json()
        assert [(r["session_id"], r["attempts"]) for r in skipped] == [(beta, 3)]
        api_rows = client.get("/api/history", params={"handler": "api"}).json()
        # latest last: every session's CREATED row, then gamma's termination
        api_rows = [r for r in api_rows if r["kind"] == "session"]
        assert [(r["session_id"], r["result"], r["to_status"]) for r in api_rows] == [
            (ids["alpha"], "CREATED", "PENDING"),
            (ids["beta"], "CREATED", "PENDING"),
            (ids["gamma"], "CREATED", "PENDING"),
            (ids["gamma"], "SUCCESS", "CANCELLED"),
        ]
        mine = client.get("/api/history", params={"session": ids["alpha"][:22]}).json()
        assert {r["session_id"] for r in mine} == {ids["alpha"]}
        assert client.get("/api/history", params={"result": "MAYBE"}).status_code == 400

        stats = client.get("/api/stats").json()
        assert set(stats) >= {"handlers", "statuses"}
        by_status = {s["status"]: s["sessions"] for s in stats["statuses"]}
        assert by_status["RUNNING"] == 1
        assert by_status["PENDING"] == 1
        assert by_status["CANCELLED"] == 1
        assert client.get("/api/stats", params={"since": "1h"}).status_code == 200

        graph = client.get("/api/graph").json()
        assert {n["status"] for n in graph["nodes"]} == {s.value for s in SessionStatus}
        assert {
            "source": "PENDING",
            "target": "SCHEDULED",
            "handler": "schedule-sessions",
            "outcome": "success",
        } in graph["edges"]
        assert set(graph["edges"][0]) == {"source", "target", "handler", "outcome"}


def test_pages_render(harness, make_client):
    """Every page answers with its content; unknown sessions and bad filters are errors."""
    ids = harness(_scenario)
    with make_client() as client:
        home = client.get("/")
        assert home.status_code == 200
        assert "alpha" in home.text
        assert "beta-big" in home.text
        assert "gamma" in home.text
        assert 'data-count-status="RUNNING"' in home.text
        filtered = client.get("/", params={"status": "CANCELLED"}).text
        assert "gamma" in filtered
        assert "beta-big" not in filtered

        page = client.get(f"/sessions/{ids['beta']}").text
        assert "beta-big" in page
        assert "\u00d73" in page  # merged attempts
        assert "schedule-sessions" in page
        alpha = client.get(f"/sessions/{ids['alpha']}").text
        assert "tl-kernel" in alpha  # kernel history interleaved
        assert client.get("/sessions/nope").status_code == 404

        handlers = client.get("/handlers")
        assert handlers.status_code == 200
        assert "Sessions by status" in handlers.text
        assert client.get("/handlers", params={"since": "bogus"}).status_code == 400

        graph = client.get("/graph")
        assert graph.status_code == 200
        assert "<svg" in graph.text
        assert "schedule-sessions: success" in graph.text
        svg = client.get("/graph.svg")
        assert svg.headers["content-type"].startswith("image/svg+xml")
        ET.fromstring(svg.text)

        css = client.get("/static/dashboard.css")
        assert css.status_code == 200
        assert client.get("/static/live.js").status_code == 200


def test_the_history_page_filters_exports_and_refuses(harness, make_client):
    """Issue 35: /history (was a 404) with the CLI's filters, latest last, its CSV and
    JSON exports of the same rows, and a 400 naming an unknown result, handler or kind."""
    ids = harness(_scenario)
    with make_client() as client:
        everything = client.get("/api/history", params={"limit": "1000"}).json()
        shown = client.get("/history", params={"limit": "1000"})
        assert shown.status_code == 200
        assert 'data-live="' in shown.text
        assert 'href="/history.csv?limit=1000"' in shown.text
        order = re.findall(r'data-history-id="(\d+)"', shown.text)
        assert [int(i) for i in order] == [r["id"] for r in everything]
        params = {"handler": "schedule-sessions", "result": "skipped", "kind": "session"}
        page = client.get("/history", params={**params, "entity": ids["beta"][:20]}).text
        assert re.findall(r'data-entity-id="([^"]+)"', page) == [ids["beta"]]
        assert f'href="/sessions/{ids["beta"]}"' in page  # the entity's own page
        assert 'value="skipped"' in page  # the form keeps the filters
        reverse = client.get("/api/history", params={"limit": "1000", "reverse": "1"}).json()
        assert reverse == everything[::-1]
        kernels = client.get("/api/history", params={"kind": "kernel"}).json()
        assert kernels
        assert {r["kind"] for r in kernels} == {"kernel"}
        assert all("session_id" not in r for r in kernels)
        since = client.get("/api/history", params={"since": "2000-01-01T00:00"}).json()
        assert [r["id"] for r in since] == [r["id"] for r in everything][-100:]

        exported = client.get("/history.csv", params={"handler": "api", "kind": "session"})
        assert exported.headers["content-type"].startswith("text/csv")
        assert "attachment" in exported.headers["content-disposition"]
        rows = list(csv.DictReader(io.StringIO(exported.text)))
        api_json = client.get("/api/history", params={"handler": "api", "kind": "session"})
        assert [int(r["id"]) for r in rows] == [r["id"] for r in api_json.json()]
        assert [r["entity_id"] for r in rows][-1] == ids["gamma"]

        for query, start in (
            ({"result": "BOGUS"}, "result 'BOGUS': not a result"),
            ({"handler": "nobody"}, "handler 'nobody': no handler"),
            ({"kind": "gadget"}, "kind 'gadget': no such kind"),
        ):
            answer = client.get("/api/history", params=query)
            assert answer.status_code == 400
            assert answer.json()["error"].startswith(start)
            assert client.get("/history", params=query).status_code == 400
            assert client.get("/history.csv", params=query).status_code == 400
        assert client.get("/api/history", params={"entity": "no-such"}).status_code == 400


def test_token_gate(harness, make_client):
    """With a token every request needs it (header or login cookie): 401 otherwise."""
    harness(_scenario)
    with make_client(auth_token=TOKEN) as client:
        for path in ("/", "/api/sessions", "/metrics", "/healthz", "/graph", "/static/live.js"):
            denied = client.get(path)
            assert denied.status_code == 401, path
            assert denied.headers["www-authenticate"].startswith("Bearer")
        assert client.get(
            "/api/sessions", headers={"Authorization": "Bearer wrong"}
        ).status_code == (401)
        # The token is never taken from the address, where logs and history keep it.
        assert client.get("/api/sessions", params={"token": TOKEN}).status_code == 401
        html = client.get("/", headers={"Accept": "text/html"})
        assert html.status_code == 401
        assert "401 Unauthorized" in html.text
        assert '<form method="post" action="/login">' in html.text

        ok = client.get("/api/sessions", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200
        assert len(ok.json()) == 3
        page = client.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
        assert page.status_code == 200
        assert TOKEN not in page.text
        # No link carries it either (an installed plugin may name a handler "…token…").
        assert "token=" not in page.text.lower()


def test_login_form_sets_a_strict_httponly_cookie_and_links_carry_no_token(harness, make_client):
    """The token is typed once: POST /login sets the cookie; no page copies the token."""
    harness(_scenario)
    with make_client(auth_token=TOKEN) as client:
        form = client.get("/login", params={"next": "/graph"})
        assert form.status_code == 200
        assert 'name="next" value="/graph"' in form.text
        wrong = client.post(
            "/login", data={"token": "nope", "next": "/graph"}, follow_redirects=False
        )
        assert wrong.status_code == 401
        assert "The token is wrong." in wrong.text
        assert "set-cookie" not in wrong.headers

        right = client.post(
            "/login", data={"token": TOKEN, "next": "/graph"}, follow_redirects=False
        )
        assert right.status_code == 303
        assert right.headers["location"] == "/graph"
        cookie = right.headers["set-cookie"]
        attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
        assert {"httponly", "path"} <= attributes
        assert "samesite=strict" in cookie.lower()
        assert TOKEN not in cookie  # a value derived from it, not the token itself

        pages = [client.get(p) for p in ("/", "/graph", "/handlers", "/api/sessions")]
        assert [p.status_code for p in pages] == [200, 200, 200, 200]
        overview = pages[0].text
        assert TOKEN not in overview
        assert "token=" not in overview  # was in every link: 118 times on one page
        assert 'href="/logout"' in overview

        # Another site cannot send the browser on elsewhere after logging in.
        outside = client.post(
            "/login", data={"token": TOKEN, "next": "//evil.example/"}, follow_redirects=False
        )
        assert outside.headers["location"] == "/"

        out = client.get("/logout", follow_redirects=False)
        assert out.status_code == 303
        assert (
            'drover_session=""' in out.headers["set-cookie"]
            or "Max-Age=0" in (out.headers["set-cookie"])
        )
        client.cookies.clear()
        assert client.get("/").status_code == 401


@pytest.mark.parametrize(
    ("bound", "allowed", "host", "status"),
    [
        ("127.0.0.1", (), "127.0.0.1:8080", 200),
        ("127.0.0.1", (), "localhost:8080", 200),
        ("127.0.0.1", (), "[::1]:8080", 200),
        # DNS rebinding: a name the attacker controls, resolving to 127.0.0.1.
        ("127.0.0.1", (), "rebind.evil.example:8080", 400),
        ("127.0.0.1", (), "10.0.0.5:8080", 400),
        ("127.0.0.1", ("drover.internal",), "drover.internal:8080", 200),
        ("127.0.0.1", ("drover.internal",), "DROVER.INTERNAL", 200),
        ("0.0.0.0", (), "192.168.1.20:8080", 200),
        ("0.0.0.0", (), "[fe80::1]:8080", 200),
        ("0.0.0.0", (), "localhost", 200),
        ("0.0.0.0", (), "rebind.evil.example", 400),
        ("0.0.0.0", ("dash.example.org",), "dash.example.org", 200),
        ("10.1.2.3", (), "10.1.2.3:8080", 200),
        ("10.1.2.3", (), "localhost:8080", 400),
    ],
)
def test_the_host_header_must_name_this_dashboard(
    harness, make_client, bound, allowed, host, status
):
    """Only the bound address (loopback names on loopback) and the allow-list are answered."""
    harness(_scenario)
    with make_client(host=bound, allowed_hosts=allowed) as client:
        for path in ("/", "/api/sessions", "/healthz", "/static/dashboard.css"):
            response = client.get(path, headers={"Host": host})
            if status == 400:
                assert response.status_code == 400, (path, host)
                assert "does not answer to the host" in response.text
                assert "--allowed-host" in response.text
            else:
                assert response.status_code in (200, 503), (path, host, response.text)


def test_security_headers_on_every_answer(harness, make_client):
    """CSP allowing only the dashboard's own files, nosniff, no referrer, no framing."""
    ids = harness(_scenario)
    with make_client(auth_token=TOKEN) as client:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        answers = [
            client.get("/", headers=bearer),
            client.get(f"/sessions/{ids['alpha']}", headers=bearer),
            client.get("/graph", headers=bearer),
            client.get("/api/sessions", headers=bearer),
            client.get("/static/dashboard.css", headers=bearer),
            client.get("/palette.css", headers=bearer),
            client.get("/sessions/nope", headers=bearer),
            client.get("/"),
            client.get("/", headers={"Host": "evil.example"}),
            client.get("/login"),
        ]
        assert [a.status_code for a in answers] == [
            200,
            200,
            200,
            200,
            200,
            200,
            404,
            401,
            400,
            200,
        ]
        for answer in answers:
            csp = answer.headers["content-security-policy"]
            assert "default-src 'none'" in csp
            assert "script-src 'self'" in csp
            assert "style-src 'self'" in csp
            assert "frame-ancestors 'none'" in csp
            assert "unsafe-inline" not in csp
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["referrer-policy"] == "no-referrer"
            assert answer.headers["x-frame-options"] == "DENY"
        # What the policy forbids is not there: no inline script or style, no other origin.
        for answer in answers[:3]:
            assert "<style" not in answer.text
            assert " style=" not in answer.text
            assert re.findall(r"<script(?![^>]*\bsrc=)", answer.text) == []
            assert "http://" not in re.sub(
                r'xmlns(:xlink)?="http://www.w3.org/[^"]*"', "", answer.text
            )
            assert "https://" not in answer.text


def test_public_bind_warning():
    """Binding beyond loopback without a token warns; loopback or a token does not."""
    assert public_bind_warning("127.0.0.1", None) is None
    assert public_bind_warning("::1", None) is None
    assert public_bind_warning("localhost", None) is None
    assert public_bind_warning("0.0.0.0", "t") is None
    assert "without --auth-token" in public_bind_warning("0.0.0.0", None)


def test_metrics(harness, make_client):
    """/metrics parses with prometheus-client; ticks, results, the histogram and sessions."""

    async def build(h: CoordinatorHarness) -> None:
        await h.create_session(name="a")
        await h.create_session(name="b")
        await h.run_until_settled()
        await h.create_session(name="c")
        now = time.time()
        await h.repository.record_ticks(
            [
                {"handler": "schedule-sessions", "started_at": now, "duration": 0.02,
                 "fetched": 2, "counts": {"SUCCESS": 2}},
                {"handler": "schedule-sessions", "started_at": now, "duration": 0.3,
                 "fetched": 1, "counts": {"SKIPPED": 1}},
                {"handler": "schedule-sessions", "started_at": now, "duration": 0.02,
                 "fetched": 2, "counts": {"SUCCESS": 2}},
                {"handler": "start-sessions", "started_at": now, "duration": 0.004,
                 "fetched": 2, "counts": {"SUCCESS": 1, "NEED_RETRY": 1}},
            ]
        )  # fmt: skip

    harness(build)
    with make_client() as client:
        response = client.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    assert {
        "drover_handler_ticks",
        "drover_handler_results",
        "drover_handler_tick_seconds",
        "drover_sessions",
    } <= set(families)

    def samples(family, suffix=""):
        return {
            tuple(sorted(s.labels.items())): s.value
            for s in families[family].samples
            if s.name == family + suffix
        }

    assert families["drover_handler_ticks"].type == "counter"
    assert samples("drover_handler_ticks", "_total") == {
        (("handler", "schedule-sessions"),): 3.0,
        (("handler", "start-sessions"),): 1.0,
    }
    assert samples("drover_handler_results", "_total") == {
        (("handler", "schedule-sessions"), ("result", "SUCCESS")): 4.0,
        (("handler", "schedule-sessions"), ("result", "SKIPPED")): 1.0,
        (("handler", "start-sessions"), ("result", "SUCCESS")): 1.0,
        (("handler", "start-sessions"), ("result", "NEED_RETRY")): 1.0,
    }
    hist = families["drover_handler_tick_seconds"]
    assert hist.type == "histogram"
    count = samples("drover_handler_tick_seconds", "_count")
    assert count[(("handler", "schedule-sessions"),)] == 3.0
    total = samples("drover_handler_tick_seconds", "_sum")
    assert total[(("handler", "schedule-sessions"),)] == pytest.approx(0.34)
    buckets = {
        (s.labels["handler"], s.labels["le"]): s.value
        for s in hist.samples
        if s.name == "drover_handler_tick_seconds_bucket"
    }
    assert buckets[("schedule-sessions", "0.025")] == 2.0
    assert buckets[("schedule-sessions", "0.25")] == 2.0
    assert buckets[("schedule-sessions", "0.5")] == 3.0
    assert buckets[("schedule-sessions", "+Inf")] == 3.0
    assert buckets[("start-sessions", "0.005")] == 1.0
    assert len([k for k in buckets if k[0] == "start-sessions"]) == len(BUCKETS) + 1
    sessions = {s.labels["status"]: s.value for s in families["drover_sessions"].samples}
    assert families["drover_sessions"].type == "gauge"
    assert sessions == {s.value: 0.0 for s in SessionStatus} | {"RUNNING": 2.0, "PENDING": 1.0}


def test_healthz(database, harness, make_client):
    """503 without a heartbeat (and with a stale one); 200 once a heartbeat is fresh."""
    harness(lambda h: asyncio.sleep(0))  # migrate
    with make_client() as client:
        response = client.get("/healthz")
        assert response.status_code == 503
        assert "no coordinator heartbeat" in response.text

    def beat(age: float, cid: str) -> None:
        async def go(h: CoordinatorHarness) -> None:
            repo = Repository(
                h.repository.engine, clock=ManualClock(time.time() - age), kinds=h.app.kinds
            )
            await repo.register_coordinator(
                CoordinatorInfo(
                    id=cid, host="test-host", pid=os.getpid(), started_at=None,
                    heartbeat_at=None, version="test", stopped_at=None,
                )
            )  # fmt: skip
            await repo.close()

        harness(go)

    beat(100.0, "old")  # 3 x heartbeat_interval (5 s) is 15 s
    with make_client() as client:
        assert client.get("/healthz").status_code == 503
    beat(0.0, "fresh")
    with make_client() as client:
        response = client.get("/healthz")
        assert response.status_code == 200, response.text
        assert response.text.startswith("ok:")
        assert "fresh on test-host" in response.text


def test_healthz_without_a_database(tmp_path, monkeypatch):
    """A database that does not answer is a 503 naming the reason."""
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "no" / "such" / "dir" / "drover.db"
    app = App(
        load_config(None, environ={}, flags={"database_url": f"sqlite+aiosqlite:///{missing}"})
    )
    with TestClient(
        create_app(app, close_app_on_shutdown=True), base_url="http://127.0.0.1"
    ) as client:
        response = client.get("/healthz")
    assert response.status_code == 503
    assert "database does not answer" in response.text


def test_the_graph_is_laid_out_by_graphviz(harness, make_client):
    """/graph.svg comes from `dot`: every status a node with its colour, every pair one labelled
    arrow, and the same SVG inlined in /graph (no external file, no script)."""
    from drover import make_plugin_manager
    from drover.kinds.sessions import SESSION
    from drover.plugins.manager import collect_handlers, collect_kinds
    from drover.plugins.registry import RuntimeContext

    harness(lambda h: asyncio.sleep(0))
    pm = make_plugin_manager(include_builtins=True)
    handlers, _ = collect_handlers(pm, RuntimeContext(None, None, None), collect_kinds(pm))
    edges = edges_of(handlers, kind=SESSION)
    source = dot_source(edges, SESSION)
    assert source == dot_source(list(reversed(edges)), SESSION)  # the same DOT whatever the order
    svg = asyncio.run(render_svg(edges, SESSION))
    assert "Generated by graph" not in svg  # dot's comments and prologue are gone
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    nodes = {
        g.get("id").removeprefix("status-"): g
        for g in root.iter(f"{ns}g")
        if g.get("class") == "node"
    }
    assert set(nodes) == {s.value for s in SessionStatus}
    for status, g in nodes.items():
        assert g.find(f"{ns}text").text == status
        shape = g.find(f"{ns}path")
        assert shape.get("fill") == STATUS_COLOURS[status][0]
    arrows = [g for g in root.iter(f"{ns}g") if g.get("class") == "edge"]
    pairs = {(e.source, e.target) for e in edges}
    assert len(arrows) == len(pairs)
    labels = " ".join(t.text or "" for t in root.iter(f"{ns}text"))
    assert "schedule-sessions: success" in labels
    assert "prepare-sessions: expired, give_up" in labels
    with make_client() as client:
        served = client.get("/graph.svg")
        assert served.headers["content-type"].startswith("image/svg+xml")
        ET.fromstring(served.text)
        assert served.text in client.get("/graph").text  # the page inlines the same SVG


def test_the_graph_page_says_when_graphviz_is_missing(harness, make_client, monkeypatch):
    """Without `dot`, /graph still answers, naming the package to install; /graph.svg is 503."""
    harness(lambda h: asyncio.sleep(0))
    monkeypatch.setenv("PATH", "/nonexistent")
    with make_client() as client:
        page = client.get("/graph")
        assert page.status_code == 200
        assert "Graphviz is not installed (no `dot` on the PATH): run `make system-deps`" in (
            page.text
        )
        assert client.get("/graph.svg").status_code == 503


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_run_with_http_serves_the_dashboard_beside_the_daemon(database, tmp_path):
    """`drover run --http PORT`: uvicorn in the daemon's loop; healthy; stops with the daemon."""
    flags = {
        "database_url": database.url,
        "database_schema": database.schema or "",
        "backend.name": "simulated",
        "heartbeat_interval": 0.2,
        "data_dir": str(tmp_path / "data"),
    }
    app = App(load_config(None, environ={}, flags=flags), claims=True)
    port = _free_port()
    daemons = []
    task = asyncio.create_task(
        app.run_daemon(
            install_signals=False, on_ready=daemons.append, http=("127.0.0.1", port, TOKEN)
        )
    )
    try:
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            deadline = time.monotonic() + 30
            while True:
                assert not task.done(), task
                try:
                    response = await client.get(
                        "/healthz", headers={"Authorization": f"Bearer {TOKEN}"}
                    )
                    if response.status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                assert time.monotonic() < deadline, "the dashboard never became healthy"
                await asyncio.sleep(0.1)
            assert (await client.get("/healthz")).status_code == 401
            sid = await app.repository.create_session(name="web", kernels=[{"cpu": 1}])
            headers = {"Authorization": f"Bearer {TOKEN}"}
            while True:
                got = (await client.get(f"/api/sessions/{sid}", headers=headers)).json()
                if got["status"] == "RUNNING":
                    break
                assert time.monotonic() < deadline, got
                await asyncio.sleep(0.1)
        daemons[0].stop()
        assert await asyncio.wait_for(task, 30) == 0
        with pytest.raises(httpx2.TransportError):
            async with httpx2.AsyncClient() as client:
                await client.get(f"http://127.0.0.1:{port}/healthz")
    finally:
        if not task.done():
            daemons[0].stop()
            await asyncio.wait_for(task, 30)
        await app.close()


def test_drover_serve_command(harness, database, tmp_path):
    """`drover serve` answers on its port without a daemon (healthz 503, pages 200)."""
    harness(lambda h: asyncio.sleep(0))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DROVER_")}
    env["DROVER_DATABASE_URL"] = database.url
    if database.schema:
        env["DROVER_DATABASE_SCHEMA"] = database.schema
    proc = subprocess.Popen(
        [sys.executable, "-m", "drover", "serve", "--port", str(port), "--host", "0.0.0.0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.communicate()
            try:
                response = httpx2.get(f"http://127.0.0.1:{port}/healthz")
                break
            except httpx2.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert response.status_code == 503
        assert httpx2.get(f"http://127.0.0.1:{port}/").status_code == 200
        assert httpx2.get(f"http://127.0.0.1:{port}/api/sessions").json() == []
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    assert "without --auth-token" in err  # 0.0.0.0 without a token warns


async def _service(h: CoordinatorHarness) -> str:
    """A deployment ``web`` of 2 replicas whose routes are provisioned (DEGRADED)."""
    spec = {"replicas": 2, "kernel": {"command": ["true"], "cpu": 1, "mem": 64}}
    dep = await h.create("deployment", spec=spec, name="web")
    await h.tick("check-pending-deployment")
    await h.tick("scaling-deployment")
    await h.tick("provisioning-route")
    return dep


def test_deployment_pages_and_endpoints(harness, make_client):
    """The Deployments page, a deployment's page (routes, session links, timeline), endpoints."""
    dep = harness(_service)
    with make_client() as client:
        listing = client.get("/deployments")
        assert listing.status_code == 200
        assert 'href="/deployments/web"' in listing.text
        # No replica answers yet: DEGRADED, not READY (issue 35).
        assert 'data-status="DEGRADED"' in listing.text
        assert "0 of 2 healthy" in listing.text
        page = client.get("/deployments/web")
        assert page.status_code == 200
        assert page.text.count('data-status="DEGRADED"') >= 3
        assert page.text.count('href="/sessions/') == 2
        assert "scaling-deployment" in page.text  # the timeline
        endpoints = client.get("/api/deployments/web/endpoints").json()
        assert endpoints == {"deployment": "web", "id": dep, "status": "DEGRADED", "endpoints": []}
        assert client.get("/api/deployments/nope/endpoints").status_code == 404
        listed = client.get("/api/deployments").json()
        assert [(d["name"], d["replicas"], d["live_routes"]) for d in listed] == [("web", 2, 2)]


async def _ended(h: CoordinatorHarness) -> dict[str, str]:
    """Two TERMINATED sessions, one SUCCESS and one FAILURE (exit 3), created a second apart."""
    ok = await h.create_session(name="went-well", kernels=[{"cpu": 1, "sim": {"run_for": 1}}])
    h.clock.advance(1)
    bad = await h.create_session(
        name="went-wrong", kernels=[{"cpu": 1, "sim": {"run_for": 1, "exit_code": 3}}]
    )
    await h.run_until_settled()
    h.clock.advance(2)
    await h.run_until_settled()
    return {"ok": ok, "bad": bad}


def test_failed_sessions_stand_out_newest_first_and_filters_above(harness, make_client):
    """A TERMINATED FAILURE row is marked apart from a SUCCESS one; newest first; the form
    comes before the table; ?sort= orders otherwise."""
    ids = harness(_ended)
    with make_client() as client:
        page = client.get("/").text
        assert page.index('<form class="filters"') < page.index('<table class="sessions"')
        rows = re.findall(r'<tr data-session-id="([^"]+)"[^>]*>', page)
        assert rows == [ids["bad"], ids["ok"]]  # newest first
        bad_row = re.search(rf'<tr data-session-id="{ids["bad"]}"[^>]*>.*?</tr>', page, re.S)
        ok_row = re.search(rf'<tr data-session-id="{ids["ok"]}"[^>]*>.*?</tr>', page, re.S)
        assert 'data-status="TERMINATED" data-result="FAILURE" class="failed"' in bad_row.group(0)
        assert "✗ failed" in bad_row.group(0)
        assert 'class="failed"' not in ok_row.group(0)
        assert "✗ failed" not in ok_row.group(0)
        oldest = client.get("/", params={"sort": "oldest"}).text
        assert re.findall(r'<tr data-session-id="([^"]+)"', oldest) == [ids["ok"], ids["bad"]]
        assert [s["id"] for s in client.get("/api/sessions").json()] == [ids["bad"], ids["ok"]]
        assert client.get("/", params={"sort": "size"}).status_code == 400
        css = client.get("/static/dashboard.css").text
        assert "tr.failed td" in css


def test_the_overview_counts_ended_sessions_by_result(harness, make_client):
    """Issue 35: beside the TERMINATED count, how those sessions ended (1 SUCCESS, 1
    FAILURE), so a failure or a stop is not hidden in TERMINATED."""
    harness(_ended)
    with make_client() as client:
        page = client.get("/").text
        ended = re.search(r'data-count-results="TERMINATED">(.*?)</span></span>', page, re.S)
        assert ended is not None
        counted = re.findall(r'data-result="([A-Z]+)">(\d+) \1', ended.group(1))
        assert counted == [("SUCCESS", "1"), ("FAILURE", "1")]
        assert 'data-count-results="PENDING"' not in page  # nothing has ended there


def test_kernel_logs_are_readable_from_the_session_page(harness, make_client, tmp_path):
    """The session page shows the tail of each kernel's stdout and stderr (capped); the raw
    tail is one click away, capped too."""
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    out.write_text("".join(f"line {i:05d}\n" for i in range(5000)))  # 55 000 bytes
    err.write_text("Traceback: <boom> & \x1b[31mred\x1b[0m\n")

    async def running(h: CoordinatorHarness) -> str:
        sid = await h.create_session(
            name="logged",
            status=SessionStatus.RUNNING,
            kernels=[{"cpu": 1, "status": "CREATING", "agent_id": "sim-1"}, {"cpu": 1}],
        )
        kernel = (await h.session(sid)).kernels[0]
        (applied,) = await h.repository.report_kernel_statuses(
            [
                KernelReport(
                    kernel.id,
                    KernelStatus.RUNNING,
                    runtime={"pid": 1, "stdout": str(out), "stderr": str(err)},
                )
            ]
        )
        assert applied
        return sid

    sid = harness(running)
    with make_client() as client:
        page = client.get(f"/sessions/{sid}").text
        assert "line 04999" in page  # the end
        assert "line 00000" not in page  # not the beginning: the page shows a capped tail
        assert "55000 bytes, the last 16 KiB shown" in page
        assert "Traceback: &lt;boom&gt; &amp;" in page  # escaped, not markup
        assert "No logs yet" in page  # kernel 2 never started
        raw = client.get(f"/sessions/{sid}/kernels/1/stdout", params={"bytes": 33})
        assert raw.status_code == 200
        assert raw.headers["content-type"].startswith("text/plain")
        assert raw.headers["x-drover-log-size"] == "55000"
        assert raw.text == "line 04998\nline 04999\n"
        assert len(client.get(f"/sessions/{sid}/kernels/1/stdout").text) == 55000
        assert client.get(f"/sessions/{sid}/kernels/1/stderr").text.startswith("Traceback")
        assert client.get(f"/sessions/{sid}/kernels/2/stdout").status_code == 404
        assert client.get(f"/sessions/{sid}/kernels/3/stdout").status_code == 404
        assert client.get(f"/sessions/{sid}/kernels/1/nope").status_code == 404
        assert client.get(f"/sessions/{sid}/kernels/1/stdout?bytes=0").status_code == 400


class _HelloPlugin:
    """A third-party plugin: a page in drover's layout, a JSON endpoint, a nav link."""

    def __init__(self, templates):
        self.templates = templates

    @hookimpl
    def drover_register_web(self, register):
        async def hello_page(request):
            count = sum((await dashboard_of(request).repo.count_by_status()).values())
            return page(request, "hello.html", {"title": "Hello", "count": count})

        async def hello_api(request):
            name = request.path_params["name"]
            if name == "nobody":
                raise HTTPException(404, "no one called nobody")
            return JSONResponse({"hello": name})

        register.templates(self.templates)
        register.route("/hello", hello_page, name="hello", nav="Hello there")
        register.route("/api/hello/{name}", hello_api)


def test_a_plugin_page_is_served_behind_the_token_with_its_nav_link(
    harness, database, monkeypatch, tmp_path
):
    """drover_register_web: a plugin's page and endpoint, gated like drover's, in the nav."""
    harness(_scenario)
    monkeypatch.chdir(tmp_path)
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "hello.html").write_text(
        '{% extends "base.html" %}{% block content %}<h1>Hello: {{ count }} sessions</h1>'
        "{% endblock %}"
    )
    flags = {"database_url": database.url, "database_schema": database.schema or ""}
    pm = make_plugin_manager(plugins=[_HelloPlugin(templates)])
    app = App(load_config(None, environ={}, flags=flags), plugin_manager=pm)
    web = create_app(app, auth_token=TOKEN, close_app_on_shutdown=True)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(web, base_url="http://127.0.0.1:8080") as client:
        for path in ("/hello", "/api/hello/you"):
            assert client.get(path).status_code == 401, path
            assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        hello = client.get("/hello", headers=auth)
        assert hello.status_code == 200
        assert "<h1>Hello: 3 sessions</h1>" in hello.text
        assert "default-src 'none'" in hello.headers["content-security-policy"]
        assert re.search(r'<a href="/hello" class="current">Hello there</a>', hello.text)
        assert client.get("/api/hello/you", headers=auth).json() == {"hello": "you"}
        missing = client.get("/api/hello/nobody", headers=auth)
        assert (missing.status_code, missing.json()) == (404, {"error": "no one called nobody"})
        # A wrong Host is refused before the plugin's endpoint runs.
        assert client.get("/hello", headers={**auth, "Host": "evil.example"}).status_code == 400

        overview = client.get("/", headers=auth)
        assert overview.status_code == 200
        assert '<a href="/hello" >Hello there</a>' in overview.text
        # drover's own deployments link is registered the same way, before the plugin's.
        assert overview.text.index(">Deployments</a>") < overview.text.index(">Hello there</a>")


def test_every_status_of_drovers_kinds_has_a_colour():
    """drover's palette and the colours its kind packages register cover every status of
    every kind drover registers (a badge or a box is never the unknown grey)."""
    pm = make_plugin_manager()
    colours = with_plugin_colours(collect_web(pm).status_colours)
    missing = {
        (kind.name, status)
        for kind in collect_kinds(pm).values()
        for status in kind.status_names
        if status not in colours
    }
    assert not missing, sorted(missing)


class _Colours:
    """A plugin giving statuses their dashboard colours."""

    def __init__(self, colours):
        self.colours = colours

    @hookimpl
    def drover_register_web(self, register):
        register.colours(self.colours)


def test_a_plugin_gives_its_statuses_their_colours(database, monkeypatch, tmp_path):
    """register.colours: the plugin's statuses get badge classes in /palette.css, after
    drover's own; a colour drover already gives a status, given again alike, is accepted."""
    monkeypatch.chdir(tmp_path)
    flags = {"database_url": database.url, "database_schema": database.schema or ""}
    plugin = _Colours({"QUEUED": ("#123456", "#FEDCBA"), "RUNNING": STATUS_COLOURS["RUNNING"]})
    pm = make_plugin_manager(plugins=[plugin])
    app = App(load_config(None, environ={}, flags=flags), plugin_manager=pm)
    web = create_app(app, close_app_on_shutdown=True)
    with TestClient(web, base_url="http://127.0.0.1:8080") as client:
        css = client.get("/palette.css").text.splitlines()
    assert css[-1] == ".badge-QUEUED { background: #123456; color: #FEDCBA; }"
    assert css[0] == ".badge-PENDING { background: #f59e0b; color: #1f1300; }"
    assert ".badge-READY { background: #1d4ed8; color: #ffffff; }" in css  # the deployments'
    assert sum(line.startswith(".badge-RUNNING ") for line in css) == 1


def test_a_status_has_one_colour(database, monkeypatch, tmp_path):
    """A plugin giving a status another colour than drover's is an error naming both."""
    monkeypatch.chdir(tmp_path)
    flags = {"database_url": database.url, "database_schema": database.schema or ""}
    pm = make_plugin_manager(plugins=[_Colours({"RUNNING": ("#000000", "#ffffff")})])
    app = App(load_config(None, environ={}, flags=flags), plugin_manager=pm)
    with pytest.raises(
        InvalidHandlerError,
        match=r"^plugin '.*' gives status 'RUNNING' the colours \('#000000', '#ffffff'\); "
        r"'drover' gave it \('#1d4ed8', '#ffffff'\)$",
    ):
        create_app(app)
    asyncio.run(app.close())


@pytest.mark.parametrize(
    ("colours", "said"),
    [
        ({"NOT A NAME": ("#000000", "#ffffff")}, "'NOT A NAME' is not a status name"),
        ({"QUEUED": ("red", "#ffffff")}, "the colours of 'QUEUED' must be a pair"),
        ({"QUEUED": ("#000000",)}, "the colours of 'QUEUED' must be a pair"),
        ({"QUEUED": "#000000"}, "the colours of 'QUEUED' must be a pair"),
        ([("QUEUED", ("#000000", "#ffffff"))], "colours must be a mapping"),
    ],
)
def test_register_colours_refuses_what_css_and_dot_cannot_take(colours, said):
    """A status name and colours go into CSS and DOT: anything else names the plugin."""
    pm = make_plugin_manager(plugins=[_Colours(colours)], include_builtins=False)
    with pytest.raises(TypeError, match=rf"^plugin '.*': .*{re.escape(said)}"):
        collect_web(pm)


def test_a_plugin_may_not_take_a_path_of_drovers_own(database, monkeypatch, tmp_path):
    """A route on one of drover's own paths is an error naming the plugin."""
    monkeypatch.chdir(tmp_path)

    class Shadow:
        @hookimpl
        def drover_register_web(self, register):
            register.route("/healthz", lambda request: None)

    flags = {"database_url": database.url, "database_schema": database.schema or ""}
    pm = make_plugin_manager(plugins=[Shadow()])
    app = App(load_config(None, environ={}, flags=flags), plugin_manager=pm)
    with pytest.raises(InvalidHandlerError, match=r"plugin '.*' registered the dashboard path "):
        create_app(app)
    asyncio.run(app.close())
