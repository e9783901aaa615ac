"""What a container's state means for its kernel: pure functions from a state to reports.

Private to the container backend. The exit code recorded is the engine's
(a container killed by a signal exits 128 + the signal's number, 137 for
SIGKILL), so ``drover show`` gives what ``docker ps -a`` gives.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from typing import Any

from drover.backends.container._engine import ContainerState
from drover.backends.container._spec import MIB
from drover.backends.stopping import seen_end
from drover.kinds.sessions.values import KernelReport, KernelStatus

__all__ = [
    "AFTER_PULL",
    "EXIT_EXPECTED",
    "OWNING",
    "RUNNING_EXPECTED",
    "end_reports",
    "ended",
    "lost",
]

_K = KernelStatus
#: Kernel statuses a pull's result applies to.
AFTER_PULL = frozenset({_K.SCHEDULED, _K.PREPARING, _K.PULLING})
#: A RUNNING report applies to a kernel being started.
RUNNING_EXPECTED = frozenset({_K.PREPARED, _K.CREATING})
#: A container's end applies to a kernel that started it (or was starting it).
EXIT_EXPECTED = frozenset({_K.PREPARED, _K.CREATING, _K.RUNNING, _K.TERMINATING})
#: Kernel statuses in which a kernel may own a container (or a pull).
OWNING = AFTER_PULL - {_K.SCHEDULED} | EXIT_EXPECTED
_SIGKILL_CODE = 128 + signal.SIGKILL


def _words(code: int | None) -> str:
    if code is None:
        return "ended; exit status unknown"
    if code > 128:
        try:
            name = signal.Signals(code - 128).name
        except ValueError:
            return f"exited with code {code}"
        return f"exited with code {code} (killed by {name})"
    return f"exited with code {code}"


def ended(
    kernel_id: str,
    state: ContainerState,
    *,
    destroying: bool,
    runtime: Mapping[str, Any],
) -> KernelReport:
    """How an ended container ends its kernel.

    Asked to stop (``destroying``): TERMINATED, whatever the code. Otherwise
    code 0 is TERMINATED; a container the kernel's OOM killer ended (the
    engine says ``OOMKilled``, or it died by SIGKILL under a memory limit,
    which is how Podman's cgroup v1 runs report it) is ERROR "out of
    memory"; any other code is ERROR with it.
    """
    code = state.exit_code
    text = _words(code)
    if state.error:
        text += f": {state.error}"
    status = _K.ERROR
    message: str | None = text
    if destroying:
        status, message = _K.TERMINATED, f"destroyed; {text}"
    elif code == 0:
        status, message = _K.TERMINATED, None
    elif state.oom_killed or (code == _SIGKILL_CODE and state.memory):
        limit = f" of {state.memory // MIB} MiB" if state.memory else ""
        message = f"out of memory: killed at its memory limit{limit} ({text})"
    return KernelReport(
        kernel_id,
        status,
        expected=EXIT_EXPECTED,
        exit_code=code,
        message=message,
        runtime=dict(runtime),
    )


def lost(kernel_id: str, container: str, *, destroying: bool) -> KernelReport:
    """The end of a kernel whose container is gone from the engine."""
    if destroying:
        message = f"destroyed; its container {container} is gone, exit status unknown"
        return KernelReport(kernel_id, _K.TERMINATED, expected=EXIT_EXPECTED, message=message)
    message = f"lost: its container {container} is gone from the engine"
    return KernelReport(kernel_id, _K.ERROR, expected=EXIT_EXPECTED, message=message)


def end_reports(
    kernel_id: str,
    state: ContainerState | None,
    container: str,
    *,
    stopped: bool,
    runtime: Mapping[str, Any],
) -> list[KernelReport]:
    """The reports of a container's end (``state`` ``None``: it is gone from the engine).

    ``stopped``: this backend stopped it (a destroy, or a kernel that no longer
    wanted it). Otherwise the destroy's verdict follows the kernel's own, for a
    kernel another coordinator (or this one before a restart) asked to stop
    (:mod:`drover.backends.stopping`).
    """
    if state is not None:
        own, destroyed = (
            ended(kernel_id, state, destroying=d, runtime=runtime) for d in (stopped, True)
        )
    else:
        own, destroyed = (lost(kernel_id, container, destroying=d) for d in (stopped, True))
    return [own] if stopped else seen_end(own, destroyed)
