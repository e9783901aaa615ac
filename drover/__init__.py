"""drover: a plugin-based lifecycle coordinator for compute sessions.

Handlers say which sessions they succeeded on, failed on or skipped; the
coordinator applies their declared transitions, judges retries and timeouts,
and writes a scheduling-history row for every outcome.

Every public name is imported from its module on first use (PEP 562
``__getattr__``): the command line imports this package, and ``drover --help``
must not pay for SQLAlchemy, Alembic or Starlette.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drover._lazy import lazy_attributes
from drover._version import DISTRIBUTION_NAME, __version__

if TYPE_CHECKING:
    from drover.backends.base import AgentBackend, AgentInfo, BackendError, KernelReporter
    from drover.backends.simulated import SimulatedBackend
    from drover.builtin_plugins import make_plugin_manager
    from drover.coordinator.handlers import (
        DeclaredHandler,
        LifecycleHandler,
        SessionPromotionHandler,
    )
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
        Dependents,
        Field,
        LatestChild,
        Not,
        Parent,
        StatusAge,
        TimedOut,
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
        MoveTo,
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


#: Where each public name lives.
_MODULES: dict[str, str] = {
    "AgentBackend": "drover.backends.base",
    "AgentInfo": "drover.backends.base",
    "BackendError": "drover.backends.base",
    "KernelReporter": "drover.backends.base",
    "SimulatedBackend": "drover.backends.simulated",
    "make_plugin_manager": "drover.builtin_plugins",
    "DeclaredHandler": "drover.coordinator.handlers",
    "LifecycleHandler": "drover.coordinator.handlers",
    "SessionPromotionHandler": "drover.coordinator.handlers",
    "CoordinatorStore": "drover.coordinator.store",
    "Coordinator": "drover.coordinator.tick",
    "TickReport": "drover.coordinator.tick",
    "Clock": "drover.model.clock",
    "ManualClock": "drover.model.clock",
    "SystemClock": "drover.model.clock",
    "DroverError": "drover.model.errors",
    "InvalidHandlerError": "drover.model.errors",
    "InvalidSpecError": "drover.model.errors",
    "UnknownEntityError": "drover.model.errors",
    "UnknownHandlerError": "drover.model.errors",
    "UnknownKernelError": "drover.model.errors",
    "UnknownSessionError": "drover.model.errors",
    "AllOf": "drover.model.filters",
    "AnyOf": "drover.model.filters",
    "CandidateFilter": "drover.model.filters",
    "ChildCount": "drover.model.filters",
    "Children": "drover.model.filters",
    "DependenciesFailed": "drover.model.filters",
    "DependenciesSucceeded": "drover.model.filters",
    "Dependents": "drover.model.filters",
    "Parent": "drover.model.filters",
    "Field": "drover.model.filters",
    "LatestChild": "drover.model.filters",
    "Not": "drover.model.filters",
    "StatusAge": "drover.model.filters",
    "TimedOut": "drover.model.filters",
    "Budget": "drover.model.kinds",
    "BudgetUse": "drover.model.budgets",
    "Pool": "drover.model.pools",
    "EntityKind": "drover.model.kinds",
    "Kinds": "drover.model.kinds",
    "TerminationRule": "drover.model.kinds",
    "PromotionRule": "drover.model.promotion",
    "TERMINAL_KERNEL_STATUSES": "drover.model.status",
    "TERMINAL_SESSION_STATUSES": "drover.model.status",
    "KernelMatchType": "drover.model.status",
    "KernelStatus": "drover.model.status",
    "SchedulingResult": "drover.model.status",
    "SessionStatus": "drover.model.status",
    "Entity": "drover.model.values",
    "HandlerOptions": "drover.model.values",
    "HandlerResult": "drover.model.values",
    "HistoryRecord": "drover.model.values",
    "KernelHistoryRecord": "drover.model.values",
    "KernelInfo": "drover.model.values",
    "KernelReport": "drover.model.values",
    "MoveTo": "drover.model.values",
    "NewEntity": "drover.model.values",
    "SessionWithKernels": "drover.model.values",
    "StatusInfoRule": "drover.model.values",
    "StatusTransitions": "drover.model.values",
    "Target": "drover.model.values",
    "TerminationOutcome": "drover.model.values",
    "Transition": "drover.model.values",
    "TransitionStatus": "drover.model.values",
    "drover_register_kinds": "drover.plugins.hookspecs",
    "hookimpl": "drover.plugins.markers",
    "HandlerRegistry": "drover.plugins.registry",
    "KindRegistry": "drover.plugins.registry",
    "RuntimeContext": "drover.plugins.registry",
    "Queries": "drover.storage.queries",
    "Repository": "drover.storage.repository",
}


__getattr__ = lazy_attributes(__name__, _MODULES)


__all__ = [
    "DISTRIBUTION_NAME",
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
    "DeclaredHandler",
    "DependenciesFailed",
    "DependenciesSucceeded",
    "Dependents",
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
    "LatestChild",
    "LifecycleHandler",
    "ManualClock",
    "MoveTo",
    "NewEntity",
    "Not",
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
    "TimedOut",
    "Transition",
    "TransitionStatus",
    "UnknownEntityError",
    "UnknownHandlerError",
    "UnknownKernelError",
    "UnknownSessionError",
    "__version__",
    "drover_register_kinds",
    "hookimpl",
    "make_plugin_manager",
]
