"""Benchmark the daemon end to end, on a temporary SQLite file.

1. **Local processes.** ``--sessions`` sessions (default 1,000) of ``true``,
   two kernels each, submitted at once and driven by ``drover run``'s daemon
   with the local backend until all are TERMINATED. Prints sessions per second
   end to end, the coordinator's share of the wall time (the summed duration
   of its ticks), and the kernel processes' own CPU time.
2. **Latency.** With the simulated instant backend, sessions are submitted from
   a separate connection at ``--rate`` per second (default 100) for
   ``--seconds`` (default 10); prints the median and p99 time from
   submission to RUNNING. Target: p99 under 1 s.
3. **Memory.** ``drover run``'s daemon with the simulated instant backend runs
   ``--rss-sessions`` sessions (default 100,000) in waves of 10,000, each wave
   driven to TERMINATED before the next; prints the process's resident set
   size after each wave, read ``RSS_SETTLE`` seconds after it ended (the daemon
   returns freed memory once it has been idle for a second,
   ``drover.coordinator.memory``). Target: after the first three waves (warm-up: SQLite's
   page caches fill as the database grows), RSS stays within 10% of the size
   after the third. Python's own memory blocks are printed too: they stay flat.

Run as ``.venv/bin/python bench/daemon.py [--sessions N] [--rate R] [--seconds S]
[--rss-sessions N] [--quick]``. The last line of stdout is the summary as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from drover.app import App
from drover.config import load_config
from drover.coordinator.daemon import Daemon
from drover.coordinator.tick import TickReport
from drover.kinds.sessions.values import SessionStatus
from drover.model.status import SchedulingResult


def _flags(workdir: Path, backend: str) -> dict[str, Any]:
    return {
        "database_url": f"sqlite+aiosqlite:///{workdir / 'bench.db'}",
        "data_dir": str(workdir / "data"),
        "backend.name": backend,
        # Capacity is not what is measured: let every kernel fit at once.
        "backend.agents": [{"id": "bench", "cpu": 100_000, "mem": 100_000_000}],
        "log_level": "WARNING",
    }


async def _start(workdir: Path, backend: str) -> tuple[App, Daemon, asyncio.Task[int]]:
    app = App(load_config(None, environ={}, flags=_flags(workdir, backend)), claims=True)
    ready: asyncio.Future[Daemon] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(app.run_daemon(install_signals=False, on_ready=ready.set_result))
    daemon = await asyncio.wait_for(asyncio.shield(ready), timeout=60)
    return app, daemon, task


async def _stop(app: App, daemon: Daemon, task: asyncio.Task[int]) -> None:
    daemon.stop()
    await task
    await app.close()


async def local_processes(sessions: int) -> dict[str, Any]:
    """Sessions of `true` x2 through the daemon and real processes."""
    with tempfile.TemporaryDirectory(prefix="drover-bench-") as tmp:
        app, daemon, task = await _start(Path(tmp), "local")
        tick_time = 0.0
        ticks = 0

        def on_tick(report: TickReport) -> None:
            nonlocal tick_time, ticks
            tick_time += report.duration
            ticks += 1

        daemon.on_tick = on_tick
        kernel = {"command": ["true"], "cpu": 1, "mem": 16}
        before = os.times()
        started = time.perf_counter()
        await app.repository.create_sessions(
            [{"kernels": [kernel, kernel]} for _ in range(sessions)]
        )
        last_report = started
        deadline = started + 600
        while True:
            counts = await app.repository.count_by_status()
            done = counts.get(SessionStatus.TERMINATED, 0)
            if done >= sessions:
                break
            now = time.perf_counter()
            if now > deadline:
                raise SystemExit(f"not finished after 600 s: {counts}")
            if now - last_report > 5:
                last_report = now
                print(f"  … {done}/{sessions} TERMINATED", file=sys.stderr, flush=True)
            await asyncio.sleep(0.1)
        wall = time.perf_counter() - started
        after = os.times()
        results = await app.repository.list_sessions(limit=sessions)
        failed = sum(1 for s in results if s.result != "SUCCESS")
        await _stop(app, daemon, task)
    children = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    own = (after.user - before.user) + (after.system - before.system)
    return {
        "sessions": sessions,
        "kernels": sessions * 2,
        "wall_s": round(wall, 3),
        "sessions_per_s": round(sessions / wall, 1),
        "ticks": ticks,
        # Ticks of different handlers overlap, so this sum can exceed the wall time.
        "summed_tick_durations_s": round(tick_time, 3),
        "coordinator_cpu_s": round(own, 3),
        "kernel_processes_cpu_s": round(children, 3),
        "coordinator_share_of_cpu": round(own / (own + children), 3) if own + children else None,
        "not_success": failed,
    }


async def latency(rate: float, seconds: float) -> dict[str, Any]:
    """Submission-to-RUNNING latency at a steady submission rate (simulated instant kernels)."""
    with tempfile.TemporaryDirectory(prefix="drover-bench-") as tmp:
        app, daemon, task = await _start(Path(tmp), "simulated")
        # Submit from another process, as the CLI would: a client sharing the
        # daemon's event loop would steal the very CPU time being measured.
        total = int(rate * seconds)
        client_proc = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--submit-only",
            str(Path(tmp)),
            str(rate),
            str(total),
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await client_proc.communicate()
        client_summary = json.loads(out.decode().strip().splitlines()[-1])
        ids: list[str] = client_summary["ids"]
        achieved = client_summary["achieved_rate_per_s"]
        client = App(load_config(None, environ={}, flags=_flags(Path(tmp), "simulated")))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            counts = await client.repository.count_by_status()
            if counts.get(SessionStatus.RUNNING, 0) >= total:
                break
            await asyncio.sleep(0.2)
        latencies = []
        for sid in ids:
            session = await client.repository.get_session(sid)
            rows = await client.repository.history(sid)
            running = [
                r
                for r in rows
                if r.to_status == SessionStatus.RUNNING and r.result == SchedulingResult.SUCCESS
            ]
            if running:
                latencies.append((running[0].created_at - session.created_at).total_seconds())
        await client.close()
        await _stop(app, daemon, task)
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else None
    return {
        "submitted": total,
        "achieved_rate_per_s": achieved,
        "reached_running": len(latencies),
        "median_s": round(statistics.median(latencies), 4) if latencies else None,
        "p99_s": round(p99, 4) if p99 is not None else None,
        "max_s": round(latencies[-1], 4) if latencies else None,
        "target_p99_s": 1.0,
        "meets_target": p99 is not None and p99 < 1.0 and len(latencies) == total,
    }


#: Sessions per wave of the memory measurement; the first two waves are the warm-up.
RSS_WAVE = 10_000
RSS_WARMUP_WAVES = 3
RSS_TARGET = 0.10
#: Seconds after a wave ends before RSS is read: the daemon's idle check runs every second.
RSS_SETTLE = 3.5


def rss_bytes() -> int:
    """This process's resident set size now (Linux ``/proc``; else the peak so far)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


