"""History, read back: what handlers concluded (``scheduling_history``) and every other
status change (``status_changes``). :class:`HistoryReads` is one of the read-only
services :class:`~drover.storage.queries.Queries` is made of; its statements are here.
(The history is written by the one history writer, :mod:`drover.storage.journal`, and
pruned by the daemon's store, :mod:`drover.storage.daemon_store`.)
"""

from __future__ import annotations

import heapq
from typing import Any

import sqlalchemy as sa

from drover.model.checks import check_filter
from drover.model.status import SchedulingResult
from drover.model.values import HistoryRecord, KernelHistoryRecord
from drover.storage._service import Service
from drover.storage.rows import history_from_row, kernel_history_from_row, moved_from_change
from drover.storage.schema import scheduling_history, status_changes

__all__ = ["HistoryReads"]

h = scheduling_history
c = status_changes


def _history_rows(kind: str | None, entity_id: str | None, limit: int | None) -> sa.Select[Any]:
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


def _change_rows(entity_id: str | None, parent_id: str | None) -> sa.Select[Any]:
    """Status changes, oldest first: of the entity ``entity_id``, of the children of
    ``parent_id`` (``None``: any)."""
    query = sa.select(c).order_by(c.c.id)
    if entity_id is not None:
        query = query.where(c.c.entity_id == entity_id)
    if parent_id is not None:
        query = query.where(c.c.parent_id == parent_id)
    return query


#: Seconds between a status change and the history row of the same move: the most one
#: apply's transaction takes between writing the two (it holds its claims that long).
_SAME_MOVE_WINDOW = 60.0


def _own_changes(entity_id: str) -> sa.Select[Any]:
    """The status changes of the entity ``entity_id``, oldest first, but those its own
    ``scheduling_history`` already has (a child moved by a handler of its own kind is
    recorded in both tables: in its parent's view of its children, and its own)."""
    # A history row is dated when it is written, later in the apply's transaction than
    # the status change it records (dated at the apply's start): the same move is
    # the one by the same writer, between the same statuses, dated within
    # _SAME_MOVE_WINDOW after it.
    same = sa.exists().where(
        h.c.entity_id == c.c.entity_id,
        h.c.handler == c.c.source,
        h.c.created_at >= c.c.created_at,
        h.c.created_at <= c.c.created_at + _SAME_MOVE_WINDOW,
        h.c.from_status == c.c.from_status,
        h.c.to_status == c.c.to_status,
    )
    return sa.select(c).where(c.c.entity_id == entity_id, ~same).order_by(c.c.id)


def _history_search(
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


def _change_search(
    entity_id: str, since: float | None, until: float | None, limit: int
) -> sa.Select[Any]:
    """The status changes of the entity ``entity_id`` created between ``since`` and
    ``until`` (``None``: unbounded), newest first, at most ``limit``."""
    query = sa.select(c).where(c.c.entity_id == entity_id)
    if since is not None:
        query = query.where(c.c.created_at >= since)
    if until is not None:
        query = query.where(c.c.created_at <= until)
    return query.order_by(c.c.id.desc()).limit(limit)


def _history_has(handler: str | None, result: str | None) -> sa.Select[Any]:
    """One row written by ``handler`` with ``result`` (``None``: any), if there is one."""
    query = sa.select(h.c.id)
    if handler is not None:
        query = query.where(h.c.handler == handler)
    if result is not None:
        query = query.where(h.c.result == result)
    return query.limit(1)


class HistoryReads(Service):
    """The scheduling history and the status changes, of one entity, a kind, or all."""

    async def _history_rows(self, query: sa.Select[Any]) -> list[HistoryRecord]:
        kinds = self._db.kinds
        return await self._db.read(
            lambda conn: [history_from_row(r, kinds) for r in conn.execute(query)]
        )

    async def _change_rows(self, query: sa.Select[Any]) -> list[KernelHistoryRecord]:
        kinds = self._db.kinds
        return await self._db.read(
            lambda conn: [kernel_history_from_row(r, kinds) for r in conn.execute(query)]
        )

    async def history(
        self, session_id: str | None = None, *, limit: int | None = None, kind: str | None = None
    ) -> list[HistoryRecord]:
        """Scheduling history rows, oldest first (of one entity, of one kind, or of all).

        One entity's history also has a row (result ``MOVED``, the mover as handler)
        for each status change recorded only in ``status_changes``: a child moved
        by its parent's transition (the parent's handler), ended with its parent
        (down the tree), or moved by a report. The apply writes such a move once,
        so moving a session's kernels costs no extra row.
        """
        if session_id is None:
            return await self._history_rows(_history_rows(kind, session_id, limit))
        own_query, moves_query = _history_rows(kind, session_id, None), _own_changes(session_id)
        kinds = self._db.kinds

        def work(conn: sa.Connection) -> list[HistoryRecord]:
            own = [history_from_row(r, kinds) for r in conn.execute(own_query)]
            moves = [moved_from_change(r, kinds) for r in conn.execute(moves_query)]
            if kind is not None:
                moves = [m for m in moves if m.kind == kind]
            # Each list keeps the order it was written in (rows of several writers
            # can carry clocks that disagree); the merge interleaves them by time,
            # the entity's own row first at one instant.
            merged = list(heapq.merge(own, moves, key=lambda r: r.created_at))
            return merged if limit is None else merged[:limit]

        return await self._db.read(work)

    async def changes(
        self, *, entity_id: str | None = None, parent_id: str | None = None
    ) -> list[KernelHistoryRecord]:
        """Status changes of an entity or of an entity's children, oldest first (neither
        given: every recorded change)."""
        return await self._change_rows(_change_rows(entity_id, parent_id))

    async def search_history(
        self,
        *,
        session_id: str | None = None,
        handler: str | None = None,
        result: SchedulingResult | str | None = None,
        since: float | None = None,
        until: float | None = None,
        after_id: int | None = None,
        limit: int = 100,
        newest_first: bool = True,
        kind: str | None = None,
    ) -> list[HistoryRecord]:
        """History rows matching every filter given (``session_id``: the entity's id).

        ``since`` compares with ``updated_at``, ``until`` with ``created_at``;
        ``after_id``: rows newer than that one. A text filter past
        :data:`~drover.model.checks.MAX_FILTER_LENGTH`, or with a NUL, is refused
        (InvalidSpecError).
        """
        for what, text in (("handler", handler), ("result", result), ("kind", kind)):
            check_filter(None if text is None else str(text), f"the {what} filter")
        query = _history_search(
            kind=kind,
            entity_id=session_id,
            handler=handler,
            result=None if result is None else str(result),
            since=since,
            until=until,
            after_id=after_id,
            limit=limit,
            newest_first=newest_first,
        )
        return await self._history_rows(query)

    async def history_has(self, *, handler: str | None = None, result: str | None = None) -> bool:
        """Whether some history row was written by ``handler`` with ``result`` (``None``:
        any): how a filter naming neither a loaded handler nor a declared result is told
        from a typo (a row of a plugin since removed still matches)."""
        for what, text in (("handler", handler), ("result", result)):
            check_filter(text, f"the {what} filter")
        query = _history_has(handler, result)
        return await self._db.read(lambda conn: conn.execute(query).first() is not None)

    async def search_changes(
        self,
        *,
        entity_id: str,
        since: float | None = None,
        until: float | None = None,
        limit: int = 100,
    ) -> list[KernelHistoryRecord]:
        """One entity's status changes, newest first."""
        check_filter(entity_id, "the entity filter")
        return await self._change_rows(_change_search(entity_id, since, until, limit))
