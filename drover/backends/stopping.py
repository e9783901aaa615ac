"""Destroy intent: a kernel drover stops ends TERMINATED, whoever sees it end.

Several watchers may see one kernel end: the coordinator destroying it, and
another one (the coordinator that started it, or one that adopted it after a
restart). Each judges the end it saw, and the first report to commit wins. A
watcher that did not send the signal would call a death by SIGTERM an ERROR,
and could win against the destroy's own verdict. So a destroy records its
intent first, and every watcher's report honours it:

* before any signal, :func:`mark_stopping` reports the kernels TERMINATING
  (a backend report, compare-and-set like any other; ended kernels stay as
  they are); if that cannot commit, nothing is signalled;
* a watcher that did not stop the kernel itself reports an end with
  :func:`seen_end`: the verdict of a kernel left alone (which applies while
  the kernel is not TERMINATING) followed by the destroy's verdict (which
  applies only to a TERMINATING one). Reports of one call apply in order, in
  one transaction, each compare-and-set, so exactly one of the two applies.

A kernel killed from outside (not by drover) is not TERMINATING: it ends
ERROR, as before. A kernel TERMINATING whose end is seen after its destroyer
died (a coordinator killed during ``kill_grace``) still ends TERMINATED.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from drover.backends.base import BackendError, KernelReporter
from drover.kinds.sessions.values import NON_TERMINAL_KERNEL_STATUSES, KernelReport, KernelStatus

__all__ = ["STOPPED", "STOPPING_FROM", "mark_stopping", "seen_end"]

_K = KernelStatus
#: The destroy intent: drover has asked the kernel to stop.
STOPPED = frozenset({_K.TERMINATING})
#: The statuses a destroy marks TERMINATING (every live one).
STOPPING_FROM = frozenset(NON_TERMINAL_KERNEL_STATUSES) - STOPPED


async def mark_stopping(reporter: KernelReporter | None, kernel_ids: Iterable[str]) -> None:
    """Record that drover is stopping these kernels (TERMINATING); call it before any signal.

    Kernels already ended are left as they are. Raises :class:`BackendError`
    if the intent cannot be recorded: nothing may be signalled then.
    """
    ids = list(dict.fromkeys(kernel_ids))
    if not ids:
        return
    assert reporter is not None, "the backend was not started"
    reports = [KernelReport(k, _K.TERMINATING, expected=STOPPING_FROM) for k in ids]
    try:
        await reporter.report_kernel_statuses(reports)
    except Exception as error:
        raise BackendError(
            f"could not record that the kernels are being destroyed: {error}"
        ) from error


def seen_end(left_alone: KernelReport, destroyed: KernelReport) -> list[KernelReport]:
    """The reports of an end seen by a watcher that did not stop the kernel itself.

    ``left_alone`` applies unless the kernel is TERMINATING (its expected
    statuses, without TERMINATING); ``destroyed`` applies only if it is.
    """
    expected = left_alone.expected if left_alone.expected is not None else STOPPING_FROM
    return [
        attrs.evolve(left_alone, expected=frozenset(expected) - STOPPED),
        attrs.evolve(destroyed, expected=STOPPED),
    ]
