"""What a kind declares besides its statuses: named budgets, termination rules, limits.

They are parts of an :class:`~drover.model.kinds.EntityKind` (and importable
from :mod:`drover.model.kinds` too, where plugin authors find them).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from drover.model.values import Transition

__all__ = ["Budget", "Limit", "TerminationRule"]


def _frozen_str(values: Iterable[str]) -> frozenset[str]:
    return frozenset(values)


def _maybe_frozen(values: Iterable[str] | None) -> frozenset[str] | None:
    return None if values is None else frozenset(values)


@attrs.frozen
class Limit:
    """An upper bound on a count one request can ask for, so no request eats the machine.

    ``name`` is its configuration key (``[limits]``, :class:`drover.config.LimitsConfig`),
    whose value replaces ``bound`` when a system is assembled
    (:meth:`Kinds.with_limits`). ``spec_key`` is the whole-number spec key it
    bounds (a deployment's ``replicas``); without one it bounds the number of
    children a new entity is created with (a session's kernels). The creation
    check and every spec update enforce it.
    """

    name: str
    bound: int
    spec_key: str | None = None


@attrs.frozen
class Budget:
    """A named budget of a kind: failures (and named outcomes) that name it spend it.

    ``limit`` is the default number of charges allowed (configuration under
    ``[budgets.<kind>]`` and an entity's ``spec["budgets"]`` override it);
    ``None``: no limit, a counter that never gives up. The charge that goes
    past the limit gives up: with the budget's own ``give_up`` transition if it
    declares one (Iris: ``FAILED`` when the failure budget is spent,
    ``PREEMPTED`` when the preemption budget is), else the handler's.

    A budget is cumulative over the entity's whole life unless it is
    refilled: ``resets=True`` refills it on every status change (as
    per-handler tries are); ``resets_on={...}`` only when the entity enters
    one of those statuses (dstack: the resubmission attempt starts over
    once the run reaches PROVISIONING). The two do not go together.
    """

    name: str
    limit: int | None
    resets: bool = False
    give_up: Transition | None = None
    resets_on: frozenset[str] = attrs.field(default=frozenset(), converter=_frozen_str)

    def refills_on(self, to_status: str | None) -> bool:
        """Whether a move into ``to_status`` refills this budget."""
        return self.resets or (to_status is not None and to_status in self.resets_on)


@attrs.frozen
class TerminationRule:
    """How a termination request moves an entity in one of ``from_statuses``.

    ``from_statuses`` of ``None`` means every live status except ``to``.
    ``children`` (optional) is what its children become at once.
    ``if_childless`` (optional) replaces ``to`` for an entity with no children:
    nothing would ever finish its cleanup. ``status_info`` (optional) is the
    entity's ``status_info`` instead of who asked (``USER_REQUESTED``,
    ``REQUESTED_BY_<HANDLER>``).

    ``mode`` (optional) names the termination mode the rule serves
    (``drover terminate --mode abort``): a request in a mode uses only that
    mode's rules, a plain request only the rules without one. The modes a kind
    accepts are the ones its rules name (:attr:`EntityKind.termination_modes`).

    ``children_info`` (optional) is the ``status_info`` of every child (and
    descendant) the termination moves or ends: the reason they stopped, as a
    :class:`~drover.model.values.Transition`'s ``children_info`` gives it.
    """

    to: str
    from_statuses: frozenset[str] | None = attrs.field(default=None, converter=_maybe_frozen)
    children: str | None = None
    if_childless: str | None = None
    message: str = "termination requested"
    status_info: str | None = None
    mode: str | None = None
    children_info: str | None = None
