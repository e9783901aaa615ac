"""Honest deployment health (issue 35) and bounded health checks (issue 36 §1, §9), on
SQLite and PostgreSQL.

Replicas are sessions on the simulated backend whose "port" is a real HTTP server in this
process (``test_deployment_tables``' ``replica``, or the trickling one below).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from test_cli import cli, harness  # noqa: F401  (fixtures: the CLI on this test's database)
from test_deployment_tables import (  # noqa: F401  (replica: the fixture)
    E,
    R,
    replica,
    run_replicas,
    spec,
    status,
    with_port,
)
from test_web import make_client  # noqa: F401  (fixture: the dashboard on it)

from drover.kinds.sessions.values import KernelReport, KernelStatus, SessionStatus


class _Trickle(BaseHTTPRequestHandler):
    """Answers 200 at once, then (once ``trickle`` is set) a 100 MB body at one byte a second."""

    trickle = False
    stop = threading.Event()

    def do_GET(self) -> None:
        self.send_response(200)
        if not type(self).trickle:
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            return
        self.send_header("Content-Length", "100000000")
        self.end_headers()
        try:
            while not type(self).stop.wait(1.0):
                self.wfile.write(b"x")
                self.wfile.flush()
        except OSError:
            pass  # the checker gave up and closed the connection

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def trickler() -> Iterator[Any]:
    """A real HTTP server; set ``trickler.trickle`` to make it send its body a byte a second."""

    class Handler(_Trickle):
        trickle = False
        stop = threading.Event()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Handler.port = server.server_address[1]  # type: ignore[attr-defined]
    yield Handler
    Handler.stop.set()
    server.shutdown()
    server.server_close()


async def _deploy(h: Any, name: str, port: int, **extra: Any) -> tuple[str, list[str]]:
    dep = await h.create("deployment", spec=spec(1, kernel=with_port(port), **extra), name=name)
    await h.tick("check-pending-deployment")
    await h.tick("scaling-deployment")
    return dep, await run_replicas(h, dep)


async def test_a_trickling_replica_never_stalls_another_deployments_checks(
    make_harness,
    replica,  # noqa: F811
    trickler,
):
    """Issue 36 §1: a replica answering 200 with a 100 MB body at one byte a second. Its check
    has a total deadline; meanwhile another deployment's replica that turned unhealthy is
    judged in the same tick, not after the slow check."""
    async with make_harness() as h:
        _, (slow,) = await _deploy(h, "slow", trickler.port, check_timeout=6)
        _, (web,) = await _deploy(h, "web", replica.port)
        await asyncio.wait_for(h.tick("health-check-route"), 20)
        assert (await status(h, slow), await status(h, web)) == (R.HEALTHY, R.HEALTHY)
        trickler.trickle = True
        replica.code = 503
        started = time.monotonic()
        # Before: httpx's per-read timeout never fired, and the tick waited for it forever.
        await asyncio.wait_for(h.tick("health-check-route"), 20)
        assert await status(h, web) == R.UNHEALTHY  # judged while the slow check still runs
        assert await status(h, slow) == R.HEALTHY
        assert "no complete answer yet (check_timeout=6s)" in (
            (await h.history(slow))[-1].message or ""
        )
        while await status(h, slow) == R.HEALTHY:
            assert time.monotonic() - started < 30, "the slow check has no total deadline"
            await asyncio.wait_for(h.tick("health-check-route"), 20)
        assert await status(h, slow) == R.UNHEALTHY
        last = (await h.history(slow))[-1].message or ""
        assert last == (
            f"GET http://127.0.0.1:{trickler.port}/healthz: no complete answer within 6s "
            "(check_timeout)"
        )


# -- issue 36 §9: no deployment on a backend that records no port ----------------------------


def test_drover_deploy_on_slurm_is_refused_in_one_line(cli, harness, monkeypatch):  # noqa: F811
    """The slurm backend records no replica's port: its health checks could never pass."""
    monkeypatch.setenv("DROVER_BACKEND", "slurm")
    refused = cli("deploy", "web", "--replicas", "2", "--", "sh", "-c", "exec server $PORT")
    assert refused.exit_code == 1
    (line,) = refused.output.splitlines()
    assert "deployment 'web': the slurm backend records no port for a replica" in line
    assert harness(lambda h: h.repository.list_entities("deployment")) == []
    monkeypatch.setenv("DROVER_BACKEND", "local")
    assert cli("deploy", "web", "--", "true").exit_code == 0  # the same request elsewhere
    (dep,) = harness(lambda h: h.repository.list_entities("deployment"))
    monkeypatch.setenv("DROVER_BACKEND", "slurm")  # deploying it again there: refused too
    again = cli("deploy", "web", "--replicas", "3", "--", "true")
    assert again.exit_code == 1
    assert "the slurm backend records no port" in again.output
    assert harness(lambda h: h.get(dep.id)).spec["replicas"] == 1


