"""How a local command ended, as a kernel report: one verdict wherever the end was seen.

Private to the local backend. The same record (a supervisor's ``.exit``
file) gives the same report whether the end was seen by the daemon that
started the command, by a daemon that adopted it, or at start-up after the
daemon was down. Exit codes are the command's own; a death by signal is
recorded as the negative signal number (``-9``) with ``runtime["signal"]``
naming it, and said in words ("killed by SIGKILL"), never turned into a code
the command did not return.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from typing import Any

import attrs

from drover.backends.local._proc import describe_signal
from drover.backends.stopping import STOPPED, seen_end
from drover.kinds.sessions.values import KernelReport, KernelStatus

__all__ = [
    "AFTER_SETUP",
    "EXIT_EXPECTED",
    "RUNNING_EXPECTED",
    "WANTS_PROCESS",
    "describe",
    "kernel_end",
    "kernel_ends",
    "setup_end",
    "setup_ends",
    "start_failure",
]

_K = KernelStatus
#: A kernel's RUNNING report applies to a kernel being started.
RUNNING_EXPECTED = frozenset({_K.PREPARED, _K.CREATING})
#: A kernel's end applies to a started kernel.
EXIT_EXPECTED = frozenset({_K.RUNNING, _K.CREATING, _K.TERMINATING})
#: A setup's end applies to a kernel being prepared (even if PREPARING was not yet applied).
AFTER_SETUP = frozenset({_K.SCHEDULED, _K.PREPARING, _K.PULLING})
#: Kernel statuses that still want their command's process.
WANTS_PROCESS = frozenset({_K.PREPARED, _K.CREATING, _K.RUNNING, _K.TERMINATING})


def describe(record: Mapping[str, Any]) -> tuple[int | None, str]:
    """The exit code to record and the words for it, from an ``.exit`` record."""
    sig = record.get("signal")
    if isinstance(sig, int):
        text = f"killed by {describe_signal(sig)}"
        if record.get("core_dumped"):
            text += " (core dumped)"
        return -sig, text
    code = record.get("exit_code")
    if isinstance(code, int):
        return code, f"exited with code {code}"
    return None, "ended; exit status unknown"


def start_failure(error: Mapping[str, Any]) -> str:
    """Why a command could not start, with the OS error: "… command not found (…)"."""
    number = error.get("errno") or 0
    subject = str(error.get("subject", ""))
    strerror = error.get("strerror") or ""
    os_error = f"[Errno {number}] {strerror}" if number else str(strerror)
    if error.get("stage") == "cwd":
        return f"cannot enter working directory {subject!r} ({os_error})"
    if number == errno.ENOENT:
        reason = "file not found" if "/" in subject else "command not found"
    elif number == errno.EACCES:
        reason = "permission denied"
    elif number == errno.ENOEXEC:
        reason = "not an executable format"
    elif number == errno.EISDIR:
        reason = "is a directory"
    else:
        reason = "cannot be executed"
    return f"cannot run {subject!r}: {reason} ({os_error})"


def _with_signal(runtime: Mapping[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    updated = dict(runtime)
    sig = record.get("signal")
    if isinstance(sig, int):
        updated["signal"] = describe_signal(sig)
        if record.get("core_dumped"):
            updated["core_dumped"] = True
    return updated


def kernel_end(
    kernel_id: str,
    record: Mapping[str, Any] | None,
    *,
    destroying: bool,
    runtime: Mapping[str, Any],
    lost: str = "its supervisor ended without recording how the command ended",
    unstarted: bool = False,
) -> KernelReport:
    """The report for a kernel command that ended (``record`` None: nobody knows how).

    Asked to stop (``destroying``), it is TERMINATED whatever its status, which
    the message gives. Otherwise exit code 0 is TERMINATED and anything else,
    a signal or an unknown end included, is ERROR. ``unstarted``: the kernel
    was never reported RUNNING (the report applies to PREPARED and CREATING too).
    """
    report = _kernel_end(kernel_id, record, destroying=destroying, runtime=runtime, lost=lost)
    if unstarted and report.expected is not None:
        return attrs.evolve(report, expected=report.expected | RUNNING_EXPECTED)
    return report


def kernel_ends(
    kernel_id: str,
    record: Mapping[str, Any] | None,
    *,
    destroying: bool,
    runtime: Mapping[str, Any],
    lost: str = "its supervisor ended without recording how the command ended",
    unstarted: bool = False,
) -> list[KernelReport]:
    """The reports of a kernel command that ended, as :func:`kernel_end` judges it.

    Not ``destroying`` (this watcher did not stop it): the kernel's own verdict,
    then the destroy's, which applies if another coordinator (or this one,
    before a restart) asked the kernel to stop (:mod:`drover.backends.stopping`).
    """
    end = kernel_end(
        kernel_id, record, destroying=destroying, runtime=runtime, lost=lost, unstarted=unstarted
    )
    if destroying:
        return [end]
    destroyed = kernel_end(
        kernel_id, record, destroying=True, runtime=runtime, lost=lost, unstarted=unstarted
    )
    return seen_end(end, destroyed)


def _kernel_end(
    kernel_id: str,
    record: Mapping[str, Any] | None,
    *,
    destroying: bool,
    runtime: Mapping[str, Any],
    lost: str,
) -> KernelReport:
    if record is None:
        if destroying:
            unknown = "destroyed; its exit status is unknown"
            return KernelReport(kernel_id, _K.TERMINATED, expected=EXIT_EXPECTED, message=unknown)
        return KernelReport(kernel_id, _K.ERROR, expected=EXIT_EXPECTED, message=f"lost: {lost}")
    if "error" in record:
        return KernelReport(
            kernel_id,
            _K.ERROR,
            expected=RUNNING_EXPECTED | EXIT_EXPECTED,
            message=f"failed to start: {start_failure(record['error'])}",
        )
    if record.get("cancelled"):
        if destroying:
            return KernelReport(
                kernel_id,
                _K.TERMINATED,
                expected=RUNNING_EXPECTED | EXIT_EXPECTED,
                message="destroyed before its command started",
            )
        return KernelReport(
            kernel_id,
            _K.ERROR,
            expected=RUNNING_EXPECTED | EXIT_EXPECTED,
            message="its supervisor was stopped before the command started",
        )
    code, text = describe(record)
    runtime = _with_signal(runtime, record)
    message: str | None
    if destroying:
        status, message = _K.TERMINATED, f"destroyed; {text}"
    elif code == 0:
        status, message = _K.TERMINATED, None
    else:
        status, message = _K.ERROR, text
    return KernelReport(
        kernel_id, status, expected=EXIT_EXPECTED, exit_code=code, message=message, runtime=runtime
    )


def setup_end(
    kernel_id: str,
    record: Mapping[str, Any] | None,
    *,
    destroying: bool,
    stderr_tail: str,
) -> KernelReport:
    """The report for a kernel's setup command that ended: PREPARED if it succeeded.

    ``destroying``: TERMINATED, from the statuses of a setup or the destroy's
    TERMINATING.
    """
    if destroying:
        return KernelReport(
            kernel_id,
            _K.TERMINATED,
            expected=AFTER_SETUP | STOPPED,
            message="destroyed during setup",
        )
    if record is None:
        message = "setup lost: its supervisor ended without recording how the setup ended"
        return KernelReport(kernel_id, _K.ERROR, expected=AFTER_SETUP, message=message)
    if "error" in record:
        message = f"setup failed to start: {start_failure(record['error'])}"
        return KernelReport(kernel_id, _K.ERROR, expected=AFTER_SETUP, message=message)
    if record.get("cancelled"):
        message = "setup stopped before it started"
        return KernelReport(kernel_id, _K.ERROR, expected=AFTER_SETUP, message=message)
    code, text = describe(record)
    if code == 0:
        return KernelReport(kernel_id, _K.PREPARED, expected=AFTER_SETUP)
    message = f"setup {text}" if "signal" in record else f"setup failed with exit code {code}"
    if stderr_tail:
        message += f": {stderr_tail}"
    return KernelReport(kernel_id, _K.ERROR, expected=AFTER_SETUP, exit_code=code, message=message)


def setup_ends(
    kernel_id: str,
    record: Mapping[str, Any] | None,
    *,
    destroying: bool,
    stderr_tail: str,
) -> list[KernelReport]:
    """The reports of a setup that ended, as :func:`setup_end` judges it (see
    :func:`kernel_ends`: a watcher that did not stop it adds the destroy's verdict)."""
    end = setup_end(kernel_id, record, destroying=destroying, stderr_tail=stderr_tail)
    if destroying:
        return [end]
    return seen_end(end, setup_end(kernel_id, record, destroying=True, stderr_tail=stderr_tail))
