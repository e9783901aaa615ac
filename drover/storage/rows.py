"""Turning rows into drover's values, fast.

Rows come from statements that select the columns below, in this order, and
are read by position. Statuses are looked up in plain dicts (an enum call per
row costs more), a timestamp shared by many rows (everything one tick moved)
becomes one datetime per read, not one per row, and JSON columns arrive as
text decoded here once (not through two layers of type processors): the
database already validated what it stores, so nothing is checked twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import sqlalchemy as sa

from drover.model.kinds import Kinds
from drover.model.status import SchedulingResult
from drover.model.values import Claim, CoordinatorInfo, Entity, HistoryRecord, KernelHistoryRecord
from drover.storage.schema import entities

__all__ = [
    "CHILD_COLUMNS",
    "ENTITY_COLUMNS",
    "MOVED",
    "Reader",
    "Times",
    "coordinator_from_row",
    "decode_json",
    "entities_with_children",
    "entity_from_row",
    "history_from_row",
    "kernel_history_from_row",
    "moved_from_change",
]

_e = entities


def _text(column: sa.Column[Any]) -> sa.ColumnElement[Any]:
    # The JSON as the driver returns it (SQLite: text, decoded by _json).
    return sa.type_coerce(column, sa.Text).label(column.name)


#: Any kind's entities, in this order: :func:`entities_with_children` reads them (their
#: children too), and so does a kind's own :attr:`~drover.model.kinds.EntityKind.reader`.
ENTITY_COLUMNS = (
    _e.c.id,
    _e.c.kind,
    _e.c.name,
    _e.c.status,
    _e.c.status_changed_at,
    _e.c.priority,
    _e.c.created_at,
    _text(_e.c.spec),
    _text(_e.c.data),
    _e.c.status_info,
    _e.c.result,
    _text(_e.c.tries),
    _e.c.requeues,
    _text(_e.c.budgets),
    _e.c.parent_id,
    _e.c.exit_code,
    _e.c.agent_id,
    _text(_e.c.runtime),
)
#: The children a kind's own reader is given, in this order: the narrow columns a child
#: kind's value needs (a session's kernels), a tick reading thousands of them.
CHILD_COLUMNS = (
    _e.c.id,
    _e.c.parent_id,
    _e.c.status,
    _e.c.status_changed_at,
    _e.c.agent_id,
    _text(_e.c.spec),
    _e.c.exit_code,
    _e.c.status_info,
    _text(_e.c.runtime),
)
_loads = json.loads


def decode_json(text: Any) -> Any:
    """A JSON column's value: asyncpg hands PostgreSQL's over decoded, SQLite's is text."""
    if text.__class__ is not str:
        return text
    if text == "{}":
        return {}
    return _loads(text)


_json = decode_json
_RESULT: dict[str, SchedulingResult] = {r.value: r for r in SchedulingResult}


class Reader(Protocol):
    """A kind's own reader (:attr:`~drover.model.kinds.EntityKind.reader`): its values, in
    the order of ``rows``, from rows of :data:`ENTITY_COLUMNS` and its children's rows of
    :data:`CHILD_COLUMNS` (in no particular order); ``handler``'s try count; ``claim``
    the tick's, given to each value."""

    def __call__(
        self,
        rows: Sequence[Sequence[Any]],
        child_rows: Sequence[Sequence[Any]],
        handler: str | None,
        claim: Claim | None,
    ) -> list[Any]:
        """The values of ``rows``."""
        ...


class Times:
    """Epoch seconds to aware UTC datetimes, one datetime per distinct value."""

    def __init__(self) -> None:
        self._seen: dict[float, datetime] = {}

    def __call__(self, ts: float) -> datetime:
        """The datetime of ``ts``."""
        value = self._seen.get(ts)
        if value is None:
            value = self._seen[ts] = datetime.fromtimestamp(ts, UTC)
        return value


def entity_from_row(
    row: Sequence[Any],
    times: Times,
    kinds: Kinds,
    children: Sequence[Entity] = (),
    handler: str | None = None,
    links: Sequence[tuple[str, str]] = (),
    claim: Claim | None = None,
) -> Entity:
    """An :class:`Entity` from a row of :data:`ENTITY_COLUMNS`, its status its kind's enum."""
    tries: dict[str, int] = (_json(row[11]) or {}) if row[11] is not None else {}
    try_count = tries.get(handler, 0) if handler is not None else max(tries.values(), default=0)
    spec = _json(row[7]) if row[7] is not None else {}
    return Entity(
        id=row[0],
        kind=row[1],
        status=kinds.status(row[1], row[3]),
        status_changed_at=times(row[4]),
        try_count=try_count,
        priority=row[5],
        created_at=times(row[6]),
        spec=spec,
        data=None if row[8] is None else _json(row[8]),
        status_info=row[9],
        result=row[10],
        parent_id=row[14],
        children=tuple(children),
        name=row[2],
        tries=tries,
        requeues=row[12],
        budgets=kinds.budget_uses(row[1], spec, None if row[13] is None else _json(row[13])),
        exit_code=row[15],
        links=tuple(links),
        claim=claim,
    )


