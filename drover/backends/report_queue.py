"""Reports that must commit: kept, in order, until the database takes them.

How a kernel's work ended (or how its preparation ended) is seen once; if
the database cannot take the report at that moment (a transient
infrastructure error), dropping it would leave the kernel RUNNING forever.
So reports wait here and are retried with exponential backoff (tenacity)
until they commit. A report that *applies or is refused* has committed: the
database decided. Should the daemon stop first, each backend reads the end
again at its next start (an exit record, the container, the job).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence

from tenacity import AsyncRetrying, before_sleep_log, retry_if_exception, wait_exponential_jitter

from drover.backends.base import KernelReporter, Wake
from drover.kinds.sessions.values import KernelReport, UnknownKernelError

__all__ = ["ReportQueue"]


class ReportQueue:
    """Per-kernel lists of reports, committed in order, retried until they commit."""

    def __init__(
        self,
        reporter: Callable[[], KernelReporter | None],
        wake: Callable[[], Wake],
        backoff: float,
        log: logging.Logger,
    ) -> None:
        self._reporter = reporter
        self._log = log
        self._wake = wake
        self._backoff = backoff
        self._queued: dict[str, list[KernelReport]] = {}
        self._pending = asyncio.Event()
        self._lock = asyncio.Lock()
        self._stopping = False

    def __contains__(self, kernel_id: object) -> bool:
        return kernel_id in self._queued

    def __bool__(self) -> bool:
        return bool(self._queued)

    def kernels(self) -> set[str]:
        """The kernels with reports waiting."""
        return set(self._queued)

    def add(self, reports: Iterable[KernelReport]) -> None:
        """Queue reports; the runner commits them soon."""
        added = False
        for report in reports:
            self._queued.setdefault(report.kernel_id, []).append(report)
            added = True
        if added:
            self._pending.set()

    async def flush(self, only: Iterable[str] | None = None) -> None:
        """Commit the queued reports (of ``only`` these kernels) once; raise if that fails."""
        reporter = self._reporter()
        assert reporter is not None, "the backend was not started"
        wanted = None if only is None else set(only)
        async with self._lock:
            batch = {
                kid: list(reports)
                for kid, reports in self._queued.items()
                if wanted is None or kid in wanted
            }
            if not batch:
                return
            try:
                await reporter.report_kernel_statuses(_flat(batch.values()))
            except UnknownKernelError as error:
                # A kernel that no longer exists can never take its report.
                self._log.error("dropping the reports of unknown kernel %s", error.kernel_id)
                self._queued.pop(error.kernel_id, None)
                raise
            for kid, sent in batch.items():
                queued = self._queued.get(kid)
                if queued is not None:
                    # Reports queued meanwhile stay, in order, for the next round.
                    del queued[: len(sent)]
                    if not queued:
                        del self._queued[kid]
        self._wake()()

    async def run(self) -> None:
        """Commit queued reports as they come; retry failures with backoff until stopped."""
        self._stopping = False
        while not self._stopping:
            await self._pending.wait()
            self._pending.clear()
            if self._stopping:
                return
            retrying = AsyncRetrying(
                retry=retry_if_exception(lambda _error: not self._stopping),
                wait=wait_exponential_jitter(multiplier=0.1, max=self._backoff, jitter=0.1),
                before_sleep=before_sleep_log(self._log, logging.WARNING),
                reraise=True,
            )
            try:
                async for attempt in retrying:
                    with attempt:
                        await self.flush()
            except Exception:
                return  # only when stopping: the ends are read again at start-up

    def stop(self) -> None:
        """Let :meth:`run` return (after its current attempt)."""
        self._stopping = True
        self._pending.set()


def _flat(lists: Iterable[Sequence[KernelReport]]) -> list[KernelReport]:
    return [report for reports in lists for report in reports]
