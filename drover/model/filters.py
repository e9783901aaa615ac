"""Candidate filters: conditions on a handler's targets that storage compiles to SQL.

A handler declares them (``candidate_filters``); the fetch applies them in the
``WHERE`` clause, before the ``LIMIT``, so entities that are waiting never
take the places of entities that are ready. All the filters a handler
declares must hold. Example::

    candidate_filters = (
        Field("spec", ("gpu",), "gt", 0),
        Children({KernelStatus.RUNNING}, KernelMatchType.ALL),
        DependenciesSucceeded(),
    )

Storage compiles a filter's *shape* (its kind, fields, paths, operators and
statuses) into a statement once, and binds its *values* (``Field.value``,
``ChildCount.value``, ``StatusAge.seconds``) as parameters: a handler whose
values change every tick reuses one statement.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from drover.model.status import KernelMatchType

__all__ = [
    "COUNT_OPERATORS",
    "FIELD_OPERATORS",
    "AllOf",
    "AnyOf",
    "CandidateFilter",
    "ChildCount",
    "Children",
    "DependenciesFailed",
    "DependenciesSucceeded",
    "Dependents",
    "Field",
    "LatestChild",
    "Not",
    "Parent",
    "PoolHasRoom",
    "StatusAge",
    "TimedOut",
    "slot_field",
    "slot_keys",
]

#: Comparisons a :class:`Field` may use.
FIELD_OPERATORS = frozenset(
    {"eq", "ne", "lt", "le", "gt", "ge", "in", "exists", "missing", "not_number"}
)
#: Comparisons a :class:`ChildCount` may use.
COUNT_OPERATORS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})


def _path(value: Iterable[str] | str) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _statuses(value: Iterable[str] | None) -> frozenset[str] | None:
    return None if value is None else frozenset(value)


def _some(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


def slot_field(value: str | Iterable[str] | None) -> str | tuple[str, ...] | None:
    """A slot as declared: one spec key stays a string (what plugins read back), several
    become a tuple (a list given is converted); an empty one is refused."""
    if value is None or isinstance(value, str):
        return value
    keys = tuple(str(key) for key in value)
    if not keys:
        raise ValueError("a slot names at least one spec key (or is None)")
    return keys


def slot_keys(slot: str | tuple[str, ...] | None) -> tuple[str, ...]:
    """The spec keys a slot (``LatestChild.slot_key``, ``EntityKind.result_slot``) is
    made of: none, one, or several (a composite slot: replica x job number)."""
    if slot is None:
        return ()
    return (slot,) if isinstance(slot, str) else slot


def _value(value: Any) -> Any:
    # Lists and sets become tuples: a filter is a frozen, hashable value.
    return tuple(value) if isinstance(value, list | set | frozenset) else value


@attrs.frozen
class Field:
    """A JSON field of the entity's ``spec`` or ``data`` compared with a value.

    ``path`` is the keys from the top (``("resources", "gpu")``); ``op`` one
    of :data:`FIELD_OPERATORS` (``exists``, ``missing`` and ``not_number``, set
    but not a JSON number, take no value; ``in`` takes a list or tuple and
    matches a field equal to one of its members). An entity without the
    field matches only ``missing`` (and ``ne``). Values compare as JSON, alike
    on both databases: equality is JSON's (``true`` is not ``1``), an ordering
    compares only a field of the value's type, a field holding ``null`` exists.
    Example::

        Field("spec", ("queue",), "in", ["gpu", "gpu-large"])
    """

    source: str
    path: tuple[str, ...] = attrs.field(converter=_path)
    op: str = "eq"
    value: Any = attrs.field(default=None, converter=_value)

    def __attrs_post_init__(self) -> None:
        if self.source not in ("spec", "data"):
            raise ValueError(f"Field source must be 'spec' or 'data', not {self.source!r}")
        if self.op not in FIELD_OPERATORS:
            raise ValueError(f"Field op must be one of {sorted(FIELD_OPERATORS)}, not {self.op!r}")
        if not self.path:
            raise ValueError("Field path must name at least one key")
        if self.op == "in" and not isinstance(self.value, tuple):
            raise ValueError(f"Field op 'in' takes a list of values, not {self.value!r}")


@attrs.frozen
class Children:
    """ALL / ANY / NOT_ANY of the entity's children are in ``statuses``.

    The built-in kernel filter (``target_kernel_statuses``) is
    ``Children(statuses, KernelMatchType.ANY)``.
    """

    statuses: frozenset[str] = attrs.field(converter=_some)
    match: KernelMatchType = KernelMatchType.ANY


@attrs.frozen
class ChildCount:
    """The number of children (in ``statuses``, or all) compared with a number.

    The number is ``value``, or the number in ``spec[spec_key]`` (an entity
    whose spec has no such number does not match). Example: jobs that may
    start another task, up to their own ``max_parallel``::

        ChildCount("lt", statuses={Task.RUNNING}, spec_key="max_parallel")
    """

    op: str
    value: int | None = None
    statuses: frozenset[str] | None = attrs.field(default=None, converter=_statuses)
    spec_key: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.op not in COUNT_OPERATORS:
            raise ValueError(f"ChildCount op must be eq/ne/lt/le/gt/ge, not {self.op!r}")
        if (self.value is None) == (self.spec_key is None):
            raise ValueError("ChildCount takes exactly one of value= and spec_key=")


@attrs.frozen
class DependenciesSucceeded:
    """Every entity this one links to with ``relation`` has ended with result SUCCESS.

    An entity without such links matches.
    """

    relation: str = "depends_on"


@attrs.frozen
class DependenciesFailed:
    """Some entity this one links to with ``relation`` has ended without success.

    "Ended without success" is a ``result`` other than SUCCESS (results are
    set when an entity ends). The filter of a handler that fails the
    dependents of a failed dependency, where :class:`DependenciesSucceeded`
    would leave them waiting forever.
    """

    relation: str = "depends_on"


@attrs.frozen
class Dependents:
    """Some entity links to this one with ``relation`` and is in ``statuses``.

    The reverse of :class:`DependenciesSucceeded`: the entities that *depend on*
    this one (``statuses=None``: any such entity, whatever its status). The
    statuses are names, matched against the dependents whatever their kind.
    Example: experimaestro's transient jobs, registered only while a job that
    needs them is waiting::

        Dependents("depends_on", statuses={JobState.WAITING})
    """

    relation: str = "depends_on"
    statuses: frozenset[str] | None = attrs.field(default=None, converter=_statuses)

    def __attrs_post_init__(self) -> None:
        if self.statuses is not None and not self.statuses:
            raise ValueError("Dependents statuses must name at least one status (or be None)")


@attrs.frozen
class Parent:
    """The entity's parent is in ``statuses`` (an entity without a parent never matches).

    Example: tasks start only while their job is RUNNING::

        Parent(statuses={Job.RUNNING})
    """

    statuses: frozenset[str] = attrs.field(converter=_some)


@attrs.frozen
class StatusAge:
    """The entity has been in its status for at least a number of seconds.

    Inclusive: an entity exactly ``n`` seconds in its status matches
    ``StatusAge(n)`` (a back-off of ``n`` seconds is over at ``n``). The
    seconds are ``seconds``, or the number in ``spec[spec_key]`` or in
    ``data[data_key]`` (an entity without such a number does not match): a
    deadline a handler wrote, say ``data["retry_after"]``.
    """

    seconds: float | None = None
    spec_key: str | None = None
    data_key: str | None = None

    def __attrs_post_init__(self) -> None:
        given = [x for x in (self.seconds, self.spec_key, self.data_key) if x is not None]
        if len(given) != 1:
            raise ValueError("StatusAge takes exactly one of seconds=, spec_key= and data_key=")


@attrs.frozen
class LatestChild:
    """The entity's most recent child is in ``statuses``.

    "Most recent" is the order children were created in (creation time, then
    id: the order ``result_from="latest-child"`` reads). With ``slot_key``,
    children are grouped by ``spec[slot_key]`` (a replica number, say), or by
    several keys together when it is a tuple (a composite slot: dstack's
    ``("replica_num", "job_num")``), and the filter holds when the latest child
    of *some* slot is in ``statuses``. An entity without children never
    matches. Example: tasks whose latest attempt was preempted, whatever the
    earlier attempts ended as::

        LatestChild({Attempt.PREEMPTED})
    """

    statuses: frozenset[str] = attrs.field(converter=_some)
    slot_key: str | tuple[str, ...] | None = attrs.field(default=None, converter=slot_field)

    def __attrs_post_init__(self) -> None:
        if not self.statuses:
            raise ValueError("LatestChild statuses must name at least one status")


@attrs.frozen
class PoolHasRoom:
    """The pools the entity would hold have room for it now.

    For each pool of ``pools`` (``None``: every pool the entity's kind
    declares) that the entity's kind holds, the units held now plus what the
    entity would take (its ``spec["pools"]`` claim for a ``claimed`` pool, else
    one) are within the pool's capacity. An entity claiming none of a claimed
    pool always has room (the apply never refuses it). Compiled to SQL before
    the ``LIMIT``, so full-pool candidates never take a batch's places: say
    experimaestro's jobs waiting for a full token while another token's job
    could run::

        candidate_filters = (PoolHasRoom({"xpm-token"}),)

    The apply still admits a move atomically (a filter reads before the
    tick's write): the filter only keeps hopeless candidates out of the batch.
    """

    pools: frozenset[str] | None = attrs.field(default=None, converter=_statuses)


@attrs.frozen(init=False)
class Not:
    """``filter`` does not hold (an entity it does not match, for whatever reason).

    A condition that SQL would leave unknown (a spec without the compared
    field) counts as not holding, so ``Not`` matches it. Example: the rule
    "no earlier rule applies", written once instead of by hand::

        Not(AnyOf(Children({Task.FAILED}, KernelMatchType.ANY), Parent({Job.CANCELLING})))
    """

    filter: CandidateFilter

    def __init__(self, filter: CandidateFilter) -> None:
        self.__attrs_init__(filter)


@attrs.frozen(init=False)
class AnyOf:
    """At least one of ``filters`` holds (the filters a handler declares must all hold)."""

    filters: tuple[CandidateFilter, ...]

    def __init__(self, *filters: CandidateFilter) -> None:
        if not filters:
            raise ValueError("AnyOf takes at least one filter")
        self.__attrs_init__(tuple(filters))


@attrs.frozen(init=False)
class AllOf:
    """Every one of ``filters`` holds: a conjunction to put inside :class:`AnyOf`.

    Example: ready tasks, or tasks whose job is being cancelled::

        AnyOf(AllOf(Parent({Job.RUNNING}), DependenciesSucceeded()), Parent({Job.CANCELLING}))
    """

    filters: tuple[CandidateFilter, ...]

    def __init__(self, *filters: CandidateFilter) -> None:
        if not filters:
            raise ValueError("AllOf takes at least one filter")
        self.__attrs_init__(tuple(filters))


@attrs.frozen
class TimedOut:
    """Entities outside ``statuses`` match; one in them only once it has held its status
    longer than its timeout for ``handler``: ``spec["options"][handler]["timeout"]``
    when that is a number, else ``seconds`` (``None``: never).

    The coordinator adds it to the fetch of a handler that *watches* statuses
    (:attr:`~drover.coordinator.handlers.LifecycleHandler.watched_statuses`):
    entities it fetches there only so that their timeout is judged. Until then
    they are not read at all, so a tick's cost does not grow with how many
    wait there (sessions pulling their images, say).
    """

    statuses: frozenset[str] = attrs.field(converter=_some)
    handler: str
    seconds: float | None = None


CandidateFilter = (
    Field
    | Children
    | ChildCount
    | DependenciesSucceeded
    | DependenciesFailed
    | Dependents
    | LatestChild
    | Parent
    | PoolHasRoom
    | StatusAge
    | TimedOut
    | AnyOf
    | AllOf
    | Not
)
"""Any of the filters above."""
