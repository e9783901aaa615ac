"""The daemon's loop: every enabled handler ticking in one asyncio process.

* Each handler ticks every ``interval`` seconds, and at once when woken: a tick
  that moves sessions into a status wakes the handlers that target it (not
  those whose filters require a status age, which only their interval
  ticks), a child moving wakes its parent kind's handlers that read children
  (:mod:`drover.coordinator.wakes`), and a backend report wakes the promotion
  handlers over that kind's entities (:meth:`Daemon.wake_promotions`).
* A tick whose named outcome kept targets in a status its handler targets
  (new data, the same status) ticks that handler again at once, at most
  :data:`MAX_KEPT_REWAKES` times in a row.
* News from other processes (PostgreSQL ``LISTEN``): entities another
  coordinator (or the CLI) moved into a status wake the handlers that target
  it; new submissions wake the handlers that target PENDING. On SQLite, where
  nothing is pushed, new sessions are noticed within ``submission_poll``
  seconds (the newest id is polled: one index lookup).
* Each lifecycle tick claims its targets under this daemon's id (on
  PostgreSQL several coordinators may share a database; see docs/scaling.md).
  Its coordinator row, heartbeat and solo lease are kept by
  :mod:`drover.coordinator.presence`.
* Sessions ending wake the handlers that target PENDING: capacity was freed.
* Every ``safety_interval`` seconds all handlers are woken unconditionally.
* Every ``prune_interval`` seconds, what is older than its retention is
  deleted (:mod:`drover.coordinator.retention`).
* Ticks of one handler never overlap (one task per handler).
* A tick that raises (the database went away, say) is logged and retried with
  tenacity's exponential backoff; the daemon goes on.
* A handler whose ``execute`` raised is backed off: its next tick waits
  ``interval * 2**errors`` (at most ``max_error_backoff``) whatever wakes it.
  The error is recorded with the tick, for ``drover status``, ``/healthz`` and
  ``/metrics``.
* :meth:`Daemon.stop` stops starting ticks; :meth:`Daemon.run` then lets
  in-flight ticks finish within ``shutdown_grace`` before cancelling them
  (a cancelled apply is a rolled-back transaction).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    wait_exponential,
    wait_random,
)

from drover.coordinator.memory import RELEASE_EVERY, release_free_memory
from drover.coordinator.presence import Presence
from drover.coordinator.retention import Retention
from drover.coordinator.store import DaemonStore, Subscription
from drover.coordinator.tick import Coordinator, TickReport
from drover.coordinator.wakes import WakeRules
from drover.model.ids import new_id
from drover.model.promotion import PromotionRule

__all__ = ["MAX_KEPT_REWAKES", "Daemon"]

#: Consecutive ticks of one handler re-woken because a named outcome kept its status.
MAX_KEPT_REWAKES = 100

log = logging.getLogger("drover.daemon")


class Daemon:
    """Runs a :class:`Coordinator`'s handlers until stopped.

    The daemon's id is the coordinator's ``claim_owner`` (a new id if it
    claims nothing): its heartbeat row and its claims carry the same name.
    """

    def __init__(
        self,
        coordinator: Coordinator,
        store: DaemonStore,
        *,
        intervals: Mapping[str, float] | None = None,
        enabled: Mapping[str, bool] | None = None,
        default_interval: float = 2.0,
        safety_interval: float = 30.0,
        heartbeat_interval: float = 5.0,
        shutdown_grace: float = 10.0,
        version: str = "",
        submission_poll: float = 0.1,
        on_tick: Callable[[TickReport], None] | None = None,
        retention: float | None = None,
        ticks_retention: float | None = None,
        prune_files: Callable[[float], Awaitable[int]] | None = None,
        files_retention: float | None = None,
        prune_interval: float = 3600.0,
        max_error_backoff: float = 300.0,
    ) -> None:
        self.coordinator = coordinator
        self.store = store
        self.names = [n for n in coordinator.handlers if (enabled or {}).get(n, True)]
        self.intervals = {n: (intervals or {}).get(n, default_interval) for n in self.names}
        self.safety_interval = safety_interval
        self.heartbeat_interval = heartbeat_interval
        self.shutdown_grace = shutdown_grace
        self.max_error_backoff = max_error_backoff
        self.version = version
        # Claims name this daemon, so `drover status` shows what each coordinator holds.
        self.id = coordinator.claim_owner or new_id()
        #: Called with every tick's report (observers, metrics, benchmarks).
        self.on_tick = on_tick
        self._submission_poll = submission_poll
        # Tick summaries for `drover stats`, written in batches off the tick path.
        self._tick_rows: list[dict[str, object]] = []
        self._wake = {n: asyncio.Event() for n in self.names}
        self._stopping = asyncio.Event()
        self._presence = Presence(
            coordinator,
            store,
            self.id,
            heartbeat_interval=heartbeat_interval,
            stopping=self._stopping,
            sleep=self._sleep_unless_stopping,
        )
        self._retention = Retention(
            store,
            history=retention,
            ticks=ticks_retention,
            prune_files=prune_files,
            files=files_retention,
            interval=prune_interval,
            stopping=self._stopping,
            sleep=self._sleep_unless_stopping,
        )
        self._in_tick: set[str] = set()
        #: Consecutive ticks of each handler whose execute() raised.
        self.errors: dict[str, int] = dict.fromkeys(self.names, 0)
        # Which handlers to wake when entities move into a status (drover.coordinator.wakes).
        self._promotions = [
            n for n in self.names if isinstance(coordinator.handlers[n], PromotionRule)
        ]
        # Per child kind, the promotions that read children of that kind: a kernel's
        # report wakes the session promotions, not every installed kind's.
        self._promotions_over: dict[str, list[str]] = {}
        for name in self._promotions:
            child = coordinator.kinds.child_of(coordinator.handlers[name].kind)
            if child is not None:
                self._promotions_over.setdefault(child.name, []).append(name)
        self._rules = WakeRules.build(
            coordinator.kinds, [coordinator.handlers[n] for n in self.names]
        )
        # Handlers whose last tick fetched a full batch and changed nothing: entities
        # leaving their statuses make room in their next batch for others waiting.
        self._saturated: set[str] = set()
        # Handlers of the statuses new entities start in (woken by news of creations).
        self._newcomers = sorted(self._rules.newcomers())
        # Per handler, consecutive ticks re-woken because an outcome kept its status.
        self._kept: dict[str, int] = dict.fromkeys(self.names, 0)
        self.ticks = 0
        # Targets fetched since free memory was last released, and at the last check.
        self._fetched_since_release = 0
        self._fetched_at_check = 0
        # Per handler, each entity's outcome in its last tick (see _news).
        self._last_outcomes: dict[str, dict[str, tuple[object, ...]]] = {}

    def wake(self, *names: str) -> None:
        """Make the named handlers (default: all) tick as soon as they are free."""
        for name in names or self.names:
            if name in self._wake:
                self._wake[name].set()

    def entered(self, kind: str, statuses: Iterable[str]) -> None:
        """Entities of ``kind`` entered ``statuses`` outside a tick (a backend's reports):
        wake the handlers that wakes (:meth:`WakeRules.woken`)."""
        self._wake_for((kind, str(s)) for s in statuses)

    def wake_promotions(self, child_kind: str | None = None) -> None:
        """Wake the promotion handlers whose entities' children are of ``child_kind``
        (entities of that kind changed status; ``None``: every promotion)."""
        names = self._promotions_over.get(child_kind, ()) if child_kind else self._promotions
        if names:
            self.wake(*names)

    def stop(self) -> None:
        """Stop starting new ticks; :meth:`run` returns once in-flight ticks are done."""
        if not self._stopping.is_set():
            log.info("stopping: no new ticks; waiting for in-flight ticks to finish")
        self._stopping.set()
        for event in self._wake.values():
            event.set()

    async def register(self) -> None:
        """Record this coordinator (heartbeat row); refuse to run beside another if the store
        allows only one (SQLite).

        :meth:`run` calls it if it has not been; ``drover run`` calls it before
        the backend starts, so a refused daemon touches no kernel.
        """
        await self._presence.register(version=self.version, handlers=self.names)

    async def run(self) -> None:
        """Run until :meth:`stop`; then finish in-flight ticks within the grace period."""
        await self.register()
        log.info("coordinator %s running handlers: %s", self.id, ", ".join(self.names))
        workers = [
            asyncio.create_task(self._handler_loop(n), name=f"drover-tick-{n}") for n in self.names
        ]
        helpers = [
            asyncio.create_task(self._safety_loop(), name="drover-safety"),
            asyncio.create_task(self._presence.beat(), name="drover-heartbeat"),
            asyncio.create_task(self._submission_loop(), name="drover-submissions"),
            asyncio.create_task(self._record_loop(), name="drover-tick-records"),
        ]
        if self.coordinator.claim_owner is not None:
            helpers.append(
                asyncio.create_task(self._presence.hold_solo_lease(), name="drover-solo")
            )
        if self._retention.enabled:
            helpers.append(asyncio.create_task(self._retention.run(), name="drover-retention"))
        try:
            await self._stopping.wait()
        finally:
            self.stop()
            # Every loop checks the stopping flag between iterations, so they
            # all end on their own; cancelling one in the middle of a write
            # could leave its connection holding SQLite's write lock.
            _done, pending = await asyncio.wait([*workers, *helpers], timeout=self.shutdown_grace)
            if pending:
                log.warning(
                    "grace period of %ss over: cancelling ticks of %s",
                    self.shutdown_grace,
                    sorted(self._in_tick),
                )
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
            await self._presence.mark_stopped()
            log.info("coordinator %s stopped", self.id)

    async def _sleep_unless_stopping(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)

    async def _handler_loop(self, name: str) -> None:
        wake = self._wake[name]
        wake.set()  # tick once at start-up
        while not self._stopping.is_set():
            errors = self.errors[name]
            if errors:
                # A failing handler waits out its backoff whatever wakes it.
                backoff = min(self.intervals[name] * 2**errors, self.max_error_backoff)
                await self._sleep_unless_stopping(backoff)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout=self.intervals[name])
            if self._stopping.is_set():
                return
            wake.clear()
            report = await self._tick_with_backoff(name)
            if report is None:
                return
            self._after_tick(report)

    async def _tick_with_backoff(self, name: str) -> TickReport | None:
        def log_retry(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            wait = state.next_action.sleep if state.next_action else 0.0
            log.error(
                "tick of %s failed (%s: %s); retrying in %.1fs",
                name,
                type(error).__name__,
                error,
                wait,
                extra={"handler": name, "attempt": state.attempt_number},
            )

        retrying = AsyncRetrying(
            retry=retry_if_exception_type(Exception),
            wait=wait_exponential(multiplier=0.5, max=30.0) + wait_random(0, 0.5),
            stop=lambda _state: self._stopping.is_set(),
            sleep=self._sleep_unless_stopping,
            before_sleep=log_retry,
            reraise=False,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    self._in_tick.add(name)
                    try:
                        return await self.coordinator.tick(name)
                    finally:
                        self._in_tick.discard(name)
        except Exception as error:  # tenacity's RetryError once stopping
            log.warning("tick of %s abandoned at shutdown: %s", name, error)
        return None

    def _wake_for(self, moved: Iterable[tuple[str | None, str]]) -> None:
        """Wake the handlers an entity of ``kind`` (``None``: any kind) entering ``status``
        wakes (:meth:`WakeRules.woken`)."""
        for kind, status in moved:
            for name in self._rules.woken(kind, status):
                if name in self._wake:
                    self._wake[name].set()

    def _on_news(self, news: dict[str, Any]) -> None:
        """A notification from another process (or our own commits, which woke us already)."""
        if news.get("by") == self.id:
            return
        moved = news.get("moved")
        if isinstance(moved, list):
            self._wake_for(
                (str(m[0]), str(m[1])) if isinstance(m, list) and len(m) == 2 else (None, str(m))
                for m in moved
            )
        if news.get("new"):
            self.wake(*self._newcomers)
        if news.get("joined"):
            self._presence.another_joined()
        if news.get("unleased"):
            # Our fetches found nothing while another coordinator held the solo lease.
            self.wake()

    def _news(self, report: TickReport) -> int:
        """How many of the tick's outcomes differ from the same entity's in the previous tick."""
        current: dict[str, tuple[object, ...]] = {
            c.entity_id: (c.result, c.from_status, c.to_status, c.error_code, c.message)
            for c in report.changes
        }
        previous = self._last_outcomes.get(report.handler, {})
        self._last_outcomes[report.handler] = current
        return sum(1 for entity, outcome in current.items() if previous.get(entity) != outcome)

    def _after_tick(self, report: TickReport) -> None:
        self.ticks += 1
        self._fetched_since_release += report.fetched
        counts = {str(k): v for k, v in report.counts.items()}
        if report.fetched or report.error:
            self._tick_rows.append(
                {
                    "handler": report.handler,
                    "started_at": time.time() - report.duration,
                    "duration": report.duration,
                    "fetched": report.fetched,
                    "counts": counts,
                    "error": report.error,
                }
            )
        if report.error:
            self.errors[report.handler] += 1
            backoff = min(
                self.intervals[report.handler] * 2 ** self.errors[report.handler],
                self.max_error_backoff,
            )
            log.error(
                "handler %s failed (%d in a row): %s; its %d target(s) were skipped; "
                "next tick in %.0fs",
                report.handler,
                self.errors[report.handler],
                report.error,
                report.fetched,
                backoff,
                extra={"handler": report.handler, "error": report.error},
            )
        else:
            self.errors[report.handler] = 0
        # Log changes, not repetition: a session too large to place is SKIPPED
        # with the same reason every tick, a watchdog fetches and acts on none.
        # Only a tick with an outcome its handler's previous tick did not have
        # is worth an INFO line.
        level = logging.INFO if self._news(report) else logging.DEBUG
        log.log(
            level,
            "tick %s fetched=%d %s in %.3fs",
            report.handler,
            report.fetched,
            " ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "no-change",
            report.duration,
            extra={
                "handler": report.handler,
                "fetched": report.fetched,
                "counts": counts,
                "duration": round(report.duration, 6),
            },
        )
        moved = [c for c in report.changes if c.to_status != c.from_status]
        for kind, from_status, status in {
            (c.kind, str(c.from_status), str(c.to_status)) for c in moved
        }:
            for name in self._rules.woken_by_move(kind, from_status, status):
                if name in self._wake:
                    self._wake[name].set()
        # The children it moved wake what their new statuses can make match.
        self._wake_for(report.children_entered)
        full = report.fetched >= self.coordinator.options(report.handler).batch_size
        if report.changes and not report.error and full:
            # A full batch: there may be more waiting.
            self._wake[report.handler].set()
        if not report.error and self._rules.keeps_status(report.handler, report.changes):
            # A named outcome kept targets in this handler's status with new data (a
            # node's next local segment): they are ready now. Bounded, so a handler
            # that keeps answering so falls back to its interval.
            self._kept[report.handler] += 1
            if self._kept[report.handler] <= MAX_KEPT_REWAKES:
                self._wake[report.handler].set()
        else:
            self._kept[report.handler] = 0
        if full and not report.changes:
            # Its batch was all entities it leaves as they are (sessions waiting on
            # their kernels, say): others behind them wait until some leave.
            self._saturated.add(report.handler)
        else:
            self._saturated.discard(report.handler)
        if moved and self._saturated:
            left = {(c.kind, str(c.from_status)) for c in moved}
            for name in self._saturated:
                if self._rules.statuses_of.get(name, frozenset()) & left:
                    self._wake[name].set()
        if report.fetched > len(moved):
            # Its fetch locked the targets it left as they were, which promotions
            # selecting meanwhile skipped (WakeRules.promotions_beside).
            for name in self._rules.promotions_beside.get(report.handler, ()):
                self._wake[name].set()
        if self.on_tick is not None:
            self.on_tick(report)

    async def _safety_loop(self) -> None:
        while not self._stopping.is_set():
            await self._sleep_unless_stopping(self.safety_interval)
            if not self._stopping.is_set():
                self.wake()

    async def _flush_ticks(self) -> None:
        rows, self._tick_rows = self._tick_rows, []
        if rows:
            try:
                await self.store.record_ticks(rows)
            except Exception as error:
                log.error(
                    "recording %d tick(s) failed: %s: %s", len(rows), type(error).__name__, error
                )

    async def _record_loop(self) -> None:
        while not self._stopping.is_set():
            await self._sleep_unless_stopping(1.0)
            await self._flush_ticks()
            await self._release_after_burst()
        await self._flush_ticks()

    async def _release_after_burst(self) -> None:
        """Give freed memory back once a burst of work is over (nothing fetched for the
        last second), or every :data:`RELEASE_EVERY` targets under steady work: the
        store's idle caches first, then what the allocator holds free."""
        fetched = self._fetched_since_release
        idle = fetched == self._fetched_at_check
        self._fetched_at_check = fetched
        if fetched and (idle or fetched >= RELEASE_EVERY):
            self._fetched_since_release = self._fetched_at_check = 0
            try:
                await self.store.release_memory()
            except Exception as error:  # a busy database: the next burst's release catches up
                log.debug("releasing the store's caches failed: %s", error)
            # A full collection only at rest: under steady work it would pause the loop.
            release_free_memory(collect=idle)

    async def _submission_loop(self) -> None:
        subscription: Subscription | None = None
        try:
            subscription = await self.store.subscribe(self._on_news)
        except Exception as error:
            log.error("listening for news failed: %s: %s; polling", type(error).__name__, error)
        if subscription is None:
            await self._poll_submissions()
            return
        # Pushed news replaces the poll; a dropped connection is replaced, and
        # the safety cycle covers whatever was missed meanwhile.
        try:
            while not self._stopping.is_set():
                await self._sleep_unless_stopping(1.0)
                if subscription is not None and subscription.alive():
                    continue
                if subscription is not None:
                    await subscription.close()
                    subscription = None
                try:
                    subscription = await self.store.subscribe(self._on_news)
                    log.info("listening for news again")
                    self.wake()
                except Exception as error:
                    log.error("listening for news failed: %s: %s", type(error).__name__, error)
        finally:
            if subscription is not None:
                await subscription.close()

    async def _poll_submissions(self) -> None:
        pending = self._newcomers
        last: str | None = None
        while not self._stopping.is_set():
            try:
                newest = await self.store.latest_entity_id()
                if newest != last:
                    last = newest
                    if pending:
                        self.wake(*pending)
            except Exception as error:
                log.error("polling for new sessions failed: %s: %s", type(error).__name__, error)
                await self._sleep_unless_stopping(1.0)
            await self._sleep_unless_stopping(self._submission_poll)
