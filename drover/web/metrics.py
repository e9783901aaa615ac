"""``/metrics``: Prometheus text read from the database at scrape time.

The figures come from the ``handler_ticks`` table (one row per tick that
fetched something, written by every daemon) and from the sessions table, so
``drover serve`` reports the same numbers with or without a daemon in its
process, and several daemons on one database add up. Counters fall back when
``drover history prune`` removes old tick rows; Prometheus treats that as a
counter reset.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import attrs
import sqlalchemy as sa
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from sqlalchemy.ext.asyncio import AsyncConnection

from drover.model.status import SessionStatus
from drover.storage.repository import Repository
from drover.storage.schema import handler_ticks, sessions

__all__ = ["BUCKETS", "MetricsSnapshot", "render_metrics", "snapshot"]

#: Upper bounds (seconds) of the tick duration histogram.
BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@attrs.frozen
class MetricsSnapshot:
    """Everything one scrape reports."""

    ticks: dict[str, int]
    results: dict[tuple[str, str], int]
    #: handler -> (cumulative counts per bucket of BUCKETS, count, sum)
    durations: dict[str, tuple[list[int], int, float]]
    sessions: dict[str, int]


async def snapshot(repo: Repository) -> MetricsSnapshot:
    """Read the figures in one read transaction; aggregation happens in SQL."""
    t = handler_ticks
    bucket_columns = [
        sa.func.sum(sa.case((t.c.duration <= bound, 1), else_=0)).label(f"b{i}")
        for i, bound in enumerate(BUCKETS)
    ]
    per_handler = sa.select(
        t.c.handler, sa.func.count(), sa.func.sum(t.c.duration), *bucket_columns
    ).group_by(t.c.handler)
    # counts is a small JSON object; identical objects are grouped in SQL.
    counts_text = sa.cast(t.c.counts, sa.Text)
    per_counts = sa.select(t.c.handler, counts_text, sa.func.count()).group_by(
        t.c.handler, counts_text
    )
    by_status = sa.select(sessions.c.status, sa.func.count()).group_by(sessions.c.status)

    async def work(conn: AsyncConnection) -> MetricsSnapshot:
        ticks: dict[str, int] = {}
        durations: dict[str, tuple[list[int], int, float]] = {}
        for row in await conn.execute(per_handler):
            handler, count, total = row[0], int(row[1]), float(row[2] or 0.0)
            ticks[handler] = count
            durations[handler] = ([int(v or 0) for v in row[3:]], count, total)
        results: Counter[tuple[str, str]] = Counter()
        for handler, text, n in await conn.execute(per_counts):
            counts: Any = json.loads(text) if isinstance(text, str) else text
            for result, value in (counts or {}).items():
                results[(handler, str(result))] += int(value) * int(n)
        found = {str(s): int(n) for s, n in await conn.execute(by_status)}
        return MetricsSnapshot(
            ticks=ticks,
            results=dict(results),
            durations=durations,
            sessions={s.value: found.get(s.value, 0) for s in SessionStatus},
        )

    return await repo.read(work)


class _SnapshotCollector(Collector):
    """A prometheus-client collector over one :class:`MetricsSnapshot`."""

    def __init__(self, snap: MetricsSnapshot) -> None:
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        snap = self.snap
        ticks = CounterMetricFamily(
            "drover_handler_ticks",
            "Ticks that fetched at least one session, per handler.",
            labels=["handler"],
        )
        for handler, n in sorted(snap.ticks.items()):
            ticks.add_metric([handler], n)
        yield ticks
        results = CounterMetricFamily(
            "drover_handler_results",
            "Sessions per handler and scheduling result (SUCCESS, NEED_RETRY, …).",
            labels=["handler", "result"],
        )
        for (handler, result), n in sorted(snap.results.items()):
            results.add_metric([handler, result], n)
        yield results
        seconds = HistogramMetricFamily(
            "drover_handler_tick_seconds",
            "Duration of ticks that fetched at least one session.",
            labels=["handler"],
        )
        for handler, (cumulative, count, total) in sorted(snap.durations.items()):
            buckets = [(repr(b), c) for b, c in zip(BUCKETS, cumulative, strict=True)]
            buckets.append(("+Inf", count))
            seconds.add_metric([handler], buckets, total)
        yield seconds
        gauge = GaugeMetricFamily(
            "drover_sessions", "Sessions currently in each status.", labels=["status"]
        )
        for status, n in snap.sessions.items():
            gauge.add_metric([status], n)
        yield gauge


def render_metrics(snap: MetricsSnapshot) -> bytes:
    """Prometheus text exposition of ``snap``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(snap))
    return generate_latest(registry)
