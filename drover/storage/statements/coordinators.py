"""Coordinator rows and their claims: statements of the daemon's store, the tick store and
the stats.

A coordinator registers (:data:`INSERT_COORDINATOR`), beats
(:data:`HEARTBEAT`) and stops (:data:`STOPPED`); on SQLite a new one finds
the rows never marked stopped (:data:`NEWEST_RUNNING`, :data:`NOT_STOPPED`)
and marks them (:data:`MARK_STOPPED`). :func:`coordinators_alive` lists
them, :data:`CLAIMS_BY_OWNER` counts their claims (PostgreSQL). The solo lease
(PostgreSQL, docs/scaling.md): :data:`TAKE_SOLO` after :data:`REVOKE_LAPSED_SOLO`
under :data:`SOLO_LOCK`, :data:`RENEW_SOLO`, :data:`SOLO_HELD`, :data:`DROP_SOLO`,
and :data:`OTHERS_ALIVE`.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from drover.storage.schema import coordinators, entities

__all__ = [
    "CLAIMS_BY_OWNER",
    "DROP_SOLO",
    "HEARTBEAT",
    "INSERT_COORDINATOR",
    "MARK_STOPPED",
    "NEWEST_RUNNING",
    "NOT_STOPPED",
    "OTHERS_ALIVE",
    "RENEW_SOLO",
    "REVOKE_LAPSED_SOLO",
    "SOLO_HELD",
    "SOLO_LOCK",
    "STOPPED",
    "TAKE_SOLO",
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
    sa.update(t)
    .where(t.c.id == sa.bindparam("b_id"))
    .values(stopped_at=_NOW, heartbeat_at=_NOW, solo_token=None, solo_until=None)
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


# -- the solo lease (PostgreSQL) -------------------------------------------------------------

_other = t.alias("other")
_ALIVE_SINCE = sa.bindparam("b_alive_since", type_=sa.Double)

#: Serialises the coordinators taking the solo lease (a transaction-level advisory lock).
SOLO_LOCK = sa.select(sa.func.pg_advisory_xact_lock(sa.literal(0x64726F766572)))
#: Drop every solo lease that lapsed before ``:b_now``: its holder stopped renewing.
REVOKE_LAPSED_SOLO = (
    sa.update(t)
    .where(t.c.solo_token.is_not(None), t.c.solo_until < sa.bindparam("b_now", type_=sa.Double))
    .values(solo_token=None, solo_until=None)
)
#: How many other coordinators (not ``:b_id``) run, with a heartbeat since ``:b_alive_since``.
OTHERS_ALIVE = sa.select(sa.func.count()).where(
    t.c.id != sa.bindparam("b_id"), t.c.stopped_at.is_(None), t.c.heartbeat_at >= _ALIVE_SINCE
)
#: ``:b_id`` takes the solo lease ``:b_token`` until ``:b_until`` if no other coordinator
#: runs (heartbeat since ``:b_alive_since``) nor holds the lease; returns its id if so.
TAKE_SOLO = (
    sa.update(t)
    .where(
        t.c.id == sa.bindparam("b_id"),
        t.c.stopped_at.is_(None),
        ~sa.exists().where(
            _other.c.id != t.c.id,
            sa.or_(
                _other.c.solo_token.is_not(None),
                sa.and_(_other.c.stopped_at.is_(None), _other.c.heartbeat_at >= _ALIVE_SINCE),
            ),
        ),
    )
    .values(solo_token=sa.bindparam("b_token"), solo_until=sa.bindparam("b_until"))
    .returning(t.c.id)
)
#: Renew ``:b_id``'s solo lease ``:b_token`` until ``:b_until``; returns its id if still held.
RENEW_SOLO = (
    sa.update(t)
    .where(t.c.id == sa.bindparam("b_id"), t.c.solo_token == sa.bindparam("b_token"))
    .values(solo_until=sa.bindparam("b_until"))
    .returning(t.c.id)
)
#: ``:b_id``'s row if it still holds the solo lease ``:b_token``.
SOLO_HELD = sa.select(t.c.id).where(
    t.c.id == sa.bindparam("b_id"), t.c.solo_token == sa.bindparam("b_token")
)
#: ``:b_id`` gives its solo lease ``:b_token`` up.
DROP_SOLO = (
    sa.update(t)
    .where(t.c.id == sa.bindparam("b_id"), t.c.solo_token == sa.bindparam("b_token"))
    .values(solo_token=None, solo_until=None)
)
