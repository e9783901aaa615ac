"""The statements of :mod:`drover.storage.history`: reading and pruning the history tables.

``scheduling_history`` (what handlers concluded) is read by
:func:`history_rows` and :func:`history_search`; ``status_changes`` (every
other status change) by :func:`change_rows` and :func:`change_search`.
Pruning deletes, table by table (:func:`prune_targets`), rows of entities
whose top-level entity ended (:func:`ended_entities`): :func:`count_rows`
counts them, :func:`row_ids` and :func:`delete_rows` delete them in batches.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from drover.model.kinds import EntityKind
from drover.storage.schema import entities, handler_ticks, scheduling_history, status_changes

__all__ = [
    "change_rows",
    "change_search",
    "count_rows",
    "delete_rows",
    "ended_entities",
    "history_rows",
    "history_search",
    "own_changes",
    "prune_targets",
    "row_ids",
]

e = entities
h = scheduling_history
c = status_changes


def history_rows(kind: str | None, entity_id: str | None, limit: int | None) -> sa.Select[Any]:
    """Scheduling history rows, oldest first: of ``kind``, of the entity ``entity_id``
    (``None``: any), at most ``limit`` (``None``: all)."""
    query = sa.select(h).order_by(h.c.id)
    if kind is not None:
        query = query.where(h.c.kind == kind)
    if entity_id is not None:
        query = query.where(h.c.entity_id == entity_id)
    if limit is not None:
        query = query.limit(limit)
    return query


def change_rows(kernel_id: str | None, parent_id: str | None) -> sa.Select[Any]:
    """Status changes, oldest first: of the entity ``kernel_id``, of the children of
    ``parent_id`` (``None``: any)."""
    query = sa.select(c).order_by(c.c.id)
    if kernel_id is not None:
        query = query.where(c.c.entity_id == kernel_id)
    if parent_id is not None:
        query = query.where(c.c.parent_id == parent_id)
    return query


def own_changes(entity_id: str) -> sa.Select[Any]:
    """The status changes of the entity ``entity_id``, oldest first, but those its own
    ``scheduling_history`` already has (a child moved by a handler of its own kind is
    recorded in both tables: in its parent's view of its children, and its own)."""
    same = sa.exists().where(
        h.c.entity_id == c.c.entity_id,
        h.c.handler == c.c.source,
        h.c.created_at == c.c.created_at,
        h.c.from_status == c.c.from_status,
        h.c.to_status == c.c.to_status,
    )
    return sa.select(c).where(c.c.entity_id == entity_id, ~same).order_by(c.c.id)


def history_search(
    *,
    kind: str | None,
    entity_id: str | None,
    handler: str | None,
    result: str | None,
    since: float | None,
    until: float | None,
    after_id: int | None,
    limit: int,
    newest_first: bool,
) -> sa.Select[Any]:
    """Scheduling history rows matching every filter that is not ``None``.

    ``since`` compares with ``updated_at``, ``until`` with ``created_at``;
    ``after_id``: rows newer than that one.
    """
    query = sa.select(h)
    if kind is not None:
        query = query.where(h.c.kind == kind)
    if entity_id is not None:
        query = query.where(h.c.entity_id == entity_id)
    if handler is not None:
        query = query.where(h.c.handler == handler)
    if result is not None:
        query = query.where(h.c.result == result)
    if since is not None:
        query = query.where(h.c.updated_at >= since)
    if until is not None:
        query = query.where(h.c.created_at <= until)
    if after_id is not None:
        query = query.where(h.c.id > after_id)
    return query.order_by(h.c.id.desc() if newest_first else h.c.id).limit(limit)


def change_search(
    kernel_id: str, since: float | None, until: float | None, limit: int
) -> sa.Select[Any]:
    """The status changes of the entity ``kernel_id`` created between ``since`` and
    ``until`` (``None``: unbounded), newest first, at most ``limit``."""
    query = sa.select(c).where(c.c.entity_id == kernel_id)
    if since is not None:
        query = query.where(c.c.created_at >= since)
    if until is not None:
        query = query.where(c.c.created_at <= until)
    return query.order_by(c.c.id.desc()).limit(limit)


def ended_entities(kinds: Iterable[EntityKind]) -> sa.Select[Any]:
    """Ids of the entities of the top-level ``kinds`` (no parent) that are in a terminal status."""
    return sa.select(e.c.id).where(
        sa.or_(
            *(
                sa.and_(e.c.kind == kind.name, e.c.status.in_(sorted(kind.terminal)))
                for kind in kinds
                if kind.parent is None
            )
        )
    )


def prune_targets(
    kinds: Iterable[EntityKind], older_than: float | None, ticks_older_than: float | None = None
) -> dict[str, tuple[sa.Table, sa.ColumnElement[bool]]]:
    """Per table, the rows pruning deletes (a cutoff of ``None`` leaves its tables alone).

    History and status changes last updated (created) before ``older_than``
    of entities whose top-level entity ended (:func:`ended_entities`), down
    to their grandchildren and further, and tick summaries started before
    ``ticks_older_than``.
    """
    targets: dict[str, tuple[sa.Table, sa.ColumnElement[bool]]] = {}
    if older_than is not None:
        kinds = list(kinds)
        by_name = {k.name: k for k in kinds}

        def depth(kind: EntityKind) -> int:
            return (
                0
                if kind.parent is None or kind.parent not in by_name
                else 1 + depth(by_name[kind.parent])
            )

        # The ended top-level entities, then their children, grandchildren…
        levels: list[sa.Select[Any]] = [ended_entities(kinds)]
        for _ in range(max((depth(k) for k in kinds), default=0)):
            levels.append(sa.select(e.c.id).where(e.c.parent_id.in_(levels[-1])))
        own = sa.or_(*(h.c.entity_id.in_(level) for level in levels))
        # A change is kept with its parent's (a child's) or its own (a report on a top entity).
        changes = sa.or_(
            c.c.entity_id.in_(levels[0]), *(c.c.parent_id.in_(level) for level in levels)
        )
        # The newest row of each table stays: SQLite numbers a new row after the largest
        # id left, so deleting the newest would hand its ids out again, below the
        # watermarks promotion probes read after (drover.storage.watermarks).
        newest_h = sa.select(sa.func.max(h.c.id)).scalar_subquery()
        newest_c = sa.select(sa.func.max(c.c.id)).scalar_subquery()
        targets["scheduling_history"] = (
            h,
            sa.and_(h.c.updated_at < older_than, own, h.c.id < newest_h),
        )
        targets["status_changes"] = (
            c,
            sa.and_(c.c.created_at < older_than, changes, c.c.id < newest_c),
        )
    if ticks_older_than is not None:
        targets["handler_ticks"] = (handler_ticks, handler_ticks.c.started_at < ticks_older_than)
    return targets


def count_rows(table: sa.Table, condition: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """The number of rows of ``table`` where ``condition`` holds."""
    return sa.select(sa.func.count()).select_from(table).where(condition)


def row_ids(table: sa.Table, condition: sa.ColumnElement[bool], limit: int) -> sa.Select[Any]:
    """Ids of at most ``limit`` rows of ``table`` where ``condition`` holds."""
    return sa.select(table.c.id).where(condition).limit(limit)


def delete_rows(table: sa.Table) -> sa.Delete:
    """Delete the rows of ``table`` whose id is among ``:ids`` (a list)."""
    return sa.delete(table).where(table.c.id.in_(sa.bindparam("ids", expanding=True)))
