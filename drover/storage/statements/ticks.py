"""The statements of :mod:`drover.storage.ticks`: tick records and the figures read from them.

Ticks are recorded with :data:`INSERT_TICKS` and read back by
:func:`ticks_since`, :data:`ERRORS_PER_HANDLER` and :data:`LAST_ERRORS`;
:data:`STATUS_COUNTS` and :data:`STATUS_AGE_AT` give ``drover stats`` its
ages; one scrape of ``/metrics`` reads :data:`TICKS_PER_HANDLER` (with the
duration histogram's :data:`BUCKETS`), :data:`COUNTS_PER_HANDLER` and
:data:`ENTITIES_PER_STATUS`, :data:`ENTITIES_PER_RESULT`. Aggregation happens in SQL.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from drover.storage.schema import entities, handler_ticks

__all__ = [
    "BUCKETS",
    "COUNTS_PER_HANDLER",
    "ENTITIES_PER_RESULT",
    "ENTITIES_PER_STATUS",
    "ERRORS_PER_HANDLER",
    "INSERT_TICKS",
    "LAST_ERRORS",
    "STATUS_AGE_AT",
    "STATUS_COUNTS",
    "TICKS_PER_HANDLER",
    "ticks_since",
]

t = handler_ticks
e = entities

#: Upper bounds (seconds) of the tick duration histogram.
BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

#: Tick summaries (executed with many rows).
INSERT_TICKS = sa.insert(t)


def ticks_since(since: float | None) -> sa.Select[Any]:
    """``(handler, duration, counts)`` of the ticks started at or after ``since`` (``None``:
    every tick)."""
    query = sa.select(t.c.handler, t.c.duration, t.c.counts)
    if since is not None:
        query = query.where(t.c.started_at >= since)
    return query


#: Per handler whose ticks recorded an error since ``:since``: the handler, how many, the
#: id of the last one.
ERRORS_PER_HANDLER = (
    sa.select(t.c.handler, sa.func.count(), sa.func.max(t.c.id))
    .where(t.c.started_at >= sa.bindparam("since"), t.c.error.is_not(None))
    .group_by(t.c.handler)
)
#: Id, start and error of the ticks ``:ids`` (a list).
LAST_ERRORS = sa.select(t.c.id, t.c.started_at, t.c.error).where(
    t.c.id.in_(sa.bindparam("ids", expanding=True))
)

#: ``(status, number of entities)`` of the entities of kind ``:kind``, per status they are in.
STATUS_COUNTS = (
    sa.select(e.c.status, sa.func.count())
    .where(e.c.kind == sa.bindparam("kind"))
    .group_by(e.c.status)
)
#: When the entity of kind ``:kind`` at ``:offset`` (newest first) among those in ``:status``
#: entered it.
STATUS_AGE_AT = (
    sa.select(e.c.status_changed_at)
    .where(e.c.kind == sa.bindparam("kind"), e.c.status == sa.bindparam("status"))
    .order_by(e.c.status_changed_at.desc())
    .offset(sa.bindparam("offset"))
    .limit(1)
)

#: Per handler: ticks, their total duration, ticks with an error, then the cumulative number of
#: ticks per bucket of :data:`BUCKETS`.
TICKS_PER_HANDLER = sa.select(
    t.c.handler,
    sa.func.count(),
    sa.func.sum(t.c.duration),
    sa.func.sum(sa.case((t.c.error.is_not(None), 1), else_=0)),
    *(
        sa.func.sum(sa.case((t.c.duration <= bound, 1), else_=0)).label(f"b{i}")
        for i, bound in enumerate(BUCKETS)
    ),
).group_by(t.c.handler)

# counts is a small JSON object; identical objects are grouped in SQL.
_COUNTS_TEXT = sa.cast(t.c.counts, sa.Text)
#: Per handler and distinct ``counts`` (as JSON text): how many ticks recorded it.
COUNTS_PER_HANDLER = sa.select(t.c.handler, _COUNTS_TEXT, sa.func.count()).group_by(
    t.c.handler, _COUNTS_TEXT
)
#: ``(kind, status, number of entities)`` for every kind and status that has entities.
ENTITIES_PER_STATUS = sa.select(e.c.kind, e.c.status, sa.func.count()).group_by(
    e.c.kind, e.c.status
)
#: Ended entities per ``(kind, result)`` (SUCCESS, CANCELLED, FAILURE).
ENTITIES_PER_RESULT = (
    sa.select(e.c.kind, e.c.result, sa.func.count())
    .where(e.c.result.is_not(None))
    .group_by(e.c.kind, e.c.result)
)