async def memory(sessions: int) -> dict[str, Any]:
    """RSS of the daemon's process after each wave of sessions (simulated instant kernels)."""
    waves = max(RSS_WARMUP_WAVES + 1, -(-sessions // RSS_WAVE))
    with tempfile.TemporaryDirectory(prefix="drover-bench-") as tmp:
        flags = {**_flags(Path(tmp), "simulated"), "backend.run_for": 0.0}
        app = App(load_config(None, environ={}, flags=flags), claims=True)
        ready: asyncio.Future[Daemon] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(app.run_daemon(install_signals=False, on_ready=ready.set_result))
        daemon = await asyncio.wait_for(asyncio.shield(ready), timeout=60)
        after: list[int] = []
        blocks: list[int] = []
        started = time.perf_counter()
        for wave in range(waves):
            await app.repository.create_sessions([{"kernels": [{"cpu": 1}]}] * RSS_WAVE)
            total = (wave + 1) * RSS_WAVE
            deadline = time.perf_counter() + 600
            while (await app.repository.count_by_status()).get(SessionStatus.TERMINATED, 0) < total:
                if time.perf_counter() > deadline:
                    raise SystemExit(f"wave {wave + 1} not finished after 600 s")
                await asyncio.sleep(0.2)
            # At rest: the daemon returns freed memory once a second passes with nothing to
            # do (drover.coordinator.memory); an operator's reading between bursts sees that.
            await asyncio.sleep(RSS_SETTLE)
            after.append(rss_bytes())
            blocks.append(sys.getallocatedblocks())
            print(
                f"  after {total:,} sessions: RSS {after[-1] / 2**20:.1f} MiB, "
                f"{blocks[-1]:,} Python memory blocks",
                file=sys.stderr,
                flush=True,
            )
        # The settling pauses are not the daemon's work.
        wall = time.perf_counter() - started - waves * RSS_SETTLE
        await _stop(app, daemon, task)
    reference = after[RSS_WARMUP_WAVES - 1]
    growth = max(after[RSS_WARMUP_WAVES:]) / reference - 1
    return {
        "sessions": waves * RSS_WAVE,
        "rss_mib_after_each_wave": [round(b / 2**20, 1) for b in after],
        "python_blocks_after_each_wave": blocks,
        "growth_after_warmup": round(growth, 4),
        "target_growth": RSS_TARGET,
        "meets_target": growth <= RSS_TARGET,
        "sessions_per_s": round(waves * RSS_WAVE / wall, 1),
    }


async def _submit_only(workdir: Path, rate: float, total: int) -> None:
    """The client process of the latency benchmark: submit at ``rate`` per second."""
    client = App(load_config(None, environ={}, flags=_flags(workdir, "simulated")))
    ids: list[str] = []
    interval = 1.0 / rate
    t0 = time.perf_counter()
    for i in range(total):
        delay = t0 + i * interval - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        ids.extend(await client.repository.create_sessions([{"kernels": [{"cpu": 1}]}]))
    achieved = total / (time.perf_counter() - t0)
    await client.close()
    print(json.dumps({"ids": ids, "achieved_rate_per_s": round(achieved, 1)}))


def main() -> None:
    """Run the measurements (or ``--only`` one) and print a summary."""
    if len(sys.argv) == 5 and sys.argv[1] == "--submit-only":
        asyncio.run(_submit_only(Path(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rss-sessions", type=int, default=100_000)
    parser.add_argument(
        "--only", choices=["local", "latency", "memory"], help="run one of the measurements"
    )
    parser.add_argument(
        "--quick", action="store_true", help="200 sessions, 3 s of submissions, 40,000 for RSS"
    )
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.seconds, args.rss_sessions = 200, 3.0, 40_000
    summary: dict[str, Any] = {}
    if args.only in (None, "memory"):
        print(f"== memory: {args.rss_sessions:,} sessions in waves of {RSS_WAVE:,}, simulated")
        summary["memory"] = asyncio.run(memory(args.rss_sessions))
        for key, value in summary["memory"].items():
            print(f"  {key:28} {value}")
    if args.only in (None, "local"):
        print(f"== local processes: {args.sessions} sessions of `true` x2 kernels")
        summary["local_processes"] = asyncio.run(local_processes(args.sessions))
        for key, value in summary["local_processes"].items():
            print(f"  {key:28} {value}")
    if args.only in (None, "latency"):
        print(
            f"== latency: simulated instant kernels, {args.rate:g} submissions/s "
            f"for {args.seconds:g}s"
        )
        summary["latency"] = asyncio.run(latency(args.rate, args.seconds))
        for key, value in summary["latency"].items():
            print(f"  {key:28} {value}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
