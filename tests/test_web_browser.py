"""The dashboard in a real headless browser: Debian's chromium driven by Playwright.

Playwright never downloads a browser here: it drives ``/usr/bin/chromium``
(``make system-deps`` installs it; ``make test`` runs that first). Without it these
tests FAIL. uvicorn serves the dashboard on a free 127.0.0.1 port in a
background thread, over a SQLite database with known sessions. Screenshots of
every page go to ``screenshots/`` (gitignored).
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from playwright.sync_api import Browser, Page, expect, sync_playwright

from drover.app import App
from drover.config import load_config
from drover.kinds.sessions.values import KernelReport, KernelStatus, SessionStatus
from drover.testing import CoordinatorHarness
from drover.web import create_app

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parent.parent / "screenshots"
TOKEN = "browser-token"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.slow


def _run(fn: Any, *args: Any) -> Any:
    """``asyncio.run(fn(*args))`` in its own thread: Playwright's sync API owns this one's loop."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            out.append(asyncio.run(fn(*args)))
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return out[0]


async def _build(url: str) -> dict[str, str]:
    """alpha and delta RUNNING; beta PENDING, skipped three times; gamma CANCELLED; ticks."""
    async with CoordinatorHarness(database_url=url) as h:
        alpha = await h.create_session(name="alpha", kernels=[{"cpu": 1, "mem": 64}] * 2)
        delta = await h.create_session(name="delta", kernels=[{"cpu": 1, "mem": 64}])
        await h.run_until_settled()
        beta = await h.create_session(name="beta-big", kernels=[{"cpu": 100000, "mem": 64}])
        for _ in range(3):
            await h.tick("schedule-sessions")
            h.clock.advance(1)
        gamma = await h.create_session(name="gamma")
        await h.request_termination(gamma)
        now = time.time()
        await h.repository.record_ticks(
            [
                {"handler": "schedule-sessions", "started_at": now, "duration": 0.012,
                 "fetched": 2, "counts": {"SUCCESS": 2}},
                {"handler": "schedule-sessions", "started_at": now, "duration": 0.03,
                 "fetched": 1, "counts": {"SKIPPED": 1}},
                {"handler": "start-sessions", "started_at": now, "duration": 0.004,
                 "fetched": 2, "counts": {"SUCCESS": 2}},
            ]
        )  # fmt: skip
        return {"alpha": alpha, "beta": beta, "gamma": gamma, "delta": delta}


async def _ended_and_logged(url: str, log: str) -> dict[str, str]:
    """ok (SUCCESS) and bad (FAILURE) TERMINATED; logged RUNNING with a stdout log."""
    async with CoordinatorHarness(database_url=url) as h:
        ok = await h.create_session(name="went-well", kernels=[{"cpu": 1, "sim": {"run_for": 1}}])
        h.clock.advance(1)
        bad = await h.create_session(
            name="went-wrong", kernels=[{"cpu": 1, "sim": {"run_for": 1, "exit_code": 3}}]
        )
        await h.run_until_settled()
        h.clock.advance(2)
        await h.run_until_settled()
        h.clock.advance(1)
        logged = await h.create_session(
            name="training",
            status=SessionStatus.RUNNING,
            kernels=[{"cpu": 1, "status": "CREATING", "agent_id": "sim-1"}],
        )
        kernel = (await h.session(logged)).kernels[0]
        await h.repository.report_kernel_statuses(
            [KernelReport(kernel.id, KernelStatus.RUNNING, runtime={"stdout": log})]
        )
        return {"ok": ok, "bad": bad, "logged": logged}


async def _add_session(url: str, name: str, status: SessionStatus) -> str:
    async with CoordinatorHarness(database_url=url) as h:
        return await h.create_session(name=name, status=status)


class Served:
    """A dashboard served by uvicorn in a background thread."""

    def __init__(self, url: str, *, token: str | None = None) -> None:
        self.db_url = url
        app = App(load_config(None, environ={}, flags={"database_url": url}))
        web = create_app(app, auth_token=token, refresh_seconds=1.0, close_app_on_shutdown=True)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(web, log_level="warning", access_log=False, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert self.thread.is_alive(), "uvicorn did not start"
            assert time.monotonic() < deadline, "uvicorn did not start within 20 s"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
        self.sock.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's chromium, headless, with a fresh profile; no Playwright browser download."""
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: install Debian's chromium (make system-deps)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Browser, tmp_path: Path) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(15000)
    try:
        yield pg
    finally:
        context.close()


@pytest.fixture
def served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Served, dict[str, str]]]:
    monkeypatch.chdir(tmp_path)
    url = f"sqlite+aiosqlite:///{tmp_path}/drover.db"
    ids = _run(_build, url)
    with Served(url) as s:
        yield s, ids


