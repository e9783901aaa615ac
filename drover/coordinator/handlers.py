"""The handler ABCs that plugins implement, and promotions as data.

A :class:`LifecycleHandler` runs code on its targets; a :class:`DeclaredHandler` is one
that declares what it acts on as class attributes. A promotion runs no
code: it is a :class:`~drover.model.promotion.PromotionRule`, which plugins may
register as it is or spell as a :class:`SessionPromotionHandler` subclass.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from drover.model.checks import is_kebab_case
from drover.model.errors import InvalidHandlerError
from drover.model.filters import CandidateFilter, Children
from drover.model.kinds import Kinds
from drover.model.promotion import PromotionRule
from drover.model.status import KernelMatchType
from drover.model.values import (
    HandlerOptions,
    HandlerResult,
    StatusInfoRule,
    StatusTransitions,
)

__all__ = [
    "DeclaredHandler",
    "Handler",
    "LifecycleHandler",
    "LoadedHandlers",
    "SessionPromotionHandler",
    "fetch_filters",
    "handler_name",
    "is_kebab_case",
    "kind_of",
    "promotion_class",
    "rule_of",
    "target_statuses",
    "with_kind",
]


class LifecycleHandler(ABC):
    """A handler that acts on entities and reports which succeeded, failed or were skipped.

    :attr:`kind` says which entities (``""``, the default: the registered default
    kind, drover's sessions). The coordinator
    fetches those whose status is in :attr:`target_statuses` (and, if
    :attr:`target_child_statuses` is not ``None``, that have at least one
    child in those statuses, and that pass every :attr:`candidate_filters`),
    awaits :meth:`execute`, and then applies :meth:`status_transitions`
    itself: retries, give-ups and timeouts are the coordinator's judgement,
    not the handler's.

    Session handlers may spell the targets ``target_session_statuses`` and
    ``target_kernel_statuses``; handlers of other kinds use
    ``target_statuses`` and ``target_child_statuses``. Session handlers'
    ``execute`` gets :class:`SessionWithKernels` values, other kinds'
    :class:`~drover.model.values.Entity` values (the same attributes).
    """

    #: The kind of entity this handler acts on (``""``: the default kind, set on the
    #: handler when it is registered; see :func:`with_kind`).
    kind: ClassVar[str] = ""
    #: What each ``status_info`` this handler writes (``HandlerResult.status_infos``)
    #: means, in words: ``drover why`` shows it beside the value.
    status_info_meanings: ClassVar[Mapping[str, str]] = {}

    @classmethod
    @abstractmethod
    def name(cls) -> str:
        """Return the handler's unique kebab-case name."""

    @property
    def target_statuses(self) -> frozenset[str]:
        """Statuses this handler acts on (and owns, for timeouts)."""
        return frozenset(self.target_session_statuses)

    @property
    def target_child_statuses(self) -> frozenset[str] | None:
        """Keep only entities with at least one child in these statuses (``None``: no filter)."""
        found = self.target_kernel_statuses
        return None if found is None else frozenset(found)

    @property
    def target_session_statuses(self) -> frozenset[str]:
        """The session kind's spelling of :attr:`target_statuses`."""
        raise NotImplementedError(
            f"handler {type(self).name()!r} defines neither target_statuses "
            "nor target_session_statuses"
        )

    @property
    def target_kernel_statuses(self) -> Sequence[str] | None:
        """The session kind's spelling of :attr:`target_child_statuses`."""
        return None

    @property
    def candidate_filters(self) -> tuple[CandidateFilter, ...]:
        """Conditions compiled into the fetch, before its LIMIT (:mod:`drover.model.filters`)."""
        return ()

    @property
    def watched_statuses(self) -> frozenset[str]:
        """Target statuses fetched only once the entity's timeout has passed.

        A handler that acts on entities in some of its statuses and only has the
        coordinator judge the timeout of those in the others (``prepare-sessions``
        prepares SCHEDULED sessions and leaves PREPARING ones unmentioned until
        preparation hangs) names the others here: they are fetched once they
        have held their status past the timeout
        (:class:`~drover.model.filters.TimedOut`), never before, and entering
        them wakes nothing. With no timeout they are never fetched.
        """
        return frozenset()

    @classmethod
    @abstractmethod
    def status_transitions(cls) -> StatusTransitions:
        """Declare the transitions for success, need_retry, expired, give_up and named outcomes."""

    @abstractmethod
    async def execute(self, targets: Sequence[Any]) -> HandlerResult:
        """Act on ``targets`` and say which succeeded, failed or were skipped."""

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """Options used unless the configuration or an entity's spec overrides them."""
        return HandlerOptions()


class DeclaredHandler(LifecycleHandler):
    """A :class:`LifecycleHandler` that says what it is in class attributes, so that each
    handler of a plugin is a few declarations and an :meth:`execute`.

    :attr:`handler` is the name, :attr:`kind` the entities (inherited, default: the
    default kind), :attr:`statuses` the target statuses, :attr:`filters` the candidate
    filters, :attr:`transitions` the declared moves and :attr:`options` the default
    options. A plugin's own base class sets what its handlers share; each handler the
    rest. Override a method instead (``default_options``, say) when it is computed.

    Example::

        class FinishJobs(DeclaredHandler):
            kind = "job"
            handler = "finish-jobs"
            statuses = frozenset({"RUNNING"})
            filters = (Field("spec", ("done",), "eq", True),)
            transitions = StatusTransitions(success=Transition("DONE"))
            options = HandlerOptions(max_retries=None)

            async def execute(self, targets: Sequence[Any]) -> HandlerResult:
                return HandlerResult(successes=[t.id for t in targets])
    """

    #: The handler's unique kebab-case name (history's ``handler`` column).
    handler: ClassVar[str]
    #: The statuses this handler acts on (and owns, for timeouts).
    statuses: ClassVar[frozenset[str]] = frozenset()
    #: Conditions compiled into the fetch, before its LIMIT (:mod:`drover.model.filters`).
    filters: ClassVar[tuple[CandidateFilter, ...]] = ()
    #: Target statuses fetched only past the timeout (:attr:`watched_statuses`).
    watched: ClassVar[frozenset[str]] = frozenset()
    #: The transitions for success, need_retry, expired, give_up and named outcomes.
    transitions: ClassVar[StatusTransitions] = StatusTransitions()
    #: Options used unless the configuration or an entity's spec overrides them.
    options: ClassVar[HandlerOptions] = HandlerOptions()

    @classmethod
    def name(cls) -> str:
        """:attr:`handler`."""
        return cls.handler

    @property
    def target_statuses(self) -> frozenset[str]:
        """:attr:`statuses`."""
        return self.statuses

    @property
    def candidate_filters(self) -> tuple[CandidateFilter, ...]:
        """:attr:`filters`."""
        return self.filters

    @property
    def watched_statuses(self) -> frozenset[str]:
        """:attr:`watched`."""
        return self.watched

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """:attr:`transitions`."""
        return cls.transitions

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """:attr:`options`."""
        return cls.options


def fetch_filters(handler: LifecycleHandler) -> tuple[CandidateFilter, ...]:
    """Every filter the fetch applies: the child-status filter, then the declared ones."""
    child = handler.target_child_statuses
    declared = tuple(handler.candidate_filters)
    if child is None:
        return declared
    return (Children(frozenset(child)), *declared)


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
    def target_session_statuses(self) -> frozenset[str]:
        """Session statuses to consider for promotion."""

    @property
    @abstractmethod
    def check_kernel_statuses(self) -> frozenset[str]:
        """Kernel statuses the match is evaluated against."""

    @property
    @abstractmethod
    def match_type(self) -> KernelMatchType:
        """ALL, ANY or NOT_ANY of the session's kernels must be in :attr:`check_kernel_statuses`."""

    @classmethod
    @abstractmethod
    def success_session_status(cls) -> str:
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


def target_statuses(handler: Handler) -> frozenset[str]:
    """The statuses a handler (or promotion rule) acts on."""
    if isinstance(handler, PromotionRule):
        return handler.from_statuses
    return handler.target_statuses


def kind_of(handler: Handler) -> str:
    """The kind of entity a handler (or promotion rule) acts on."""
    return handler.kind


class LoadedHandlers(dict[str, Handler]):
    """The handlers a coordinator loaded, by name, with what they were loaded with: the
    registered ``kinds`` and each handler's resolved ``options`` (declared, then
    configured). What the graph reads (:func:`drover.plugins.graph.check_graph` finds a
    kind's parent here; an ``expired`` edge needs a handler with a timeout)."""

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        *,
        kinds: Kinds,
        options: Mapping[str, HandlerOptions] | None = None,
    ) -> None:
        super().__init__(handlers)
        self.kinds = kinds
        self.options: Mapping[str, HandlerOptions] = dict(options or {})


def with_kind(handler: Handler, kinds: Kinds) -> Handler:
    """``handler`` acting on a kind: one that names none (``kind == ""``) gets the default
    kind of ``kinds`` (a rule is replaced, a handler gets it as its own attribute).

    InvalidHandlerError when it names none and no registered kind is the default.
    """
    if handler.kind:
        return handler
    if kinds.default is None:
        raise InvalidHandlerError(
            f"handler {handler_name(handler)!r} names no kind, and no registered kind is "
            f"the default one; set its kind (registered: {sorted(kinds)})"
        )
    if isinstance(handler, PromotionRule):
        return attrs.evolve(handler, kind=kinds.default)
    # The class attribute stays as declared; this handler object acts on the default kind.
    setattr(handler, "kind", kinds.default)  # noqa: B010
    return handler


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
        def target_session_statuses(self) -> frozenset[str]:
            return rule.from_statuses

        @property
        def check_kernel_statuses(self) -> frozenset[str]:
            return rule.kernel_statuses

        @property
        def match_type(self) -> KernelMatchType:
            return rule.match

        @classmethod
        def success_session_status(cls) -> str:
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
