"""The dashboard pages of issue 22: what an operator needs on the overview and a session's page.

HTTP through Starlette's TestClient: these are facts in the HTML, no browser needed.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from html import unescape as html_unescape
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from drover.app import App
from drover.config import load_config
from drover.kinds.sessions.values import KernelReport, KernelStatus
from drover.kinds.sessions.values import SessionStatus as S
from drover.testing import CoordinatorHarness
from drover.web import create_app

KERNEL = {"command": ["true"], "cpu": 1, "mem": 64}


async def _scenario(h: CoordinatorHarness, logs: Path) -> dict[str, str]:
    """ok (SUCCESS), bad (FAILURE), big (PENDING, too large), and a deployment's replica."""
    ids = {}
    ids["ok"] = await h.create_session(
        name="ok",
        kernels=[
            {
                "command": ["sh", "-c", "echo 'hello world'"],
                "cpu": 1,
                "mem": 64,
                "env": {"SECRET_TOKEN": "s3cret", "MODE": "fast"},
                "cwd": "sub",
                "sim": {"run_for": 5},
            }
        ],
    )
    ids["bad"] = await h.create_session(
        name="bad", kernels=[{**KERNEL, "sim": {"run_for": 1, "exit_code": 3}}]
    )
    ids["big"] = await h.create_session(name="big", kernels=[{**KERNEL, "cpu": 100000}])
    ids["web"] = await h.create(
        "deployment",
        name="web",
        spec={
            "replicas": 1,
            "kernel": KERNEL,
            "health_path": "/healthz",
            "evict_after": 5,
            "stale_after": 30,
        },
    )
    # No replica wanted: READY with nothing to explain.
    ids["idle"] = await h.create(
        "deployment", name="idle", spec={"replicas": 0, "kernel": KERNEL, "health_path": "/"}
    )
    await h.run_until_settled()
    h.clock.advance(10)
    await h.run_until_settled()
    (route,) = (await h.get(ids["web"])).children
    ids["replica"] = route.data["session_id"]
    # A kernel with log files, as the local backend records them: stdout with a line,
    # stderr empty.
    ids["logs"] = await h.create_session(
        name="logs", status=S.CREATING, kernels=[{**KERNEL, "status": "CREATING"}]
    )
    (kernel,) = (await h.session(ids["logs"])).kernels
    (logs / "stdout.log").write_text("hello\n")
    (logs / "stderr.log").write_text("")
    runtime = {"stdout": str(logs / "stdout.log"), "stderr": str(logs / "stderr.log")}
    report = KernelReport(
        kernel.id, KernelStatus.RUNNING, (KernelStatus.CREATING,), None, None, runtime
    )
    assert await h.repository.report_kernel_statuses([report]) == [True]
    return ids


@pytest.fixture
def world(database, monkeypatch, tmp_path):
    """The scenario on this test's database, and a TestClient of the dashboard over it."""
    monkeypatch.chdir(tmp_path)

    async def build() -> dict[str, str]:
        async with CoordinatorHarness(
            database_url=database.url, database_schema=database.schema
        ) as h:
            return await _scenario(h, tmp_path)

    ids = asyncio.run(build())
    flags = {"database_url": database.url, "database_schema": database.schema or ""}
    web = create_app(App(load_config(None, environ={}, flags=flags)), close_app_on_shutdown=True)
    with TestClient(web, base_url="http://127.0.0.1:8080") as client:
        yield ids, client


def _rows(html: str) -> dict[str, str]:
    """Session id -> its overview row's HTML."""
    return {
        m.group(1): m.group(0)
        for m in re.finditer(r'<tr data-session-id="([^"]+)"[^>]*>.*?</tr>', html, re.S)
    }


def test_the_overview_says_why_a_session_is_pending(world):
    """A 'waiting for' column: the scheduler's reason for a PENDING session."""
    ids, client = world
    rows = _rows(client.get("/").text)
    assert "<th>waiting for</th>" in client.get("/").text
    reason = re.search(r'<td class="reason">(.*?)</td>', rows[ids["big"]], re.S).group(1)
    assert "insufficient resources" in reason
    assert "cpu=100000" in reason
    assert re.search(r'<td class="reason"></td>', rows[ids["ok"]])


def test_the_overview_filters_by_result(world):
    """?result=FAILURE shows the failed session only; - shows those without a result."""
    ids, client = world
    page = client.get("/", params={"result": "FAILURE"})
    assert page.status_code == 200
    assert set(_rows(page.text)) == {ids["bad"]}
    assert '<option value="FAILURE" selected>FAILURE</option>' in page.text
    assert ids["ok"] in _rows(client.get("/", params={"result": "success"}).text)
    unfinished = set(_rows(client.get("/", params={"result": "-"}).text))
    assert ids["big"] in unfinished
    assert ids["ok"] not in unfinished
    assert client.get("/", params={"result": "no such!"}).status_code == 400


def test_the_overview_shows_a_deployments_replica_sessions(world):
    """?linked_to=<deployment name or id>: its replica sessions, and the deployment links there."""
    ids, client = world
    page = client.get("/", params={"linked_to": "web"})
    assert page.status_code == 200, page.text
    assert set(_rows(page.text)) == {ids["replica"]}
    assert "Sessions linked to deployment <strong>web</strong>" in page.text
    assert set(_rows(client.get("/", params={"linked_to": ids["web"]}).text)) == {ids["replica"]}
    assert client.get("/", params={"linked_to": "nothing-named-so"}).status_code == 400
    deployment = client.get("/deployments/web").text
    assert f'href="/?linked_to={ids["web"]}"' in deployment