def _shot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def _row_names(page: Page) -> list[str]:
    return sorted(
        page.locator("#sessions tbody tr[data-session-id] td:first-child").all_inner_texts()
    )


def test_overview_filters_and_live_refresh(served, page: Page):
    """Count badges and sessions show; a status filter survives the live refresh."""
    s, _ids = served
    response = page.goto(s.base + "/")
    assert response is not None
    assert response.status == 200
    expect(page).to_have_title("Overview · drover")
    expect(page.locator('[data-count-status="RUNNING"] .n')).to_have_text("2")
    expect(page.locator('[data-count-status="PENDING"] .n')).to_have_text("1")
    expect(page.locator('[data-count-status="CANCELLED"] .n')).to_have_text("1")
    expect(page.locator('[data-count-status="RUNNING"] .badge')).to_have_text("RUNNING")
    assert _row_names(page) == ["alpha", "beta-big", "delta", "gamma"]
    _shot(page, "overview")

    page.select_option("select[name=status]", ["RUNNING"])
    with page.expect_navigation():
        page.click("#apply-filters")
    assert "status=RUNNING" in page.url
    assert _row_names(page) == ["alpha", "delta"]
    statuses = page.locator("#sessions tbody tr[data-session-id]").evaluate_all(
        "rows => rows.map(r => r.dataset.status)"
    )
    assert statuses == ["RUNNING", "RUNNING"]

    # New sessions appear on the next live refresh, still filtered by status.
    _run(_add_session, s.db_url, "late-running", SessionStatus.RUNNING)
    _run(_add_session, s.db_url, "late-pending", SessionStatus.PENDING)
    before = int(page.locator("body").get_attribute("data-refreshes") or "0")
    page.wait_for_function(
        f"() => Number(document.body.dataset.refreshes) > {before} + 1", timeout=15000
    )
    expect(page.locator("#sessions")).to_contain_text("late-running")
    assert _row_names(page) == ["alpha", "delta", "late-running"]
    assert "late-pending" not in page.locator("#sessions").inner_text()
    expect(page.locator('[data-count-status="PENDING"] .n')).to_have_text("2")
    assert "status=RUNNING" in page.url
    expect(page.locator("select[name=status]")).to_have_values(["RUNNING"])
    _shot(page, "overview-filtered")

    # The name filter, through the form.
    page.goto(s.base + "/")
    page.fill("input[name=name]", "gam")
    with page.expect_navigation():
        page.click("#apply-filters")
    assert _row_names(page) == ["gamma"]


def test_session_page(served, page: Page):
    """A session: kernels, status_info, result, the why diagnosis and the merged timeline."""
    s, ids = served
    page.goto(s.base + "/")
    with page.expect_navigation():
        page.click("text=beta-big")
    assert page.url.endswith(f"/sessions/{ids['beta']}")
    expect(page.locator("h1")).to_contain_text("beta-big")
    expect(page.locator("h1 .badge")).to_have_text("PENDING")
    expect(page.locator("ul.why li").first).to_be_visible()
    assert page.locator("ul.why li").count() >= 2
    expect(page.locator(".timeline .attempts")).to_have_text("\u00d73")
    expect(page.locator(".timeline")).to_contain_text("schedule-sessions")
    expect(page.locator(".timeline")).to_contain_text("SKIPPED")
    _shot(page, "session-pending")

    page.goto(f"{s.base}/sessions/{ids['alpha']}")
    expect(page.locator("table.kernels tbody tr")).to_have_count(2)
    expect(page.locator("table.kernels tbody tr").first.locator(".badge")).to_have_text("RUNNING")
    assert page.locator(".timeline li.tl-kernel").count() >= 2  # kernel history interleaved
    assert page.locator(".timeline li.tl-session").count() >= 2
    _shot(page, "session-running")

    page.goto(f"{s.base}/sessions/{ids['gamma']}")
    expect(page.locator(".result")).to_have_text("CANCELLED")  # the user cancelled it
    expect(page.locator("h1 .badge")).to_have_text("CANCELLED")
    _shot(page, "session-cancelled")

    response = page.goto(f"{s.base}/sessions/nope")
    assert response is not None
    assert response.status == 404
    expect(page.locator("h1")).to_have_text("Not found")


