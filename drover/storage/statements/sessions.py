"""The statements of :mod:`drover.storage.sessions`: reading sessions and their kernels.

Sessions are rows of ``entities`` of kind :data:`SESSION_KIND`, read as
:data:`~drover.storage.rows.ENTITY_COLUMNS`; their kernels as the narrower
:data:`~drover.storage.rows.KERNEL_COLUMNS`. The orders sessions are listed in
(:data:`FETCH_ORDER`, :data:`SESSION_ORDERS`) are here too: the fetch and the
promotions sort by :data:`FETCH_ORDER`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from drover.storage.rows import ENTITY_COLUMNS, KERNEL_COLUMNS
from drover.storage.schema import entities, relations, scheduling_history
from drover.storage.statements.apply import latest_history_ids
from drover.storage.statements.ids import ids_param

__all__ = [
    "FETCH_ORDER",
    "LATEST_ENTITY_ID",
    "PREFIX_MATCHES",
    "SESSION_BY_ID",
    "SESSION_COUNTS_BY_RESULT",
    "SESSION_COUNTS_BY_STATUS",
    "SESSION_KIND",
    "SESSION_ORDERS",
    "ids_by_name",
    "ids_by_prefix",
    "kernels_of",
    "latest_messages",
    "name_matches",
    "sessions_filtered",
    "sessions_in",
]

e = entities
#: The session kind, in the spelling of :class:`~drover.model.values.SessionWithKernels`.
SESSION_KIND = "session"
#: The order handlers see sessions in: highest priority, then oldest.
FETCH_ORDER = (e.c.priority.desc(), e.c.created_at, e.c.id)
#: Orders a person may list sessions in (``drover sessions --sort``, the dashboard).
SESSION_ORDERS: dict[str, tuple[Any, ...]] = {
    "newest": (e.c.created_at.desc(), e.c.id.desc()),
    "oldest": (e.c.created_at, e.c.id),
    "priority": FETCH_ORDER,
}


def kernels_of(postgres: bool) -> sa.Select[Any]:
    """The kernels (:data:`~drover.storage.rows.KERNEL_COLUMNS`) of the sessions ``:ids``."""
    return sa.select(*KERNEL_COLUMNS).where(ids_param(e.c.parent_id, "ids", postgres))


#: The session ``:b_id`` (:data:`~drover.storage.rows.ENTITY_COLUMNS`), if it is one.
SESSION_BY_ID = sa.select(*ENTITY_COLUMNS).where(
    e.c.id == sa.bindparam("b_id"), e.c.kind == SESSION_KIND
)


#: How many matches of an id prefix are read to tell an entity from its own children.
PREFIX_MATCHES = 64


def ids_by_prefix(prefix: str, kind: str | None) -> sa.Select[Any]:
    """Id and parent id of the first :data:`PREFIX_MATCHES` + 1 entities (in id order) of
    ``kind`` (``None``: any) whose id starts with ``prefix``, its ``%`` and ``_`` taken
    literally."""
    query = sa.select(e.c.id, e.c.parent_id).where(e.c.id.startswith(prefix, autoescape=True))
    if kind is not None:
        query = query.where(e.c.kind == kind)
    return query.order_by(e.c.id).limit(PREFIX_MATCHES + 1)


def ids_by_name(name: str, kind: str | None) -> sa.Select[Any]:
    """Id, kind and status of the newest :data:`PREFIX_MATCHES` + 1 entities of ``kind``
    (``None``: any) named exactly ``name``, newest first."""
    query = sa.select(e.c.id, e.c.kind, e.c.status).where(e.c.name == name)
    if kind is not None:
        query = query.where(e.c.kind == kind)
    return query.order_by(e.c.id.desc()).limit(PREFIX_MATCHES + 1)


def sessions_in(
    statuses: Iterable[str] | None, limit: int | None, order: str, name: str | None = None
) -> sa.Select[Any]:
    """Sessions (:data:`~drover.storage.rows.ENTITY_COLUMNS`) in ``statuses`` (``None``: all)
    whose name matches ``name`` (:func:`name_matches`; ``None``: any), in ``order`` (a key
    of :data:`SESSION_ORDERS`), at most ``limit`` (``None``: all)."""
    query = (
        sa.select(*ENTITY_COLUMNS).where(e.c.kind == SESSION_KIND).order_by(*SESSION_ORDERS[order])
    )
    if statuses is not None:
        query = query.where(e.c.status.in_(list(statuses)))
    if name:
        query = query.where(name_matches(name))
    if limit is not None:
        query = query.limit(limit)
    return query


def name_matches(pattern: str) -> sa.ColumnElement[bool]:
    """Case-insensitive: names matching ``pattern`` whole, shell-style (``*`` any run of
    characters, ``?`` one), when it has a wildcard; else names containing it."""
    text = pattern.lower()
    if "*" not in text and "?" not in text:
        return sa.func.lower(e.c.name).contains(text, autoescape=True)
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    like = escaped.replace("*", "%").replace("?", "_")
    return sa.func.lower(e.c.name).like(like, escape="\\")


def sessions_filtered(
    *,
    statuses: Iterable[str],
    name: str | None,
    handler: str | None,
    since: float | None,
    until: float | None,
    limit: int,
    sort: str,
    result: str | None = None,
    linked_to: str | None = None,
) -> sa.Select[Any]:
    """Sessions (:data:`~drover.storage.rows.ENTITY_COLUMNS`) matching every filter given.

    ``result``: that result (``"-"``: none yet); ``linked_to``: sessions with a
    relation to that entity or to one of its children (a deployment's replica
    sessions link to its routes).

    ``statuses`` (empty: any), the ``name`` (:func:`name_matches`),
    the ``handler`` of the session's latest scheduling history row, created
    at or after ``since`` and at or before ``until``; in ``sort`` (a key of
    :data:`SESSION_ORDERS`), at most ``limit``. (The dashboard's
    :class:`~drover.storage.sessions.SessionFilter`.)
    """
    query = (
        sa.select(*ENTITY_COLUMNS).where(e.c.kind == SESSION_KIND).order_by(*SESSION_ORDERS[sort])
    )
    wanted = list(statuses)
    if wanted:
        query = query.where(e.c.status.in_(wanted))
    if name:
        query = query.where(name_matches(name))
    if handler:
        h = scheduling_history
        latest = (
            sa.select(h.c.entity_id, sa.func.max(h.c.id).label("latest_id"))
            .group_by(h.c.entity_id)
            .subquery()
        )
        by_handler = (
            sa.select(latest.c.entity_id)
            .join(h, h.c.id == latest.c.latest_id)
            .where(h.c.handler == handler)
        )
        query = query.where(e.c.id.in_(by_handler))
    if since is not None:
        query = query.where(e.c.created_at >= since)
    if until is not None:
        query = query.where(e.c.created_at <= until)
    if result == "-":
        query = query.where(e.c.result.is_(None))
    elif result:
        query = query.where(e.c.result == result)
    if linked_to:
        near = sa.select(e.c.id).where(sa.or_(e.c.id == linked_to, e.c.parent_id == linked_to))
        linked = sa.select(relations.c.source_id).where(relations.c.target_id.in_(near))
        query = query.where(e.c.id.in_(linked))
    return query.limit(limit)


def latest_messages(postgres: bool) -> sa.Select[Any]:
    """``(entity_id, result, message)`` of the latest history row of each entity of ``:ids``."""
    h = scheduling_history
    latest = latest_history_ids(postgres)
    return sa.select(h.c.entity_id, h.c.result, h.c.message).where(h.c.id.in_(latest))


#: ``(status, number of sessions)`` for every status that has sessions.
SESSION_COUNTS_BY_STATUS = (
    sa.select(e.c.status, sa.func.count()).where(e.c.kind == SESSION_KIND).group_by(e.c.status)
)

#: Ended sessions per result (SUCCESS, CANCELLED, FAILURE).
SESSION_COUNTS_BY_RESULT = (
    sa.select(e.c.result, sa.func.count())
    .where(e.c.kind == SESSION_KIND, e.c.result.is_not(None))
    .group_by(e.c.result)
)

#: The newest entity id (ids are time-ordered): one primary-key index lookup.
LATEST_ENTITY_ID = sa.select(sa.func.max(e.c.id))
