"""The statements of :mod:`drover.storage.coordinators`: coordinator rows and their claims.

A coordinator registers (:data:`INSERT_COORDINATOR`), beats
(:data:`HEARTBEAT`) and stops (:data:`STOPPED`); on SQLite a new one finds
the rows never marked stopped (:data:`NEWEST_RUNNING`, :data:`NOT_STOPPED`)
and marks them (:data:`MARK_STOPPED`). :func:`coordinators_alive` lists
them, :data:`CLAIMS_BY_OWNER` counts their claims (PostgreSQL).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from drover.storage.schema import coordinators, entities

__all__ = [
    "CLAIMS_BY_OWNER",
    "HEARTBEAT",
    "INSERT_COORDINATOR",
    "MARK_STOPPED",
    "NEWEST_RUNNING",
    "NOT_STOPPED",
    "STOPPED",
    "coordinators_alive",
]

t = coordinators
e = entities

#: The coordinators never marked stopped, the latest heartbeat first.
NEWEST_RUNNING = sa.select(t).where(t.c.stopped_at.is_(None)).order_by(t.c.heartbeat_at.desc())
#: The coordinators never marked stopped.
NOT_STOPPED = sa.select(t).where(t.c.stopped_at.is_(None))
#: ``stopped_at = :b_now`` of the coordinators ``:ids`` (a list).
MARK_STOPPED = (
    sa.update(t)
    .where(t.c.id.in_(sa.bindparam("ids", expanding=True)))
    .values(stopped_at=sa.bindparam("b_now"))
)
#: A coordinator's row.
INSERT_COORDINATOR = sa.insert(t)
#: ``heartbeat_at = :b_now`` of the coordinator ``:b_id``.
HEARTBEAT = (
    sa.update(t).where(t.c.id == sa.bindparam("b_id")).values(heartbeat_at=sa.bindparam("b_now"))
)
#: The coordinator ``:b_id`` stopped cleanly at ``:b_now`` (its last heartbeat too).
_NOW = sa.bindparam("b_now", type_=t.c.stopped_at.type)
STOPPED = (
    sa.update(t).where(t.c.id == sa.bindparam("b_id")).values(stopped_at=_NOW, heartbeat_at=_NOW)
)


def coordinators_alive(beat_since: float | None) -> sa.Select[Any]:
    """Coordinators, newest first; with ``beat_since``, only those not stopped whose
    heartbeat is at or after it."""
    query = sa.select(t).order_by(t.c.started_at.desc())
    if beat_since is not None:
        query = query.where(t.c.stopped_at.is_(None), t.c.heartbeat_at >= beat_since)
    return query


#: Unexpired claims (at ``:now``) per coordinator id (PostgreSQL).
CLAIMS_BY_OWNER = (
    sa.select(e.c.claim_owner, sa.func.count())
    .where(e.c.claim_expires > sa.bindparam("now"))
    .group_by(e.c.claim_owner)
)