def test_handlers_and_graph_pages(served, page: Page):
    """The stats table (with a since filter) and the server-rendered SVG graph."""
    s, _ids = served
    page.goto(s.base + "/")
    with page.expect_navigation():
        page.click("header nav >> text=Handlers")
    row = page.locator('#handler-stats tr[data-handler="schedule-sessions"]')
    expect(row).to_be_visible()
    expect(row.locator("td").nth(1)).to_have_text("2")
    expect(page.locator('#status-stats tr[data-status="RUNNING"] td').nth(1)).to_have_text("2")
    _shot(page, "handlers")
    page.fill("input[name=since]", "2000-01-01T00:00")
    page.goto(s.base + "/handlers?since=1s")
    time.sleep(1.2)
    page.reload()
    expect(page.locator("#handler-stats")).to_contain_text("No tick recorded since 1s")

    with page.expect_navigation():
        page.click("header nav >> text=Graph")
    svg = page.locator("#kind-session figure.graph svg")
    expect(svg).to_be_visible()
    expect(svg.locator("g.node#status-PENDING text")).to_have_text("PENDING")
    assert svg.locator("g.node").count() == len(SessionStatus)
    expect(svg).to_contain_text("schedule-sessions: success")
    box = svg.bounding_box()
    assert box is not None
    assert box["width"] > 600
    # Graphviz places the labels: none lies on another, none on a status box.
    # One box per arrow's label (the union of its lines).
    labels = svg.locator("g.edge").evaluate_all(
        "gs => gs.map(g => { const bs = [...g.querySelectorAll('text')]"
        ".map(t => t.getBoundingClientRect());"
        " return [Math.min(...bs.map(b => b.left)), Math.min(...bs.map(b => b.top)),"
        " Math.max(...bs.map(b => b.right)), Math.max(...bs.map(b => b.bottom))]; })"
    )
    nodes = svg.locator("g.node path").evaluate_all(
        "ps => ps.map(p => { const b = p.getBoundingClientRect();"
        " return [b.left, b.top, b.right, b.bottom]; })"
    )
    assert len(labels) >= 20

    def overlap(a: list[float], b: list[float]) -> bool:
        return a[0] < b[2] - 1 and b[0] < a[2] - 1 and a[1] < b[3] - 1 and b[1] < a[3] - 1

    clashes = [(a, b) for i, a in enumerate(labels) for b in labels[i + 1 :] if overlap(a, b)]
    assert clashes == []
    assert [(a, n) for a in labels for n in nodes if overlap(a, n)] == []
    _shot(page, "graph")


def test_history_page_filters_live_and_exports(served, page: Page):
    """Issue 35: the History page from the navigation: rows latest last, the CLI's filters
    through its form (kept by the live refresh, which shows new rows), CSV and JSON
    exports of the same rows."""
    s, ids = served
    page.goto(s.base + "/")
    with page.expect_navigation():
        page.click("header nav >> text=History")
    expect(page).to_have_title("History · drover")
    shown = page.locator("#history tbody tr[data-history-id]").evaluate_all(
        "rows => rows.map(r => Number(r.dataset.historyId))"
    )
    assert shown
    assert shown == sorted(shown)  # latest last
    _shot(page, "history")

    page.select_option("select[name=kind]", "session")
    page.select_option("select[name=handler]", "api")
    page.fill("input[name=result]", "CREATED")
    with page.expect_navigation():
        page.click("#apply-history-filters")
    assert "handler=api" in page.url
    entities = page.locator("#history tbody tr[data-history-id]").evaluate_all(
        "rows => rows.map(r => r.dataset.entityId)"
    )
    assert entities == [ids["alpha"], ids["delta"], ids["beta"], ids["gamma"]]

    # A new session's CREATED row appears on the next live refresh, the filters kept.
    late = _run(_add_session, s.db_url, "late-pending", SessionStatus.PENDING)
    before = int(page.locator("body").get_attribute("data-refreshes") or "0")
    page.wait_for_function(
        f"() => Number(document.body.dataset.refreshes) > {before} + 1", timeout=15000
    )
    rows = page.locator("#history tbody tr[data-history-id]")
    assert rows.evaluate_all("rows => rows.map(r => r.dataset.entityId)")[-1] == late
    assert set(rows.evaluate_all("rows => rows.map(r => r.dataset.result)")) == {"CREATED"}
    expect(page.locator("select[name=handler]")).to_have_value("api")
    _shot(page, "history-filtered")

    csv_href = page.locator("#export-csv").get_attribute("href")
    json_href = page.locator("#export-json").get_attribute("href")
    assert csv_href is not None
    assert json_href is not None
    assert "handler=api" in csv_href
    exported = page.request.get(s.base + csv_href)
    assert exported.headers["content-type"].startswith("text/csv")
    lines = exported.text().splitlines()
    assert lines[0].startswith("id,created_at,updated_at,kind,entity_id,handler,result")
    as_json = page.request.get(s.base + json_href).json()
    assert [str(r["id"]) for r in as_json] == [line.split(",")[0] for line in lines[1:]]

    with page.expect_navigation():
        page.click(f"#history a[href$='/sessions/{ids['gamma']}']")
    expect(page.locator("h1")).to_contain_text("gamma")

    response = page.goto(s.base + "/history?result=BOGUS")
    assert response is not None
    assert response.status == 400
    expect(page.locator("main")).to_contain_text("result 'BOGUS'")


