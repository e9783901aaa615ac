"""Where a lifecycle run's CPU goes, per handler: SQL, the rest of each transaction, the loop.

Runs drover's side of ``bench/lifecycle.py``'s throughput measurement once
(``--sessions`` sessions of ``--kernels`` kernels, PENDING to TERMINATED on
instant simulated kernels) and splits the CPU time of the timed ticks:

* **worker**: the transactions, each run whole in a SQLite worker thread
  (``time.thread_time`` around ``Database._transaction``), split into the
  statements' own CPU (around the driver's execute and fetch, and
  SQLAlchemy's cursor execute), the commit (what the transaction takes beyond
  its work function) and the Python in between (building values, the apply's
  bookkeeping);
* **main**: the event loop's thread during the tick (the handler's
  ``execute``, classification, asyncio).

The costliest statements of each handler follow. Instrumentation adds its own
cost (the figures are for comparing parts, not for ratios against raw
sqlite3: that is ``bench/lifecycle.py``). Usage::

    .venv/bin/python bench/tick_cpu.py --sessions 10000
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

import drover.storage._sql as sql_module
from drover.coordinator.tick import Coordinator
from drover.storage._db import Database

sys.path.insert(0, str(Path(__file__).parent))
import lifecycle

#: The handler whose tick is running (one tick at a time in this benchmark).
_CURRENT: list[str | None] = [None]
#: CPU seconds per handler: whole transactions, their work functions, the loop's thread.
TXN: Counter[str] = Counter()
WORK: Counter[str] = Counter()
MAIN: Counter[str] = Counter()
#: CPU seconds and executions per (handler, statement).
SQL: Counter[tuple[str, str]] = Counter()
RUNS: Counter[tuple[str, str]] = Counter()


def _note(seconds: float, text: str) -> None:
    handler = _CURRENT[0]
    if handler and threading.current_thread().name.startswith("drover-sqlite"):
        key = (handler, " ".join(text.split())[:100])
        SQL[key] += seconds
        RUNS[key] += 1


class _Rows:
    """A cursor's rows, fetched at once (so their stepping is timed), and its rowcount."""

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows, self.rowcount = rows, rowcount

    def __iter__(self) -> Any:
        return iter(self._rows)

    def fetchall(self) -> list[Any]:
        return self._rows


class _TimedDriver:
    """The pysqlite connection, timing each statement drover runs on it directly."""

    def __init__(self, driver: Any) -> None:
        self._driver = driver

    def execute(self, text: str, values: Sequence[Any] = ()) -> _Rows:
        started = time.thread_time()
        cursor = self._driver.execute(text, values)
        rows = cursor.fetchall()
        _note(time.thread_time() - started, text)
        return _Rows(rows, cursor.rowcount)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)


def instrument() -> None:
    """Wrap the driver, SQLAlchemy's cursor executions, transactions and ticks."""
    driver_of = sql_module._driver

    def timed_driver(conn: sa.Connection) -> Any:
        found = driver_of(conn)
        return None if found is None else _TimedDriver(found)

    sql_module._driver = timed_driver

    @event.listens_for(sa.Engine, "before_cursor_execute")
    def _before(conn: Any, cursor: Any, text: str, *args: Any) -> None:
        conn.info["tick_cpu_started"] = time.thread_time()

    @event.listens_for(sa.Engine, "after_cursor_execute")
    def _after(conn: Any, cursor: Any, text: str, *args: Any) -> None:
        _note(time.thread_time() - conn.info["tick_cpu_started"], "SA " + text)

    transaction = Database._transaction

    def timed_transaction(self: Database, engine: Any, work: Any, write: bool) -> Any:
        handler, started, inner = _CURRENT[0], time.thread_time(), [0.0]

        def timed_work(conn: sa.Connection) -> Any:
            begun = time.thread_time()
            try:
                return work(conn)
            finally:
                inner[0] = time.thread_time() - begun

        try:
            return transaction(self, engine, timed_work, write)
        finally:
            if handler:
                TXN[handler] += time.thread_time() - started
                WORK[handler] += inner[0]

    Database._transaction = timed_transaction  # type: ignore[method-assign]
    tick = Coordinator.tick

    async def timed_tick(self: Coordinator, name: str) -> Any:
        _CURRENT[0], started = name, time.thread_time()
        try:
            return await tick(self, name)
        finally:
            MAIN[name] += time.thread_time() - started
            _CURRENT[0] = None

    Coordinator.tick = timed_tick  # type: ignore[method-assign]


def report(cpu: float, top: int) -> None:
    """Print the split per handler, costliest first, with its costliest statements."""
    print(f"timed ticks: {cpu:.3f} s CPU (process); per handler, thread CPU seconds:")
    for handler in sorted(TXN, key=lambda h: -(TXN[h] + MAIN[h])):
        statements = sum(v for (h, _), v in SQL.items() if h == handler)
        print(
            f"  {handler:<24} worker {TXN[handler]:.3f} (SQL {statements:.3f}, "
            f"commit {TXN[handler] - WORK[handler]:.3f}, Python "
            f"{WORK[handler] - statements:.3f})  main {MAIN[handler]:.3f}"
        )
        mine = sorted(((v, k) for k, v in SQL.items() if k[0] == handler), reverse=True)
        for seconds, key in mine[:top]:
            print(f"      {seconds:.3f} s {RUNS[key]:4d}x  {key[1]}")


async def main_async(args: argparse.Namespace) -> None:
    """One instrumented drover pass, then the report."""
    instrument()
    workdir = Path(tempfile.mkdtemp(prefix="drover-tick-cpu-", dir=args.tmpdir))
    run = await lifecycle.run_drover(workdir, args.sessions, args.kernels)
    report(run.cpu_seconds, args.top)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions (10,000)")
    parser.add_argument("--kernels", type=int, default=4, help="kernels per session (4)")
    parser.add_argument("--top", type=int, default=6, help="statements shown per handler (6)")
    parser.add_argument("--tmpdir", type=Path, help="where the temporary database goes")
    asyncio.run(main_async(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
