"""Fair fetches: when a handler with ``HandlerOptions(order="oldest-seen")`` saw each entity.

Such a handler's fetch sorts its candidates by the time it last fetched them
(never fetched first) and then marks the batch it took, in the same
transaction. Only these handlers pay for it: one outer join and a sort of
their candidates, one upsert per fetched entity, and a sweep that drops
the marks of entities no longer among the handler's candidates (up to 500 a
fetch), so the marks stay about as many as the candidates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from drover.storage._sql import bounded_statement, statement
from drover.storage.schema import entities, fetch_marks

__all__ = ["OLDEST_SEEN", "mark"]


#: Marks of gone entities dropped per fetch, at most.
FORGET_BATCH = 500

m = fetch_marks


def oldest_seen_order(query: sa.Select[Any]) -> tuple[sa.Select[Any], sa.ColumnElement[Any]]:
    """``query`` joined to ``:handler``'s marks, and the sort key (never fetched first)."""
    joined = query.outerjoin(
        m,
        sa.and_(
            m.c.entity_id == entities.c.id,
            m.c.handler == sa.bindparam("mark_handler", type_=sa.String),
        ),
    )
    return joined, sa.func.coalesce(m.c.seen_at, -1.0)


def mark_fetched(postgres: bool) -> sa.Executable:
    """``seen_at = :seen_at`` for (``:handler``, ``:entity_id``), inserted or updated."""
    # The dialect's own insert (ON CONFLICT), imported only for the database in use.
    if postgres:
        from sqlalchemy.dialects import postgresql

        stmt: Any = postgresql.insert(m)
    else:
        from sqlalchemy.dialects import sqlite

        stmt = sqlite.insert(m)
    stmt = stmt.values(
        handler=sa.bindparam("handler"),
        entity_id=sa.bindparam("entity_id"),
        seen_at=sa.bindparam("seen_at"),
    )
    upsert: sa.Executable = stmt.on_conflict_do_update(
        index_elements=[m.c.handler, m.c.entity_id], set_={"seen_at": stmt.excluded.seen_at}
    )
    return upsert


def forget_gone(kind: str, statuses: frozenset[str]) -> sa.Delete:
    """Drop up to :data:`FORGET_BATCH` of ``:handler``'s marks on entities that are no
    longer of ``kind`` in ``statuses`` (they left the handler's statuses, or are gone)."""
    e = entities
    gone = (
        sa.select(m.c.entity_id)
        .outerjoin(e, e.c.id == m.c.entity_id)
        .where(
            m.c.handler == sa.bindparam("handler", type_=sa.String),
            sa.or_(
                e.c.id.is_(None),
                e.c.kind != kind,
                e.c.status.not_in(sorted(statuses)),
            ),
        )
        .limit(FORGET_BATCH)
    )
    return sa.delete(m).where(
        m.c.handler == sa.bindparam("handler", type_=sa.String), m.c.entity_id.in_(gone)
    )


#: The fetch order that reads and writes the marks.
OLDEST_SEEN = "oldest-seen"


def mark(
    conn: sa.Connection,
    handler: str,
    ids: Sequence[str],
    now: float,
    kind: str,
    statuses: frozenset[str],
) -> None:
    """Record that ``handler`` (of ``kind`` in ``statuses``) fetched ``ids`` at ``now``,
    inside the fetch's transaction, and forget marks of entities it can no longer fetch."""
    if not ids:
        return
    postgres = conn.dialect.name == "postgresql"
    stmt = statement(("mark-fetched", postgres), lambda: mark_fetched(postgres))
    conn.execute(stmt, [{"handler": handler, "entity_id": i, "seen_at": now} for i in ids])
    sweep = bounded_statement(("forget-marks", kind, statuses), lambda: forget_gone(kind, statuses))
    conn.execute(sweep, {"handler": handler})
