"""Lost-update campaign: terminations racing start-sessions' success, thousands of times.

Issue 36, point 10. A user terminates a PREPARED session while
``start-sessions``' ``execute`` runs, then the handler reports success; the
session must end TERMINATING (or, under the daemon, TERMINATED), with one
continuous history chain, whichever side commits first.

``harness`` mode ticks start-sessions in the test harness over batches of
PREPARED sessions, each terminated at a random point: awaited inside
``execute``, started from inside the apply's transaction, or racing with a
random delay; every other round with claims. ``daemon`` mode runs the real
daemon (simulated backend) over a stream of sessions, half of them terminated
while their ``backend.create`` runs, and waits for everything to settle.
``tests/test_lost_update.py`` runs the harness scenario a few hundred times per
database. Prints the counts and exits 1 if any session was lost.

    .venv/bin/python bench/lost_update.py --db both --runs 3000
    .venv/bin/python bench/lost_update.py --mode daemon --db postgresql --runs 2000
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from drover.app import App
from drover.config import load_config
from drover.kinds.sessions.values import KernelStatus as K
from drover.kinds.sessions.values import SessionStatus as S
from drover.testing import CoordinatorHarness
from drover.testing.databases import pg_schema, pg_url

PLACES = ("inside", "in-apply", "racing")
ENDED = {S.TERMINATED, S.CANCELLED, S.ERROR}


async def _lost(repo: Any, sid: str, wanted: set[S]) -> str | None:
    """Why session ``sid`` is lost (not in ``wanted``, or its history broken), or ``None``."""
    session = await repo.get_session(sid)
    rows = await repo.history(sid)
    chain = all(a.to_status == b.from_status for a, b in itertools.pairwise(rows))
    if session.status in wanted and chain and rows[-1].to_status == session.status:
        return None
    return f"{sid}: {session.status}, {[(r.handler, r.from_status, r.to_status) for r in rows]}"


async def harness_round(h: CoordinatorHarness, rng: random.Random, size: int) -> list[str]:
    """One start-sessions tick over ``size`` PREPARED sessions, each terminated somewhere."""
    kernels = [{"cpu": 1, "status": K.PREPARED, "agent_id": "i-0"}]
    sids = await h.repository.seed_sessions(
        [{"kernels": kernels, "status": S.PREPARED} for _ in range(size)]
    )
    place = {sid: rng.choice(PLACES) for sid in sids}
    loop = asyncio.get_running_loop()
    pending: list[asyncio.Future[Any]] = []
    in_apply = [sid for sid in sids if place[sid] == "in-apply"]
    expected = sum(1 for sid in sids if place[sid] != "inside")
    started = asyncio.Event()

    def terminate(sid: str, after: float = 0.0) -> None:
        async def go() -> Any:
            await asyncio.sleep(after)
            return await h.request_termination(sid)

        pending.append(asyncio.ensure_future(go()))
        if len(pending) == expected:
            started.set()

    def hook(step: str) -> None:
        if step == "after-entities":
            for sid in in_apply:
                loop.call_soon_threadsafe(terminate, sid)
            in_apply.clear()

    original = h.backend.create

    async def create(session: Any) -> None:
        if place[session.id] == "inside":
            await h.request_termination(session.id)
        elif place[session.id] == "racing":
            terminate(session.id, rng.random() * 0.006)
        await original(session)

    h.backend.create = create
    h.coordinator.inject_apply_failure = hook
    try:
        await h.tick("start-sessions")
        if expected:
            await started.wait()
        await asyncio.gather(*pending)
    finally:
        h.backend.create = original
        h.coordinator.inject_apply_failure = None
    found = [await _lost(h.repository, sid, {S.TERMINATING}) for sid in sids]
    return [f for f in found if f is not None]


async def harness_campaign(url: str, schema: str | None, runs: int, seed: int) -> list[str]:
    """``runs`` scenarios in rounds of 12 in one harness."""
    rng = random.Random(seed)
    lost: list[str] = []
    async with CoordinatorHarness(database_url=url, database_schema=schema) as h:
        for n in range(0, runs, 12):
            h.coordinator.claim_owner = "campaign" if (n // 12) % 2 else None
            lost += await harness_round(h, rng, min(12, runs - n))
    return lost


async def daemon_campaign(url: str, schema: str | None, runs: int, seed: int) -> list[str]:
    """``runs`` sessions through the daemon, half terminated while their create runs."""
    rng = random.Random(seed)
    flags = {
        "database_url": url, "database_schema": schema or "",
        "data_dir": tempfile.mkdtemp(prefix="drover-lost-"), "backend.name": "simulated",
        "backend.agents": [{"id": "a", "cpu": 10**6, "mem": 10**9}],
    }  # fmt: skip
    app = App(load_config(None, environ={}, flags=flags), claims=True)
    ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    daemon = asyncio.create_task(app.run_daemon(install_signals=False, on_ready=ready.set_result))
    doomed: set[str] = set()
    tasks: list[asyncio.Future[Any]] = []
    try:
        await asyncio.wait_for(asyncio.shield(ready), timeout=30)
        original = app.backend.create

        async def create(session: Any) -> None:
            if rng.random() < 0.5:
                doomed.add(session.id)

                async def later(sid: str = session.id) -> None:
                    await asyncio.sleep(rng.random() * 0.02)
                    await app.repository.request_termination([sid])

                tasks.append(asyncio.ensure_future(later()))
            await asyncio.sleep(rng.random() * 0.01)
            await original(session)

        app.backend.create = create
        sids: list[str] = []
        for n in range(0, runs, 20):
            batch = [{"kernels": [{"cpu": 1, "mem": 1}]} for _ in range(min(20, runs - n))]
            sids += await app.repository.create_sessions(batch)
            await asyncio.sleep(0.05)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            await asyncio.sleep(1)
            await asyncio.gather(*tasks)
            sessions = [await app.repository.get_session(s) for s in sids]
            if all((s.status in ENDED) == (s.id in doomed) for s in sessions):
                break
        lost = []
        for sid in sids:
            wanted = ENDED if sid in doomed else {S.RUNNING}
            found = await _lost(app.repository, sid, wanted)
            if found is not None:
                lost.append(found)
        print(f"  {len(doomed)} of {len(sids)} terminated while start-sessions ran")
        return lost
    finally:
        daemon.cancel()
        await asyncio.gather(daemon, *tasks, return_exceptions=True)
        await app.close()


async def run(args: argparse.Namespace) -> int:
    """Run the campaign on each chosen database; 1 if anything was lost."""
    campaign = harness_campaign if args.mode == "harness" else daemon_campaign
    failed = 0
    for db in ("sqlite", "postgresql") if args.db == "both" else (args.db,):
        started = time.monotonic()
        if db == "postgresql":
            async with pg_schema("lostupd", pg_url()) as schema:
                lost = await campaign(pg_url(), schema, args.runs, args.seed)
        else:
            path = Path(tempfile.mkdtemp(prefix="drover-lost-")) / "drover.db"
            lost = await campaign(f"sqlite+aiosqlite:///{path}", None, args.runs, args.seed)
        for line in lost[:10]:
            print("  LOST", line)
        took = time.monotonic() - started
        print(f"{args.mode} {db}: {args.runs} runs, {len(lost)} lost ({took:.0f} s)")
        failed += len(lost)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and run the campaign."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("harness", "daemon"), default="harness")
    parser.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--runs", type=int, default=1200)
    parser.add_argument("--seed", type=int, default=36)
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
