"""Transient database errors retry the whole transaction; other errors do not."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from sqlalchemy import exc

from drover.storage.retry import is_transient, run_transaction


class _PgError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"sqlstate {sqlstate}")
        self.sqlstate = sqlstate


def _dbapi(orig: Exception, *, invalidated: bool = False) -> exc.DBAPIError:
    return exc.OperationalError("UPDATE sessions ...", {}, orig, connection_invalidated=invalidated)


@pytest.mark.parametrize(
    "error",
    [
        _dbapi(sqlite3.OperationalError("database is locked")),
        _dbapi(_PgError("40001")),  # serialization failure
        _dbapi(_PgError("40P01")),  # deadlock detected
        _dbapi(Exception("server closed the connection"), invalidated=True),
        ConnectionResetError("reset by peer"),
    ],
    ids=["sqlite-locked", "pg-serialization", "pg-deadlock", "dropped-connection", "reset"],
)
def test_transient_errors_are_recognised(error):
    """Busy/locked, serialization failures, deadlocks and dropped connections are transient."""
    assert is_transient(error)


@pytest.mark.parametrize(
    "error",
    [
        _dbapi(sqlite3.OperationalError("no such table: sessions")),
        exc.IntegrityError("INSERT", {}, _PgError("23505")),
        ValueError("a bug"),
    ],
    ids=["missing-table", "unique-violation", "bug"],
)
def test_other_errors_are_not(error):
    """Schema problems, constraint violations and bugs are not retried."""
    assert not is_transient(error)


async def test_run_transaction_retries_then_succeeds():
    """The whole unit of work runs again after a transient failure."""
    calls = 0

    async def work() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise _dbapi(sqlite3.OperationalError("database is locked"))
        return "done"

    assert await run_transaction(work) == "done"
    assert calls == 3


async def test_run_transaction_gives_up_and_reraises():
    """After the attempts are spent, the last error surfaces unchanged."""
    calls = 0

    async def work() -> None:
        nonlocal calls
        calls += 1
        raise _dbapi(sqlite3.OperationalError("database is locked"))

    with pytest.raises(exc.OperationalError, match="database is locked"):
        await run_transaction(work, attempts=2)
    assert calls == 2


async def test_non_transient_errors_are_not_retried():
    """A bug fails at once."""
    calls = 0

    async def work() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("bug")

    with pytest.raises(ValueError, match="bug"):
        await run_transaction(work)
    assert calls == 1


async def test_concurrent_sqlite_writers_queue_instead_of_failing(tmp_path):
    """BEGIN IMMEDIATE + busy timeout: two harnesses writing one file both succeed."""
    from drover.testing import CoordinatorHarness

    url = f"sqlite+aiosqlite:///{tmp_path}/shared.db"
    async with CoordinatorHarness(database_url=url) as a, CoordinatorHarness(database_url=url) as b:
        await asyncio.gather(
            *(a.create_session(name=f"a{i}") for i in range(20)),
            *(b.create_session(name=f"b{i}") for i in range(20)),
        )
        counts = await a.repository.count_by_status()
        assert sum(counts.values()) == 40


async def test_first_failure_is_retried_and_logged_like_the_next(caplog):
    """The first attempt runs outside the retry loop, yet its transient failure is logged,
    waited for and counted as attempt 1 like every later one."""
    calls = 0

    async def work() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise _dbapi(sqlite3.OperationalError("database is locked"))
        return "done"

    with caplog.at_level("WARNING", logger="drover.storage"):
        assert await run_transaction(work) == "done"
    retried = [r for r in caplog.records if r.name == "drover.storage"]
    assert calls == 3
    assert len(retried) == 2
    assert all("database is locked" in r.getMessage() for r in retried)


async def test_one_attempt_is_not_retried():
    """With a single attempt a transient error surfaces after one call."""
    calls = 0

    async def work() -> None:
        nonlocal calls
        calls += 1
        raise _dbapi(sqlite3.OperationalError("database is locked"))

    with pytest.raises(exc.OperationalError, match="database is locked"):
        await run_transaction(work, attempts=1)
    assert calls == 1


async def test_other_errors_surface_at_once():
    """A non-transient error is raised from the first call, never retried."""
    calls = 0

    async def work() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        await run_transaction(work)
    assert calls == 1
