"""The handler ABCs that plugins implement, and promotions as data.

A :class:`LifecycleHandler` runs code on its targets. A promotion runs no
code: it is a :class:`~drover.model.promotion.PromotionRule`, which plugins may
register as it is or spell as a :class:`SessionPromotionHandler` subclass.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from drover.model.promotion import PromotionRule
from drover.model.spec import is_kebab_case
from drover.model.status import KernelMatchType, KernelStatus, SessionStatus
from drover.model.values import (
    HandlerOptions,
    HandlerResult,
    SessionWithKernels,
    StatusInfoRule,
    StatusTransitions,
)

__all__ = [
    "Handler",
    "LifecycleHandler",
    "SessionPromotionHandler",
    "handler_name",
    "is_kebab_case",
    "promotion_class",
    "rule_of",
    "target_statuses",
]


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


Handler = LifecycleHandler | PromotionRule
"""What the coordinator runs: lifecycle handlers, and promotions as rules."""


def handler_name(handler: Handler) -> str:
    """The name a handler (or promotion rule) is registered under."""
    if isinstance(handler, PromotionRule):
        return handler.name
    return type(handler).name()


def target_statuses(handler: Handler) -> frozenset[SessionStatus]:
    """The session statuses a handler (or promotion rule) acts on."""
    if isinstance(handler, PromotionRule):
        return handler.from_statuses
    return handler.target_session_statuses


def rule_of(handler: SessionPromotionHandler) -> PromotionRule:
    """The :class:`PromotionRule` a :class:`SessionPromotionHandler` spells."""
    cls = type(handler)
    return PromotionRule(
        name=cls.name(),
        from_statuses=handler.target_session_statuses,
        kernel_statuses=handler.check_kernel_statuses,
        match=handler.match_type,
        to_status=cls.success_session_status(),
        status_info=cls.status_info_rule(),
        options=cls.default_options(),
    )


def promotion_class(rule: PromotionRule) -> type[SessionPromotionHandler]:
    """A :class:`SessionPromotionHandler` subclass spelling ``rule`` (for code that wants one)."""

    class _Promotion(SessionPromotionHandler):
        @classmethod
        def name(cls) -> str:
            return rule.name

        @property
        def target_session_statuses(self) -> frozenset[SessionStatus]:
            return rule.from_statuses

        @property
        def check_kernel_statuses(self) -> frozenset[KernelStatus]:
            return rule.kernel_statuses

        @property
        def match_type(self) -> KernelMatchType:
            return rule.match

        @classmethod
        def success_session_status(cls) -> SessionStatus:
            return rule.to_status

        @classmethod
        def status_info_rule(cls) -> StatusInfoRule | None:
            return rule.status_info

        @classmethod
        def default_options(cls) -> HandlerOptions:
            return rule.options

    words = [w.capitalize() for w in rule.name.split("-")]
    _Promotion.__name__ = _Promotion.__qualname__ = "".join(words)
    _Promotion.__doc__ = f"The ``{rule.name}`` promotion rule as a SessionPromotionHandler."
    return _Promotion
