"""Retrying whole transactions on transient infrastructure errors, with tenacity.

Only the database's own hiccups are retried here: SQLite busy/locked,
PostgreSQL serialization failures and deadlocks, and dropped connections.
Handler outcomes are never retried here: they belong to the coordinator.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy import exc

__all__ = ["is_transient", "run_transaction"]

log = logging.getLogger("drover.storage")

T = TypeVar("T")

_PG_TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "57P01", "08000", "08003", "08006"})


def is_transient(error: BaseException) -> bool:
    """Tell whether ``error`` is a database hiccup worth retrying the whole transaction for."""
    if isinstance(error, exc.DBAPIError):
        if error.connection_invalidated:
            return True
        orig = error.orig
        text = str(orig).lower()
        if "database is locked" in text or "database is busy" in text:
            return True
        sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
        if sqlstate is None and orig is not None:
            sqlstate = getattr(getattr(orig, "__cause__", None), "sqlstate", None)
        if sqlstate in _PG_TRANSIENT_SQLSTATES:
            return True
    return isinstance(error, ConnectionError | TimeoutError)


async def run_transaction(
    work: Callable[[], Awaitable[T]],
    *,
    attempts: int = 6,
) -> T:
    """Run ``work`` (which opens and commits its own transaction), retrying transient errors."""
    # Nearly every transaction succeeds at once: it pays for no retry machinery (a
    # tick runs a few). A transient failure enters the same loop as its first
    # attempt (logged, waited for, counted), and the next attempts run there.
    try:
        return await work()
    except Exception as error:
        if not is_transient(error):
            raise
        failed: Exception | None = error
    # Imported only now: a command-line read never meets a transient error.
    from tenacity import (
        AsyncRetrying,
        before_sleep_log,
        retry_if_exception,
        stop_after_attempt,
        wait_exponential,
        wait_random,
    )

    retrying = AsyncRetrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=0.05, max=2.0) + wait_random(0, 0.05),
        before_sleep=before_sleep_log(log, logging.WARNING),
        reraise=True,
    )
    async for attempt in retrying:
        with attempt:
            if failed is not None:
                first, failed = failed, None
                raise first
            return await work()
    raise AssertionError("unreachable: tenacity reraises the last error")