def entities_with_children(
    rows: Iterable[Sequence[Any]],
    child_rows: Iterable[Sequence[Any]],
    kinds: Kinds,
    handler: str | None = None,
    links: Mapping[str, Sequence[tuple[str, str]]] | None = None,
    claim: Claim | None = None,
) -> list[Entity]:
    """Entities in the order of ``rows``, with children (id order), ``links`` and ``claim``."""
    times = Times()
    by_parent: dict[str, list[Entity]] = {}
    for child_row in child_rows:
        child = entity_from_row(child_row, times, kinds)
        by_parent.setdefault(child_row[14], []).append(child)
    for children in by_parent.values():
        children.sort(key=lambda c: c.id)
    linked = links or {}
    return [
        entity_from_row(
            r, times, kinds, by_parent.get(r[0], ()), handler, linked.get(r[0], ()), claim
        )
        for r in rows
    ]


def history_from_row(row: Any, kinds: Kinds) -> HistoryRecord:
    """A :class:`HistoryRecord` from a ``scheduling_history`` row.

    Statuses are members of the row's kind's enum; result classes are
    :class:`SchedulingResult` members, named outcomes (and ``CREATED``) strings.
    """
    statuses = kinds.members(row.kind)
    return HistoryRecord(
        id=row.id,
        session_id=row.entity_id,
        handler=row.handler,
        result=_RESULT.get(row.result, row.result),
        from_status=statuses.get(row.from_status, row.from_status),
        to_status=statuses.get(row.to_status, row.to_status),
        error_code=row.error_code,
        message=row.message,
        attempts=row.attempts,
        created_at=datetime.fromtimestamp(row.created_at, UTC),
        updated_at=datetime.fromtimestamp(row.updated_at, UTC),
        kind=row.kind,
    )


#: ``result`` of the history rows read from ``status_changes`` (see :func:`moved_from_change`).
MOVED = "MOVED"


def moved_from_change(row: Any, kinds: Kinds) -> HistoryRecord:
    """A :class:`HistoryRecord` (result ``MOVED``, by ``source``) from a ``status_changes``
    row: how an entity's own history shows a move recorded among its parent's children."""
    statuses = kinds.members(row.kind)
    at = datetime.fromtimestamp(row.created_at, UTC)
    return HistoryRecord(
        id=row.id,
        session_id=row.entity_id,
        handler=row.source,
        result=MOVED,
        from_status=statuses.get(row.from_status, row.from_status),
        to_status=statuses.get(row.to_status, row.to_status),
        error_code=None,
        message=row.message,
        attempts=1,
        created_at=at,
        updated_at=at,
        kind=row.kind,
    )


def kernel_history_from_row(row: Any, kinds: Kinds) -> KernelHistoryRecord:
    """A :class:`KernelHistoryRecord` from a ``status_changes`` row (statuses its kind's)."""
    statuses = kinds.members(row.kind)
    return KernelHistoryRecord(
        id=row.id,
        kernel_id=row.entity_id,
        session_id=row.parent_id,
        source=row.source,
        from_status=statuses.get(row.from_status, row.from_status),
        to_status=statuses.get(row.to_status, row.to_status),
        message=row.message,
        created_at=datetime.fromtimestamp(row.created_at, UTC),
    )


def coordinator_from_row(row: Any) -> CoordinatorInfo:
    """A :class:`CoordinatorInfo` from a ``coordinators`` row."""
    return CoordinatorInfo(
        id=row.id,
        host=row.host,
        pid=row.pid,
        started_at=datetime.fromtimestamp(row.started_at, UTC),
        heartbeat_at=datetime.fromtimestamp(row.heartbeat_at, UTC),
        version=row.version,
        stopped_at=(
            datetime.fromtimestamp(row.stopped_at, UTC) if row.stopped_at is not None else None
        ),
        handlers=tuple(row.handlers) if row.handlers is not None else None,
    )