def test_token_gate_in_the_browser(tmp_path: Path, page: Page, monkeypatch: pytest.MonkeyPatch):
    """Without the token: a 401 page with a login form; logging in once sets an HttpOnly,
    SameSite=Strict cookie, and no link, form or address carries the token."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite+aiosqlite:///{tmp_path}/drover.db"
    _run(_build, url)
    with Served(url, token=TOKEN) as s:
        response = page.goto(s.base + "/graph")
        assert response is not None
        assert response.status == 401
        expect(page.locator("h1")).to_have_text("401 Unauthorized")
        _shot(page, "token-required")
        page.fill("input[name=token]", "wrong")
        with page.expect_navigation():
            page.click("#login")
        expect(page.locator(".error")).to_have_text("The token is wrong.")

        page.fill("input[name=token]", TOKEN)
        with page.expect_navigation():
            page.click("#login")
        assert page.url == s.base + "/graph"  # back where it was going
        expect(page.locator("#kind-session figure.graph svg")).to_be_visible()
        (cookie,) = page.context.cookies()
        assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"]) == (
            "drover_session",
            True,
            "Strict",
        )
        assert cookie["value"] != TOKEN
        assert page.evaluate("document.cookie") == ""  # scripts cannot read it

        page.goto(s.base + "/")
        expect(page.locator('[data-count-status="RUNNING"] .n')).to_have_text("2")
        # the stylesheets loaded (they need the login too)
        colour = page.locator(".badge-RUNNING").first.evaluate(
            "e => getComputedStyle(e).backgroundColor"
        )
        assert colour == "rgb(29, 78, 216)"
        assert TOKEN not in page.content()
        hrefs = page.locator("a").evaluate_all("as => as.map(a => a.href)")
        assert hrefs
        assert not [h for h in hrefs if "token" in h]
        page.select_option("select[name=status]", ["CANCELLED"])
        with page.expect_navigation():
            page.click("#apply-filters")
        assert "token" not in page.url
        assert _row_names(page) == ["gamma"]
        before = int(page.locator("body").get_attribute("data-refreshes") or "0")
        page.wait_for_function(f"() => Number(document.body.dataset.refreshes) > {before}")
        assert _row_names(page) == ["gamma"]
        expect(page.locator(".live-state").first).to_have_text(" · live")

        with page.expect_navigation():
            page.click("header >> text=log out")
        response = page.goto(s.base + "/")
        assert response is not None
        assert response.status == 401


def test_pages_break_no_content_security_policy_rule(served, page: Page):
    """Every page loads under the CSP with no violation: its styles, script and graph are
    the dashboard's own, and the live refresh still runs."""
    s, ids = served
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    for path in ("/", f"/sessions/{ids['alpha']}", "/history", "/handlers", "/graph"):
        response = page.goto(s.base + path)
        assert response is not None
        assert "default-src 'none'" in response.headers["content-security-policy"]
        assert response.headers["x-frame-options"] == "DENY"
    page.goto(s.base + "/")
    page.wait_for_function("() => Number(document.body.dataset.refreshes) >= 1")
    assert problems == []


