"""``drover stats``: per-handler tick figures and per-status session ages."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict

import attrs

from drover.kinds.sessions.values import SessionStatus
from drover.storage.queries import Queries

__all__ = ["HandlerStats", "Stats", "StatusStats", "collect_stats"]


@attrs.frozen
class HandlerStats:
    """One handler's recorded ticks (ticks that fetched something)."""

    handler: str
    ticks: int
    results: dict[str, int]
    p50_tick_s: float
    p95_tick_s: float


@attrs.frozen
class StatusStats:
    """Entities (sessions, by default) in one status and how long they have held it."""

    status: SessionStatus | str
    sessions: int
    p50_age_s: float
    p95_age_s: float


@attrs.frozen
class Stats:
    """Everything ``drover stats`` shows."""

    handlers: tuple[HandlerStats, ...]
    statuses: tuple[StatusStats, ...]
    since: float | None
    kind: str = "session"


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


async def collect_stats(
    repo: Queries, *, since: float | None, now: float, kind: str = "session"
) -> Stats:
    """Handler figures from ticks recorded since ``since``; status ages of ``kind`` as of
    ``now``."""
    durations: dict[str, list[float]] = defaultdict(list)
    results: dict[str, Counter[str]] = defaultdict(Counter)
    for handler, duration, counts in await repo.tick_rows(since):
        durations[handler].append(duration)
        results[handler].update(counts)
    handlers = tuple(
        HandlerStats(
            handler=name,
            ticks=len(values),
            results=dict(sorted(results[name].items())),
            p50_tick_s=round(_quantile(values, 0.5), 6),
            p95_tick_s=round(_quantile(values, 0.95), 6),
        )
        for name, values in sorted(durations.items())
    )
    ages = await repo.status_ages(now, kind)
    names = list(repo.kinds[kind].statuses)
    statuses = tuple(StatusStats(status, *ages.get(status, (0, 0.0, 0.0))) for status in names)
    return Stats(handlers=handlers, statuses=statuses, since=since, kind=kind)
