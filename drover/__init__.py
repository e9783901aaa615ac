"""drover: a plugin-based lifecycle coordinator for compute sessions.

Handlers say which sessions they succeeded on, failed on or skipped; the
coordinator applies their declared transitions, judges retries and timeouts,
and writes a scheduling-history row for every outcome.
"""

from drover.backends.base import AgentBackend, AgentInfo, BackendError, KernelReporter
from drover.backends.simulated import SimulatedBackend
from drover.coordinator.handlers import LifecycleHandler, SessionPromotionHandler
from drover.coordinator.store import CoordinatorStore
from drover.coordinator.tick import Coordinator, TickReport
from drover.model.budgets import BudgetUse
from drover.model.clock import Clock, ManualClock, SystemClock
from drover.model.errors import (
    DroverError,
    InvalidHandlerError,
    InvalidSpecError,
    UnknownEntityError,
    UnknownHandlerError,
    UnknownKernelError,
    UnknownSessionError,
)
from drover.model.filters import (
    AllOf,
    AnyOf,
    CandidateFilter,
    ChildCount,
    Children,
    DependenciesFailed,
    DependenciesSucceeded,
    Field,
    Parent,
    StatusAge,
)
from drover.model.kinds import Budget, EntityKind, Kinds, TerminationRule
from drover.model.pools import Pool
from drover.model.promotion import PromotionRule
from drover.model.status import (
    TERMINAL_KERNEL_STATUSES,
    TERMINAL_SESSION_STATUSES,
    KernelMatchType,
    KernelStatus,
    SchedulingResult,
    SessionStatus,
)
from drover.model.values import (
    Entity,
    HandlerOptions,
    HandlerResult,
    HistoryRecord,
    KernelHistoryRecord,
    KernelInfo,
    KernelReport,
    NewEntity,
    SessionWithKernels,
    StatusInfoRule,
    StatusTransitions,
    Target,
    TerminationOutcome,
    Transition,
    TransitionStatus,
)
from drover.plugins.hookspecs import drover_register_kinds
from drover.plugins.markers import hookimpl
from drover.plugins.registry import HandlerRegistry, KindRegistry, RuntimeContext
from drover.storage.queries import Queries
from drover.storage.repository import Repository

__version__ = "0.1.0"

__all__ = [
    "TERMINAL_KERNEL_STATUSES",
    "TERMINAL_SESSION_STATUSES",
    "AgentBackend",
    "AgentInfo",
    "AllOf",
    "AnyOf",
    "BackendError",
    "Budget",
    "BudgetUse",
    "CandidateFilter",
    "ChildCount",
    "Children",
    "Clock",
    "Coordinator",
    "CoordinatorStore",
    "DependenciesFailed",
    "DependenciesSucceeded",
    "DroverError",
    "Entity",
    "EntityKind",
    "Field",
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
    "KernelReporter",
    "KernelStatus",
    "KindRegistry",
    "Kinds",
    "LifecycleHandler",
    "ManualClock",
    "NewEntity",
    "Parent",
    "Pool",
    "PromotionRule",
    "Queries",
    "Repository",
    "RuntimeContext",
    "SchedulingResult",
    "SessionPromotionHandler",
    "SessionStatus",
    "SessionWithKernels",
    "SimulatedBackend",
    "StatusAge",
    "StatusInfoRule",
    "StatusTransitions",
    "SystemClock",
    "Target",
    "TerminationOutcome",
    "TerminationRule",
    "TickReport",
    "Transition",
    "TransitionStatus",
    "UnknownEntityError",
    "UnknownHandlerError",
    "UnknownKernelError",
    "UnknownSessionError",
    "__version__",
    "drover_register_kinds",
    "hookimpl",
]