def test_failed_sessions_and_kernel_logs_in_the_browser(tmp_path, page: Page, monkeypatch):
    """A TERMINATED FAILURE row looks different from a SUCCESS one; newest first, filters
    above; a kernel's log tail on its session page."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite+aiosqlite:///{tmp_path}/drover.db"
    log = tmp_path / "stdout.log"
    log.write_text("".join(f"epoch {i} loss {1 / (i + 1):.3f}\n" for i in range(3000)))
    ids = _run(_ended_and_logged, url, str(log))
    with Served(url) as s:
        page.goto(s.base + "/")
        rows = page.locator("#sessions tbody tr[data-session-id]")
        assert rows.evaluate_all("rs => rs.map(r => r.dataset.sessionId)") == [
            ids["logged"],
            ids["bad"],
            ids["ok"],
        ]
        form = page.locator("form.filters").bounding_box()
        table = page.locator("#sessions").bounding_box()
        assert form is not None
        assert table is not None
        assert form["y"] + form["height"] <= table["y"]

        def background(sid: str) -> str:
            return page.locator(f'tr[data-session-id="{sid}"] td').first.evaluate(
                "e => getComputedStyle(e).backgroundColor"
            )

        assert background(ids["bad"]) != background(ids["ok"])
        expect(page.locator(f'tr[data-session-id="{ids["bad"]}"] .failure-mark')).to_be_visible()
        expect(page.locator(f'tr[data-session-id="{ids["ok"]}"] .failure-mark')).to_have_count(0)
        _shot(page, "overview-failed")

        page.goto(f"{s.base}/sessions/{ids['logged']}")
        tail = page.locator('section.kernel-logs[data-kernel-index="1"] pre.log-tail').first
        expect(tail).to_contain_text("epoch 2999 loss 0.000")
        assert "epoch 0 loss" not in tail.inner_text()
        _shot(page, "session-logs")


async def _stopped_and_failed(url: str) -> dict[str, str]:
    """ok (SUCCESS), bad (FAILURE) and stopped (terminated by the user: CANCELLED)."""
    async with CoordinatorHarness(database_url=url) as h:
        ok = await h.create_session(name="went-well", kernels=[{"cpu": 1, "sim": {"run_for": 0}}])
        bad = await h.create_session(
            name="went-wrong", kernels=[{"cpu": 1, "sim": {"run_for": 0, "exit_code": 3}}]
        )
        stopped = await h.create_session(name="stopped", kernels=[{"cpu": 1}])
        await h.run_until_settled()
        await h.request_termination(stopped)
        await h.run_until_settled()
        return {"ok": ok, "bad": bad, "stopped": stopped}


def test_a_stop_somebody_asked_for_is_not_painted_as_a_failure(tmp_path, page: Page, monkeypatch):
    """Issue 22: the user-terminated session is CANCELLED, not red; the failed badge counts
    the one real failure, which ended TERMINATED."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite+aiosqlite:///{tmp_path}/drover.db"
    ids = _run(_stopped_and_failed, url)
    with Served(url) as s:
        page.goto(s.base + "/")

        def row(name: str) -> Any:
            return page.locator(f'tr[data-session-id="{ids[name]}"]')

        red = "rgb(254, 242, 242)"  # a failed row's background (retried: the table refreshes)
        expect(row("stopped").locator("td.result")).to_have_text("CANCELLED")
        expect(row("bad").locator("td.result")).to_have_text("FAILURE")
        expect(row("bad").locator("td").first).to_have_css("background-color", red)
        expect(row("stopped").locator("td").first).not_to_have_css("background-color", red)
        expect(row("ok").locator("td").first).not_to_have_css("background-color", red)
        expect(row("stopped").locator(".failure-mark")).to_have_count(0)
        expect(page.locator('[data-count-result="FAILURE"] .n')).to_have_text("1")
        expect(page.locator('[data-count-status="ERROR"] .n')).to_have_text("0")
        _shot(page, "overview-cancelled")


async def _ended_and_deployed(url: str) -> dict[str, str]:
    """_stopped_and_failed's sessions, and a deployment "web" of one long-running replica."""
    ids = await _stopped_and_failed(url)
    async with CoordinatorHarness(database_url=url) as h:
        kernel = {"command": ["serve"], "cpu": 1, "mem": 64}
        ids["web"] = await h.create(
            "deployment", spec={"replicas": 1, "kernel": kernel}, name="web"
        )
        # No replica wanted: READY with nothing to explain.
        ids["idle"] = await h.create(
            "deployment", spec={"replicas": 0, "kernel": kernel}, name="idle"
        )
        await h.run_until_settled()
        h.clock.advance(10)
        await h.run_until_settled()
        (route,) = (await h.get(ids["web"])).children
        ids["replica"] = route.data["session_id"]
        return ids


