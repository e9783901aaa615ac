"""Tick records and the figures read from them: stats, metrics and handler errors."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import sqlalchemy as sa

from drover.model.status import SessionStatus
from drover.storage._db import Database
from drover.storage.schema import entities, handler_ticks
from drover.storage.sessions import SESSION_KIND

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

t = handler_ticks
e = entities

#: Upper bounds (seconds) of the tick duration histogram.
BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


async def record_ticks(db: Database, rows: Sequence[Mapping[str, Any]]) -> None:
    """Store tick summaries (handler, started_at, duration, fetched, counts, error)."""
    if not rows:
        return
    values = [{"error": None, **row} for row in rows]

    def work(conn: sa.Connection) -> None:
        conn.execute(sa.insert(t), values)

    await db.write(work)


async def tick_rows(db: Database, since: float | None) -> list[tuple[str, float, dict[str, int]]]:
    """``(handler, duration, counts)`` of the recorded ticks since ``since``."""
    query = sa.select(t.c.handler, t.c.duration, t.c.counts)
    if since is not None:
        query = query.where(t.c.started_at >= since)

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
    per_handler = (
        sa.select(t.c.handler, sa.func.count(), sa.func.max(t.c.id))
        .where(t.c.started_at >= since, t.c.error.is_not(None))
        .group_by(t.c.handler)
    )

    def work(conn: sa.Connection) -> list[HandlerErrors]:
        found = (conn.execute(per_handler)).all()
        if not found:
            return []
        last = {
            row.id: row
            for row in conn.execute(
                sa.select(t.c.id, t.c.started_at, t.c.error).where(
                    t.c.id.in_([f[2] for f in found])
                )
            )
        }
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
    counts_query = (
        sa.select(e.c.status, sa.func.count()).where(e.c.kind == kind).group_by(e.c.status)
    )
    statuses = db.kinds.members(kind)

    def work(conn: sa.Connection) -> dict[Any, tuple[int, float, float]]:
        out: dict[Any, tuple[int, float, float]] = {}
        for raw, n in (conn.execute(counts_query)).all():
            status = statuses.get(raw, raw)
            ages = []
            # Percentiles by offset into the sorted column: no sorting in Python.
            for q in (0.5, 0.95):
                # Newest first: the age at offset i grows with i.
                offset = min(n - 1, int(q * (n - 1) + 0.5))
                value = (
                    conn.execute(
                        sa.select(e.c.status_changed_at)
                        .where(e.c.kind == kind, e.c.status == str(status))
                        .order_by(e.c.status_changed_at.desc())
                        .offset(offset)
                        .limit(1)
                    )
                ).scalar()
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


async def metrics_snapshot(db: Database) -> MetricsSnapshot:
    """Read the figures in one read transaction; aggregation happens in SQL."""
    bucket_columns = [
        sa.func.sum(sa.case((t.c.duration <= bound, 1), else_=0)).label(f"b{i}")
        for i, bound in enumerate(BUCKETS)
    ]
    per_handler = sa.select(
        t.c.handler,
        sa.func.count(),
        sa.func.sum(t.c.duration),
        sa.func.sum(sa.case((t.c.error.is_not(None), 1), else_=0)),
        *bucket_columns,
    ).group_by(t.c.handler)
    # counts is a small JSON object; identical objects are grouped in SQL.
    counts_text = sa.cast(t.c.counts, sa.Text)
    per_counts = sa.select(t.c.handler, counts_text, sa.func.count()).group_by(
        t.c.handler, counts_text
    )
    by_status = sa.select(e.c.kind, e.c.status, sa.func.count()).group_by(e.c.kind, e.c.status)

    def work(conn: sa.Connection) -> MetricsSnapshot:
        ticks: dict[str, int] = {}
        errors: dict[str, int] = {}
        durations: dict[str, tuple[list[int], int, float]] = {}
        for row in conn.execute(per_handler):
            handler, count, total = row[0], int(row[1]), float(row[2] or 0.0)
            ticks[handler] = count
            errors[handler] = int(row[3] or 0)
            durations[handler] = ([int(v or 0) for v in row[4:]], count, total)
        results: Counter[tuple[str, str]] = Counter()
        for handler, text, n in conn.execute(per_counts):
            counts: Any = json.loads(text) if isinstance(text, str) else text
            for result, value in (counts or {}).items():
                results[(handler, str(result))] += int(value) * int(n)
        found = {(str(k), str(s)): int(n) for k, s, n in conn.execute(by_status)}
        entities = {
            (kind.name, status): found.get((kind.name, status), 0)
            for kind in db.kinds.values()
            for status in kind.status_names
        }
        return MetricsSnapshot(
            ticks=ticks,
            results=dict(results),
            durations=durations,
            sessions={s.value: found.get((SESSION_KIND, s.value), 0) for s in SessionStatus},
            errors=errors,
            entities=entities,
        )

    return await db.read(work)
