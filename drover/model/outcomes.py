"""A handler's result read as one outcome per target (:meth:`HandlerResult.per_target`).

Handlers write a :class:`~drover.model.values.HandlerResult` the way they find
convenient: lists of ids per outcome class, and maps from ids to messages, data
patches, budgets... :meth:`TargetOutcomes.read` turns those collections into one
:class:`TargetOutcome` per id, and :meth:`TargetOutcomes.problem` is the one place
that finds what makes a result contradictory: an id listed twice, a budget charged
for a success, data or terminations for an id without an outcome. What needs the
kind or the handler's declarations (declared outcomes, the kind's budgets and
claimed pools, creations) is checked by the coordinator's tick, through this view.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Set
from enum import Enum
from itertools import chain
from typing import Any, Protocol

import attrs

from drover.model.checks import json_copy
from drover.model.errors import InvalidSpecError
from drover.model.rules import SETTABLE_RESULTS


class Creation(Protocol):
    """What the view reads of a creation (:class:`drover.model.values.NewEntity` is one)."""

    @property
    def id(self) -> str:
        """The new entity's id."""
        ...

    @property
    def kind(self) -> str:
        """Its kind."""
        ...

    @property
    def creator(self) -> str | None:
        """The target whose outcome it belongs to."""
        ...


class Result(Protocol):
    """What the view reads of a result (:class:`drover.model.values.HandlerResult` is one;
    a protocol here, so that the result and its view need not import each other)."""

    @property
    def successes(self) -> list[str]: ...

    @property
    def failures(self) -> list[str]: ...

    @property
    def skipped(self) -> list[str]: ...

    @property
    def messages(self) -> dict[str, str]: ...

    @property
    def error_codes(self) -> dict[str, str]: ...

    @property
    def status_infos(self) -> dict[str, str]: ...

    @property
    def placements(self) -> dict[str, str]: ...

    @property
    def outcomes(self) -> dict[str, str]: ...

    @property
    def budgets(self) -> dict[str, str]: ...

    @property
    def create(self) -> list[Any]: ...

    @property
    def data(self) -> dict[str, Any]: ...

    @property
    def terminate(self) -> dict[str, list[str]]: ...

    @property
    def results(self) -> dict[str, str]: ...

    @property
    def claims(self) -> dict[str, dict[str, int]]: ...


__all__ = ["SUCCEEDED", "UNMENTIONED", "Reported", "TargetOutcome", "TargetOutcomes"]


class Reported(Enum):
    """The class of outcome a handler reported for one entity id."""

    #: Listed in ``successes``.
    SUCCESS = "success"
    #: Listed in ``failures``.
    FAILURE = "failure"
    #: Listed in ``skipped``.
    SKIPPED = "skipped"
    #: Given a named outcome (``outcomes``); :attr:`TargetOutcome.name` is its name.
    NAMED = "named"
    #: No outcome: at most a message, error code or ``status_info``, used if it expires.
    NOTHING = "nothing"


