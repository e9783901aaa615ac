"""A service end to end, through the real CLI and a real `drover run`, on both databases.

Three replicas of Python's ``http.server`` on the local backend: all become
HEALTHY and answer; one is killed with -9 and replaced; ``scale`` drains two;
``destroy`` ends everything, through DESTROYING, with no process left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drover.kinds.deployments import deployments, routes

DROVER = [sys.executable, "-m", "drover"]
SERVER = "exec python3 -m http.server --bind 127.0.0.1 $PORT"
# Every deployment and route handler ticks often, so the test runs in seconds.
FAST = {
    f"DROVER_HANDLERS__{name.upper().replace('-', '_')}__INTERVAL": "0.3"
    for name in (*deployments.HANDLERS, *(h.name() for h in routes.ROUTE_HANDLERS))
}


@pytest.fixture
def service_env(database: Any, tmp_path: Path) -> dict[str, str]:
    """The environment of every `drover` call: this test's database, data dir, fast ticks."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DROVER_")}
    env.update(FAST)
    env["DROVER_DATABASE_URL"] = database.url
    if database.schema:
        env["DROVER_DATABASE_SCHEMA"] = database.schema
    env["DROVER_DATA_DIR"] = str(tmp_path / "data")
    env["DROVER_BACKEND"] = "local"
    env["DROVER_LOAD_PLUGINS"] = ""
    subprocess.run([*DROVER, "db", "upgrade"], env=env, check=True, capture_output=True)
    return env


def drover(env: dict[str, str], *args: str) -> Any:
    result = subprocess.run([*DROVER, *args], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout) if "--json" in args else result.stdout


def wait_until(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(200 <= response.status < 300)
    except OSError:
        return False


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def replica_pgid(env: dict[str, str], session_id: str) -> int:
    shown = drover(env, "show", session_id, "--json")
    (kernel,) = shown["kernels"]
    return int(kernel["pid"])  # the kernel leads its own process group


def test_a_service_is_kept_healthy_replaced_scaled_and_destroyed(service_env, tmp_path):
    env = service_env
    log = (tmp_path / "daemon.log").open("w")
    daemon = subprocess.Popen([*DROVER, "run"], env=env, stdout=log, stderr=log)
    try:
        out = drover(
            env, "deploy", "web", "--replicas", "3", "--evict-after", "1", "--json",
            "--", "sh", "-c", SERVER,
        )  # fmt: skip
        deployment = out["id"]

        def healthy() -> list[dict[str, Any]] | None:
            rows = drover(env, "routes", "web", "--json")
            good = [r for r in rows if r["status"] == "HEALTHY"]
            return good if len(good) == 3 and len(rows) == 3 else None

        routes = wait_until(healthy, "3 HEALTHY routes")
        assert all(answers(r["url"]) for r in routes)
        endpoints = sorted(r["url"] for r in routes)
        pgids = {r["id"]: replica_pgid(env, r["session_id"]) for r in routes}

        # kill -9 one replica: its route leaves HEALTHY, a new route replaces it.
        victim = routes[0]
        os.killpg(pgids[victim["id"]], signal.SIGKILL)

        def replaced() -> list[dict[str, Any]] | None:
            rows = drover(env, "routes", "web", "--all", "--json")
            by_id = {r["id"]: r for r in rows}
            good = [r for r in rows if r["status"] == "HEALTHY"]
            gone = by_id[victim["id"]]["status"] in ("TERMINATING", "TERMINATED")
            return good if gone and len(good) == 3 else None

        now_healthy = wait_until(replaced, "the killed replica replaced")
        assert victim["id"] not in {r["id"] for r in now_healthy}
        assert all(answers(r["url"]) for r in now_healthy)
        for route in now_healthy:
            pgids.setdefault(route["id"], replica_pgid(env, route["session_id"]))
        assert sorted(r["url"] for r in now_healthy) != endpoints

        # scale 3 -> 1: two routes drain and their processes are gone.
        drover(env, "scale", "web", "1")

        def drained() -> list[dict[str, Any]] | None:
            rows = drover(env, "routes", "web", "--json")
            return rows if len(rows) == 1 and rows[0]["status"] == "HEALTHY" else None

        (kept,) = wait_until(drained, "two routes drained")
        for route in now_healthy:
            if route["id"] != kept["id"]:
                wait_until(lambda r=route: not group_alive(pgids[r["id"]]), "drained replica gone")
        assert answers(kept["url"])

        # destroy: DESTROYING, then DESTROYED; every route and session ended; no process left.
        assert "READY -> DESTROYING" in drover(env, "destroy", "web")

        def destroyed() -> bool:
            listed = drover(env, "deployments", "--all", "--json")
            return any(d["id"] == deployment and d["status"] == "DESTROYED" for d in listed)

        wait_until(destroyed, "the deployment DESTROYED")
        rows = drover(env, "routes", "web", "--all", "--json")
        assert {r["status"] for r in rows} == {"TERMINATED"}
        for row in rows:
            session = drover(env, "show", row["session_id"], "--json")
            assert session["status"] == "TERMINATED", session
        for pgid in pgids.values():
            wait_until(lambda g=pgid: not group_alive(g), f"process group {pgid} gone", 15)
        history = drover(env, "history", deployment, "--json")
        moves = [(h["from_status"], h["to_status"]) for h in history]  # latest last
        assert moves[-2:] == [("READY", "DESTROYING"), ("DESTROYING", "DESTROYED")] or (
            ("READY", "DESTROYING") in moves and moves[-1] == ("DESTROYING", "DESTROYED")
        )
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
