"""``start-sessions``: ask the backend to start PREPARED sessions' kernels."""

from __future__ import annotations

from collections.abc import Sequence

from drover.backends.base import AgentBackend
from drover.coordinator.handlers import LifecycleHandler
from drover.kinds.sessions._common import run_per_session
from drover.kinds.sessions.values import (
    KernelStatus,
    SessionStatus,
    SessionWithKernels,
    TransitionStatus,
)
from drover.model.values import HandlerOptions, HandlerResult, StatusTransitions
from drover.plugins.markers import hookimpl
from drover.plugins.registry import HandlerRegistry

__all__ = ["StartSessions", "drover_register_handlers"]


class StartSessions(LifecycleHandler):
    """Start PREPARED sessions; leave CREATING ones to expire if creation hangs."""

    def __init__(self, backend: AgentBackend) -> None:
        self.backend = backend

    @classmethod
    def name(cls) -> str:
        """``start-sessions``."""
        return "start-sessions"

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        """PREPARED and CREATING."""
        return frozenset({SessionStatus.PREPARED, SessionStatus.CREATING})

    @property
    def watched_statuses(self) -> frozenset[str]:
        """CREATING: fetched only once creation has hung past the timeout."""
        return frozenset({SessionStatus.CREATING})

    @property
    def target_kernel_statuses(self) -> list[KernelStatus] | None:
        """PREPARED and CREATING."""
        return [KernelStatus.PREPARED, KernelStatus.CREATING]

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """CREATING on success; back to PENDING on expiry or give-up."""
        return StatusTransitions(
            success=TransitionStatus(SessionStatus.CREATING, KernelStatus.CREATING),
            need_retry=None,
            expired=TransitionStatus(SessionStatus.PENDING, KernelStatus.PENDING),
            give_up=TransitionStatus(SessionStatus.PENDING, KernelStatus.PENDING),
        )

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """A 600 s timeout."""
        return HandlerOptions(max_retries=5, timeout=600.0)

    async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult:
        """Call ``backend.create`` for each PREPARED session."""
        return await run_per_session(
            targets, self.backend.create, skip=lambda s: s.status != SessionStatus.PREPARED
        )


@hookimpl
def drover_register_handlers(register: HandlerRegistry) -> None:
    """Register ``start-sessions``."""
    register(StartSessions(register.context.backend))
