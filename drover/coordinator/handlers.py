"""The two handler ABCs that plugins implement."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence

from drover.model.status import KernelMatchType, KernelStatus, SessionStatus
from drover.model.values import (
    HandlerOptions,
    HandlerResult,
    SessionWithKernels,
    StatusInfoRule,
    StatusTransitions,
)

__all__ = ["Handler", "LifecycleHandler", "SessionPromotionHandler", "is_kebab_case"]

_KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def is_kebab_case(name: str) -> bool:
    """Tell whether ``name`` is a valid handler name (``kebab-case``)."""
    return bool(_KEBAB.match(name))


class LifecycleHandler(ABC):
    """A handler that acts on sessions and reports which succeeded, failed or were skipped.

    The coordinator fetches the sessions whose status is in
    :attr:`target_session_statuses` (and, if :attr:`target_kernel_statuses` is
    not ``None``, that have at least one kernel in those statuses), awaits
    :meth:`execute`, and then applies :meth:`status_transitions` itself:
    retries, give-ups and timeouts are the coordinator's judgement, not the
    handler's.
    """

    @classmethod
    @abstractmethod
    def name(cls) -> str:
        """Return the handler's unique kebab-case name."""

    @property
    @abstractmethod
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        """Session statuses this handler acts on (and owns, for timeouts)."""

    @property
    @abstractmethod
    def target_kernel_statuses(self) -> list[KernelStatus] | None:
        """Keep only sessions with at least one kernel in these statuses (``None``: no filter)."""

    @classmethod
    @abstractmethod
    def status_transitions(cls) -> StatusTransitions:
        """Declare the transitions for success, need_retry, expired and give_up."""

    @abstractmethod
    async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult:
        """Act on ``targets`` and say which succeeded, failed or were skipped."""

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """Options used unless the configuration or a session's spec overrides them."""
        return HandlerOptions()


class SessionPromotionHandler(ABC):
    """A handler that promotes sessions whose kernels ALL / ANY / NOT_ANY match statuses.

    Promotion needs no code: the coordinator evaluates the kernel condition in
    SQL and moves each matching session to :meth:`success_session_status`.
    Kernels are never changed by a promotion.
    """

    @classmethod
    @abstractmethod
    def name(cls) -> str:
        """Return the handler's unique kebab-case name."""

    @property
    @abstractmethod
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        """Session statuses to consider for promotion."""

    @property
    @abstractmethod
    def check_kernel_statuses(self) -> frozenset[KernelStatus]:
        """Kernel statuses the match is evaluated against."""

    @property
    @abstractmethod
    def match_type(self) -> KernelMatchType:
        """ALL, ANY or NOT_ANY of the session's kernels must be in :attr:`check_kernel_statuses`."""

    @classmethod
    @abstractmethod
    def success_session_status(cls) -> SessionStatus:
        """The status a matching session is promoted to."""

    @classmethod
    def status_info_rule(cls) -> StatusInfoRule | None:
        """Optionally set ``status_info`` on promoted sessions (``None``: leave it)."""
        return None

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """Options for promotion ticks; only ``batch_size`` applies."""
        return HandlerOptions(max_retries=None)


Handler = LifecycleHandler | SessionPromotionHandler
