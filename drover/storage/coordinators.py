"""Coordinator processes: heartbeats, clean stops, who is alive, and SQLite's one-coordinator rule.

On PostgreSQL any number of coordinators run side by side: each tick claims
its entities (``storage/fetch.py``) and the apply is fenced by the claim's
token. SQLite has no row locks to claim with, so only one coordinator may
run on a SQLite file. That is enforced with an exclusive ``flock`` on
``<database file>.coordinator.lock``, held for the coordinator's life:

* the lock is held: another coordinator is alive; starting is refused with
  one line naming it (pid, host, since), from its ``coordinators`` row;
* the lock is free but a row was never marked stopped: that coordinator died
  (``kill -9``, a crash) — the operating system released its lock. The new
  one takes over: the old row is marked stopped, and the returned note says
  so, with how stale its heartbeat was.

A lock, rather than the heartbeat alone, decides: a coordinator killed a
moment ago is taken over at once (its heartbeat is still fresh but it is
gone), and a hung one whose heartbeat went stale is never run beside (it
still holds the lock, and would write again if it woke up).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from datetime import UTC, datetime

import sqlalchemy as sa

from drover.model.errors import CoordinatorConflictError
from drover.model.values import CoordinatorInfo
from drover.storage._db import Database
from drover.storage.notify import notify
from drover.storage.rows import coordinator_from_row
from drover.storage.statements.coordinators import (
    CLAIMS_BY_OWNER,
    DROP_SOLO,
    HEARTBEAT,
    INSERT_COORDINATOR,
    MARK_STOPPED,
    NEWEST_RUNNING,
    NOT_STOPPED,
    OTHERS_ALIVE,
    RENEW_SOLO,
    REVOKE_LAPSED_SOLO,
    SOLO_LOCK,
    STOPPED,
    TAKE_SOLO,
    coordinators_alive,
)

__all__ = [
    "claims_by_owner",
    "coordinator_stopped",
    "drop_solo",
    "heartbeat",
    "keep_solo",
    "list_coordinators",
    "register_coordinator",
    "release_lock",
    "take_solo",
]


def _lock_path(db: Database) -> str | None:
    """The lock file of a SQLite file database; ``None`` for PostgreSQL or in-memory SQLite."""
    url = db.engine.url
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return os.path.abspath(url.database) + ".coordinator.lock"


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def _describe(row: sa.Row[tuple[object, ...]]) -> str:
    return f"pid {row.pid} on host {row.host}, since {_when(float(row.started_at))} (id {row.id})"


def _take_lock(db: Database) -> int | None:
    """Take the SQLite file's coordinator lock; ``None`` if another process holds it."""
    path = _lock_path(db)
    assert path is not None
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        # flock, not fcntl's POSIX locks: those are per process, and would let a
        # second coordinator in the same process (tests, the harness) through.
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def release_lock(db: Database) -> None:
    """Release the SQLite coordinator lock this process holds, if any."""
    fd = db.coordinator_lock
    db.coordinator_lock = None
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


async def register_coordinator(
    db: Database, info: CoordinatorInfo, *, stale_after: float = 15.0
) -> str | None:
    """Insert a coordinator's row; its start and first heartbeat are now.

    On a SQLite file, first take the one-coordinator lock (see the module
    docstring): raise :class:`CoordinatorConflictError` if a live coordinator
    holds it, and return a note when taking over from dead ones.
    ``stale_after`` is how old a heartbeat must be to be called stale in
    messages.
    """
    now = db.clock.time()
    row = {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "started_at": now,
        "heartbeat_at": now,
        "version": info.version,
        "stopped_at": None,
        "handlers": list(info.handlers) if info.handlers is not None else None,
    }
    locking = _lock_path(db) is not None and db.coordinator_lock is None
    if locking:
        fd = _take_lock(db)
        if fd is None:
            running = await db.read(lambda conn: conn.execute(NEWEST_RUNNING).first())
            if running is None:
                raise CoordinatorConflictError(
                    "another coordinator is starting on this SQLite database "
                    "(it holds the coordinator lock); SQLite allows only one"
                )
            age = now - float(running.heartbeat_at)
            state = (
                f"its heartbeat is {age:.0f}s old: it is alive but hung, stop it first"
                if age > stale_after
                else f"last heartbeat {age:.1f}s ago"
            )
            raise CoordinatorConflictError(
                f"another coordinator is running on this SQLite database: {_describe(running)}; "
                f"{state}. SQLite allows one coordinator; use PostgreSQL for several"
            )
        db.coordinator_lock = fd

    def work(conn: sa.Connection) -> str | None:
        note = None
        if locking:
            # We hold the lock: coordinators never marked stopped are dead.
            dead = conn.execute(NOT_STOPPED).all()
            if dead:
                conn.execute(MARK_STOPPED, {"ids": [d.id for d in dead], "b_now": now})
                last = max(dead, key=lambda d: float(d.heartbeat_at))
                age = now - float(last.heartbeat_at)
                note = (
                    f"taking over from coordinator {_describe(last)}: it is no longer running "
                    f"(it did not stop cleanly; last heartbeat {age:.0f}s ago)"
                )
        conn.execute(INSERT_COORDINATOR, row)
        # A coordinator holding the solo lease gives it up at once (PostgreSQL).
        notify(conn, {"joined": info.id})
        return note

    try:
        return await db.write(work)
    except BaseException:
        if locking:
            release_lock(db)
        raise


