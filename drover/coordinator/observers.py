"""Calling observers with each committed tick's history, never delaying the coordinator.

Each observer has its own bounded queue and worker task. ``publish`` only
enqueues (dropping the oldest records, with a counted warning, when a queue
is full); the worker calls ``on_history`` with a timeout and logs failures.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs

from drover.model.clock import from_timestamp
from drover.model.deprecation import warn_kindless
from drover.model.status import SchedulingResult

if TYPE_CHECKING:
    # Only named: a read of the plugins (the command line's) never imports the tick.
    from drover.coordinator.tick import TickReport

__all__ = ["HistoryEvent", "Observer", "ObserverDispatcher", "events_of"]

log = logging.getLogger("drover.observers")


@attrs.frozen
class HistoryEvent:
    """One entity's outcome of a committed tick, as observers receive it.

    ``session_id`` is the entity's id (a session's for the session kind);
    ``kind`` says which kind it is. Statuses are the kind's (members of its
    status enum, strings); ``result`` is a
    :class:`SchedulingResult` or a named outcome.
    """

    handler: str
    session_id: str
    result: SchedulingResult | str
    from_status: str
    to_status: str
    error_code: str | None
    message: str | None
    at: datetime
    kind: str = attrs.field(default="", kw_only=True)

    def __attrs_post_init__(self) -> None:
        if not self.kind:
            warn_kindless(self)


@runtime_checkable
class Observer(Protocol):
    """Anything with ``async def on_history(records)``."""

    async def on_history(self, records: Sequence[HistoryEvent]) -> None:
        """Receive one committed tick's history records."""
        ...


def events_of(report: TickReport, at: float) -> list[HistoryEvent]:
    """The history events of one tick report."""
    when = from_timestamp(at)
    return [
        HistoryEvent(
            handler=report.handler,
            session_id=c.session_id,
            result=c.result,
            from_status=c.from_status,
            to_status=c.to_status,
            error_code=c.error_code,
            message=c.message,
            at=when,
            kind=c.kind,
        )
        for c in report.changes
    ]


class _Lane:
    def __init__(self, name: str, observer: Observer, capacity: int) -> None:
        self.name = name
        self.observer = observer
        self.queue: collections.deque[HistoryEvent] = collections.deque()
        self.capacity = capacity
        self.ready = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()
        self.dropped = 0
        self.failures = 0
        self.task: asyncio.Task[None] | None = None


class ObserverDispatcher:
    """Fans tick records out to observers without ever blocking the caller."""

    def __init__(
        self,
        observers: Sequence[tuple[str, Observer]],
        *,
        capacity: int = 10_000,
        batch: int = 1_000,
        timeout: float = 5.0,
    ) -> None:
        self._lanes = [_Lane(name, obs, capacity) for name, obs in observers]
        self._batch = batch
        self._timeout = timeout
        self._closing = False

    @property
    def dropped(self) -> dict[str, int]:
        """Records dropped so far, per observing plugin."""
        return {lane.name: lane.dropped for lane in self._lanes}

    @property
    def failures(self) -> dict[str, int]:
        """Failed or timed-out calls so far, per observing plugin."""
        return {lane.name: lane.failures for lane in self._lanes}

    def start(self) -> None:
        """Start one worker per observer."""
        for lane in self._lanes:
            if lane.task is None:
                lane.task = asyncio.create_task(
                    self._work(lane), name=f"drover-observer-{lane.name}"
                )

    def publish(self, records: Sequence[HistoryEvent]) -> None:
        """Queue records for every observer; never blocks, never raises."""
        if not records:
            return
        for lane in self._lanes:
            lane.queue.extend(records)
            overflow = len(lane.queue) - lane.capacity
            if overflow > 0:
                for _ in range(overflow):
                    lane.queue.popleft()
                lane.dropped += overflow
                log.warning(
                    "observer %s is too slow: dropped %d oldest record(s) (%d so far)",
                    lane.name,
                    overflow,
                    lane.dropped,
                )
            lane.idle.clear()
            lane.ready.set()

    async def _work(self, lane: _Lane) -> None:
        while True:
            await lane.ready.wait()
            lane.ready.clear()
            while lane.queue:
                chunk = [lane.queue.popleft() for _ in range(min(self._batch, len(lane.queue)))]
                try:
                    await asyncio.wait_for(lane.observer.on_history(chunk), self._timeout)
                except asyncio.CancelledError:
                    raise
                except TimeoutError:
                    lane.failures += 1
                    log.error(
                        "observer %s did not return within %ss; %d record(s) skipped",
                        lane.name,
                        self._timeout,
                        len(chunk),
                    )
                except Exception:
                    lane.failures += 1
                    log.exception("observer %s failed; %d record(s) skipped", lane.name, len(chunk))
            lane.idle.set()
            if self._closing:
                return

    async def drain(self) -> None:
        """Wait until every queued record has been handed to its observer (tests, shutdown)."""
        for lane in self._lanes:
            await lane.idle.wait()

    async def close(self, grace: float = 5.0) -> None:
        """Deliver what is queued (within ``grace`` seconds), then stop the workers."""
        self._closing = True
        for lane in self._lanes:
            lane.ready.set()
        tasks = [lane.task for lane in self._lanes if lane.task is not None]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=grace)
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
