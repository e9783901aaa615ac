"""Sessions and their kernels: creating them and reading them back."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import sqlalchemy as sa

from drover.model.errors import InvalidSpecError, UnknownEntityError, UnknownSessionError
from drover.model.status import SessionStatus
from drover.model.values import SessionWithKernels
from drover.storage._db import Database
from drover.storage._sql import ids_param, ids_value, statement
from drover.storage.rows import (
    ENTITY_COLUMNS,
    KERNEL_COLUMNS,
    sessions_with_kernels,
)
from drover.storage.schema import entities, scheduling_history

__all__ = [
    "FETCH_ORDER",
    "SESSION_ORDERS",
    "SessionFilter",
    "count_by_status",
    "filtered_sessions",
    "get_session",
    "latest_entity_id",
    "list_sessions",
    "read_kernels_of",
    "resolve_session_id",
]

e = entities
# This module reads the session kind in its own spelling (SessionWithKernels).
SESSION_KIND = "session"
#: The order handlers see sessions in: highest priority, then oldest.
FETCH_ORDER = (e.c.priority.desc(), e.c.created_at, e.c.id)
#: Orders a person may list sessions in (``drover sessions --sort``, the dashboard).
SESSION_ORDERS: dict[str, tuple[Any, ...]] = {
    "newest": (e.c.created_at.desc(), e.c.id.desc()),
    "oldest": (e.c.created_at, e.c.id),
    "priority": FETCH_ORDER,
}


def _kernels_of(postgres: bool) -> sa.Select[Any]:
    return sa.select(*KERNEL_COLUMNS).where(ids_param(e.c.parent_id, "ids", postgres))


def read_kernels_of(conn: sa.Connection, ids: Sequence[str]) -> Sequence[Any]:
    """Kernel rows (:data:`KERNEL_COLUMNS`) of the sessions ``ids``, in no particular order.

    :func:`~drover.storage.rows.sessions_with_kernels` orders them; sorting a
    few kernels per session in Python is cheaper than a sort in SQL.
    """
    if not ids:
        return []
    postgres = conn.dialect.name == "postgresql"
    query: sa.Select[Any] = statement(("kernels-of", postgres), lambda: _kernels_of(postgres))
    rows: Sequence[Any] = (conn.execute(query, {"ids": ids_value(ids, postgres)})).all()
    return rows


def _sessions(
    conn: sa.Connection, query: sa.Select[Any], handler: str | None = None
) -> list[SessionWithKernels]:
    rows = (conn.execute(query)).all()
    kernel_rows = read_kernels_of(conn, [r[0] for r in rows])
    return sessions_with_kernels(rows, kernel_rows, handler)


async def get_session(db: Database, session_id: str) -> SessionWithKernels:
    """One session with its kernels, or UnknownSessionError."""
    query = sa.select(*ENTITY_COLUMNS).where(e.c.id == session_id, e.c.kind == SESSION_KIND)
    found = await db.read(lambda conn: _sessions(conn, query))
    if not found:
        raise UnknownSessionError(session_id)
    return found[0]


async def resolve_session_id(db: Database, prefix: str, kind: str | None = SESSION_KIND) -> str:
    """The id of the one session (entity of ``kind``; ``None``: any) whose id starts with
    ``prefix`` (or equals it)."""
    if not prefix:
        raise UnknownEntityError(prefix, kind)
    query = sa.select(e.c.id).where(e.c.id.startswith(prefix, autoescape=True))
    if kind is not None:
        query = query.where(e.c.kind == kind)
    query = query.order_by(e.c.id).limit(3)

    def work(conn: sa.Connection) -> list[str]:
        return [r[0] for r in conn.execute(query)]

    found = await db.read(work)
    if prefix in found:
        return prefix
    if len(found) == 1:
        return found[0]
    if not found:
        raise UnknownEntityError(prefix, kind)
    what = kind or "entity"
    raise InvalidSpecError(
        f"{what} id prefix {prefix!r} is ambiguous: it matches {', '.join(found[:2])}, …"
    )


async def list_sessions(
    db: Database,
    *,
    statuses: Iterable[SessionStatus] | None = None,
    limit: int | None = None,
    order: str = "priority",
) -> list[SessionWithKernels]:
    """Sessions (with kernels), optionally filtered by status, in ``order``.

    ``order`` is a key of :data:`SESSION_ORDERS`; ``priority`` is fetch order.
    """
    query = (
        sa.select(*ENTITY_COLUMNS).where(e.c.kind == SESSION_KIND).order_by(*SESSION_ORDERS[order])
    )
    if statuses is not None:
        query = query.where(e.c.status.in_([s.value for s in statuses]))
    if limit is not None:
        query = query.limit(limit)
    return await db.read(lambda conn: _sessions(conn, query))


@attrs.frozen
class SessionFilter:
    """The dashboard's session filters; every one that is set must hold."""

    statuses: tuple[SessionStatus, ...] = ()
    #: A case-insensitive substring of the session's name.
    name: str | None = None
    #: Sessions whose latest scheduling history row was written by this handler.
    handler: str | None = None
    #: Created at or after / at or before (epoch seconds).
    since: float | None = None
    until: float | None = None
    limit: int = 100
    #: A key of :data:`SESSION_ORDERS`.
    sort: str = "newest"


async def filtered_sessions(db: Database, f: SessionFilter) -> list[SessionWithKernels]:
    """Sessions (with kernels) matching ``f``, in the order ``f.sort`` names."""
    query = (
        sa.select(*ENTITY_COLUMNS).where(e.c.kind == SESSION_KIND).order_by(*SESSION_ORDERS[f.sort])
    )
    if f.statuses:
        query = query.where(e.c.status.in_([s.value for s in f.statuses]))
    if f.name:
        query = query.where(sa.func.lower(e.c.name).contains(f.name.lower(), autoescape=True))
    if f.handler:
        h = scheduling_history
        latest = (
            sa.select(h.c.entity_id, sa.func.max(h.c.id).label("latest_id"))
            .group_by(h.c.entity_id)
            .subquery()
        )
        by_handler = (
            sa.select(latest.c.entity_id)
            .join(h, h.c.id == latest.c.latest_id)
            .where(h.c.handler == f.handler)
        )
        query = query.where(e.c.id.in_(by_handler))
    if f.since is not None:
        query = query.where(e.c.created_at >= f.since)
    if f.until is not None:
        query = query.where(e.c.created_at <= f.until)
    query = query.limit(f.limit)
    return await db.read(lambda conn: _sessions(conn, query))


async def count_by_status(db: Database) -> dict[SessionStatus, int]:
    """The number of sessions in each status (statuses with none are omitted)."""
    query = (
        sa.select(e.c.status, sa.func.count()).where(e.c.kind == SESSION_KIND).group_by(e.c.status)
    )

    def work(conn: sa.Connection) -> dict[SessionStatus, int]:
        return {SessionStatus(status): count for status, count in conn.execute(query)}

    return await db.read(work)


async def latest_entity_id(db: Database) -> str | None:
    """The newest entity id (ids are time-ordered): one primary-key index lookup."""

    def work(conn: sa.Connection) -> str | None:
        value = (conn.execute(sa.select(sa.func.max(e.c.id)))).scalar()
        return str(value) if value is not None else None

    return await db.read(work)
