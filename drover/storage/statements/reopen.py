"""The statements of :mod:`drover.storage.reopen`: what a reopen reads first, and clears."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from drover.storage.schema import entities

__all__ = ["clear_status_info", "entity_and_parent"]

e = entities


def entity_and_parent(postgres: bool) -> sa.Select[Any]:
    """Kind and status of the entity ``:b_id``, and its parent's id and status (locked on
    PostgreSQL)."""
    parent = entities.alias("parent")
    query = (
        sa.select(e.c.kind, e.c.status, parent.c.id, parent.c.status)
        .select_from(e.outerjoin(parent, parent.c.id == e.c.parent_id))
        .where(e.c.id == sa.bindparam("b_id"))
    )
    return query.with_for_update(of=e) if postgres else query


def clear_status_info() -> sa.Update:
    """Clear the ``status_info`` of the entity ``:b_id``: it said how the entity had ended."""
    return e.update().where(e.c.id == sa.bindparam("b_id")).values(status_info=None)
