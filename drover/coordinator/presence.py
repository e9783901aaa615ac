"""A coordinator among the others sharing its database: its row, its heartbeat, the solo lease.

* :meth:`Presence.register` records the coordinator (its heartbeat row); a store
  that allows only one coordinator (SQLite) refuses a second one.
* :meth:`Presence.beat` renews the heartbeat every ``heartbeat_interval``
  seconds; ``drover status`` and the other coordinators read it.
* :meth:`Presence.hold_solo_lease` lets a coordinator that runs alone tick
  without marking its rows with claims (PostgreSQL; docs/scaling.md).
* :meth:`Presence.mark_stopped` marks the row stopped when the daemon ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

import attrs

from drover.coordinator.store import DaemonStore
from drover.coordinator.tick import Coordinator
from drover.model.ids import new_id
from drover.model.values import Claim, CoordinatorInfo

__all__ = ["Presence"]

log = logging.getLogger("drover.daemon")


class Presence:
    """One daemon's coordinator row and solo lease, kept while it runs.

    ``stopping`` ends its loops; ``sleep`` waits a number of seconds, or less
    if stopping (the daemon's own wait, so that every loop stops alike).
    """

    def __init__(
        self,
        coordinator: Coordinator,
        store: DaemonStore,
        coordinator_id: str,
        *,
        heartbeat_interval: float,
        stopping: asyncio.Event,
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self.coordinator = coordinator
        self.store = store
        self.id = coordinator_id
        self.heartbeat_interval = heartbeat_interval
        self._stopping = stopping
        self._sleep = sleep
        self._registered = False
        # Set when another coordinator joins: the solo lease is to be left at once.
        self._solo_wake = asyncio.Event()

    async def register(self, *, version: str, handlers: Sequence[str]) -> None:
        """Record this coordinator (heartbeat row), once; refuse to run beside another if
        the store allows only one (SQLite)."""
        if self._registered:
            return
        now = datetime.now(UTC)
        note = await self.store.register_coordinator(
            CoordinatorInfo(
                id=self.id,
                host=socket.gethostname(),
                pid=os.getpid(),
                started_at=now,
                heartbeat_at=now,
                version=version,
                stopped_at=None,
                handlers=tuple(handlers),
            ),
            stale_after=3 * self.heartbeat_interval,
        )
        self._registered = True
        if note:
            log.warning("%s", note)

    async def mark_stopped(self) -> None:
        """Mark this coordinator stopped; a failure is ignored (its heartbeat goes stale)."""
        with contextlib.suppress(Exception):
            await self.store.coordinator_stopped(self.id)

    def another_joined(self) -> None:
        """Another coordinator registered: leave the solo lease at once, if held."""
        if self.coordinator.solo_claim is not None:
            self._solo_wake.set()

    async def beat(self) -> None:
        """Renew the heartbeat every ``heartbeat_interval`` seconds until stopping."""
        while not self._stopping.is_set():
            await self._sleep(self.heartbeat_interval)
            if self._stopping.is_set():
                return
            try:
                await self.store.heartbeat(self.id)
            except Exception as error:
                log.error("heartbeat failed: %s: %s", type(error).__name__, error)

    async def hold_solo_lease(self) -> None:
        """Hold the solo lease while no other coordinator runs (PostgreSQL; docs/scaling.md).

        Alone, a coordinator's ticks need not mark their rows with claims (a
        third of a lone coordinator's database work went to claiming and
        releasing). It takes the lease when no other coordinator beat within
        three heartbeats (checked at start and every step), renews it every
        step, and leaves it as soon as another coordinator joins (its
        registration notifies) or beats, or the lease was revoked (this
        process stopped renewing it: it was paused): its solo ticks finish,
        then it gives the lease up and the others' ticks fetch again.
        """
        coordinator = self.coordinator
        owner = coordinator.claim_owner
        assert owner is not None
        ttl = coordinator.claim_ttl
        step = min(self.heartbeat_interval, ttl / 3)
        quiet = 3 * self.heartbeat_interval
        first = True
        try:
            while not self._stopping.is_set():
                if not first:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._solo_wake.wait(), timeout=step)
                    self._solo_wake.clear()
                first = False
                if self._stopping.is_set():
                    return
                now = coordinator.clock.time()
                until, alive_since = now + ttl, now - quiet
                held = coordinator.solo_claim
                try:
                    if held is not None:
                        if await self.store.keep_solo(
                            owner, held.token, until=until, alive_since=alive_since
                        ):
                            coordinator.solo_claim = attrs.evolve(held, expires=until)
                        else:
                            log.info("another coordinator runs: claiming rows again")
                            await coordinator.leave_solo()
                            await self.store.drop_solo(owner, held.token)
                    else:
                        token = new_id()
                        if await self.store.take_solo(
                            owner, token, until=until, alive_since=alive_since
                        ):
                            log.info("no other coordinator runs: ticking without row claims")
                            coordinator.solo_claim = Claim(owner, token, until, ttl, solo=True)
                except Exception as error:
                    log.error("solo lease: %s: %s", type(error).__name__, error)
        finally:
            held = coordinator.solo_claim
            if held is not None:
                await coordinator.leave_solo()
