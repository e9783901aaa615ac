"""Honest deployment health (issue 35) and bounded health checks (issue 36 §1, §9), on
SQLite and PostgreSQL.

Replicas are sessions on the simulated backend whose "port" is a real HTTP server in this
process (``test_deployment_tables``' ``replica``, or the trickling one below).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from test_cli import cli, harness  # noqa: F401  (fixtures: the CLI on this test's database)
from test_deployment_tables import (  # noqa: F401  (replica: the fixture)
    R,
    replica,
    run_replicas,
    spec,
    status,
    with_port,
)


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
