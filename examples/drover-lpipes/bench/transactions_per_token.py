"""Database transactions per generated token, one job alone against many jobs at once.

Run: ``python examples/drover-lpipes/bench/transactions_per_token.py [--tokens 32]
[--jobs 1 10 100] [--database URL]`` (default: a temporary SQLite file; a
PostgreSQL URL such as ``postgresql+asyncpg://postgres@127.0.0.1:5432/test``
runs in a schema of its own, dropped after). Transactions are counted, not
timed (:mod:`drover_lpipes.measure`), so the figures are exact and the same
on every run; the baseline is one job at a time, and the ratio says how much
cheaper each token gets when the pipe runs a batch of jobs.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import uuid
from pathlib import Path

import asyncpg
from drover_lpipes import LanguagePipesPlugin
from drover_lpipes.measure import Measurement, measure
from sqlalchemy.engine import make_url

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


async def main() -> None:
    """Print transactions per token for each number of concurrent jobs, and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32, help="tokens per job")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--database", default=None, help="SQLAlchemy async URL")
    args = parser.parse_args()
    baseline: float | None = None
    print("jobs  tokens  transactions  ticks  transactions/token  vs 1 job")
    for jobs in args.jobs:
        m = await _one(args.database, jobs, args.tokens)
        baseline = baseline if baseline is not None else m.per_token
        print(
            f"{m.jobs:4d}  {m.tokens:6d}  {m.transactions:12d}  {m.ticks:5d}  "
            f"{m.per_token:18.3f}  {m.per_token / baseline:8.3f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
