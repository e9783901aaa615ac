"""``/metrics``: Prometheus text read from the database at scrape time.

The figures come from the ``handler_ticks`` table (one row per tick that
fetched something, written by every daemon) and from the sessions table, so
``drover serve`` reports the same numbers with or without a daemon in its
process, and several daemons on one database add up. Counters fall back when
``drover history prune`` removes old tick rows; Prometheus treats that as a
counter reset.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from drover.storage.queries import BUCKETS, MetricsSnapshot

__all__ = ["CONTENT_TYPE_METRICS", "render_metrics"]

#: The media type of :func:`render_metrics`' text (Prometheus exposition format 0.0.4).
CONTENT_TYPE_METRICS = "text/plain; version=0.0.4; charset=utf-8"


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
        errors = CounterMetricFamily(
            "drover_handler_errors",
            "Ticks whose execute() raised or returned an invalid result, per handler.",
            labels=["handler"],
        )
        for handler, n in sorted(snap.errors.items()):
            errors.add_metric([handler], n)
        yield errors
        gauge = GaugeMetricFamily(
            "drover_sessions", "Sessions currently in each status.", labels=["status"]
        )
        for status, n in snap.sessions.items():
            gauge.add_metric([status], n)
        yield gauge
        entities = GaugeMetricFamily(
            "drover_entities",
            "Entities of every kind (sessions, kernels, plugins' kinds) in each status.",
            labels=["kind", "status"],
        )
        for (kind, status), n in sorted(snap.entities.items()):
            entities.add_metric([kind, status], n)
        yield entities
        ended = GaugeMetricFamily(
            "drover_entity_results",
            "Ended entities of every kind by result: SUCCESS, CANCELLED (a stop somebody "
            "asked for) or FAILURE.",
            labels=["kind", "result"],
        )
        for (kind, result), n in sorted(snap.results_by_kind.items()):
            ended.add_metric([kind, result], n)
        yield ended


def render_metrics(snap: MetricsSnapshot) -> bytes:
    """Prometheus text exposition of ``snap``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(snap))
    return generate_latest(registry)