async def test_app_create_refuses_a_deployment_on_slurm(database):
    from drover import App, load_config
    from drover.model.errors import InvalidSpecError
    from drover.model.values import NewEntity

    flags = {"backend.name": "slurm", "database_url": database.url}
    if database.schema:
        flags["database_schema"] = database.schema
    app = App(load_config(None, environ={}, flags=flags))
    try:
        await app.check_schema(auto_upgrade=True)
        new = NewEntity("deployment", spec={"replicas": 1, "kernel": {"command": ["true"]}})
        with pytest.raises(InvalidSpecError, match="the slurm backend records no port"):
            await app.create([new])
        assert await app.repository.list_entities("deployment") == []
    finally:
        await app.close()


# -- issue 35: READY only while the wanted replicas are HEALTHY --------------------------------


class _ByPath(BaseHTTPRequestHandler):
    codes: dict[str, int] = {}

    def do_GET(self) -> None:
        self.send_response(type(self).codes.get(self.path, 200))
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def by_path() -> Iterator[Any]:
    """A real HTTP server answering ``by_path.codes[path]`` (200 for any other path)."""

    class Handler(_ByPath):
        codes = {"/healthz": 500}

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Handler.port = server.server_address[1]  # type: ignore[attr-defined]
    yield Handler
    server.shutdown()
    server.server_close()


async def _sick(h: Any, server: Any) -> tuple[str, list[str]]:
    """``web``: 2 replicas, both answering 500, checked and reconciled."""
    dep, routes = await _deploy_n(h, "web", server.port, 2)
    await h.tick("health-check-route")
    await h.tick("reconcile-deployment")
    return dep, routes


async def _deploy_n(h: Any, name: str, port: int, n: int) -> tuple[str, list[str]]:
    dep = await h.create("deployment", spec=spec(n, kernel=with_port(port)), name=name)
    await h.tick("check-pending-deployment")
    await h.tick("scaling-deployment")
    return dep, await run_replicas(h, dep)


async def test_a_deployment_whose_replicas_fail_their_checks_is_degraded_not_ready(
    make_harness, by_path
):
    """Its status follows its replicas' health, with "n of m healthy" rewritten in place."""
    async with make_harness() as h:
        dep, (first, second) = await _sick(h, by_path)
        assert {await status(h, first), await status(h, second)} == {R.UNHEALTHY}
        found = await h.get(dep)
        assert (found.status, found.status_info) == (E.DEGRADED, "0 of 2 healthy")
        h.clock.advance(30)
        await h.tick("reconcile-deployment")  # still: before, READY here for good
        assert (await h.get(dep)).status == E.DEGRADED
        # One replica answers again: the same status, its count rewritten.
        await h.repository.update_spec(second, {"health_path": "/ok"})
        await h.tick("health-check-route")
        await h.tick("reconcile-deployment")
        found = await h.get(dep)
        assert (found.status, found.status_info) == (E.DEGRADED, "1 of 2 healthy")
        last = (await h.history(dep))[-1]
        assert (last.handler, str(last.result), last.message) == (
            "reconcile-deployment", "unhealthy", "1 of 2 healthy (1 UNHEALTHY)",
        )  # fmt: skip
        by_path.codes["/healthz"] = 200
        await h.tick("health-check-route")
        await h.tick("reconcile-deployment")
        found = await h.get(dep)
        assert (found.status, found.status_info) == (E.READY, "2 of 2 healthy")
        assert str((await h.history(dep))[-1].result) == "recovered"
        by_path.codes["/healthz"] = 503
        await h.tick("health-check-route")
        await h.tick("reconcile-deployment")
        found = await h.get(dep)
        assert (found.status, found.status_info) == (E.DEGRADED, "1 of 2 healthy")


