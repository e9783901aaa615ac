"""Scale-out: 1 against 3 coordinators on one PostgreSQL database, handlers that wait on I/O.

Four lifecycle handlers carry 2,000 sessions PENDING -> SCHEDULED -> PREPARED
-> RUNNING -> TERMINATED on the simulated backend. Each handler's
``execute`` waits 100 ms per call (a simulated agent RPC) and takes at most
``--batch`` sessions per tick, so one coordinator is bound by waiting, not by
the database: the case where several coordinators pay off. The same workload
runs with one coordinator, then with three (real daemons: claims, fencing and
NOTIFY wake-ups), in the same run, each on a fresh schema. The figure is
sessions ended per second; the ratio is three over one (target >= 2.5).

After each run the invariants are checked: every session TERMINATED, each
status equal to its latest history row's ``to_status``, no session moved
twice out of one status, no handler acting twice on a session in one status.

    .venv/bin/python bench/replicas.py [--sessions 2000] [--batch 10] [--repeats 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import os
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from drover import (
    HandlerOptions,
    HandlerResult,
    LifecycleHandler,
    SessionStatus,
    SessionWithKernels,
    StatusTransitions,
    TransitionStatus,
    hookimpl,
    make_plugin_manager,
)
from drover.app import App
from drover.backends.base import AgentInfo
from drover.backends.simulated import SimulatedBackend
from drover.config import Config
from drover.coordinator.daemon import Daemon
from drover.storage.connect import create_engine

PG_URL = os.environ.get("DROVER_TEST_PG_URL") or "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
S = SessionStatus
#: The pipeline: (handler name, from status, to status).
STEPS = [
    ("rpc-schedule", S.PENDING, S.SCHEDULED),
    ("rpc-prepare", S.SCHEDULED, S.PREPARED),
    ("rpc-start", S.PREPARED, S.RUNNING),
    ("rpc-finish", S.RUNNING, S.TERMINATED),
]


def _handler_class(name: str, source: S, target: S, wait: float, batch: int) -> type:
    class Rpc(LifecycleHandler):
        """Waits ``wait`` seconds per call (an agent RPC), then succeeds on every target."""

        @classmethod
        def name(cls) -> str:
            return name

        @property
        def target_session_statuses(self) -> frozenset[SessionStatus]:
            return frozenset({source})

        @property
        def target_kernel_statuses(self) -> None:
            return None

        @classmethod
        def status_transitions(cls) -> StatusTransitions:
            return StatusTransitions(success=TransitionStatus(session=target))

        @classmethod
        def default_options(cls) -> HandlerOptions:
            return HandlerOptions(batch_size=batch, timeout=None)

        async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult:
            await asyncio.sleep(wait)
            return HandlerResult(successes=[t.id for t in targets])

    return Rpc


class RpcPlugin:
    """Registers the four waiting handlers."""

    def __init__(self, wait: float, batch: int) -> None:
        self.handlers = [_handler_class(n, a, b, wait, batch)() for n, a, b in STEPS]

    @hookimpl
    def drover_register_handlers(self, register: Callable[..., None]) -> None:
        for handler in self.handlers:
            register(handler)


async def _schema(create: bool, schema: str) -> None:
    dsn = make_url(PG_URL).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        statement = f'CREATE SCHEMA "{schema}"' if create else f'DROP SCHEMA "{schema}" CASCADE'
        await conn.execute(statement)
    finally:
        await conn.close()


def _app(schema: str, args: argparse.Namespace) -> App:
    config = Config(database_url=PG_URL, database_schema=schema, safety_interval=5.0)
    pm = make_plugin_manager(
        plugins=[RpcPlugin(args.wait, args.batch)], include_builtins=False, load_entrypoints=False
    )
    backend = SimulatedBackend([AgentInfo("sim", {"cpu": 1e9, "mem": 1e12})])
    return App(config, backend=backend, plugin_manager=pm, claims=True)


async def _coordinator_main(schema: str, args: argparse.Namespace, go: Any, done: Any) -> None:
    app = _app(schema, args)
    try:
        coordinator = await app.start(auto_upgrade=False)
        daemon = Daemon(coordinator, app.repository, default_interval=1.0)
        # A multiprocessing event cannot be awaited: poll it.
        while not go.is_set():  # noqa: ASYNC110 (every coordinator starts at once)
            await asyncio.sleep(0.01)
        task = asyncio.create_task(daemon.run())
        while not done.is_set():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        daemon.stop()
        await task
    finally:
        await app.close()


def _coordinator_process(schema: str, args: argparse.Namespace, go: Any, done: Any) -> None:
    """One coordinator in a process of its own, as `drover run` would be."""
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(_coordinator_main(schema, args, go, done))


async def run_once(coordinators: int, args: argparse.Namespace) -> dict[str, Any]:
    """One measurement: ``coordinators`` daemons (one process each) end ``args.sessions``."""
    schema = f"replicas_{uuid.uuid4().hex[:12]}"
    await _schema(True, schema)
    context = multiprocessing.get_context("spawn")
    go, done = context.Event(), context.Event()
    procs = [
        context.Process(target=_coordinator_process, args=(schema, args, go, done))
        for _ in range(coordinators)
    ]
    app = _app(schema, args)
    try:
        await app.check_schema(auto_upgrade=True)
        await app.repository.create_sessions(
            [{"kernels": [{"command": ["true"], "cpu": 1, "mem": 1}]}] * args.sessions
        )
        for proc in procs:
            proc.start()
        await asyncio.sleep(args.warmup)  # imports and connections, not measured
        started = time.perf_counter()
        go.set()
        repo = app.repository
        while True:
            counts = await repo.count_by_status()
            if counts.get(S.TERMINATED, 0) >= args.sessions:
                break
            if any(not p.is_alive() for p in procs):
                raise RuntimeError("a coordinator stopped early")
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        done.set()
        for proc in procs:
            await asyncio.to_thread(proc.join, 60)
        checks = await _check(schema, args.sessions)
    finally:
        done.set()
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        await app.close()
        await _schema(False, schema)
    return {
        "coordinators": coordinators,
        "seconds": elapsed,
        "sessions_per_s": args.sessions / elapsed,
        "checks": checks,
    }


async def _check(schema: str, sessions: int) -> dict[str, bool]:
    engine = create_engine(PG_URL, schema=schema)
    async with engine.connect() as conn:
        query = sa.text("SELECT id, status FROM entities WHERE kind='session'")
        statuses = {sid: st for sid, st in await conn.execute(query)}
        rows = (
            await conn.execute(
                sa.text(
                    "SELECT entity_id, handler, from_status, to_status, result "
                    "FROM scheduling_history WHERE kind='session' ORDER BY id"
                )
            )
        ).all()
    await engine.dispose()
    latest = {r.entity_id: r.to_status for r in rows}
    moves = Counter((r.entity_id, r.from_status) for r in rows if r.from_status != r.to_status)
    return {
        "every session TERMINATED": len(statuses) == sessions
        and set(statuses.values()) == {"TERMINATED"},
        "status equals the latest history row's to_status": all(
            latest.get(sid) == st for sid, st in statuses.items()
        ),
        "no session moved twice out of one status": all(n == 1 for n in moves.values()),
        "exactly 4 moves per session": sum(moves.values()) == 4 * sessions,
    }


async def main_async(args: argparse.Namespace) -> int:
    runs: dict[int, list[dict[str, Any]]] = {1: [], 3: []}
    for _ in range(args.repeats):
        for k in (1, 3):  # interleaved: both sides see the same machine noise
            result = await run_once(k, args)
            runs[k].append(result)
            print(
                f"{k} coordinator(s): {args.sessions} sessions in {result['seconds']:.2f}s = "
                f"{result['sessions_per_s']:.1f} sessions/s",
                flush=True,
            )
    one = statistics.median(r["sessions_per_s"] for r in runs[1])
    three = statistics.median(r["sessions_per_s"] for r in runs[3])
    ratio = three / one
    failed = [
        (r["coordinators"], name) for k in runs for r in runs[k] for name, ok in r["checks"].items()
        if not ok
    ]  # fmt: skip
    verdict = "PASS" if ratio >= 2.5 else "BELOW TARGET"
    print(f"median: 1 coordinator {one:.1f}/s, 3 coordinators {three:.1f}/s")
    print(f"ratio 3/1 = {ratio:.2f} (target >= 2.5): {verdict}")
    print(f"invariants: {failed or 'all hold'}")
    summary = {"one_per_s": one, "three_per_s": three, "ratio": ratio, "runs": runs}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    print(json.dumps({"one_per_s": one, "three_per_s": three, "ratio": ratio}))
    return 0 if not failed else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=10, help="sessions per tick (10)")
    parser.add_argument("--wait", type=float, default=0.1, help="seconds per execute (0.1)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--warmup", type=float, default=4.0, help="seconds to start processes")
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; exit 1 if an invariant failed."""
    logging.basicConfig(level=logging.WARNING)
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
