"""Load-time checks of each handler and of the handler set. Errors name plugin and handler."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Protocol

from drover.coordinator.handlers import Handler, LifecycleHandler, SessionPromotionHandler
from drover.model.checks import is_kebab_case
from drover.model.errors import InvalidHandlerError
from drover.model.filters import (
    AllOf,
    AnyOf,
    CandidateFilter,
    ChildCount,
    Children,
    Dependents,
    LatestChild,
    Not,
    Parent,
    PoolHasRoom,
)
from drover.model.kinds import EntityKind, Kinds
from drover.model.options import validate_options
from drover.model.promotion import PromotionRule
from drover.model.status import KernelMatchType, SchedulingResult
from drover.model.values import StatusTransitions, Transition

__all__ = ["Registration", "validate_handlers", "validate_promotion_handler"]


class Registration(Protocol):
    """What the checks read of a registered handler
    (:class:`~drover.plugins.registry.RegisteredHandler` is one)."""

    @property
    def handler(self) -> Handler:
        """The handler, or the promotion rule."""

    @property
    def plugin(self) -> str:
        """The name of the plugin that registered it."""


def _check_members(values: Iterable[object], enum: type, what: str, where: str) -> None:
    for value in values:
        if not isinstance(value, enum):
            raise InvalidHandlerError(
                f"{where}: {what} contains {value!r}, which is not a {enum.__name__}"
            )


def _check_name(name: object, where: str) -> None:
    if not isinstance(name, str) or not is_kebab_case(name):
        raise InvalidHandlerError(f"{where}: name() must return a kebab-case string")


def _check_targets(targets: object, what: str, where: str, enum: type) -> None:
    if not isinstance(targets, frozenset):
        raise InvalidHandlerError(f"{where}: {what} must be a frozenset")
    _check_members(targets, enum, what, where)
    if not targets:
        raise InvalidHandlerError(f"{where}: {what} is empty")


def _check_transition(
    value: object, field: str, where: str, kind: EntityKind, child: EntityKind | None
) -> None:
    if value is None:
        return
    if not isinstance(value, Transition):
        raise InvalidHandlerError(
            f"{where}: status_transitions().{field} is {value!r}, not a Transition "
            "(TransitionStatus for sessions) or None"
        )
    own, theirs = value.sides
    if value.to is not None and not isinstance(value.to, kind.statuses):
        raise InvalidHandlerError(
            f"{where}: status_transitions().{field}.{own} is {value.to!r}, "
            f"not a {kind.statuses.__name__}"
        )
    if value.children is not None:
        if child is None:
            raise InvalidHandlerError(
                f"{where}: status_transitions().{field}.{theirs} is set, but kind "
                f"{kind.name!r} has no child kind"
            )
        if not isinstance(value.children, child.statuses):
            raise InvalidHandlerError(
                f"{where}: status_transitions().{field}.{theirs} is {value.children!r}, "
                f"not a {child.statuses.__name__}"
            )


def _check_pool_filter(f: PoolHasRoom, kinds: Kinds, where: str) -> None:
    """A :class:`PoolHasRoom` naming no pool family nor a family's member: the filter
    cannot tell which member a candidate would take (the apply still refuses it)."""
    for name in sorted(f.pools or ()):
        pool = kinds.pool(name)
        family = name if name.endswith("*") else pool.family if pool is not None else None
        if family is not None:
            raise InvalidHandlerError(
                f"{where}: candidate filter PoolHasRoom names {name!r} of the pool family "
                f"{family!r}; it checks declared pools only (the apply still admits a "
                "family's members up to their capacity)"
            )


def _check_filter(f: object, kind: EntityKind, kinds: Kinds, where: str) -> None:
    """A candidate filter, and the statuses it names against the kinds it reads."""
    if not isinstance(f, CandidateFilter):
        raise InvalidHandlerError(f"{where}: candidate_filters contains {f!r}, not a filter")
    if isinstance(f, AnyOf | AllOf):
        for inner in f.filters:
            _check_filter(inner, kind, kinds, where)
        return
    if isinstance(f, Not):
        _check_filter(f.filter, kind, kinds, where)
        return
    named: frozenset[str] | None = None
    other: EntityKind | None = None
    if isinstance(f, Parent):
        if kind.parent is None:
            raise InvalidHandlerError(
                f"{where}: candidate filter {f!r}, but kind {kind.name!r} has no parent kind"
            )
        named, other = f.statuses, kinds[kind.parent]
    elif isinstance(f, Children | ChildCount | LatestChild) and f.statuses is not None:
        other = kinds.child_of(kind.name)
        if other is None:
            raise InvalidHandlerError(
                f"{where}: candidate filter {f!r}, but kind {kind.name!r} has no child kind"
            )
        named = f.statuses
    elif isinstance(f, PoolHasRoom):
        _check_pool_filter(f, kinds, where)
    elif isinstance(f, Dependents) and f.statuses is not None:
        # Dependents may be of any kind: a status no kind has is a typo.
        every = {s for name in kinds for s in kinds[name].status_names}
        unknown = sorted(set(f.statuses) - every)
        if unknown:
            raise InvalidHandlerError(
                f"{where}: candidate filter Dependents names status(es) {unknown}, "
                "not statuses of any registered kind"
            )
    if named is not None and other is not None:
        unknown = sorted(set(named) - set(other.status_names))
        if unknown:
            raise InvalidHandlerError(
                f"{where}: candidate filter {type(f).__name__} names status(es) {unknown}, "
                f"not statuses of kind {other.name!r}: {list(other.status_names)}"
            )


def _validate_lifecycle(handler: LifecycleHandler, plugin: str, kinds: Kinds) -> str:
    name = type(handler).name()
    where = f"handler {name!r} of plugin {plugin!r}"
    _check_name(name, where)
    try:
        kind = kinds[handler.kind]
    except InvalidHandlerError as error:
        raise InvalidHandlerError(f"{where}: {error}") from None
    child = kinds.child_of(kind.name)
    # Name the property the handler itself wrote (the design card's spelling, or the generic).
    session_spelling = type(handler).target_statuses is LifecycleHandler.target_statuses
    spelled = "target_session_statuses" if session_spelling else "target_statuses"
    try:
        targets = handler.target_statuses
    except NotImplementedError as error:
        raise InvalidHandlerError(f"{where}: {error}") from None
    _check_targets(targets, spelled, where, kind.statuses)
    validate_options(type(handler).default_options(), where=f"{where}: default_options()")
    child_targets = handler.target_child_statuses
    if child_targets is not None:
        kernel_spelling = (
            type(handler).target_child_statuses is LifecycleHandler.target_child_statuses
        )
        what = "target_kernel_statuses" if kernel_spelling else "target_child_statuses"
        if child is None:
            raise InvalidHandlerError(f"{where}: {what} is set, but {kind.name!r} has no children")
        _check_members(child_targets, child.statuses, what, where)
    for f in handler.candidate_filters:
        _check_filter(f, kind, kinds, where)
    transitions = type(handler).status_transitions()
    if not isinstance(transitions, StatusTransitions):
        raise InvalidHandlerError(f"{where}: status_transitions() must return StatusTransitions")
    for field in ("success", "need_retry", "expired", "give_up"):
        _check_transition(getattr(transitions, field), field, where, kind, child)
    for outcome, transition in transitions.outcomes.items():
        if not is_kebab_case(outcome) or outcome.upper() in SchedulingResult.__members__:
            raise InvalidHandlerError(
                f"{where}: named outcome {outcome!r} must be kebab-case and not one of "
                f"{', '.join(m.lower() for m in SchedulingResult.__members__)}"
            )
        _check_transition(transition, f"outcomes[{outcome!r}]", where, kind, child)
    _check_stays_ended(transitions, frozenset(targets), where, kind)
    return name


def _check_stays_ended(
    transitions: StatusTransitions, targets: frozenset[str], where: str, kind: EntityKind
) -> None:
    """A handler never takes an entity out of a terminal status: ``reopen`` does that."""
    ended = sorted(str(s) for s in targets if s in kind.terminal)
    if not ended:
        return
    classes = ("success", "need_retry", "expired", "give_up")
    declared = [(f, getattr(transitions, f)) for f in classes]
    declared += [(f"outcomes[{o!r}]", t) for o, t in sorted(transitions.outcomes.items())]
    for field, transition in declared:
        if transition is None or transition.to is None:
            continue
        leaving = [s for s in ended if s != transition.to]
        if leaving:
            raise InvalidHandlerError(
                f"{where}: status_transitions().{field} moves {kind.name}s out of the terminal "
                f"status {leaving[0]} to {transition.to}; a handler cannot leave a terminal "
                "status (Repository.reopen does, and clears the result)"
            )


def validate_promotion_handler(handler: SessionPromotionHandler, plugin: str) -> None:
    """Check a promotion spelled as a :class:`SessionPromotionHandler` before it becomes a rule."""
    cls = type(handler)
    name = cls.name()
    where = f"handler {name!r} of plugin {plugin!r}"
    _check_name(name, where)
    targets = handler.target_session_statuses
    # Statuses of a kind's enum; which kind's is checked once the rule is registered.
    _check_targets(targets, "target_session_statuses", where, StrEnum)
    validate_options(cls.default_options(), where=f"{where}: default_options()")
    _check_members(handler.check_kernel_statuses, StrEnum, "check_kernel_statuses", where)
    if not handler.check_kernel_statuses:
        raise InvalidHandlerError(f"{where}: check_kernel_statuses is empty")
    if not isinstance(handler.match_type, KernelMatchType):
        raise InvalidHandlerError(f"{where}: match_type must be a KernelMatchType")
    success = cls.success_session_status()
    if not isinstance(success, StrEnum):
        raise InvalidHandlerError(
            f"{where}: success_session_status() returned {success!r}, not a status (a StrEnum "
            "member, such as SessionStatus.RUNNING)"
        )
    if success in targets:
        raise InvalidHandlerError(
            f"{where}: success_session_status() {success} is one of its own target statuses"
        )


def _validate_rule(rule: PromotionRule, plugin: str, kinds: Kinds) -> str:
    where = f"promotion rule {rule.name!r} of plugin {plugin!r}"
    _check_name(rule.name, where)
    try:
        kind = kinds[rule.kind]
    except InvalidHandlerError as error:
        raise InvalidHandlerError(f"{where}: {error}") from None
    child = kinds.child_of(kind.name)
    if child is None:
        raise InvalidHandlerError(f"{where}: kind {kind.name!r} has no children to match")
    _check_targets(rule.from_statuses, "from_statuses", where, kind.statuses)
    _check_members(rule.kernel_statuses, child.statuses, "kernel_statuses", where)
    if not rule.kernel_statuses:
        raise InvalidHandlerError(f"{where}: kernel_statuses is empty")
    if not isinstance(rule.match, KernelMatchType):
        raise InvalidHandlerError(f"{where}: match must be a KernelMatchType")
    if not isinstance(rule.to_status, kind.statuses):
        raise InvalidHandlerError(
            f"{where}: to_status {rule.to_status!r} is not a {kind.statuses.__name__}"
        )
    if rule.to_status in rule.from_statuses:
        raise InvalidHandlerError(
            f"{where}: to_status {rule.to_status} is one of its own from_statuses"
        )
    ended = sorted(str(s) for s in rule.from_statuses if s in kind.terminal)
    if ended:
        raise InvalidHandlerError(
            f"{where}: it would move {kind.name}s out of the terminal status {ended[0]}; "
            "a promotion cannot leave a terminal status (Repository.reopen does)"
        )
    for from_status in rule.from_statuses:
        for pool in kinds.pools_entered(kind.name, str(from_status), str(rule.to_status)):
            if kind.name in pool.claimed_by:
                # The promotion's one UPDATE moves up to a number of entities; it cannot
                # weigh what each claims.
                raise InvalidHandlerError(
                    f"{where}: it would move {kind.name}s into {rule.to_status}, where they "
                    f"hold the claimed pool {pool.name!r}; a promotion cannot weigh claims "
                    "(move them with a handler)"
                )
    validate_options(rule.options, where=f"{where}: options")
    return rule.name


def validate_handlers(entries: Sequence[Registration], kinds: Kinds) -> None:
    """Raise InvalidHandlerError for the first invalid handler or duplicate name.

    Each handler is checked against its kind among ``kinds`` (statuses, child
    statuses, transitions and named outcomes).
    """
    known = kinds
    seen: dict[str, Registration] = {}
    for entry in entries:
        handler = entry.handler
        if isinstance(handler, PromotionRule):
            name = _validate_rule(handler, entry.plugin, known)
        else:
            name = _validate_lifecycle(handler, entry.plugin, known)
        if name in seen:
            raise InvalidHandlerError(
                f"duplicate handler name {name!r}: registered by plugin {seen[name].plugin!r} "
                f"and by plugin {entry.plugin!r}"
            )
        seen[name] = entry
