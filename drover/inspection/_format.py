"""Small formatting helpers shared by the inspection tools."""

from __future__ import annotations

import re
from datetime import UTC, datetime

__all__ = ["duration", "parse_duration", "parse_time"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


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
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` to seconds; ValueError naming the problem."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration like 30s, 15m, 12h, 30d or 2w")
    return float(match.group(1)) * _UNITS[match.group(2)]


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