@attrs.frozen(kw_only=True)
class TargetOutcome:
    """Everything one :class:`~drover.model.values.HandlerResult` says about one entity id.

    ``reported`` is the outcome's class and ``name`` a named outcome's name.
    The other fields are what the result's maps hold for the id (``None`` or
    empty: nothing): ``message``, ``error_code`` and ``status_info``; the
    ``budget`` a failure or named outcome charges; the ``data`` merge-patch;
    the entities it asks to end (``terminates``; ``None``: it asks none); the
    ``result`` it sets; its pool ``claims``; the entities created with its
    outcome (``creates``: those whose ``by``, else ``parent_id``, is the id).
    Placements are keyed by child, not target: they stay in
    :attr:`TargetOutcomes.placements`.
    """

    reported: Reported
    name: str | None = None
    message: str | None = None
    error_code: str | None = None
    status_info: str | None = None
    budget: str | None = None
    #: As the handler gave it: :meth:`problem` refuses anything but a JSON mapping.
    data: Any = None
    terminates: tuple[str, ...] | None = None
    result: str | None = None
    claims: Mapping[str, Any] | None = None
    #: The :class:`~drover.model.values.NewEntity` values it creates.
    creates: tuple[Any, ...] = ()

    def problem(self, entity_id: str, is_target: bool) -> str | None:
        """What contradicts itself in this outcome of ``entity_id``, if anything.

        ``is_target``: the id is among the tick's targets (only a target with
        an outcome may carry data, terminations, a result, claims or creations).
        """
        if self.budget is not None and self.reported not in _CHARGEABLE:
            return (
                f"budget {self.budget!r} is charged for {entity_id}, which is neither among the "
                "failures nor given a named outcome"
            )
        if is_target and self.reported is not Reported.NOTHING:
            return self._value_problem(entity_id)
        if self.data is not None:
            return f"data patch for {entity_id}, which is not a target with an outcome"
        if self.terminates is not None:
            return f"terminations asked for {entity_id}, which is not a target with an outcome"
        if self.result is not None:
            return f"result set for {entity_id}, which is not a target with an outcome"
        if self.claims is not None:
            return f"claims for {entity_id}, which is not a target with an outcome"
        if self.creates:
            return _uncredited(self.creates[0])
        return None

    def _value_problem(self, entity_id: str) -> str | None:
        """What is wrong with the values this target's outcome carries."""
        if self.data is not None:
            if not isinstance(self.data, dict):
                return f"data patch for {entity_id} is not a mapping"
            try:
                json_copy(self.data, f"data patch for {entity_id}")
            except InvalidSpecError as error:
                return str(error)
        if self.result is not None and self.result not in SETTABLE_RESULTS:
            return (
                f"result {self.result!r} (for {entity_id}) is not one of {sorted(SETTABLE_RESULTS)}"
            )
        for pool, units in (self.claims or {}).items():
            if isinstance(units, bool) or not isinstance(units, int) or units < 1:
                return f"claim on pool {pool!r} (for {entity_id}) is {units!r}, not an integer >= 1"
        return None


#: The outcome of a target the result does not mention at all.
UNMENTIONED = TargetOutcome(reported=Reported.NOTHING)
# One shared value per plain class: a thousand plain successes allocate nothing.
#: The outcome of every target the result lists as a plain success (nothing else
#: said about it): one shared value, so that a plain success is told by identity.
SUCCEEDED = TargetOutcome(reported=Reported.SUCCESS)
_FAILED = TargetOutcome(reported=Reported.FAILURE)
_SKIPPED = TargetOutcome(reported=Reported.SKIPPED)
_CHARGEABLE = frozenset({Reported.FAILURE, Reported.NAMED})
#: A data patch given as ``None``: kept apart from "no patch", to be refused as any
#: patch that is not a mapping is.
_NULL_PATCH = object()


def _uncredited(new: Creation) -> str:
    return (
        f"entity {new.id} of kind {new.kind!r} is created by {new.creator!r}, "
        "which is not a target with an outcome (set by= or parent_id=)"
    )


