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

from typing import TYPE_CHECKING

from drover._lazy import lazy_attributes

if TYPE_CHECKING:
    from drover.kinds.sessions.kinds import (
        ENGINE_KERNEL_KEYS,
        KERNEL,
        KERNEL_DEFAULTS,
        SESSION,
        check_kernel_spec,
        with_kernel_defaults,
    )
    from drover.kinds.sessions.plugins import HANDLER_PLUGINS
    from drover.kinds.sessions.prepare import PrepareSessions
    from drover.kinds.sessions.promotions import (
        BUILTIN_PROMOTIONS,
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

# Imported on first use: the command line imports this package to list its commands.
__getattr__ = lazy_attributes(
    __name__,
    {
        "ENGINE_KERNEL_KEYS": "drover.kinds.sessions.kinds",
        "KERNEL": "drover.kinds.sessions.kinds",
        "KERNEL_DEFAULTS": "drover.kinds.sessions.kinds",
        "SESSION": "drover.kinds.sessions.kinds",
        "check_kernel_spec": "drover.kinds.sessions.kinds",
        "with_kernel_defaults": "drover.kinds.sessions.kinds",
        "PrepareSessions": "drover.kinds.sessions.prepare",
        "BUILTIN_PROMOTIONS": "drover.kinds.sessions.promotions",
        "DetectStartFailure": "drover.kinds.sessions.promotions",
        "DetectTermination": "drover.kinds.sessions.promotions",
        "PromoteToPrepared": "drover.kinds.sessions.promotions",
        "PromoteToRunning": "drover.kinds.sessions.promotions",
        "PromoteToTerminated": "drover.kinds.sessions.promotions",
        "ScheduleSessions": "drover.kinds.sessions.schedule",
        "StartSessions": "drover.kinds.sessions.start",
        "TerminateSessions": "drover.kinds.sessions.terminate",
        "HANDLER_PLUGINS": "drover.kinds.sessions.plugins",
    },
)
