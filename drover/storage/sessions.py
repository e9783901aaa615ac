"""Sessions and their kernels: creating them and reading them back."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import sqlalchemy as sa

from drover.kinds.sessions.values import SessionStatus, SessionWithKernels, UnknownSessionError
from drover.model.checks import MAX_NAME_LENGTH, text_problem
from drover.model.errors import InvalidSpecError, UnknownEntityError
from drover.model.ids import ID_LENGTH
from drover.storage._db import Database
from drover.storage._sql import driver_rows, ids_value, statement
from drover.storage.rows import sessions_with_kernels
from drover.storage.statements.sessions import (
    FETCH_ORDER,
    LATEST_ENTITY_ID,
    PREFIX_MATCHES,
    SESSION_BY_ID,
    SESSION_COUNTS_BY_RESULT,
    SESSION_COUNTS_BY_STATUS,
    SESSION_KIND,
    SESSION_ORDERS,
    ids_by_name,
    ids_by_prefix,
    kernels_of,
    sessions_filtered,
    sessions_in,
)
from drover.storage.statements.sessions import latest_messages as latest_messages_query

__all__ = [
    "FETCH_ORDER",
    "SESSION_ORDERS",
    "SessionFilter",
    "count_by_result",
    "count_by_status",
    "filtered_sessions",
    "get_session",
    "latest_entity_id",
    "list_sessions",
    "read_kernels_of",
    "resolve_session_id",
]


def read_kernels_of(conn: sa.Connection, ids: Sequence[str]) -> Sequence[Any]:
    """Kernel rows (:data:`~drover.storage.rows.KERNEL_COLUMNS`) of the sessions ``ids``, in
    no particular order.

    :func:`~drover.storage.rows.sessions_with_kernels` orders them; sorting a
    few kernels per session in Python is cheaper than a sort in SQL.
    """
    if not ids:
        return []
    postgres = conn.dialect.name == "postgresql"
    query: sa.Select[Any] = statement(("kernels-of", postgres), lambda: kernels_of(postgres))
    return driver_rows(conn, query, {"ids": ids_value(ids, postgres)})


def _sessions(
    conn: sa.Connection,
    query: sa.Select[Any],
    handler: str | None = None,
    params: dict[str, Any] | None = None,
) -> list[SessionWithKernels]:
    rows = (conn.execute(query, params)).all()
    kernel_rows = read_kernels_of(conn, [r[0] for r in rows])
    return sessions_with_kernels(rows, kernel_rows, handler)


async def get_session(db: Database, session_id: str) -> SessionWithKernels:
    """One session with its kernels, or UnknownSessionError."""
    params = {"b_id": session_id}
    found = await db.read(lambda conn: _sessions(conn, SESSION_BY_ID, params=params))
    if not found:
        raise UnknownSessionError(session_id)
    return found[0]


async def resolve_session_id(db: Database, ref: str, kind: str | None = SESSION_KIND) -> str:
    """The id of the one entity of ``kind`` (``None``: any) that ``ref`` names.

    The one resolver of every command and page that takes an id. In order:

    1. ``ref`` is an entity's id: that entity.
    2. ``ref`` is a name: the one **live** (not terminal) entity of that kind
       with that name; more than one live: ambiguous, the error lists them. No
       live one: the newest ended one (``drover logs NAME`` after it ended).
    3. ``ref`` is a prefix of one entity's id. Ids are time-ordered, so a
       session and the kernels created with it share their first characters: a
       prefix that matches one entity and only its own children means that entity.
    """
    if not ref or len(ref) > max(ID_LENGTH, MAX_NAME_LENGTH) or text_problem(ref):
        # Nothing longer than an id or a name names an entity; asking would only make
        # the database build a huge pattern (SQLite: "LIKE or GLOB pattern too complex").
        raise UnknownEntityError(ref, kind, what="id or name")
    by_prefix = ids_by_prefix(ref, kind)
    by_name = ids_by_name(ref, kind)

    def work(conn: sa.Connection) -> tuple[list[tuple[str, str | None]], list[Any]]:
        found = [(r[0], r[1]) for r in conn.execute(by_prefix)]
        if any(i == ref for i, _ in found):
            return found, []
        return found, list(conn.execute(by_name))

    found, named = await db.read(work)
    ids = [i for i, _ in found]
    if ref in ids:
        return ref
    if named:
        return _one_named(db, ref, kind, named)
    if not found:
        raise UnknownEntityError(ref, kind, what="id or name")
    parents = {i for i, parent in found if parent not in ids}
    if len(parents) == 1 and len(found) <= PREFIX_MATCHES:
        return parents.pop()
    what = kind or "entity"
    raise InvalidSpecError(
        f"{what} id prefix {ref!r} is ambiguous: it matches {', '.join(ids[:2])}, …"
    )


def _one_named(db: Database, name: str, kind: str | None, named: Sequence[Any]) -> str:
    """The one live entity among ``named`` (newest first), else the newest one."""
    live = [r for r in named if r[1] not in db.kinds or r[2] not in db.kinds[r[1]].terminal]
    if len(live) == 1:
        return str(live[0][0])
    if not live:
        return str(named[0][0])
    listed = ", ".join(f"{r[0]} ({r[1]} {r[2]})" for r in live[:5])
    more = ", …" if len(live) > 5 else ""
    kinds = {str(r[1]) for r in live}
    what = f"{kinds.pop()}s" if len(kinds) == 1 else "entities"
    raise InvalidSpecError(
        f"name {name!r} is ambiguous: {len(live)} live {what} have it: {listed}{more}; use an id"
    )


async def list_sessions(
    db: Database,
    *,
    statuses: Iterable[SessionStatus] | None = None,
    limit: int | None = None,
    order: str = "priority",
    name: str | None = None,
) -> list[SessionWithKernels]:
    """Sessions (with kernels), optionally filtered by status and name, in ``order``.

    ``order`` is a key of :data:`SESSION_ORDERS`; ``priority`` is fetch order;
    ``name`` a pattern (:func:`~drover.storage.statements.sessions.name_matches`).
    """
    wanted = None if statuses is None else [s.value for s in statuses]
    query = sessions_in(wanted, limit, order, name)
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
    #: Sessions with this result (``"-"``: no result yet).
    result: str | None = None
    #: Sessions with a relation to this entity id or to one of its children.
    linked_to: str | None = None


async def filtered_sessions(db: Database, f: SessionFilter) -> list[SessionWithKernels]:
    """Sessions (with kernels) matching ``f``, in the order ``f.sort`` names."""
    query = sessions_filtered(
        statuses=[s.value for s in f.statuses],
        name=f.name,
        handler=f.handler,
        since=f.since,
        until=f.until,
        limit=f.limit,
        sort=f.sort,
        result=f.result,
        linked_to=f.linked_to,
    )
    return await db.read(lambda conn: _sessions(conn, query))


async def latest_messages(db: Database, ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
    """``id -> (result, message)`` of each entity's latest history row (those that have one)."""
    if not ids:
        return {}

    def work(conn: sa.Connection) -> dict[str, tuple[str, str | None]]:
        postgres = conn.dialect.name == "postgresql"
        query = statement(("latest-messages", postgres), lambda: latest_messages_query(postgres))
        rows = conn.execute(query, {"ids": ids_value(ids, postgres)})
        return {r.entity_id: (str(r.result), r.message) for r in rows}

    return await db.read(work)


async def count_by_status(db: Database) -> dict[SessionStatus, int]:
    """The number of sessions in each status (statuses with none are omitted)."""

    def work(conn: sa.Connection) -> dict[SessionStatus, int]:
        return {
            SessionStatus(status): count for status, count in conn.execute(SESSION_COUNTS_BY_STATUS)
        }

    return await db.read(work)


async def count_by_result(db: Database) -> dict[str, int]:
    """The number of ended sessions per result (results with none are omitted)."""

    def work(conn: sa.Connection) -> dict[str, int]:
        return {str(result): int(n) for result, n in conn.execute(SESSION_COUNTS_BY_RESULT)}

    return await db.read(work)


async def latest_entity_id(db: Database) -> str | None:
    """The newest entity id (ids are time-ordered): one primary-key index lookup."""

    def work(conn: sa.Connection) -> str | None:
        value = (conn.execute(LATEST_ENTITY_ID)).scalar()
        return str(value) if value is not None else None

    return await db.read(work)