@attrs.frozen(kw_only=True)
class TargetOutcomes:
    """A :class:`~drover.model.values.HandlerResult` as one :class:`TargetOutcome` per id.

    ``by_id`` holds every id the result mentions, in the order it lists
    them (successes, failures, skipped, named outcomes, then the ids it only
    says something else about); :meth:`get` answers :data:`UNMENTIONED` for
    the others. ``repeated`` are the ids listed more than once among the
    four outcome collections (sorted); ``uncredited`` the created entities
    with no creator (neither ``by`` nor ``parent_id``); ``placements`` the
    result's kernel (child) id -> agent map. ``carrying`` are the ids whose
    outcome carries more than a class and a message (a name, budget, data,
    terminations, result, claims or creations): the only ones the checks read.
    """

    by_id: Mapping[str, TargetOutcome]
    repeated: tuple[str, ...] = ()
    uncredited: tuple[Creation, ...] = ()
    placements: Mapping[str, str] = attrs.field(factory=dict)
    carrying: tuple[str, ...] = ()

    @classmethod
    def read(cls, result: Result) -> TargetOutcomes:
        """Read ``result`` as it stands (see :meth:`HandlerResult.per_target`)."""
        by_id = dict.fromkeys(result.successes, SUCCEEDED)
        for ids, plain in ((result.failures, _FAILED), (result.skipped, _SKIPPED)):
            if ids:
                by_id.update(dict.fromkeys(ids, plain))
        named = result.outcomes
        if named:
            shared = {
                n: TargetOutcome(reported=Reported.NAMED, name=n) for n in set(named.values())
            }
            by_id.update({eid: shared[n] for eid, n in named.items()})
        lists = (result.successes, result.failures, result.skipped, named)
        repeated: tuple[str, ...] = ()
        if len(by_id) != sum(map(len, lists)):
            counts = Counter(chain.from_iterable(lists))
            repeated = tuple(sorted(i for i, n in counts.items() if n > 1))
        creating: dict[str, list[Creation]] = {}
        uncredited: list[Creation] = []
        for new in result.create:
            creator = new.creator
            if creator is None:
                uncredited.append(new)
            else:
                creating.setdefault(creator, []).append(new)
        effects = (result.budgets, result.data, result.terminate, result.results, result.claims)
        carrying = tuple(dict.fromkeys(chain(named, *effects, creating)))
        remarked = (result.messages, result.error_codes, result.status_infos)
        if carrying or any(remarked):
            _detail(by_id, result, chain(*remarked, carrying), creating)
        return cls(
            by_id=by_id,
            repeated=repeated,
            uncredited=tuple(uncredited),
            placements=result.placements,
            carrying=carrying,
        )

    def get(self, entity_id: str) -> TargetOutcome:
        """The outcome of ``entity_id`` (:data:`UNMENTIONED` if the result says nothing)."""
        return self.by_id.get(entity_id, UNMENTIONED)

    def ignored(self, targets: Set[str]) -> tuple[str, ...]:
        """The ids given an outcome that are not among ``targets``, in the result's order."""
        nothing = Reported.NOTHING
        return tuple(
            i for i, o in self.by_id.items() if o.reported is not nothing and i not in targets
        )

    def problem(self, targets: Set[str]) -> str | None:
        """What makes the result contradictory for a tick of ``targets``, if anything.

        Ids that are not targets count only where they carry something: an
        outcome for an id that is not a target is ignored, but a data patch
        (say) for it is a problem.
        """
        repeated = [i for i in self.repeated if i in targets]
        if repeated:
            return f"it lists session(s) {repeated} more than once"
        if self.uncredited:
            return _uncredited(self.uncredited[0])
        by_id = self.by_id
        for entity_id in self.carrying:
            problem = by_id[entity_id].problem(entity_id, entity_id in targets)
            if problem is not None:
                return problem
        return None


def _detail(
    by_id: dict[str, TargetOutcome],
    result: Result,
    ids: Iterable[str],
    creating: Mapping[str, list[Creation]],
) -> None:
    """Replace the outcome of every id in ``ids`` by one carrying what the result says of it."""
    messages, codes, infos = result.messages, result.error_codes, result.status_infos
    if not creating and not any(
        (result.budgets, result.data, result.terminate, result.results, result.claims)
    ):
        # The common case, a message and an error code per failure or skip: results are
        # mostly uniform, so equal outcomes share one value.
        shared: dict[tuple[int, str | None, str | None, str | None], TargetOutcome] = {}
        for entity_id in dict.fromkeys(ids):
            base = by_id.get(entity_id, UNMENTIONED)
            key = (id(base), messages.get(entity_id), codes.get(entity_id), infos.get(entity_id))
            outcome = shared.get(key)
            if outcome is None:
                outcome = shared[key] = TargetOutcome(
                    reported=base.reported,
                    name=base.name,
                    message=key[1],
                    error_code=key[2],
                    status_info=key[3],
                )
            by_id[entity_id] = outcome
        return
    budgets, patches, ends = result.budgets, result.data, result.terminate
    results, claims = result.results, result.claims
    for entity_id in dict.fromkeys(ids):
        base = by_id.get(entity_id, UNMENTIONED)
        ending = ends.get(entity_id)
        patch: Any = patches.get(entity_id)
        if patch is None and entity_id in patches:
            patch = _NULL_PATCH
        by_id[entity_id] = TargetOutcome(
            reported=base.reported,
            name=base.name,
            message=messages.get(entity_id),
            error_code=codes.get(entity_id),
            status_info=infos.get(entity_id),
            budget=budgets.get(entity_id),
            data=patch,
            terminates=None if ending is None else tuple(ending),
            result=results.get(entity_id),
            claims=claims.get(entity_id),
            creates=tuple(creating[entity_id]) if entity_id in creating else (),
        )
