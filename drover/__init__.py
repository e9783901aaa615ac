"""drover: a plugin-based lifecycle coordinator for compute sessions.

Handlers say which sessions they succeeded on, failed on or skipped; the
coordinator applies their declared transitions, judges retries and timeouts,
and writes a scheduling-history row for every outcome.

Every public name is listed once, as a re-export (``from module import Name as
Name``). Those of the ``if TYPE_CHECKING:`` block (type checkers read it) are
imported from their module on first use (PEP 562 ``__getattr__``, which reads
this file for where each name lives and for ``__all__``): the command line
imports this package, and ``drover --help`` must not pay for SQLAlchemy,
Alembic or Starlette.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drover._lazy import lazy_reexports
from drover._version import DISTRIBUTION_NAME as DISTRIBUTION_NAME
from drover._version import __version__ as __version__

if TYPE_CHECKING:
    from drover.app import App as App
    from drover.backends.base import AgentBackend as AgentBackend
    from drover.backends.base import AgentInfo as AgentInfo
    from drover.backends.base import BackendError as BackendError
    from drover.backends.base import KernelReporter as KernelReporter
    from drover.backends.simulated import SimulatedBackend as SimulatedBackend
    from drover.builtin_plugins import make_plugin_manager as make_plugin_manager
    from drover.config import load_config as load_config
    from drover.coordinator.handlers import DeclaredHandler as DeclaredHandler
    from drover.coordinator.handlers import LifecycleHandler as LifecycleHandler
    from drover.coordinator.handlers import SessionPromotionHandler as SessionPromotionHandler
    from drover.coordinator.store import CoordinatorStore as CoordinatorStore
    from drover.coordinator.tick import Coordinator as Coordinator
    from drover.coordinator.tick import TickReport as TickReport
    from drover.kinds.sessions.store import Queries as Queries
    from drover.kinds.sessions.store import Repository as Repository
    from drover.kinds.sessions.values import TERMINAL_KERNEL_STATUSES as TERMINAL_KERNEL_STATUSES
    from drover.kinds.sessions.values import TERMINAL_SESSION_STATUSES as TERMINAL_SESSION_STATUSES
    from drover.kinds.sessions.values import KernelInfo as KernelInfo
    from drover.kinds.sessions.values import KernelReport as KernelReport
    from drover.kinds.sessions.values import KernelStatus as KernelStatus
    from drover.kinds.sessions.values import SessionStatus as SessionStatus
    from drover.kinds.sessions.values import SessionWithKernels as SessionWithKernels
    from drover.kinds.sessions.values import TransitionStatus as TransitionStatus
    from drover.kinds.sessions.values import UnknownKernelError as UnknownKernelError
    from drover.kinds.sessions.values import UnknownSessionError as UnknownSessionError
    from drover.model.budgets import BudgetUse as BudgetUse
    from drover.model.clock import Clock as Clock
    from drover.model.clock import ManualClock as ManualClock
    from drover.model.clock import SystemClock as SystemClock
    from drover.model.errors import DroverError as DroverError
    from drover.model.errors import InvalidHandlerError as InvalidHandlerError
    from drover.model.errors import InvalidSpecError as InvalidSpecError
    from drover.model.errors import UnknownEntityError as UnknownEntityError
    from drover.model.errors import UnknownHandlerError as UnknownHandlerError
    from drover.model.filters import AllOf as AllOf
    from drover.model.filters import AnyOf as AnyOf
    from drover.model.filters import CandidateFilter as CandidateFilter
    from drover.model.filters import ChildCount as ChildCount
    from drover.model.filters import Children as Children
    from drover.model.filters import DependenciesFailed as DependenciesFailed
    from drover.model.filters import DependenciesSucceeded as DependenciesSucceeded
    from drover.model.filters import Dependents as Dependents
    from drover.model.filters import Field as Field
    from drover.model.filters import LatestChild as LatestChild
    from drover.model.filters import Not as Not
    from drover.model.filters import Parent as Parent
    from drover.model.filters import PoolHasRoom as PoolHasRoom
    from drover.model.filters import StatusAge as StatusAge
    from drover.model.filters import TimedOut as TimedOut
    from drover.model.kinds import Budget as Budget
    from drover.model.kinds import EntityKind as EntityKind
    from drover.model.kinds import Kinds as Kinds
    from drover.model.kinds import Limit as Limit
    from drover.model.kinds import TerminationRule as TerminationRule
    from drover.model.pools import Pool as Pool
    from drover.model.pools import PoolUsage as PoolUsage
    from drover.model.promotion import PromotionRule as PromotionRule
    from drover.model.status import KernelMatchType as KernelMatchType
    from drover.model.status import SchedulingResult as SchedulingResult
    from drover.model.values import Entity as Entity
    from drover.model.values import HandlerOptions as HandlerOptions
    from drover.model.values import HandlerResult as HandlerResult
    from drover.model.values import HistoryRecord as HistoryRecord
    from drover.model.values import KernelHistoryRecord as KernelHistoryRecord
    from drover.model.values import MoveTo as MoveTo
    from drover.model.values import NewEntity as NewEntity
    from drover.model.values import StatusInfoRule as StatusInfoRule
    from drover.model.values import StatusTransitions as StatusTransitions
    from drover.model.values import Target as Target
    from drover.model.values import TerminationOutcome as TerminationOutcome
    from drover.model.values import Transition as Transition
    from drover.plugins.hookspecs import drover_register_kinds as drover_register_kinds
    from drover.plugins.markers import hookimpl as hookimpl
    from drover.plugins.registry import HandlerRegistry as HandlerRegistry
    from drover.plugins.registry import KindRegistry as KindRegistry
    from drover.plugins.registry import RuntimeContext as RuntimeContext

if not TYPE_CHECKING:
    # Hidden from type checkers: they take a module's __getattr__ to mean that any name
    # exists, and `from drover import Typo` must be an error.
    __getattr__ = lazy_reexports(__name__, __file__)
