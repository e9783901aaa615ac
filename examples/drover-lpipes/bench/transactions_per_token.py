"""Database transactions per generated token, one job alone against many jobs at once.

Run: ``python examples/drover-lpipes/bench/transactions_per_token.py [--tokens 32]
[--jobs 1 10 100] [--database URL] [--daemon]`` (default: a temporary SQLite
file; a PostgreSQL URL such as
``postgresql+asyncpg://postgres@127.0.0.1:5432/test`` runs in a schema of
its own, dropped after). Transactions are counted, not timed
(:mod:`drover_lpipes.measure`); the baseline is one job at a time, and the
ratio says how much cheaper each token gets when the pipe runs a batch of
jobs.

``--daemon`` runs drover's real daemon instead (``drover run`` on a
temporary SQLite file, the pack loaded from its entry point) and counts from
its start-up until every job has ended: its heartbeats, its interval ticks
and the tick records it writes are counted too, so the figures vary a little
from run to run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import tempfile
import uuid
from contextlib import closing as contextlib_closing
from pathlib import Path
from typing import Any

import asyncpg
from drover_lpipes import JOB_KIND, JobRequest, LanguagePipesPlugin, submit
from drover_lpipes.measure import Measurement, counting_transactions, measure
from sqlalchemy.engine import make_url

from drover import App, load_config
from drover.testing import CoordinatorHarness


async def _one(url: str | None, jobs: int, tokens: int) -> Measurement:
    schema = None
    dsn = None
    if url is not None and url.startswith("postgresql"):
        schema = f"lpipes_bench_{uuid.uuid4().hex[:12]}"
        dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        conn = await asyncpg.connect(dsn)
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        await conn.close()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            database = url or f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
            async with CoordinatorHarness(
                plugins=[LanguagePipesPlugin()],
                include_builtin_handlers=False,
                database_url=database,
                database_schema=schema,
            ) as h:
                return await measure(h, jobs, tokens)
    finally:
        if dsn is not None:
            conn = await asyncpg.connect(dsn)
            await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
            await conn.close()


def _running_jobs(path: Path) -> int:
    # Read with sqlite3, not SQLAlchemy: the polling is not counted.
    with contextlib_closing(sqlite3.connect(path)) as conn:
        query = "SELECT count(*) FROM entities WHERE kind = ? AND status = 'RUNNING'"
        return int(conn.execute(query, (JOB_KIND,)).fetchone()[0])


def _generated(path: Path) -> int:
    with contextlib_closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT data FROM entities WHERE kind = ?", (JOB_KIND,)).fetchall()
    return sum(len(json.loads(data or "{}").get("tokens", [])) for (data,) in rows)


async def _daemon(jobs: int, tokens: int) -> Measurement:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        loaded = load_config(
            environ={"DROVER_LOAD_PLUGINS": "lpipes"},
            flags={
                "database_url": f"sqlite+aiosqlite:///{path}",
                "backend.name": "simulated",
                "data_dir": tmp,
                "log_level": "WARNING",
            },
        )
        app = App(loaded, claims=True)
        try:
            await app.check_schema(auto_upgrade=True)
            for n in range(jobs):
                await submit(app.repository, JobRequest(f"request number {n} of the run", tokens))
            daemons: list[Any] = []
            ticks = [0]

            def ready(daemon: Any) -> None:
                daemons.append(daemon)
                daemon.on_tick = lambda _report: ticks.__setitem__(0, ticks[0] + 1)

            with counting_transactions() as count:
                run = asyncio.create_task(app.run_daemon(install_signals=False, on_ready=ready))
                while True:  # until every job has ended (polled outside the count)
                    if daemons and not _running_jobs(path):
                        break
                    await asyncio.sleep(0.02)
                daemons[0].stop()
                await run
                transactions = count[0]
        finally:
            await app.close()
        return Measurement(jobs, _generated(path), transactions, ticks[0])


async def main() -> None:
    """Print transactions per token for each number of concurrent jobs, and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32, help="tokens per job")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--database", default=None, help="SQLAlchemy async URL")
    parser.add_argument("--daemon", action="store_true", help="drover's daemon (SQLite only)")
    args = parser.parse_args()
    if args.daemon and args.database is not None:
        parser.error("--daemon runs on a temporary SQLite file: leave out --database")
    baseline: float | None = None
    print("jobs  tokens  transactions  ticks  transactions/token  vs 1 job")
    for jobs in args.jobs:
        if args.daemon:
            m = await _daemon(jobs, args.tokens)
        else:
            m = await _one(args.database, jobs, args.tokens)
        baseline = baseline if baseline is not None else m.per_token
        print(
            f"{m.jobs:4d}  {m.tokens:6d}  {m.transactions:12d}  {m.ticks:5d}  "
            f"{m.per_token:18.3f}  {m.per_token / baseline:8.3f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
