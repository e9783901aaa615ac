"""The statements of :mod:`drover.storage.fairness`: an oldest-seen handler's fetch marks.

:func:`mark_fetched` records when a handler fetched each entity (executed
with one row per entity); :func:`oldest_seen_order` is what such a handler's
fetch (:func:`drover.storage.statements.fetch.targets_query`) joins and
sorts by; :func:`forget_gone` drops the marks of entities that are no longer
its candidates.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from drover.storage.schema import entities, fetch_marks

__all__ = ["FORGET_BATCH", "forget_gone", "mark_fetched", "oldest_seen_order"]

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
    insert = (postgresql.insert if postgres else sqlite.insert)(m)
    stmt = insert.values(
        handler=sa.bindparam("handler"),
        entity_id=sa.bindparam("entity_id"),
        seen_at=sa.bindparam("seen_at"),
    )
    return stmt.on_conflict_do_update(
        index_elements=[m.c.handler, m.c.entity_id], set_={"seen_at": stmt.excluded.seen_at}
    )


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
