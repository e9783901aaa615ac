"""One database: its engines, its dialect, and transactions retried whole on hiccups.

Private to ``drover.storage``: every statement drover runs is built inside
this package, and callers outside it use the repository's named operations.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from drover.model.clock import Clock, SystemClock
from drover.storage.connect import WRITE_OPTION
from drover.storage.retry import run_transaction

__all__ = ["Database"]

T = TypeVar("T")


class Database:
    """An async engine with read and write transactions (``BEGIN IMMEDIATE`` on SQLite)."""

    def __init__(self, engine: AsyncEngine, clock: Clock | None = None) -> None:
        self.engine = engine
        self.clock: Clock = clock or SystemClock()
        self.postgres = engine.dialect.name == "postgresql"
        self._write_engine = engine.execution_options(**{WRITE_OPTION: True})

    async def write(self, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run ``work`` in one write transaction, retried whole on transient errors."""

        async def attempt() -> T:
            async with self._write_engine.begin() as conn:
                return await work(conn)

        return await run_transaction(attempt)

    async def read(self, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run ``work`` in one read transaction, retried whole on transient errors."""

        async def attempt() -> T:
            async with self.engine.connect() as conn:
                return await work(conn)

        return await run_transaction(attempt)
