"""The statements of :mod:`drover.storage.ending`: what a termination request reads first.

:func:`entity_states` reads the requested entities (locked on PostgreSQL),
and :data:`PARENTS_AMONG` says which of them have children: a kind's
termination rule may depend on it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from drover.storage.schema import entities

__all__ = ["PARENTS_AMONG", "entity_states"]

e = entities


def entity_states(postgres: bool) -> sa.Select[Any]:
    """Id, kind and status of the entities among ``:ids`` (a list), locked on PostgreSQL."""
    query = sa.select(e.c.id, e.c.kind, e.c.status).where(
        e.c.id.in_(sa.bindparam("ids", expanding=True))
    )
    return query.with_for_update() if postgres else query


#: The entities among ``:ids`` (a list) that are the parent of some entity.
PARENTS_AMONG = (
    sa.select(e.c.parent_id)
    .where(e.c.parent_id.in_(sa.bindparam("ids", expanding=True)))
    .distinct()
)
