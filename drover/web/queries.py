"""The dashboard's own reads: sessions with filters the CLI does not need."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from drover.model.status import SessionStatus
from drover.model.values import SessionWithKernels
from drover.storage.repository import Repository
from drover.storage.schema import scheduling_history, sessions

__all__ = ["SessionFilter", "filtered_sessions"]


@attrs.frozen
class SessionFilter:
    """The overview's filters; every one that is set must hold."""

    statuses: tuple[SessionStatus, ...] = ()
    #: A case-insensitive substring of the session's name.
    name: str | None = None
    #: Sessions whose latest scheduling history row was written by this handler.
    handler: str | None = None
    #: Created at or after / at or before (epoch seconds).
    since: float | None = None
    until: float | None = None
    limit: int = 100


def _query(f: SessionFilter) -> sa.Select[tuple[object, ...]]:
    query = sa.select(sessions).order_by(
        sessions.c.priority.desc(), sessions.c.created_at, sessions.c.id
    )
    if f.statuses:
        query = query.where(sessions.c.status.in_([s.value for s in f.statuses]))
    if f.name:
        pattern = f.name.lower()
        query = query.where(
            sa.func.lower(sessions.c.name).contains(pattern, autoescape=True),
        )
    if f.handler:
        h = scheduling_history
        latest = (
            sa.select(h.c.session_id, sa.func.max(h.c.id).label("latest_id"))
            .group_by(h.c.session_id)
            .subquery()
        )
        by_handler = (
            sa.select(latest.c.session_id)
            .join(h, h.c.id == latest.c.latest_id)
            .where(h.c.handler == f.handler)
        )
        query = query.where(sessions.c.id.in_(by_handler))
    if f.since is not None:
        query = query.where(sessions.c.created_at >= f.since)
    if f.until is not None:
        query = query.where(sessions.c.created_at <= f.until)
    return query.limit(f.limit)


async def filtered_sessions(repo: Repository, f: SessionFilter) -> list[SessionWithKernels]:
    """Sessions (with kernels) matching ``f``, highest priority and oldest first (as the CLI)."""

    async def work(conn: AsyncConnection) -> list[SessionWithKernels]:
        rows: Sequence[object] = (await conn.execute(_query(f))).all()
        # The repository turns rows into values the same way for every listing.
        return await repo._with_kernels(conn, rows)

    return await repo.read(work)