def test_badges_carry_results_and_replicas_their_health(tmp_path, page: Page, monkeypatch):
    """Issue 35: a failed session's TERMINATED badge is red (a stopped one's grey, a
    successful one's green), the counts say how TERMINATED sessions ended; an empty "why"
    cell is not tinted; a replica's route health sits beside its session."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite+aiosqlite:///{tmp_path}/drover.db"
    ids = _run(_ended_and_deployed, url)
    with Served(url) as s:
        page.goto(s.base + "/")

        def badge(name: str) -> Any:
            return page.locator(f'tr[data-session-id="{ids[name]}"] td').nth(1).locator(".badge")

        expect(badge("bad")).to_have_text("TERMINATED")
        expect(badge("bad")).to_have_css("background-color", "rgb(185, 28, 28)")  # red
        expect(badge("stopped")).to_have_css("background-color", "rgb(107, 114, 128)")  # grey
        expect(badge("ok")).to_have_css("background-color", "rgb(21, 128, 61)")  # green
        counts = page.locator('[data-count-results="TERMINATED"]')
        expect(counts.locator(".result-count")).to_have_text(
            ["1 SUCCESS", "1 FAILURE", "1 CANCELLED"]
        )
        expect(counts.locator('[data-result="FAILURE"]')).to_have_css("color", "rgb(185, 28, 28)")
        _shot(page, "overview-results")

        page.goto(f"{s.base}/sessions/{ids['bad']}")
        expect(page.locator("h1 .badge")).to_have_css("background-color", "rgb(185, 28, 28)")

        page.goto(s.base + "/deployments")
        # The simulated replica never answers a check: DEGRADED, and why says so.
        web = page.locator(f'tr[data-deployment-id="{ids["web"]}"]')
        expect(web.locator(".badge")).to_have_text("DEGRADED")
        expect(web.locator("td.why-cell")).to_have_text("0 of 1 healthy")
        row = page.locator(f'tr[data-deployment-id="{ids["idle"]}"]')
        expect(row.locator(".badge")).to_have_text("READY")
        why = row.locator("td.why-cell")
        expect(why).to_have_text("")
        expect(why).to_have_css("background-color", "rgba(0, 0, 0, 0)")
        expect(why).to_have_css("border-top-width", "0px")

        page.goto(s.base + "/deployments/web")
        route = page.locator(f'tr[data-session-id="{ids["replica"]}"]')
        cells = route.locator("td")
        expect(cells.nth(0)).to_contain_text(ids["replica"])
        expect(cells.nth(1).locator(".badge")).to_have_text("RUNNING")
        health = re.compile("^(PROVISIONING|DEGRADED|HEALTHY|UNHEALTHY)$")
        expect(cells.nth(2).locator(".badge")).to_have_attribute("data-status", health)
        session_box, health_box = cells.nth(1).bounding_box(), cells.nth(2).bounding_box()
        assert session_box is not None
        assert health_box is not None
        assert abs(session_box["y"] - health_box["y"]) < 2  # side by side, one row
        _shot(page, "deployment-replicas")


async def _crash_looping(url: str) -> str:
    """A deployment of 1 replica that exits at once: replaced once, then backing off."""
    crashes = {"command": ["true"], "cpu": 1, "mem": 64, "sim": {"run_for": 0}}
    async with CoordinatorHarness(database_url=url) as h:
        dep = await h.create("deployment", spec={"replicas": 1, "kernel": crashes}, name="web")
        await h.run_until_settled(max_rounds=200)
        return str(dep)


def test_a_crash_looping_deployment_is_shown_degraded(tmp_path, page: Page, monkeypatch):
    """Issue 22: 0 healthy of 1 wanted, backing off: a DEGRADED (yellow) badge and why, not
    a blue READY."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite+aiosqlite:///{tmp_path}/drover.db"
    dep = _run(_crash_looping, url)
    with Served(url) as s:
        page.goto(s.base + "/deployments")
        row = page.locator(f'tr[data-deployment-id="{dep}"]')
        badge = row.locator(".badge")
        expect(badge).to_have_text("DEGRADED")
        # The palette's yellow, not READY's blue (retried: the live refresh swaps the table).
        expect(badge).to_have_css("background-color", "rgb(202, 138, 4)")
        expect(row.locator("td.why")).to_contain_text("CRASH_LOOP_BACK_OFF until")
        expect(row.locator("td.replaced")).to_have_text("1")
        page.goto(s.base + "/deployments/web")
        expect(page.locator("dd.degraded")).to_contain_text("next replacement at")
        _shot(page, "deployment-degraded")
