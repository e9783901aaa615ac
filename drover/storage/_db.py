"""One database: its engines, and transactions run whole, retried on hiccups.

Private to ``drover.storage``: every statement drover runs is built inside
this package, and callers outside it use the repository's named operations.

Every storage operation is a synchronous function of one ``Connection``,
run as one transaction:

* on a SQLite file, whole in a worker thread, on a synchronous (pysqlite)
  engine: one thread hop per transaction instead of several per statement,
  and a writer that waits for SQLite's lock waits in its thread, never in the
  event loop;
* on PostgreSQL (and in-memory SQLite), through ``AsyncConnection.run_sync``
  on the async engine (asyncpg, aiosqlite).

A database opened on a synchronous SQLite-file engine
(:func:`~drover.storage.connect.sqlite_file_engine`, the command line's
reads) runs each transaction whole where it is called, with no worker thread.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

import sqlalchemy as sa

from drover.model.clock import Clock, SystemClock
from drover.model.kinds import Kinds
from drover.storage.connect import WRITE_OPTION, threaded_sqlite_engine
from drover.storage.retry import run_transaction

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["Database", "Work"]

T = TypeVar("T")
#: A storage operation: a synchronous function of one open transaction.
Work = Callable[[sa.Connection], T]


# Reads run beside the writer (WAL); writers queue on SQLite's lock in their threads.
_THREADS = 4


def _shrink_idle(engine: sa.Engine) -> int:
    pool = engine.pool
    idle = pool.checkedin() if isinstance(pool, sa.pool.QueuePool) else 0
    # Checking the idle connections out together reaches each once; one a tick
    # takes meanwhile is simply not shrunk (or a new, empty one is opened).
    held = []
    try:
        for _ in range(idle):
            held.append(engine.raw_connection())
        for connection in held:
            cursor = connection.cursor()
            try:
                cursor.execute("PRAGMA shrink_memory")
            finally:
                cursor.close()
    finally:
        for connection in held:
            connection.close()
    return len(held)


class Database:
    """An engine with read and write transactions (``BEGIN IMMEDIATE`` on SQLite)."""

    def __init__(self, engine: AsyncEngine | sa.Engine, clock: Clock | None, kinds: Kinds) -> None:
        self.engine = engine
        self.clock: Clock = clock or SystemClock()
        #: The registered entity kinds (their rules decide children, results, termination).
        self.kinds: Kinds = kinds
        self.postgres = engine.dialect.name == "postgresql"
        self._async: AsyncEngine | None = None
        # A SQLite file's synchronous engine (sqlite_file_engine, the command line's reads):
        # each transaction runs whole where it is called. A short read-only process gains
        # nothing from worker threads, and would pay for starting them.
        self._inline = isinstance(engine, sa.Engine)
        if isinstance(engine, sa.Engine):
            self._threaded: sa.Engine | None = engine
        else:
            self._async = engine
            self._write_engine = engine.execution_options(**{WRITE_OPTION: True})
            # PostgreSQL reads run in autocommit: at READ COMMITTED every statement has
            # its own snapshot anyway, so a read transaction only cost a BEGIN and a
            # ROLLBACK round trip each.
            self._read_engine = (
                engine.execution_options(isolation_level="AUTOCOMMIT") if self.postgres else engine
            )
            self._threaded = threaded_sqlite_engine(engine)
        self._threaded_write = (
            self._threaded.execution_options(**{WRITE_OPTION: True})
            if self._threaded is not None
            else None
        )
        self._executor: ThreadPoolExecutor | None = None
        #: The descriptor holding SQLite's one-coordinator lock (storage/coordinators.py).
        self.coordinator_lock: int | None = None

    def _transaction(self, engine: sa.Engine, work: Work[T], write: bool) -> T:
        # One whole transaction on a synchronous engine: in a worker thread, or inline.
        with engine.begin() if write else engine.connect() as conn:
            return work(conn)

    async def _run(self, work: Work[T], write: bool) -> T:
        if self._threaded is not None:
            engine = self._threaded_write if write else self._threaded
            assert engine is not None
            if self._inline:
                return self._transaction(engine, work, write)
            if self._executor is None:
                self._executor = ThreadPoolExecutor(_THREADS, thread_name_prefix="drover-sqlite")
            call = functools.partial(self._transaction, engine, work, write)
            return await asyncio.get_running_loop().run_in_executor(self._executor, call)
        if write:
            async with self._write_engine.begin() as aconn:
                return await aconn.run_sync(work)
        async with self._read_engine.connect() as aconn:
            return await aconn.run_sync(work)

    async def release_memory(self) -> int:
        """Free the page caches of the idle pooled SQLite connections; how many there were.

        A connection keeps the pages it read (up to its ``cache_size``) until
        another connection's write makes them stale: at rest, a few connections
        hold tens of MiB of a database nobody is reading. ``PRAGMA
        shrink_memory`` frees them; the next read fetches them again from the
        operating system's file cache. Nothing to do on PostgreSQL.
        """
        if self._threaded is None or self._executor is None:
            return 0
        engine = self._threaded
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(_shrink_idle, engine)
        )

    async def write(self, work: Work[T]) -> T:
        """Run ``work`` in one write transaction, retried whole on transient errors."""
        return await run_transaction(lambda: self._run(work, write=True))

    async def read(self, work: Work[T]) -> T:
        """Run ``work`` in one read transaction, retried whole on transient errors."""
        return await run_transaction(lambda: self._run(work, write=False))

    def close(self) -> None:
        """Release the worker threads, the synchronous engine's connections and any lock."""
        if self.coordinator_lock is not None:
            os.close(self.coordinator_lock)
            self.coordinator_lock = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self._threaded is not None:
            self._threaded.dispose()