def test_why_json_and_dashboard_say_how_many_are_healthy(cli, harness, make_client, by_path):  # noqa: F811
    harness(lambda h: _sick(h, by_path))
    (row,) = json.loads(cli("deployments", "--json").output)
    assert (row["status"], row["status_info"], row["degraded"]) == (
        "DEGRADED", "0 of 2 healthy", True,
    )  # fmt: skip
    assert (row["health"], row["healthy"], row["replicas"]) == ("0 of 2 healthy", 0, 2)
    line = next(x for x in cli("deployments").output.splitlines() if x.startswith("web\t"))
    assert "\tDEGRADED\t" in line
    assert line.endswith("\t0 of 2 healthy")
    why = cli("why", "web").output
    assert "is DEGRADED" in why
    assert "status_info: 0 of 2 healthy" in why
    with make_client() as client:
        listing = client.get("/deployments").text
        assert 'class="badge badge-DEGRADED"' in listing
        assert "badge-READY" not in listing
        assert "0 of 2 healthy" in listing
        assert "0 of 2 healthy" in client.get("/deployments/web").text


async def test_an_evicted_unhealthy_replica_ends_failure_saying_why(make_harness, by_path):
    """Issue 35: not CANCELLED / REQUESTED_BY_TERMINATING_ROUTE, which hid that it failed; the
    simulated replica exits 0 when stopped, and is a failure all the same."""
    async with make_harness() as h:
        _, (route,) = await _deploy_n(h, "web", by_path.port, 1)  # /healthz answers 500
        await h.tick("health-check-route")
        assert await status(h, route) == R.UNHEALTHY
        session_id = (await h.get(route)).data["session_id"]
        h.clock.advance(6)  # past evict_after (5 s)
        await h.tick("route-eviction")
        evicted = await h.get(route)
        assert (evicted.status, evicted.status_info) == (R.TERMINATING, "EVICTED_UNHEALTHY")
        await h.tick("terminating-route")
        session = await h.session(session_id)
        assert (session.status, session.status_info) == (
            SessionStatus.TERMINATING, "EVICTED_UNHEALTHY",
        )  # fmt: skip
        # The replica exits 0 when stopped, as a server handling SIGTERM does.
        (kernel,) = session.kernels
        await h.repository.report_kernel_statuses(
            [KernelReport(kernel.id, KernelStatus.TERMINATED, exit_code=0)]
        )

        async def ended(h: Any) -> bool:
            return await status(h, route) == R.TERMINATED

        # Until then: its replacement keeps failing its checks, so nothing settles.
        await h.run_until_settled(until=ended)
        session = await h.session(session_id)
        assert (session.status, str(session.result), session.status_info) == (
            SessionStatus.TERMINATED, "FAILURE", "EVICTED_UNHEALTHY",
        )  # fmt: skip
        assert [k.exit_code for k in session.kernels] == [0]  # it stopped cleanly, yet failed
        moved = [r for r in await h.history(session_id) if r.handler == "terminating-route"]
        assert [r.message for r in moved] == [
            "moved by terminating-route: EVICTED_UNHEALTHY (a failure)"
        ]
        ended = await h.get(route)
        assert (ended.status, str(ended.result)) == (R.TERMINATED, "FAILURE")


async def test_a_route_ended_for_another_reason_still_cancels_its_replica(
    make_harness,
    replica,  # noqa: F811
):
    async with make_harness() as h:
        _, (route,) = await _deploy_n(h, "web", replica.port, 1)
        session_id = (await h.get(route)).data["session_id"]
        await h.repository.request_termination([route])
        await h.run_until_settled()
        session = await h.session(session_id)
        assert (str(session.result), session.status_info) == (
            "CANCELLED", "REQUESTED_BY_TERMINATING_ROUTE",
        )  # fmt: skip
