"""What a promotion rule has already checked, so that its next probe reads only what changed.

A promotion's candidates appear only through recorded changes: an entity's
move writes a history row, a child's move a ``status_changes`` row naming
its parent (:func:`drover.storage.statements.promote.recent_promotion_probe`).
Once a check of a rule (a probe, or a promotion's own write) found nothing,
the next probe needs to look only at the rows recorded after that check's
**watermarks**: the largest ids of the two tables when it began. An empty
tick then costs what changed since the last one, not what waits in the
rule's statuses (a backlog of 100,000 PENDING sessions, say).

On SQLite one transaction writes at a time, so every row up to the largest
visible id is committed: the watermarks are exact. On PostgreSQL a
transaction may commit after another that took larger ids; a probe there
starts after the watermarks taken at least :data:`PG_LAG` seconds earlier,
so only a transaction running longer than that between writing its rows
and committing could be missed. Whatever a probe could miss (such a
transaction, a change written outside the engine) is found by the full
check every rule makes at least once per :data:`SWEEP_INTERVAL`.
"""

from __future__ import annotations

import time
from collections import deque

__all__ = [
    "INITIAL_ROW_SECONDS",
    "PG_LAG",
    "RECENT_BIAS",
    "SWEEP_INTERVAL",
    "Watermarks",
    "Window",
]

#: Largest ``status_changes`` id, largest ``scheduling_history`` id.
Watermarks = tuple[int, int]

#: Seconds between a rule's full checks, whatever its probes found (the daemon's safety cycle).
SWEEP_INTERVAL = 30.0
#: Seconds a PostgreSQL watermark ages before a probe may start after it.
PG_LAG = 2.0
#: Weight of a recent probe's expected cost against the last full probe's (0: always
#: the recent probe where it is allowed).
RECENT_BIAS = 1.0
#: A recent probe's seconds per row read until one was timed: SQLite's, measured
#: (``bench/tick_cpu.py``, 10,000 sessions: 7 ms for 35,000 rows). Only a recent
#: probe that runs corrects it, so an estimate too high keeps choosing the full
#: probe while it is the cheaper guess (1 µs did: 35 ms guessed against a full
#: probe's 8 ms, while the recent probe took 5-7 ms).
INITIAL_ROW_SECONDS = 2e-7


class Window:
    """The watermarks one promotion rule's probe may start after (one per rule, per process)."""

    def __init__(self, postgres: bool) -> None:
        self.postgres = postgres
        self._swept_at: float | None = None
        # (monotonic time a check began, its watermarks), oldest first, for the lag.
        self._marks: deque[tuple[float, Watermarks]] = deque()
        self._after: Watermarks | None = None
        # What the last full probe took, and an average of a recent probe's seconds per row.
        self._full_seconds = 0.0
        self._row_seconds = INITIAL_ROW_SECONDS

    def start(self, now: Watermarks) -> Watermarks | None:
        """Where a probe made with the tables at ``now`` may start; ``None``: it must check
        every candidate.

        A probe after the watermarks reads the rows recorded since; it is chosen
        only when those rows are expected to cost less than the last full probe
        took (under a steady stream of changes, few entities wait and the full
        probe is the cheaper one).
        """
        if self._swept_at is None or time.monotonic() - self._swept_at >= SWEEP_INTERVAL:
            return None
        after = self._after
        if after is None:
            return None
        rows = now[0] - after[0] + now[1] - after[1]
        return after if rows * self._row_seconds * RECENT_BIAS <= self._full_seconds else None

    def timed(self, now: Watermarks, after: Watermarks | None, seconds: float) -> None:
        """Record what a probe took: a full one (``after`` ``None``), or one after ``after``."""
        if after is None:
            self._full_seconds = seconds
            return
        rows = max(now[0] - after[0] + now[1] - after[1], 1)
        self._row_seconds = (self._row_seconds + seconds / rows) / 2

    def checked(self, began: float, marks: Watermarks, *, full: bool, found: bool) -> None:
        """Record a check that began at ``began`` (monotonic) with the tables at ``marks``.

        A check that found candidates moves nothing forward: the next check
        is the promotion's write, which looks at everything.
        """
        if full:
            self._swept_at = began
        if found:
            return
        self._marks.append((began, marks))
        # The newest watermarks old enough for the lag (all of them on SQLite).
        ripe = began - (PG_LAG if self.postgres else 0.0)
        while len(self._marks) > 1 and self._marks[1][0] <= ripe:
            self._marks.popleft()
        if self._marks[0][0] <= ripe:
            self._after = self._marks[0][1]
