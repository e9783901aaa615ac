"""SQL conditions on an entity's children (a session's kernels), correlated to its row."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import sqlalchemy as sa

from drover.model.rules import MATCH_CONDITIONS
from drover.model.status import KernelMatchType
from drover.storage.schema import entities
from drover.storage.statements.ids import checked_only

__all__ = ["K", "kernel_exists", "kernel_status_in", "latest_of_slot", "match_condition"]

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


def latest_of_slot(slot: Sequence[str]) -> sa.ColumnElement[bool]:
    """The child ``K`` is the latest of its slot: no later sibling has the same value of
    every spec key of ``slot`` (no keys: every child is one slot).

    "Later" is creation time, then id: the order ``result_from="latest-child"`` reads.
    A missing key reads as ``""`` (children without it share a slot).
    """
    later = entities.alias("later")
    same_slot = [
        sa.func.coalesce(later.c.spec[key].as_string(), "")
        == sa.func.coalesce(K.c.spec[key].as_string(), "")
        for key in slot
    ]
    return ~sa.exists().where(
        later.c.parent_id == K.c.parent_id,
        sa.or_(
            later.c.created_at > K.c.created_at,
            sa.and_(later.c.created_at == K.c.created_at, later.c.id > K.c.id),
        ),
        *same_slot,
    )
