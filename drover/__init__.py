"""drover: a plugin-based lifecycle coordinator for compute sessions.

Handlers say which sessions they succeeded on, failed on or skipped; the
coordinator applies their declared transitions, judges retries and timeouts,
and writes a scheduling-history row for every outcome.
"""

from drover.backends.base import AgentBackend, AgentInfo, BackendError
from drover.backends.simulated import SimulatedBackend
from drover.coordinator.handlers import LifecycleHandler, SessionPromotionHandler
from drover.coordinator.tick import Coordinator, TickReport
from drover.model.clock import ManualClock, SystemClock
from drover.model.errors import (
    DroverError,
    InvalidHandlerError,
    InvalidSpecError,
    UnknownHandlerError,
    UnknownKernelError,
    UnknownSessionError,
)
from drover.model.status import (
    TERMINAL_KERNEL_STATUSES,
    TERMINAL_SESSION_STATUSES,
    KernelMatchType,
    KernelStatus,
    SchedulingResult,
    SessionStatus,
)
from drover.model.values import (
    HandlerOptions,
    HandlerResult,
    HistoryRecord,
    KernelHistoryRecord,
    KernelInfo,
    SessionWithKernels,
    StatusInfoRule,
    StatusTransitions,
    TransitionStatus,
)
from drover.plugins.markers import hookimpl
from drover.plugins.registry import HandlerRegistry, RuntimeContext
from drover.storage.repository import KernelReport, Repository, TerminationOutcome

__version__ = "0.1.0"

__all__ = [
    "TERMINAL_KERNEL_STATUSES",
    "TERMINAL_SESSION_STATUSES",
    "AgentBackend",
    "AgentInfo",
    "BackendError",
    "Coordinator",
    "DroverError",
    "HandlerOptions",
    "HandlerRegistry",
    "HandlerResult",
    "HistoryRecord",
    "InvalidHandlerError",
    "InvalidSpecError",
    "KernelHistoryRecord",
    "KernelInfo",
    "KernelMatchType",
    "KernelReport",
    "KernelStatus",
    "LifecycleHandler",
    "ManualClock",
    "Repository",
    "RuntimeContext",
    "SchedulingResult",
    "SessionPromotionHandler",
    "SessionStatus",
    "SessionWithKernels",
    "SimulatedBackend",
    "StatusInfoRule",
    "StatusTransitions",
    "SystemClock",
    "TerminationOutcome",
    "TickReport",
    "TransitionStatus",
    "UnknownHandlerError",
    "UnknownKernelError",
    "UnknownSessionError",
    "__version__",
    "hookimpl",
]
