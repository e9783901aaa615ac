"""Load-time checks of each handler and of the handler set. Errors name plugin and handler."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from drover.coordinator.handlers import LifecycleHandler, SessionPromotionHandler
from drover.model.errors import InvalidHandlerError
from drover.model.options import validate_options
from drover.model.promotion import PromotionRule
from drover.model.spec import is_kebab_case
from drover.model.status import KernelMatchType, KernelStatus, SessionStatus
from drover.model.values import StatusTransitions, TransitionStatus

if TYPE_CHECKING:
    from drover.plugins.registry import RegisteredHandler

__all__ = ["validate_handlers", "validate_promotion_handler"]


def _check_members(values: Iterable[object], enum: type, what: str, where: str) -> None:
    for value in values:
        if not isinstance(value, enum):
            raise InvalidHandlerError(
                f"{where}: {what} contains {value!r}, which is not a {enum.__name__}"
            )


def _check_name(name: object, where: str) -> None:
    if not isinstance(name, str) or not is_kebab_case(name):
        raise InvalidHandlerError(f"{where}: name() must return a kebab-case string")


def _check_targets(targets: object, what: str, where: str) -> None:
    if not isinstance(targets, frozenset):
        raise InvalidHandlerError(f"{where}: {what} must be a frozenset")
    _check_members(targets, SessionStatus, what, where)
    if not targets:
        raise InvalidHandlerError(f"{where}: {what} is empty")


def _check_transition(value: object, field: str, where: str) -> None:
    if value is None:
        return
    if not isinstance(value, TransitionStatus):
        raise InvalidHandlerError(
            f"{where}: status_transitions().{field} is {value!r}, not a TransitionStatus or None"
        )
    if value.session is not None and not isinstance(value.session, SessionStatus):
        raise InvalidHandlerError(
            f"{where}: status_transitions().{field}.session is {value.session!r}, "
            "not a SessionStatus"
        )
    if value.kernel is not None and not isinstance(value.kernel, KernelStatus):
        raise InvalidHandlerError(
            f"{where}: status_transitions().{field}.kernel is {value.kernel!r}, not a KernelStatus"
        )


def _validate_lifecycle(handler: LifecycleHandler, plugin: str) -> str:
    name = type(handler).name()
    where = f"handler {name!r} of plugin {plugin!r}"
    _check_name(name, where)
    _check_targets(handler.target_session_statuses, "target_session_statuses", where)
    validate_options(type(handler).default_options(), where=f"{where}: default_options()")
    kernel_targets = handler.target_kernel_statuses
    if kernel_targets is not None:
        _check_members(kernel_targets, KernelStatus, "target_kernel_statuses", where)
    transitions = type(handler).status_transitions()
    if not isinstance(transitions, StatusTransitions):
        raise InvalidHandlerError(f"{where}: status_transitions() must return StatusTransitions")
    for field in ("success", "need_retry", "expired", "give_up"):
        _check_transition(getattr(transitions, field), field, where)
    return name


def validate_promotion_handler(handler: SessionPromotionHandler, plugin: str) -> None:
    """Check a promotion spelled as a :class:`SessionPromotionHandler` before it becomes a rule."""
    cls = type(handler)
    name = cls.name()
    where = f"handler {name!r} of plugin {plugin!r}"
    _check_name(name, where)
    targets = handler.target_session_statuses
    _check_targets(targets, "target_session_statuses", where)
    validate_options(cls.default_options(), where=f"{where}: default_options()")
    _check_members(handler.check_kernel_statuses, KernelStatus, "check_kernel_statuses", where)
    if not handler.check_kernel_statuses:
        raise InvalidHandlerError(f"{where}: check_kernel_statuses is empty")
    if not isinstance(handler.match_type, KernelMatchType):
        raise InvalidHandlerError(f"{where}: match_type must be a KernelMatchType")
    success = cls.success_session_status()
    if not isinstance(success, SessionStatus):
        raise InvalidHandlerError(
            f"{where}: success_session_status() returned {success!r}, not a SessionStatus"
        )
    if success in targets:
        raise InvalidHandlerError(
            f"{where}: success_session_status() {success} is one of its own target statuses"
        )


def _validate_rule(rule: PromotionRule, plugin: str) -> str:
    where = f"promotion rule {rule.name!r} of plugin {plugin!r}"
    _check_name(rule.name, where)
    _check_targets(rule.from_statuses, "from_statuses", where)
    _check_members(rule.kernel_statuses, KernelStatus, "kernel_statuses", where)
    if not rule.kernel_statuses:
        raise InvalidHandlerError(f"{where}: kernel_statuses is empty")
    if not isinstance(rule.match, KernelMatchType):
        raise InvalidHandlerError(f"{where}: match must be a KernelMatchType")
    if not isinstance(rule.to_status, SessionStatus):
        raise InvalidHandlerError(f"{where}: to_status {rule.to_status!r} is not a SessionStatus")
    if rule.to_status in rule.from_statuses:
        raise InvalidHandlerError(
            f"{where}: to_status {rule.to_status} is one of its own from_statuses"
        )
    validate_options(rule.options, where=f"{where}: options")
    return rule.name


def validate_handlers(entries: Sequence[RegisteredHandler]) -> None:
    """Raise InvalidHandlerError for the first invalid handler or duplicate name."""
    seen: dict[str, RegisteredHandler] = {}
    for entry in entries:
        handler = entry.handler
        if isinstance(handler, PromotionRule):
            name = _validate_rule(handler, entry.plugin)
        else:
            name = _validate_lifecycle(handler, entry.plugin)
        if name in seen:
            raise InvalidHandlerError(
                f"duplicate handler name {name!r}: registered by plugin {seen[name].plugin!r} "
                f"and by plugin {entry.plugin!r}"
            )
        seen[name] = entry
