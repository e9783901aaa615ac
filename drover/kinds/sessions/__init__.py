"""The session lifecycle as a plugin package: the ``session`` and ``kernel`` kinds, their handlers.

Sessions are the unit drover schedules; each has kernels, the processes a
backend runs. The package registers through the hooks a third-party plugin
uses:

* ``drover_register_kinds`` (:mod:`~drover.kinds.sessions.kinds`): ``session``
  and its child kind ``kernel``, with the kernel spec check;
* ``drover_register_handlers``: the eight handlers of the Sokovan proposal,
  each its own plugin so that any one can be blocked (``schedule-sessions``,
  ``prepare-sessions``, ``start-sessions``, ``terminate-sessions``, and the
  promotions of :mod:`~drover.kinds.sessions.promotions`), plus
  ``detect-start-failure``, so that a session whose kernels end before it
  runs cannot wait forever.
"""

from __future__ import annotations

from drover.kinds.sessions import prepare, schedule, start, terminate
from drover.kinds.sessions.kinds import (
    ENGINE_KERNEL_KEYS,
    KERNEL,
    KERNEL_DEFAULTS,
    SESSION,
    check_kernel_spec,
    with_kernel_defaults,
)
from drover.kinds.sessions.prepare import PrepareSessions
from drover.kinds.sessions.promotions import (
    BUILTIN_PROMOTIONS,
    PROMOTION_PLUGINS,
    DetectStartFailure,
    DetectTermination,
    PromoteToPrepared,
    PromoteToRunning,
    PromoteToTerminated,
)
from drover.kinds.sessions.schedule import ScheduleSessions
from drover.kinds.sessions.start import StartSessions
from drover.kinds.sessions.terminate import TerminateSessions

__all__ = [
    "BUILTIN_PROMOTIONS",
    "ENGINE_KERNEL_KEYS",
    "HANDLER_PLUGINS",
    "KERNEL",
    "KERNEL_DEFAULTS",
    "SESSION",
    "DetectStartFailure",
    "DetectTermination",
    "PrepareSessions",
    "PromoteToPrepared",
    "PromoteToRunning",
    "PromoteToTerminated",
    "ScheduleSessions",
    "StartSessions",
    "TerminateSessions",
    "check_kernel_spec",
    "with_kernel_defaults",
]

#: ``(plugin name, plugin)`` of each session handler, in lifecycle order.
HANDLER_PLUGINS: list[tuple[str, object]] = [
    ("drover.kinds.sessions.schedule-sessions", schedule),
    ("drover.kinds.sessions.prepare-sessions", prepare),
    ("drover.kinds.sessions.start-sessions", start),
    ("drover.kinds.sessions.terminate-sessions", terminate),
    *PROMOTION_PLUGINS,
]