def test_the_session_page_says_what_runs_where_and_for_how_long(world):
    """Command, resources, env names (not values), working directory, run time, dated times."""
    ids, client = world
    html = client.get(f"/sessions/{ids['ok']}").text
    command = re.search(r'<td class="command"><code>(.*?)</code>', html).group(1)
    # Quoted as a shell reads it: it can be pasted.
    assert shlex.split(html_unescape(command)) == ["sh", "-c", "echo 'hello world'"]
    assert '<td class="resources">cpu=1 mem=64</td>' in html
    assert "<code>MODE</code> <code>SECRET_TOKEN</code>" in html
    assert "s3cret" not in html  # env values are not shown
    assert re.search(r'<td class="cwd"><code>[^<]*sub</code>', html)
    # RUNNING from promote-to-running until detect-termination saw the exit, 10 s later.
    assert '<dd class="run-time">10s</dd>' in html
    times = re.findall(r'<time title="[^"]+">([^<]+)</time>', html)
    assert times
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", t) for t in times)
    assert times == sorted(times)  # oldest first


def test_replica_session_and_deployment_link_each_other(world):
    """The replica's page names its route and links its deployment; the deployment links back."""
    ids, client = world
    html = client.get(f"/sessions/{ids['replica']}").text
    link = re.search(r'<dd class="link" data-relation="replica-of">(.*?)</dd>', html, re.S)
    assert link is not None, html
    assert re.search(
        r'route <code>[^<]+</code> of deployment <a href="/deployments/' + ids["web"], link.group(1)
    )
    deployment = client.get(f"/deployments/{ids['web']}").text
    assert f'href="/sessions/{ids["replica"]}"' in deployment


def test_every_timeline_is_oldest_first_with_dates(world):
    """The deployment page's timeline is in the session page's order, with dates."""
    _ids, client = world
    html = client.get("/deployments/web").text
    times = re.findall(r'<time title="[^"]+">([^<]+)</time>', html)
    assert len(times) >= 3
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", t) for t in times)
    assert times == sorted(times)


def test_an_empty_stderr_is_a_word_not_an_empty_block(world):
    """An empty log says "empty"; only a log with text gets the dark block."""
    ids, client = world
    html = client.get(f"/sessions/{ids['logs']}").text
    stdout = re.search(r'<div class="log" data-stream="stdout">(.*?)</div>', html, re.S).group(1)
    stderr = re.search(r'<div class="log" data-stream="stderr">(.*?)</div>', html, re.S).group(1)
    assert '<pre class="log-tail"><code>hello\n</code></pre>' in stdout
    assert '<span class="empty-log">empty</span>' in stderr
    assert "<pre" not in stderr


def test_a_failed_sessions_badge_carries_its_results_colour(world):
    """Issue 35: a TERMINATED FAILURE session's badge is marked with its result (red in
    dashboard.css), on the overview and its page; a SUCCESS one keeps the status colour."""
    ids, client = world
    rows = _rows(client.get("/").text)
    assert 'class="badge badge-TERMINATED badge-result-FAILURE"' in rows[ids["bad"]]
    assert "badge-result-" not in rows[ids["ok"]].split('class="kernels"')[0]
    page = client.get(f"/sessions/{ids['bad']}").text
    assert re.search(
        r"<h1>Session bad <span class=\"badge badge-TERMINATED badge-result-FAILURE\"", page
    )
    css = client.get("/static/dashboard.css").text
    assert ".badge.badge-result-FAILURE { background: #b91c1c;" in css


def test_empty_why_cells_are_not_tinted(world):
    """Issue 35: a READY deployment's empty "why" cell carries no warning class; a DEGRADED
    one's (its replica never answered a check here) says why, tinted."""
    ids, client = world
    page = client.get("/deployments").text

    def why(name: str) -> tuple[str, str]:
        row = re.search(rf'<tr data-deployment-id="{ids[name]}">.*?</tr>', page, re.S)
        assert row is not None
        cell = re.search(r'<td class="(why-cell[^"]*)">(.*?)</td>', row.group(0), re.S)
        assert cell is not None
        return cell.group(1), cell.group(2).strip()

    assert why("idle") == ("why-cell", "")
    assert why("web") == ("why-cell why", "0 of 1 healthy")


def test_the_deployment_page_shows_each_replicas_health_beside_its_session(world):
    """Issue 35: each route's row gives its replica session, that session's status, and
    the route's health, side by side."""
    ids, client = world
    page = client.get("/deployments/web").text
    row = re.search(
        rf'<tr data-route-id="[^"]+" data-session-id="{ids["replica"]}"[^>]*>.*?</tr>', page, re.S
    )
    assert row is not None
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)
    assert ids["replica"] in cells[0]
    assert 'data-status="RUNNING"' in cells[1]  # the session
    assert re.search(r'data-status="(HEALTHY|DEGRADED|UNHEALTHY|PROVISIONING)"', cells[2])
