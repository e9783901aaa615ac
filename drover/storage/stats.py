"""Figures read from the tick records and the entities: ``drover stats``, ``/metrics``,
handlers' errors, coordinators and their claims.

:class:`StatsReads` is one of the read-only services
:class:`~drover.storage.queries.Queries` is made of; aggregation happens in SQL,
with the statements here. (Tick records are written by the daemon's store.)
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import attrs
import sqlalchemy as sa

from drover.model.values import CoordinatorInfo
from drover.storage._service import Service
from drover.storage.rows import coordinator_from_row
from drover.storage.schema import entities, handler_ticks
from drover.storage.statements.coordinators import CLAIMS_BY_OWNER, coordinators_alive

__all__ = ["BUCKETS", "HandlerErrors", "MetricsSnapshot", "StatsReads"]

t = handler_ticks
e = entities

#: Upper bounds (seconds) of the tick duration histogram.
BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def _ticks_since(since: float | None) -> sa.Select[Any]:
    """``(handler, duration, counts)`` of the ticks started at or after ``since`` (``None``:
    every tick)."""
    query = sa.select(t.c.handler, t.c.duration, t.c.counts)
    if since is not None:
        query = query.where(t.c.started_at >= since)
    return query


#: Per handler whose ticks recorded an error since ``:since``: the handler, how many, the
#: id of the last one.
_ERRORS_PER_HANDLER = (
    sa.select(t.c.handler, sa.func.count(), sa.func.max(t.c.id))
    .where(t.c.started_at >= sa.bindparam("since"), t.c.error.is_not(None))
    .group_by(t.c.handler)
)
#: Id, start and error of the ticks ``:ids`` (a list).
_LAST_ERRORS = sa.select(t.c.id, t.c.started_at, t.c.error).where(
    t.c.id.in_(sa.bindparam("ids", expanding=True))
)

#: ``(status, number of entities)`` of the entities of kind ``:kind``, per status they are in.
_STATUS_COUNTS = (
    sa.select(e.c.status, sa.func.count())
    .where(e.c.kind == sa.bindparam("kind"))
    .group_by(e.c.status)
)
#: When the entity of kind ``:kind`` at ``:offset`` (newest first) among those in ``:status``
#: entered it.
_STATUS_AGE_AT = (
    sa.select(e.c.status_changed_at)
    .where(e.c.kind == sa.bindparam("kind"), e.c.status == sa.bindparam("status"))
    .order_by(e.c.status_changed_at.desc())
    .offset(sa.bindparam("offset"))
    .limit(1)
)

#: Per handler: ticks, their total duration, ticks with an error, then the cumulative number of
#: ticks per bucket of :data:`BUCKETS`.
_TICKS_PER_HANDLER = sa.select(
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
_COUNTS_PER_HANDLER = sa.select(t.c.handler, _COUNTS_TEXT, sa.func.count()).group_by(
    t.c.handler, _COUNTS_TEXT
)
#: ``(kind, status, number of entities)`` for every kind and status that has entities.
_ENTITIES_PER_STATUS = sa.select(e.c.kind, e.c.status, sa.func.count()).group_by(
    e.c.kind, e.c.status
)
#: Ended entities per ``(kind, result)`` (SUCCESS, CANCELLED, FAILURE).
_ENTITIES_PER_RESULT = (
    sa.select(e.c.kind, e.c.result, sa.func.count())
    .where(e.c.result.is_not(None))
    .group_by(e.c.kind, e.c.result)
)


@attrs.frozen
class HandlerErrors:
    """A handler whose ``execute`` raised lately: how often, when last, and what."""

    handler: str
    count: int
    last_at: float
    last_error: str


@attrs.frozen
class MetricsSnapshot:
    """Everything one scrape of ``/metrics`` reports."""

    ticks: dict[str, int]
    results: dict[tuple[str, str], int]
    #: handler -> (cumulative counts per bucket of BUCKETS, count, sum)
    durations: dict[str, tuple[list[int], int, float]]
    #: status -> entities of the default kind (``drover_sessions``), every status
    sessions: dict[str, int]
    #: handler -> ticks whose execute() raised
    errors: dict[str, int] = attrs.field(factory=dict)
    #: (kind, status) -> entities of every registered kind, every status (zeros included)
    entities: dict[tuple[str, str], int] = attrs.field(factory=dict)
    #: (kind, result) -> ended entities (SUCCESS, CANCELLED, FAILURE)
    results_by_kind: dict[tuple[str, str], int] = attrs.field(factory=dict)


class StatsReads(Service):
    """Tick records, entity counts and coordinators, aggregated in SQL."""

    async def tick_rows(self, since: float | None) -> list[tuple[str, float, dict[str, int]]]:
        """``(handler, duration, counts)`` of the recorded ticks since ``since``."""
        query = _ticks_since(since)

        def work(conn: sa.Connection) -> list[tuple[str, float, dict[str, int]]]:
            return [(r[0], float(r[1]), dict(r[2] or {})) for r in conn.execute(query)]

        return await self._db.read(work)

    async def handler_errors(self, since: float) -> list[HandlerErrors]:
        """Handlers whose ticks recorded an error since ``since``, most errors first."""

        def work(conn: sa.Connection) -> list[HandlerErrors]:
            found = (conn.execute(_ERRORS_PER_HANDLER, {"since": since})).all()
            if not found:
                return []
            ids = {"ids": [f[2] for f in found]}
            last = {row.id: row for row in conn.execute(_LAST_ERRORS, ids)}
            out = [
                HandlerErrors(h, int(n), float(last[lid].started_at), str(last[lid].error))
                for h, n, lid in found
            ]
            return sorted(out, key=lambda x: (-x.count, x.handler))

        return await self._db.read(work)

    async def status_ages(self, now: float, kind: str) -> dict[Any, tuple[int, float, float]]:
        """Per status of ``kind``: entities, and the p50 / p95 of the time they have held it."""
        statuses = self._db.kinds.members(kind)

        def work(conn: sa.Connection) -> dict[Any, tuple[int, float, float]]:
            out: dict[Any, tuple[int, float, float]] = {}
            for raw, n in (conn.execute(_STATUS_COUNTS, {"kind": kind})).all():
                status = statuses.get(raw, raw)
                ages = []
                # Percentiles by offset into the sorted column: no sorting in Python.
                for q in (0.5, 0.95):
                    # Newest first: the age at offset i grows with i.
                    offset = min(n - 1, int(q * (n - 1) + 0.5))
                    at = {"kind": kind, "status": str(status), "offset": offset}
                    value = (conn.execute(_STATUS_AGE_AT, at)).scalar()
                    ages.append(max(0.0, now - float(value)) if value is not None else 0.0)
                out[status] = (n, ages[0], ages[1])
            return out

        return await self._db.read(work)

    async def metrics_snapshot(self) -> MetricsSnapshot:
        """The figures ``/metrics`` reports, in one read transaction."""
        kinds = self._db.kinds

        def work(conn: sa.Connection) -> MetricsSnapshot:
            ticks: dict[str, int] = {}
            errors: dict[str, int] = {}
            durations: dict[str, tuple[list[int], int, float]] = {}
            for row in conn.execute(_TICKS_PER_HANDLER):
                handler, count, total = row[0], int(row[1]), float(row[2] or 0.0)
                ticks[handler] = count
                errors[handler] = int(row[3] or 0)
                durations[handler] = ([int(v or 0) for v in row[4:]], count, total)
            results: Counter[tuple[str, str]] = Counter()
            for handler, text, n in conn.execute(_COUNTS_PER_HANDLER):
                counts: Any = json.loads(text) if isinstance(text, str) else text
                for result, value in (counts or {}).items():
                    results[(handler, str(result))] += int(value) * int(n)
            found = {(str(k), str(s)): int(n) for k, s, n in conn.execute(_ENTITIES_PER_STATUS)}
            per_status = {
                (kind.name, status): found.get((kind.name, status), 0)
                for kind in kinds.values()
                for status in kind.status_names
            }
            ended = {(str(k), str(r)): int(n) for k, r, n in conn.execute(_ENTITIES_PER_RESULT)}
            default = kinds.default
            return MetricsSnapshot(
                results_by_kind=ended,
                ticks=ticks,
                results=dict(results),
                durations=durations,
                sessions={s: n for (k, s), n in per_status.items() if k == default},
                errors=errors,
                entities=per_status,
            )

        return await self._db.read(work)

    async def coordinators(self, *, alive_within: float | None = None) -> list[CoordinatorInfo]:
        """Coordinators, newest first; with ``alive_within``, only running ones that beat
        lately."""
        beat_since = None if alive_within is None else self._db.clock.time() - alive_within
        query = coordinators_alive(beat_since)
        return await self._db.read(
            lambda conn: [coordinator_from_row(r) for r in conn.execute(query)]
        )

    async def claims_by_owner(self) -> dict[str, int]:
        """How many entities each coordinator holds an unexpired claim on now (PostgreSQL)."""
        if not self._db.postgres:
            return {}
        params = {"now": self._db.clock.time()}

        def work(conn: sa.Connection) -> dict[str, int]:
            return {str(owner): int(n) for owner, n in conn.execute(CLAIMS_BY_OWNER, params)}

        return await self._db.read(work)
