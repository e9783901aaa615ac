"""Tick records and the figures read from them: stats, metrics and handler errors."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import sqlalchemy as sa

from drover.kinds.sessions.values import SessionStatus
from drover.storage._db import Database
from drover.storage.statements.sessions import SESSION_KIND
from drover.storage.statements.ticks import (
    BUCKETS,
    COUNTS_PER_HANDLER,
    ENTITIES_PER_RESULT,
    ENTITIES_PER_STATUS,
    ERRORS_PER_HANDLER,
    INSERT_TICKS,
    LAST_ERRORS,
    STATUS_AGE_AT,
    STATUS_COUNTS,
    TICKS_PER_HANDLER,
    ticks_since,
)

__all__ = [
    "BUCKETS",
    "HandlerErrors",
    "MetricsSnapshot",
    "handler_errors",
    "metrics_snapshot",
    "record_ticks",
    "status_ages",
    "tick_rows",
]


async def record_ticks(db: Database, rows: Sequence[Mapping[str, Any]]) -> None:
    """Store tick summaries (handler, started_at, duration, fetched, counts, error)."""
    if not rows:
        return
    values = [{"error": None, **row} for row in rows]

    def work(conn: sa.Connection) -> None:
        conn.execute(INSERT_TICKS, values)

    await db.write(work)


async def tick_rows(db: Database, since: float | None) -> list[tuple[str, float, dict[str, int]]]:
    """``(handler, duration, counts)`` of the recorded ticks since ``since``."""
    query = ticks_since(since)

    def work(conn: sa.Connection) -> list[tuple[str, float, dict[str, int]]]:
        return [(r[0], float(r[1]), dict(r[2] or {})) for r in conn.execute(query)]

    return await db.read(work)


@attrs.frozen
class HandlerErrors:
    """A handler whose ``execute`` raised lately: how often, when last, and what."""

    handler: str
    count: int
    last_at: float
    last_error: str


async def handler_errors(db: Database, since: float) -> list[HandlerErrors]:
    """Handlers whose ticks recorded an error since ``since``, most errors first."""

    def work(conn: sa.Connection) -> list[HandlerErrors]:
        found = (conn.execute(ERRORS_PER_HANDLER, {"since": since})).all()
        if not found:
            return []
        last = {row.id: row for row in conn.execute(LAST_ERRORS, {"ids": [f[2] for f in found]})}
        out = [
            HandlerErrors(handler, int(count), float(last[lid].started_at), str(last[lid].error))
            for handler, count, lid in found
        ]
        return sorted(out, key=lambda x: (-x.count, x.handler))

    return await db.read(work)


async def status_ages(
    db: Database, now: float, kind: str = SESSION_KIND
) -> dict[Any, tuple[int, float, float]]:
    """Per status of ``kind``: entities, and the p50 / p95 of the time they have held it (s)."""
    statuses = db.kinds.members(kind)

    def work(conn: sa.Connection) -> dict[Any, tuple[int, float, float]]:
        out: dict[Any, tuple[int, float, float]] = {}
        for raw, n in (conn.execute(STATUS_COUNTS, {"kind": kind})).all():
            status = statuses.get(raw, raw)
            ages = []
            # Percentiles by offset into the sorted column: no sorting in Python.
            for q in (0.5, 0.95):
                # Newest first: the age at offset i grows with i.
                offset = min(n - 1, int(q * (n - 1) + 0.5))
                at = {"kind": kind, "status": str(status), "offset": offset}
                value = (conn.execute(STATUS_AGE_AT, at)).scalar()
                ages.append(max(0.0, now - float(value)) if value is not None else 0.0)
            out[status] = (n, ages[0], ages[1])
        return out

    return await db.read(work)


@attrs.frozen
class MetricsSnapshot:
    """Everything one scrape of ``/metrics`` reports."""

    ticks: dict[str, int]
    results: dict[tuple[str, str], int]
    #: handler -> (cumulative counts per bucket of BUCKETS, count, sum)
    durations: dict[str, tuple[list[int], int, float]]
    sessions: dict[str, int]
    #: handler -> ticks whose execute() raised
    errors: dict[str, int] = attrs.field(factory=dict)
    #: (kind, status) -> entities of every registered kind, every status (zeros included)
    entities: dict[tuple[str, str], int] = attrs.field(factory=dict)
    #: (kind, result) -> ended entities (SUCCESS, CANCELLED, FAILURE)
    results_by_kind: dict[tuple[str, str], int] = attrs.field(factory=dict)


async def metrics_snapshot(db: Database) -> MetricsSnapshot:
    """Read the figures in one read transaction; aggregation happens in SQL."""

    def work(conn: sa.Connection) -> MetricsSnapshot:
        ticks: dict[str, int] = {}
        errors: dict[str, int] = {}
        durations: dict[str, tuple[list[int], int, float]] = {}
        for row in conn.execute(TICKS_PER_HANDLER):
            handler, count, total = row[0], int(row[1]), float(row[2] or 0.0)
            ticks[handler] = count
            errors[handler] = int(row[3] or 0)
            durations[handler] = ([int(v or 0) for v in row[4:]], count, total)
        results: Counter[tuple[str, str]] = Counter()
        for handler, text, n in conn.execute(COUNTS_PER_HANDLER):
            counts: Any = json.loads(text) if isinstance(text, str) else text
            for result, value in (counts or {}).items():
                results[(handler, str(result))] += int(value) * int(n)
        found = {(str(k), str(s)): int(n) for k, s, n in conn.execute(ENTITIES_PER_STATUS)}
        entities = {
            (kind.name, status): found.get((kind.name, status), 0)
            for kind in db.kinds.values()
            for status in kind.status_names
        }
        ended = {(str(k), str(r)): int(n) for k, r, n in conn.execute(ENTITIES_PER_RESULT)}
        return MetricsSnapshot(
            results_by_kind=ended,
            ticks=ticks,
            results=dict(results),
            durations=durations,
            sessions={s.value: found.get((SESSION_KIND, s.value), 0) for s in SessionStatus},
            errors=errors,
            entities=entities,
        )

    return await db.read(work)
