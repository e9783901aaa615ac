"""Container start-up overhead per kernel: submit -> RUNNING, container against local backend.

For each backend in turn (``local``, then ``container`` on the Podman of
``scripts/podman-up.sh``), the real daemon (``drover run``'s, in this process)
runs on a temporary SQLite file with every session handler ticking every 20 ms;
``--count`` sessions of one kernel are submitted one at a time, each timed from
its submission until the database says RUNNING (polled every 5 ms), then
terminated (its command ends on SIGTERM) before the next. The medians and
their difference are the overhead a container adds to a kernel's start.

Run as ``.venv/bin/python bench/container_startup.py [--count 20] [--url URL]``
(``--url``: the Engine API; default: the Podman of ``make podman-up``,
started if it is not running). The last line of stdout is the summary as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from drover.app import App
from drover.config import load_config
from drover.kinds.sessions.values import SessionStatus

ROOT = Path(__file__).resolve().parent.parent
#: Where `make podman-up` runs Podman's service.
PODMAN_DIR = "/tmp/drover-podman"
#: The session handlers; each ticks every 20 ms in the benchmark.
SESSION_HANDLERS = (
    "schedule-sessions", "prepare-sessions", "promote-to-prepared", "start-sessions",
    "promote-to-running", "detect-termination", "promote-to-terminated",
    "terminate-sessions", "detect-start-failure",
)  # fmt: skip
IMAGE = "localhost/drover-test:latest"
#: Ends at once on SIGTERM, in a container (PID 1) as on the local backend.
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait"]


def _flags(backend: str, data_dir: Path, url: str) -> dict[str, Any]:
    flags: dict[str, Any] = {
        "database_url": f"sqlite+aiosqlite:///{data_dir / 'drover.db'}",
        "data_dir": str(data_dir),
        "backend.name": backend,
        "backend.agents": [{"id": "bench", "cpu": 2, "mem": 4096}],
        "backend.kill_grace": 5.0,
        "safety_interval": 1.0,
        "heartbeat_interval": 1.0,
    }
    for name in SESSION_HANDLERS:
        flags[f"handlers.{name}.interval"] = 0.02
    if backend == "container":
        flags["backend.settings"] = {
            "url": url,
            "poll_interval": 0.2,
            "default_image": IMAGE,
            "label_prefix": "drover-bench",
        }
    return flags


async def _measure(backend: str, count: int, url: str) -> list[float]:
    with tempfile.TemporaryDirectory(prefix=f"drover-bench-{backend}-") as tmp:
        loaded = load_config(None, environ={}, flags=_flags(backend, Path(tmp), url))
        app = App(loaded, claims=True)
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(app.run_daemon(install_signals=False, on_ready=ready.set_result))
        daemon = await asyncio.wait_for(asyncio.shield(ready), timeout=60)
        repo = app.repository
        times: list[float] = []
        try:
            for _ in range(count + 1):  # the first warms up (image lookup, connections)
                kernel = {"command": COMMAND, "cpu": 0.5, "mem": 64}
                began = time.perf_counter()
                (sid,) = await repo.create_sessions([{"kernels": [kernel]}])
                await _until(repo, sid, SessionStatus.RUNNING, 60.0)
                times.append(time.perf_counter() - began)
                await repo.request_termination([sid])
                await _until(repo, sid, SessionStatus.TERMINATED, 60.0)
        finally:
            daemon.stop()
            await asyncio.wait_for(task, timeout=60)
            await app.close()
        return times[1:]


async def _until(repo: Any, sid: str, status: SessionStatus, limit: float) -> None:
    """Poll every 5 ms until the session is in ``status``."""
    deadline = time.perf_counter() + limit
    while True:
        if (await repo.get_session(sid)).status == status:
            return
        if time.perf_counter() > deadline:
            raise SystemExit(f"session {sid} not {status} after {limit:g} s")
        await asyncio.sleep(0.005)


def _podman(where: Path) -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "podman-up.sh"), str(where)],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def main() -> None:
    """Measure both backends in one run and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--url", default=None, help="the Engine API (default: a new Podman)")
    args = parser.parse_args()
    # The Podman of `make podman-up` (started if it is not running; left running).
    url = args.url or _podman(Path(PODMAN_DIR))
    results = {
        backend: asyncio.run(_measure(backend, args.count, url))
        for backend in ("local", "container")
    }
    summary: dict[str, Any] = {"count": args.count}
    for backend, times in results.items():
        median = statistics.median(times)
        summary[f"{backend}_median_s"] = round(median, 4)
        summary[f"{backend}_min_s"] = round(min(times), 4)
        summary[f"{backend}_max_s"] = round(max(times), 4)
        low, high = min(times) * 1000, max(times) * 1000
        print(
            f"{backend:9} submit -> RUNNING: median {median * 1000:7.1f} ms "
            f"(min {low:.1f}, max {high:.1f}, n={len(times)})"
        )
    overhead = summary["container_median_s"] - summary["local_median_s"]
    summary["container_overhead_s"] = round(overhead, 4)
    print(f"container overhead per kernel (difference of medians): {overhead * 1000:.1f} ms")
    print(json.dumps(summary))


if __name__ == "__main__":
    os.environ.pop("DROVER_CONFIG", None)
    sys.exit(main())
