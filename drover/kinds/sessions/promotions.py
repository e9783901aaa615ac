"""The built-in promotions: a table of rules, each registered by its own plugin.

``detect-start-failure`` is not in the Sokovan proposal: without it a session
whose only kernel fails its setup is promoted to PREPARED and then waits
forever, because ``start-sessions`` only fetches sessions with a PREPARED or
CREATING kernel (and ``schedule-sessions`` likewise wants a PENDING one).
CREATING is left to ``promote-to-running`` and ``detect-termination``: kernels
may already have run there.

``promote-to-prepared`` waits for no kernel in an early status *and none ended*:
a session whose kernel failed before PREPARED (an image that could not be
pulled) is ended by ``detect-start-failure`` alone, and its history never says
it was PREPARED.
"""

from __future__ import annotations

from drover.coordinator.handlers import promotion_class
from drover.kinds.sessions.values import (
    NON_TERMINAL_KERNEL_STATUSES,
    SESSION_KIND,
    TERMINAL_KERNEL_STATUSES,
    KernelStatus,
    SessionStatus,
)
from drover.model.promotion import PromotionRule
from drover.model.status import KernelMatchType as M
from drover.model.values import StatusInfoRule
from drover.plugins.markers import hookimpl
from drover.plugins.registry import HandlerRegistry

__all__ = [
    "BUILTIN_PROMOTIONS",
    "PROMOTION_PLUGINS",
    "DetectStartFailure",
    "DetectTermination",
    "PromoteToPrepared",
    "PromoteToRunning",
    "PromoteToTerminated",
]

S = SessionStatus
K = KernelStatus

#: name, from statuses, kernel statuses, match, to status, status_info.
BUILTIN_PROMOTIONS: tuple[PromotionRule, ...] = (
    PromotionRule(
        "promote-to-prepared",
        {S.SCHEDULED, S.PREPARING},
        # An ended kernel (a failed pull) is not prepared: detect-start-failure ends
        # the session, which never passes through PREPARED.
        {K.PENDING, K.SCHEDULED, K.PREPARING, K.PULLING} | TERMINAL_KERNEL_STATUSES,
        M.NOT_ANY,
        S.PREPARED,
        kind=SESSION_KIND,
    ),
    PromotionRule(
        "promote-to-running",
        {S.CREATING},
        {K.PENDING, K.SCHEDULED, K.PREPARING, K.PULLING, K.PREPARED, K.CREATING},
        M.NOT_ANY,
        S.RUNNING,
        kind=SESSION_KIND,
    ),
    PromotionRule(
        "promote-to-terminated",
        {S.TERMINATING},
        NON_TERMINAL_KERNEL_STATUSES,
        M.NOT_ANY,
        S.TERMINATED,
        kind=SESSION_KIND,
    ),
    PromotionRule(
        "detect-termination",
        {S.RUNNING},
        TERMINAL_KERNEL_STATUSES,
        M.ANY,
        S.TERMINATING,
        StatusInfoRule("KERNEL_EXITED", ((frozenset({K.ERROR}), "ABNORMAL_TERMINATION"),)),
        kind=SESSION_KIND,
    ),
    PromotionRule(
        "detect-start-failure",
        {S.PENDING, S.SCHEDULED, S.PREPARING, S.PREPARED},
        TERMINAL_KERNEL_STATUSES,
        M.ANY,
        S.TERMINATING,
        StatusInfoRule("KERNEL_EXITED", ((frozenset({K.ERROR}), "START_FAILED"),)),
        kind=SESSION_KIND,
    ),
)

_BY_NAME = {rule.name: rule for rule in BUILTIN_PROMOTIONS}

# The same rules spelled as SessionPromotionHandler classes, for code that wants one.
PromoteToPrepared = promotion_class(_BY_NAME["promote-to-prepared"])
PromoteToRunning = promotion_class(_BY_NAME["promote-to-running"])
PromoteToTerminated = promotion_class(_BY_NAME["promote-to-terminated"])
DetectTermination = promotion_class(_BY_NAME["detect-termination"])
DetectStartFailure = promotion_class(_BY_NAME["detect-start-failure"])


class _PromotionPlugin:
    """A plugin object that registers one promotion rule."""

    def __init__(self, rule: PromotionRule) -> None:
        self.rule = rule

    @hookimpl
    def drover_register_handlers(self, register: HandlerRegistry) -> None:
        """Register this plugin's promotion rule."""
        register(self.rule)


#: ``(plugin name, plugin)`` for each promotion rule.
PROMOTION_PLUGINS: list[tuple[str, object]] = [
    (f"drover.kinds.sessions.{rule.name}", _PromotionPlugin(rule)) for rule in BUILTIN_PROMOTIONS
]
