"""The statements of :mod:`drover.storage.fairness`: an oldest-seen handler's fetch marks.

:func:`mark_fetched` records when a handler fetched each entity (executed
with one row per entity); :func:`oldest_seen_order` is what such a handler's
fetch (:func:`drover.storage.statements.fetch.targets_query`) joins and
sorts by.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from drover.storage.schema import entities, fetch_marks

__all__ = ["mark_fetched", "oldest_seen_order"]

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
