"""SQL conditions on an entity's children (a session's kernels), correlated to its row."""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from drover.model.rules import MATCH_CONDITIONS
from drover.model.status import KernelMatchType
from drover.storage.schema import entities
from drover.storage.statements.ids import checked_only

__all__ = ["K", "kernel_exists", "kernel_status_in", "match_condition"]

#: The kernels, as a second reference to ``entities``.
K = entities.alias("k")


def kernel_exists(*conditions: sa.ColumnElement[bool]) -> sa.Exists:
    """``EXISTS (a kernel of this session such that …)``."""
    return sa.exists().where(K.c.parent_id == entities.c.id, *conditions)


def kernel_status_in(statuses: Iterable[str]) -> sa.ColumnElement[bool]:
    """``k.status IN (…)`` for correlated subqueries, never served by the status index.

    Given one status, SQLite's planner would scan the (kind, status) index for
    every candidate session, which is quadratic; wrapping the column in an
    expression (``status || ''``) keeps it on the parent_id index. PostgreSQL
    plans the same query either way.
    """
    return checked_only(K.c.status).in_(sorted(str(s) for s in statuses))


def match_condition(match: KernelMatchType, check: Iterable[str]) -> sa.ColumnElement[bool]:
    """The promotion match as SQL, from its definition in :mod:`drover.model.rules`."""
    condition = MATCH_CONDITIONS[match]
    checked = list(check)
    parts: list[sa.ColumnElement[bool]] = []
    if condition.needs_kernels:
        parts.append(kernel_exists())
    if condition.some_in:
        parts.append(kernel_exists(kernel_status_in(checked)))
    if condition.none_in:
        parts.append(~kernel_exists(kernel_status_in(checked)))
    if condition.none_outside:
        parts.append(~kernel_exists(~kernel_status_in(checked)))
    return sa.and_(*parts)
