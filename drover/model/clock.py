"""The coordinator's clock. Injectable so that tests can move time."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock", "from_timestamp"]


def from_timestamp(ts: float) -> datetime:
    """Convert stored epoch seconds to an aware UTC datetime."""
    return datetime.fromtimestamp(ts, UTC)


class Clock(Protocol):
    """Anything that tells the time in epoch seconds."""

    def time(self) -> float:
        """Return the current time in seconds since the epoch."""
        ...


class SystemClock:
    """The real wall clock."""

    def time(self) -> float:
        """Return ``time.time()``."""
        return time.time()


class ManualClock:
    """A clock that only moves when told to. Starts at the current whole second."""

    def __init__(self, start: float | None = None) -> None:
        self._now = float(int(time.time())) if start is None else start

    def time(self) -> float:
        """Return the clock's current time."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back in time (advance({seconds}))")
        self._now += seconds
