"""The lifecycle's rules that are not a kind's, each defined once, in Python.

A kind's own rules (lifecycle order, requeues, which children a transition
may move, what ended children become, termination) are derived from its
declaration in :mod:`drover.model.kinds`. Here: the promotion match, which
storage compiles to SQL and ``drover why`` evaluates on values it has read,
and the engine's constants.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from drover.model.deprecation import moved_names
from drover.model.status import KernelMatchType

__all__ = [
    "DEFAULT_MAX_REQUEUES",
    "MATCH_CONDITIONS",
    "REQUEUE_LIMIT",
    "SETTABLE_RESULTS",
    "MatchCondition",
    "promotion_matches",
]

# The kernel kind's status sets moved to its package (0.2).
__getattr__ = moved_names(
    __name__,
    {
        name: "drover.kinds.sessions.values"
        for name in ("HOLDING_KERNEL_STATUSES", "NON_TERMINAL_KERNEL_STATUSES")
    },
)

#: Requeues allowed before an entity is ended instead (configuration and spec override it).
DEFAULT_MAX_REQUEUES = 3
#: The ``status_info`` of an entity sent to its kind's limit status past its requeue budget.
REQUEUE_LIMIT = "REQUEUE_LIMIT"
#: The results a handler may set for an ended target (``HandlerResult.results``).
SETTABLE_RESULTS = frozenset({"SUCCESS", "FAILURE"})


@attrs.frozen
class MatchCondition:
    """A promotion match as conditions on a session's kernels; all that are set must hold."""

    #: The session has at least one kernel.
    needs_kernels: bool = False
    #: Some kernel is in the checked statuses.
    some_in: bool = False
    #: No kernel is in the checked statuses.
    none_in: bool = False
    #: No kernel is outside the checked statuses.
    none_outside: bool = False


#: ALL, ANY and NOT_ANY, defined once. A session without kernels never matches.
MATCH_CONDITIONS: dict[KernelMatchType, MatchCondition] = {
    KernelMatchType.ALL: MatchCondition(needs_kernels=True, none_outside=True),
    KernelMatchType.ANY: MatchCondition(some_in=True),
    KernelMatchType.NOT_ANY: MatchCondition(needs_kernels=True, none_in=True),
}


def promotion_matches(
    match: KernelMatchType, kernel_statuses: Iterable[str], check: Iterable[str]
) -> bool:
    """Whether a session whose kernels are in ``kernel_statuses`` meets the match."""
    statuses = list(kernel_statuses)
    checked = frozenset(check)
    condition = MATCH_CONDITIONS[match]
    inside = sum(1 for s in statuses if s in checked)
    return (
        (not condition.needs_kernels or bool(statuses))
        and (not condition.some_in or inside > 0)
        and (not condition.none_in or inside == 0)
        and (not condition.none_outside or inside == len(statuses))
    )
