"""The four built-in promotion handlers, each registered by its own plugin."""

from __future__ import annotations

from drover.coordinator.handlers import SessionPromotionHandler
from drover.model.status import (
    TERMINAL_KERNEL_STATUSES,
    KernelMatchType,
    KernelStatus,
    SessionStatus,
)
from drover.model.values import StatusInfoRule
from drover.plugins.markers import hookimpl
from drover.plugins.registry import HandlerRegistry

__all__ = [
    "PROMOTION_PLUGINS",
    "DetectStartFailure",
    "DetectTermination",
    "PromoteToPrepared",
    "PromoteToRunning",
    "PromoteToTerminated",
]

_K = KernelStatus
_NON_TERMINAL = frozenset(s for s in KernelStatus if s not in TERMINAL_KERNEL_STATUSES)


class PromoteToPrepared(SessionPromotionHandler):
    """SCHEDULED/PREPARING -> PREPARED once no kernel is still being prepared."""

    @classmethod
    def name(cls) -> str:
        """``promote-to-prepared``."""
        return "promote-to-prepared"

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        """SCHEDULED and PREPARING."""
        return frozenset({SessionStatus.SCHEDULED, SessionStatus.PREPARING})

    @property
    def check_kernel_statuses(self) -> frozenset[KernelStatus]:
        """PENDING, SCHEDULED, PREPARING and PULLING."""
        return frozenset({_K.PENDING, _K.SCHEDULED, _K.PREPARING, _K.PULLING})

    @property
    def match_type(self) -> KernelMatchType:
        """NOT_ANY."""
        return KernelMatchType.NOT_ANY

    @classmethod
    def success_session_status(cls) -> SessionStatus:
        """PREPARED."""
        return SessionStatus.PREPARED


class PromoteToRunning(SessionPromotionHandler):
    """CREATING -> RUNNING once no kernel is in a status before RUNNING."""

    @classmethod
    def name(cls) -> str:
        """``promote-to-running``."""
        return "promote-to-running"

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        """CREATING."""
        return frozenset({SessionStatus.CREATING})

    @property
    def check_kernel_statuses(self) -> frozenset[KernelStatus]:
        """Every non-terminal status before RUNNING."""
        return frozenset(
            {_K.PENDING, _K.SCHEDULED, _K.PREPARING, _K.PULLING, _K.PREPARED, _K.CREATING}
        )

    @property
    def match_type(self) -> KernelMatchType:
        """NOT_ANY."""
        return KernelMatchType.NOT_ANY

    @classmethod
    def success_session_status(cls) -> SessionStatus:
        """RUNNING."""
        return SessionStatus.RUNNING


class PromoteToTerminated(SessionPromotionHandler):
    """TERMINATING -> TERMINATED once every kernel has ended."""

    @classmethod
    def name(cls) -> str:
        """``promote-to-terminated``."""
        return "promote-to-terminated"

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        """TERMINATING."""
        return frozenset({SessionStatus.TERMINATING})

    @property
    def check_kernel_statuses(self) -> frozenset[KernelStatus]:
        """Every non-terminal status."""
        return _NON_TERMINAL

    @property
    def match_type(self) -> KernelMatchType:
        """NOT_ANY."""
        return KernelMatchType.NOT_ANY

    @classmethod
    def success_session_status(cls) -> SessionStatus:
        """TERMINATED."""
        return SessionStatus.TERMINATED


class DetectTermination(SessionPromotionHandler):
    """RUNNING -> TERMINATING as soon as any kernel has ended.

    ``status_info`` becomes ``ABNORMAL_TERMINATION`` if a kernel is in ERROR,
    else ``KERNEL_EXITED``.
    """

    @classmethod
    def name(cls) -> str:
        """``detect-termination``."""
        return "detect-termination"

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        """RUNNING."""
        return frozenset({SessionStatus.RUNNING})

    @property
    def check_kernel_statuses(self) -> frozenset[KernelStatus]:
        """TERMINATED, CANCELLED and ERROR."""
        return TERMINAL_KERNEL_STATUSES

    @property
    def match_type(self) -> KernelMatchType:
        """ANY."""
        return KernelMatchType.ANY

    @classmethod
    def success_session_status(cls) -> SessionStatus:
        """TERMINATING."""
        return SessionStatus.TERMINATING

    @classmethod
    def status_info_rule(cls) -> StatusInfoRule:
        """ABNORMAL_TERMINATION if any kernel is in ERROR, else KERNEL_EXITED."""
        return StatusInfoRule(
            default="KERNEL_EXITED",
            if_any_kernel=((frozenset({_K.ERROR}), "ABNORMAL_TERMINATION"),),
        )


class DetectStartFailure(SessionPromotionHandler):
    """Before any kernel can have run -> TERMINATING as soon as any kernel has ended.

    Not in the Sokovan proposal: without it a session whose only kernel fails
    its setup is promoted to PREPARED and then waits forever, because
    ``start-sessions`` only fetches sessions with a PREPARED or CREATING kernel
    (and a PENDING one likewise, as ``schedule-sessions`` wants a PENDING
    kernel). CREATING is left to ``promote-to-running`` and
    ``detect-termination``: kernels may already have run there.
    ``status_info`` becomes ``START_FAILED`` if a kernel is in ERROR, else
    ``KERNEL_EXITED``.
    """

    @classmethod
    def name(cls) -> str:
        """``detect-start-failure``."""
        return "detect-start-failure"

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        """PENDING, SCHEDULED, PREPARING and PREPARED."""
        return frozenset(
            {
                SessionStatus.PENDING,
                SessionStatus.SCHEDULED,
                SessionStatus.PREPARING,
                SessionStatus.PREPARED,
            }
        )

    @property
    def check_kernel_statuses(self) -> frozenset[KernelStatus]:
        """TERMINATED, CANCELLED and ERROR."""
        return TERMINAL_KERNEL_STATUSES

    @property
    def match_type(self) -> KernelMatchType:
        """ANY."""
        return KernelMatchType.ANY

    @classmethod
    def success_session_status(cls) -> SessionStatus:
        """TERMINATING."""
        return SessionStatus.TERMINATING

    @classmethod
    def status_info_rule(cls) -> StatusInfoRule:
        """START_FAILED if any kernel is in ERROR, else KERNEL_EXITED."""
        return StatusInfoRule(
            default="KERNEL_EXITED",
            if_any_kernel=((frozenset({_K.ERROR}), "START_FAILED"),),
        )


class _PromotionPlugin:
    """A plugin object that registers one promotion handler."""

    def __init__(self, handler_class: type[SessionPromotionHandler]) -> None:
        self.handler_class = handler_class

    @hookimpl
    def drover_register_handlers(self, register: HandlerRegistry) -> None:
        """Register this plugin's promotion handler."""
        register(self.handler_class())


#: ``(plugin name, plugin)`` for each promotion handler.
PROMOTION_PLUGINS: list[tuple[str, object]] = [
    (f"drover.handlers.{cls.name()}", _PromotionPlugin(cls))
    for cls in (
        PromoteToPrepared,
        PromoteToRunning,
        PromoteToTerminated,
        DetectTermination,
        DetectStartFailure,
    )
]
