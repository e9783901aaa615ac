"""The daemon's store: coordinators' rows and SQLite's one-coordinator rule, the solo lease,
tick records, pruning, news from other processes and memory at rest.

:class:`DaemonStore` is one of the services :class:`~drover.storage.repository.Repository`
is made of; with the tick store it implements the coordinator's
:class:`~drover.coordinator.store.DaemonStore` protocol.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any

import sqlalchemy as sa

from drover.model.errors import CoordinatorConflictError
from drover.model.kinds import EntityKind
from drover.model.values import CoordinatorInfo
from drover.storage._db import Database
from drover.storage._service import Service
from drover.storage.notify import Subscription, notify, subscribe
from drover.storage.schema import entities, handler_ticks, scheduling_history, status_changes
from drover.storage.statements.coordinators import (
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
)

__all__ = ["DaemonStore"]

#: Tick summaries (executed with many rows).
_INSERT_TICKS = sa.insert(handler_ticks)

# -- pruning: what goes, table by table ------------------------------------------------------

e = entities
h = scheduling_history
c = status_changes


def _ended_entities(kinds: Iterable[EntityKind]) -> sa.Select[Any]:
    """Ids of the entities of the top-level ``kinds`` (no parent) that are in a terminal status."""
    return sa.select(e.c.id).where(
        sa.or_(
            *(
                sa.and_(e.c.kind == kind.name, e.c.status.in_(sorted(kind.terminal)))
                for kind in kinds
                if kind.parent is None
            )
        )
    )


def _prune_targets(
    kinds: Iterable[EntityKind], older_than: float | None, ticks_older_than: float | None = None
) -> dict[str, tuple[sa.Table, sa.ColumnElement[bool]]]:
    """Per table, the rows pruning deletes (a cutoff of ``None`` leaves its tables alone).

    History and status changes last updated (created) before ``older_than``
    of entities whose top-level entity ended (:func:`ended_entities`), down
    to their grandchildren and further, and tick summaries started before
    ``ticks_older_than``.
    """
    targets: dict[str, tuple[sa.Table, sa.ColumnElement[bool]]] = {}
    if older_than is not None:
        kinds = list(kinds)
        by_name = {k.name: k for k in kinds}

        def depth(kind: EntityKind) -> int:
            return (
                0
                if kind.parent is None or kind.parent not in by_name
                else 1 + depth(by_name[kind.parent])
            )

        # The ended top-level entities, then their children, grandchildren…
        levels: list[sa.Select[Any]] = [_ended_entities(kinds)]
        for _ in range(max((depth(k) for k in kinds), default=0)):
            levels.append(sa.select(e.c.id).where(e.c.parent_id.in_(levels[-1])))
        own = sa.or_(*(h.c.entity_id.in_(level) for level in levels))
        # A change is kept with its parent's (a child's) or its own (a report on a top entity).
        changes = sa.or_(
            c.c.entity_id.in_(levels[0]), *(c.c.parent_id.in_(level) for level in levels)
        )
        # The newest row of each table stays: SQLite numbers a new row after the largest
        # id left, so deleting the newest would hand its ids out again, below the
        # watermarks promotion probes read after (drover.storage.watermarks).
        newest_h = sa.select(sa.func.max(h.c.id)).scalar_subquery()
        newest_c = sa.select(sa.func.max(c.c.id)).scalar_subquery()
        targets["scheduling_history"] = (
            h,
            sa.and_(h.c.updated_at < older_than, own, h.c.id < newest_h),
        )
        targets["status_changes"] = (
            c,
            sa.and_(c.c.created_at < older_than, changes, c.c.id < newest_c),
        )
    if ticks_older_than is not None:
        targets["handler_ticks"] = (handler_ticks, handler_ticks.c.started_at < ticks_older_than)
    return targets


def _count_rows(table: sa.Table, condition: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """The number of rows of ``table`` where ``condition`` holds."""
    return sa.select(sa.func.count()).select_from(table).where(condition)


def _row_ids(table: sa.Table, condition: sa.ColumnElement[bool], limit: int) -> sa.Select[Any]:
    """Ids of at most ``limit`` rows of ``table`` where ``condition`` holds."""
    return sa.select(table.c.id).where(condition).limit(limit)


def _delete_rows(table: sa.Table) -> sa.Delete:
    """Delete the rows of ``table`` whose id is among ``:ids`` (a list)."""
    return sa.delete(table).where(table.c.id.in_(sa.bindparam("ids", expanding=True)))


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


def _release_lock(db: Database) -> None:
    """Release the SQLite coordinator lock this process holds, if any."""
    fd = db.coordinator_lock
    db.coordinator_lock = None
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


class DaemonStore(Service):
    """What the daemon writes besides its ticks, and how it hears of other processes."""

    async def register_coordinator(
        self, info: CoordinatorInfo, *, stale_after: float = 15.0
    ) -> str | None:
        """Insert a coordinator's row; its start and first heartbeat are now.

        On a SQLite file, first take the one-coordinator lock (see the module
        docstring): raise :class:`CoordinatorConflictError` if a live coordinator
        holds it, and return a note when taking over from dead ones.
        ``stale_after`` is how old a heartbeat must be to be called stale in
        messages.
        """
        db = self._db
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
                    "another coordinator is running on this SQLite database: "
                    f"{_describe(running)}; {state}. SQLite allows one coordinator; "
                    "use PostgreSQL for several"
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
                _release_lock(db)
            raise

    async def heartbeat(self, coordinator_id: str) -> None:
        """Refresh a coordinator's ``heartbeat_at``."""
        db = self._db
        now = db.clock.time()

        def work(conn: sa.Connection) -> None:
            conn.execute(HEARTBEAT, {"b_id": coordinator_id, "b_now": now})

        await db.write(work)

    async def coordinator_stopped(self, coordinator_id: str) -> None:
        """Mark a coordinator as cleanly stopped (and release SQLite's coordinator lock)."""
        db = self._db
        now = db.clock.time()

        def work(conn: sa.Connection) -> None:
            conn.execute(STOPPED, {"b_id": coordinator_id, "b_now": now})

        try:
            await db.write(work)
        finally:
            _release_lock(db)

    async def take_solo(
        self, coordinator_id: str, token: str, *, until: float, alive_since: float
    ) -> bool:
        """Take the solo lease ``token`` until ``until`` if no other coordinator runs (a
        heartbeat since ``alive_since``) or holds it; first revoke the leases that lapsed.

        Under the lease, the coordinator's ticks claim no rows; while anyone holds it,
        the other coordinators' ticks fetch nothing. Always ``False`` on SQLite (one
        coordinator, nothing claimed).
        """
        db = self._db
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
        self, coordinator_id: str, token: str, *, until: float, alive_since: float
    ) -> bool:
        """Renew the solo lease ``token`` until ``until``, unless another coordinator runs (a
        heartbeat since ``alive_since``) or the lease was revoked: then ``False``, and the
        coordinator must leave solo (:func:`drop_solo` once its solo ticks are done)."""
        db = self._db
        if not db.postgres:
            return False
        params = {"b_id": coordinator_id, "b_token": token, "b_until": until}

        def work(conn: sa.Connection) -> bool:
            others = conn.execute(
                OTHERS_ALIVE, {"b_id": coordinator_id, "b_alive_since": alive_since}
            )
            if others.scalar():
                return False
            return conn.execute(RENEW_SOLO, params).first() is not None

        return await db.write(work)

    async def drop_solo(self, coordinator_id: str, token: str) -> None:
        """Give the solo lease ``token`` up: the other coordinators' ticks may fetch again."""
        db = self._db
        if not db.postgres:
            return
        params = {"b_id": coordinator_id, "b_token": token}

        def work(conn: sa.Connection) -> None:
            conn.execute(DROP_SOLO, params)
            # The others' ticks found nothing while it was held: they tick again at once.
            notify(conn, {"unleased": coordinator_id})

        await db.write(work)

    async def record_ticks(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Store tick summaries (handler, started_at, duration, fetched, counts, error)."""
        if not rows:
            return
        values = [{"error": None, **row} for row in rows]
        await self._db.write(lambda conn: conn.execute(_INSERT_TICKS, values))

    async def prune_history(
        self,
        *,
        older_than: float | None,
        ticks_older_than: float | None = None,
        dry_run: bool = False,
        batch: int = 5000,
        on_batch: Callable[[str, int], None] | None = None,
    ) -> dict[str, int]:
        """Delete history older than ``older_than`` of entities whose top-level entity ended,
        and tick summaries started before ``ticks_older_than``; report counts per table.

        Rows of live entities are never touched (so their latest row survives),
        nor rows updated after the cutoff; a cutoff of ``None`` leaves its tables
        alone. Deletes in batches, each its own transaction, calling
        ``on_batch(table, deleted so far)`` after each; ``dry_run`` only counts.
        """
        db = self._db
        report: dict[str, int] = {}
        for name, (table, condition) in _prune_targets(
            db.kinds.values(), older_than, ticks_older_than
        ).items():
            if dry_run:
                report[name] = await db.read(partial(_count, _count_rows(table, condition)))
                continue
            report[name] = await _delete_in_batches(db, name, table, condition, batch, on_batch)
        return report

    async def subscribe(self, on_news: Callable[[dict[str, Any]], None]) -> Subscription | None:
        """Listen for other processes' news (PostgreSQL ``LISTEN``); ``None`` on SQLite."""
        return await subscribe(self._db, on_news)

    async def release_memory(self) -> int:
        """Free idle SQLite connections' page caches (``PRAGMA shrink_memory``), for a
        daemon at rest; ``0`` on PostgreSQL."""
        return await self._db.release_memory()


def _count(query: sa.Select[Any], conn: sa.Connection) -> int:
    return int(conn.execute(query).scalar() or 0)


async def _delete_in_batches(
    db: Database,
    name: str,
    table: sa.Table,
    condition: sa.ColumnElement[bool],
    batch: int,
    on_batch: Callable[[str, int], None] | None,
) -> int:
    """Delete the rows of ``table`` where ``condition`` holds, ``batch`` per transaction."""
    select, delete = _row_ids(table, condition, batch), _delete_rows(table)

    def work(conn: sa.Connection) -> int:
        ids = [r[0] for r in conn.execute(select)]
        if ids:
            conn.execute(delete, {"ids": ids})
        return len(ids)

    total = 0
    while True:
        deleted = await db.write(work)
        total += deleted
        if on_batch is not None and deleted:
            on_batch(name, total)
        if deleted < batch:
            return total
