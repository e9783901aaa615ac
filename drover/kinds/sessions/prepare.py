"""``prepare-sessions``: ask the backend to prepare SCHEDULED sessions' kernels."""

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

__all__ = ["PrepareSessions", "drover_register_handlers"]


class PrepareSessions(LifecycleHandler):
    """Start preparation of SCHEDULED sessions.

    PREPARING sessions are watched (:attr:`watched_statuses`): fetched only
    once preparation has hung past the timeout, and left unmentioned, so that
    the coordinator sends them back to PENDING. ``promote-to-prepared`` moves
    them on when their kernels are ready.
    """

    def __init__(self, backend: AgentBackend) -> None:
        self.backend = backend

    @classmethod
    def name(cls) -> str:
        """``prepare-sessions``."""
        return "prepare-sessions"

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        """SCHEDULED and PREPARING."""
        return frozenset({SessionStatus.SCHEDULED, SessionStatus.PREPARING})

    @property
    def watched_statuses(self) -> frozenset[str]:
        """PREPARING: fetched only once preparation has hung past the timeout."""
        return frozenset({SessionStatus.PREPARING})

    @property
    def target_kernel_statuses(self) -> list[KernelStatus] | None:
        """SCHEDULED, PREPARING and PULLING."""
        return [KernelStatus.SCHEDULED, KernelStatus.PREPARING, KernelStatus.PULLING]

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """PREPARING on success; back to PENDING on expiry or give-up."""
        return StatusTransitions(
            success=TransitionStatus(SessionStatus.PREPARING, KernelStatus.PREPARING),
            need_retry=None,
            expired=TransitionStatus(SessionStatus.PENDING, KernelStatus.PENDING),
            give_up=TransitionStatus(SessionStatus.PENDING, KernelStatus.PENDING),
        )

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """A 900 s timeout."""
        return HandlerOptions(max_retries=5, timeout=900.0)

    async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult:
        """Call ``backend.prepare`` for each SCHEDULED session."""
        return await run_per_session(
            targets, self.backend.prepare, skip=lambda s: s.status != SessionStatus.SCHEDULED
        )


@hookimpl
def drover_register_handlers(register: HandlerRegistry) -> None:
    """Register ``prepare-sessions``."""
    register(PrepareSessions(register.context.backend))
