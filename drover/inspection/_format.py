"""Small formatting helpers shared by the inspection tools."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

__all__ = ["duration", "ordered_results", "parse_duration", "parse_time", "results_text"]

#: The results every kind's entities end with, in the order they are shown.
_RESULT_ORDER = ("SUCCESS", "FAILURE", "CANCELLED")


def ordered_results(counts: Mapping[str, int]) -> list[tuple[str, int]]:
    """``counts`` (result -> entities) as SUCCESS, FAILURE, CANCELLED, then the others."""
    known = [(r, counts[r]) for r in _RESULT_ORDER if counts.get(r)]
    return known + sorted((r, n) for r, n in counts.items() if r not in _RESULT_ORDER and n)


def results_text(counts: Mapping[str, int]) -> str:
    """``12 SUCCESS, 5 FAILURE, 3 CANCELLED``: how the entities of one status ended."""
    return ", ".join(f"{n} {r}" for r, n in ordered_results(counts))


def duration(seconds: float) -> str:
    """``3m12s``, ``2h05m``, ``4d03h``: a compact human duration."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def parse_duration(text: str) -> float:
    """``30d``, ``12h``, ``1h30m``, ``45s``, ``2w`` to seconds; ValueError naming the problem.

    pytimeparse reads it (units s, m, h, d, w, combined or with words:
    ``1h30m``, ``1.5h``, ``2 days``); a bare number, which could mean any
    unit, and a negative duration are refused.
    """
    # Imported here: most commands that import this module never parse a duration.
    from pytimeparse.timeparse import timeparse

    seconds = timeparse(text.strip()) if text.strip() else None
    if seconds is None or seconds < 0:
        raise ValueError(f"{text!r} is not a duration like 45s, 15m, 1h30m, 30d or 2w")
    return float(seconds)


def parse_time(text: str, now: float) -> float:
    """A duration ago (``1h``) or an ISO 8601 time (UTC if no offset) to epoch seconds."""
    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a duration (1h, 30m, 2d) nor an ISO time (2026-11-22T10:00)"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()
