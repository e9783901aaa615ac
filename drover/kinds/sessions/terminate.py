"""``terminate-sessions``: destroy the live kernels of TERMINATING sessions."""

from __future__ import annotations

from collections.abc import Sequence

from drover.backends.base import AgentBackend
from drover.coordinator.handlers import LifecycleHandler
from drover.kinds.sessions._common import run_per_session
from drover.kinds.sessions.values import (
    TERMINAL_KERNEL_STATUSES,
    KernelStatus,
    SessionStatus,
    SessionWithKernels,
    TransitionStatus,
)
from drover.model.values import HandlerOptions, HandlerResult, StatusTransitions
from drover.plugins.markers import hookimpl
from drover.plugins.registry import HandlerRegistry

__all__ = ["TerminateSessions", "drover_register_handlers"]


class TerminateSessions(LifecycleHandler):
    """Destroy TERMINATING sessions' kernels; they end TERMINATED whatever happens."""

    def __init__(self, backend: AgentBackend) -> None:
        self.backend = backend

    @classmethod
    def name(cls) -> str:
        """``terminate-sessions``."""
        return "terminate-sessions"

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        """TERMINATING."""
        return frozenset({SessionStatus.TERMINATING})

    @property
    def target_kernel_statuses(self) -> list[KernelStatus] | None:
        """Every non-terminal kernel status."""
        return [s for s in KernelStatus if s not in TERMINAL_KERNEL_STATUSES]

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """TERMINATED on success, expiry and give-up alike."""
        done = TransitionStatus(SessionStatus.TERMINATED, KernelStatus.TERMINATED)
        return StatusTransitions(success=done, need_retry=None, expired=done, give_up=done)

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """A 300 s timeout."""
        return HandlerOptions(max_retries=5, timeout=300.0)

    async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult:
        """Call ``backend.destroy`` for each target."""
        return await run_per_session(targets, self.backend.destroy)


@hookimpl
def drover_register_handlers(register: HandlerRegistry) -> None:
    """Register ``terminate-sessions``."""
    register(TerminateSessions(register.context.backend))
