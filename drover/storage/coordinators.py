"""Coordinator processes: heartbeats, clean stops, and who is alive."""

from __future__ import annotations

import sqlalchemy as sa

from drover.model.values import CoordinatorInfo
from drover.storage._db import Database
from drover.storage.rows import coordinator_from_row
from drover.storage.schema import coordinators

__all__ = ["coordinator_stopped", "heartbeat", "list_coordinators", "register_coordinator"]

t = coordinators


async def register_coordinator(db: Database, info: CoordinatorInfo) -> None:
    """Insert a coordinator's row; its start and first heartbeat are now."""
    now = db.clock.time()
    row = {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "started_at": now,
        "heartbeat_at": now,
        "version": info.version,
        "stopped_at": None,
    }

    def work(conn: sa.Connection) -> None:
        conn.execute(sa.insert(t).values(**row))

    await db.write(work)


async def heartbeat(db: Database, coordinator_id: str) -> None:
    """Refresh a coordinator's ``heartbeat_at``."""
    now = db.clock.time()

    def work(conn: sa.Connection) -> None:
        conn.execute(sa.update(t).where(t.c.id == coordinator_id).values(heartbeat_at=now))

    await db.write(work)


async def coordinator_stopped(db: Database, coordinator_id: str) -> None:
    """Mark a coordinator as cleanly stopped."""
    now = db.clock.time()

    def work(conn: sa.Connection) -> None:
        conn.execute(
            sa.update(t).where(t.c.id == coordinator_id).values(stopped_at=now, heartbeat_at=now)
        )

    await db.write(work)


async def list_coordinators(
    db: Database, *, alive_within: float | None = None
) -> list[CoordinatorInfo]:
    """Coordinators, newest first; with ``alive_within``, only running ones that beat lately."""
    query = sa.select(t).order_by(t.c.started_at.desc())
    if alive_within is not None:
        query = query.where(
            t.c.stopped_at.is_(None), t.c.heartbeat_at >= db.clock.time() - alive_within
        )

    def work(conn: sa.Connection) -> list[CoordinatorInfo]:
        return [coordinator_from_row(r) for r in conn.execute(query)]

    return await db.read(work)