async def heartbeat(db: Database, coordinator_id: str) -> None:
    """Refresh a coordinator's ``heartbeat_at``."""
    now = db.clock.time()

    def work(conn: sa.Connection) -> None:
        conn.execute(HEARTBEAT, {"b_id": coordinator_id, "b_now": now})

    await db.write(work)


async def coordinator_stopped(db: Database, coordinator_id: str) -> None:
    """Mark a coordinator as cleanly stopped (and release SQLite's coordinator lock)."""
    now = db.clock.time()

    def work(conn: sa.Connection) -> None:
        conn.execute(STOPPED, {"b_id": coordinator_id, "b_now": now})

    try:
        await db.write(work)
    finally:
        release_lock(db)


async def list_coordinators(
    db: Database, *, alive_within: float | None = None
) -> list[CoordinatorInfo]:
    """Coordinators, newest first; with ``alive_within``, only running ones that beat lately."""
    beat_since = None if alive_within is None else db.clock.time() - alive_within
    query = coordinators_alive(beat_since)

    def work(conn: sa.Connection) -> list[CoordinatorInfo]:
        return [coordinator_from_row(r) for r in conn.execute(query)]

    return await db.read(work)


async def claims_by_owner(db: Database) -> dict[str, int]:
    """Unexpired claims per coordinator id (always empty on SQLite)."""
    if not db.postgres:
        return {}
    params = {"now": db.clock.time()}

    def work(conn: sa.Connection) -> dict[str, int]:
        return {str(owner): int(n) for owner, n in conn.execute(CLAIMS_BY_OWNER, params)}

    return await db.read(work)


# -- the solo lease (PostgreSQL; docs/scaling.md) --------------------------------------------


async def take_solo(
    db: Database, coordinator_id: str, token: str, *, until: float, alive_since: float
) -> bool:
    """Take the solo lease ``token`` until ``until`` if no other coordinator runs (a
    heartbeat since ``alive_since``) or holds it; first revoke the leases that lapsed.

    Under the lease, the coordinator's ticks claim no rows; while anyone holds it,
    the other coordinators' ticks fetch nothing. Always ``False`` on SQLite (one
    coordinator, nothing claimed).
    """
    if not db.postgres:
        return False
    now = db.clock.time()
    params = {"b_id": coordinator_id, "b_token": token, "b_until": until}

    def work(conn: sa.Connection) -> bool:
        conn.execute(SOLO_LOCK)
        conn.execute(REVOKE_LAPSED_SOLO, {"b_now": now})
        taken = conn.execute(TAKE_SOLO, {**params, "b_alive_since": alive_since}).first()
        return taken is not None

    return await db.write(work)


async def keep_solo(
    db: Database, coordinator_id: str, token: str, *, until: float, alive_since: float
) -> bool:
    """Renew the solo lease ``token`` until ``until``, unless another coordinator runs (a
    heartbeat since ``alive_since``) or the lease was revoked: then ``False``, and the
    coordinator must leave solo (:func:`drop_solo` once its solo ticks are done)."""
    if not db.postgres:
        return False
    params = {"b_id": coordinator_id, "b_token": token, "b_until": until}

    def work(conn: sa.Connection) -> bool:
        others = conn.execute(OTHERS_ALIVE, {"b_id": coordinator_id, "b_alive_since": alive_since})
        if others.scalar():
            return False
        return conn.execute(RENEW_SOLO, params).first() is not None

    return await db.write(work)


async def drop_solo(db: Database, coordinator_id: str, token: str) -> None:
    """Give the solo lease ``token`` up: the other coordinators' ticks may fetch again."""
    if not db.postgres:
        return
    params = {"b_id": coordinator_id, "b_token": token}

    def work(conn: sa.Connection) -> None:
        conn.execute(DROP_SOLO, params)
        # The others' ticks found nothing while it was held: they tick again at once.
        notify(conn, {"unleased": coordinator_id})

    await db.write(work)
