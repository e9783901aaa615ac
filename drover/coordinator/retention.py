"""Retention: what the daemon deletes once it is older than its configured age.

Every ``interval`` seconds (and once at start), the history of ended entities
and the tick records go through the store (:meth:`DaemonStore.prune_history`),
and the files of ended kernels through the backend's ``prune_files``. A pass
logs a line only when it deleted something; a failure is logged and the next
pass tries again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from drover.coordinator.store import DaemonStore

__all__ = ["Retention"]

log = logging.getLogger("drover.daemon")


class Retention:
    """The daemon's retention, each age in seconds (``None``: keep).

    ``history``: the history of ended entities; ``ticks``: tick records;
    ``files``: kernel files, which ``prune_files`` (the backend's
    ``AgentBackend.prune_files``) deletes for the ended kernels whose files are
    unchanged since the time it is given, returning how many.
    ``stopping`` ends :meth:`run`; ``sleep`` waits a number of seconds, or less
    if stopping (the daemon's own wait).
    """

    def __init__(
        self,
        store: DaemonStore,
        *,
        history: float | None,
        ticks: float | None,
        prune_files: Callable[[float], Awaitable[int]] | None,
        files: float | None,
        interval: float,
        stopping: asyncio.Event,
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self.store = store
        self._history = history
        self._ticks = ticks
        self._prune_files = prune_files if files is not None else None
        self._files = files
        self._interval = interval
        self._stopping = stopping
        self._sleep = sleep

    @property
    def enabled(self) -> bool:
        """Whether anything is ever deleted (else the daemon runs no retention task)."""
        return self._history is not None or self._ticks is not None or self._prune_files is not None

    async def run(self) -> None:
        """Prune at once, then every ``interval`` seconds, until stopping."""
        while not self._stopping.is_set():
            await self.prune_once()
            await self._sleep(self._interval)

    async def prune_once(self) -> None:
        """One retention pass; a line is logged only when something was deleted."""
        now = time.time()
        if self._history is not None or self._ticks is not None:
            try:
                report = await self.store.prune_history(
                    older_than=None if self._history is None else now - self._history,
                    ticks_older_than=None if self._ticks is None else now - self._ticks,
                )
            except Exception as error:
                log.error("history retention failed: %s: %s", type(error).__name__, error)
            else:
                if any(report.values()):
                    deleted = ", ".join(f"{n} {table}" for table, n in report.items() if n)
                    log.info("retention: deleted %s", deleted, extra={"pruned": report})
        if self._prune_files is not None and self._files is not None:
            try:
                removed = await self._prune_files(now - self._files)
            except Exception as error:
                log.error("kernel files retention failed: %s: %s", type(error).__name__, error)
            else:
                if removed:
                    log.info("retention: deleted the files of %d ended kernel(s)", removed)
