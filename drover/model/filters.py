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
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from drover.model.status import KernelMatchType

__all__ = [
    "FIELD_OPERATORS",
    "AnyOf",
    "CandidateFilter",
    "ChildCount",
    "Children",
    "DependenciesSucceeded",
    "Field",
    "StatusAge",
]

#: Comparisons a :class:`Field` (and :class:`ChildCount`) may use.
FIELD_OPERATORS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "exists", "missing", "not_number"})


def _path(value: Iterable[str] | str) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _statuses(value: Iterable[str] | None) -> frozenset[str] | None:
    return None if value is None else frozenset(value)


def _some(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


@attrs.frozen
class Field:
    """A JSON field of the entity's ``spec`` or ``data`` compared with a value.

    ``path`` is the keys from the top (``("resources", "gpu")``); ``op`` one
    of :data:`FIELD_OPERATORS` (``exists``, ``missing`` and ``not_number``, set
    but not a JSON number, take no value). An entity without the field
    matches only ``missing`` (and ``ne``).
    """

    source: str
    path: tuple[str, ...] = attrs.field(converter=_path)
    op: str = "eq"
    value: Any = None

    def __attrs_post_init__(self) -> None:
        if self.source not in ("spec", "data"):
            raise ValueError(f"Field source must be 'spec' or 'data', not {self.source!r}")
        if self.op not in FIELD_OPERATORS:
            raise ValueError(f"Field op must be one of {sorted(FIELD_OPERATORS)}, not {self.op!r}")
        if not self.path:
            raise ValueError("Field path must name at least one key")


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
    """The number of children (in ``statuses``, or all) compared with ``value``."""

    op: str
    value: int
    statuses: frozenset[str] | None = attrs.field(default=None, converter=_statuses)

    def __attrs_post_init__(self) -> None:
        if self.op not in FIELD_OPERATORS - {"exists", "missing", "not_number"}:
            raise ValueError(f"ChildCount op must be eq/ne/lt/le/gt/ge, not {self.op!r}")


@attrs.frozen
class DependenciesSucceeded:
    """Every entity this one links to with ``relation`` has ended with result SUCCESS.

    An entity without such links matches.
    """

    relation: str = "depends_on"


@attrs.frozen
class StatusAge:
    """The entity has been in its status for longer than a number of seconds.

    The seconds are ``seconds``, or the number in ``spec[spec_key]`` (an
    entity whose spec has no such number does not match).
    """

    seconds: float | None = None
    spec_key: str | None = None

    def __attrs_post_init__(self) -> None:
        if (self.seconds is None) == (self.spec_key is None):
            raise ValueError("StatusAge takes exactly one of seconds= and spec_key=")


@attrs.frozen(init=False)
class AnyOf:
    """At least one of ``filters`` holds (the filters a handler declares must all hold)."""

    filters: tuple[CandidateFilter, ...]

    def __init__(self, *filters: CandidateFilter) -> None:
        self.__attrs_init__(tuple(filters))


CandidateFilter = Field | Children | ChildCount | DependenciesSucceeded | StatusAge | AnyOf
"""Any of the filters above."""
