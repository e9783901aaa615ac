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
from typing import Any

import sqlalchemy as sa

from drover.kinds.sessions.values import KernelInfo, KernelStatus, SessionStatus, SessionWithKernels
from drover.model.kinds import Kinds
from drover.model.status import SchedulingResult
from drover.model.values import Claim, CoordinatorInfo, Entity, HistoryRecord, KernelHistoryRecord
from drover.storage.schema import entities

__all__ = [
    "ENTITY_COLUMNS",
    "KERNEL_COLUMNS",
    "MOVED",
    "Times",
    "coordinator_from_row",
    "entities_with_children",
    "entity_from_row",
    "history_from_row",
    "kernel_from_row",
    "kernel_history_from_row",
    "moved_from_change",
    "sessions_with_kernels",
]

_e = entities


def _text(column: sa.Column[Any]) -> sa.ColumnElement[Any]:
    # The JSON as the driver returns it (SQLite: text, decoded by _json).
    return sa.type_coerce(column, sa.Text).label(column.name)


#: Any kind's entities (and their children), read by :func:`entities_with_children`, and
#: sessions by :func:`sessions_with_kernels` (with their kernels' :data:`KERNEL_COLUMNS`).
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
)
KERNEL_COLUMNS = (
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


def _json(text: Any) -> Any:
    # asyncpg hands PostgreSQL's JSON over already decoded; SQLite's is text.
    if text.__class__ is not str:
        return text
    if text == "{}":
        return {}
    return _loads(text)


_SESSION_STATUS: dict[str, SessionStatus] = {s.value: s for s in SessionStatus}
_KERNEL_STATUS: dict[str, KernelStatus] = {s.value: s for s in KernelStatus}
_RESULT: dict[str, SchedulingResult] = {r.value: r for r in SchedulingResult}


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


def kernel_from_row(row: Sequence[Any], times: Times) -> KernelInfo:
    """A :class:`KernelInfo` from a row of :data:`KERNEL_COLUMNS`."""
    return KernelInfo(
        row[0],
        row[1],
        _KERNEL_STATUS[row[2]],
        times(row[3]),
        row[4],
        _json(row[5]),
        row[6],
        row[7],
        _json(row[8]),
    )


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


def sessions_with_kernels(
    session_rows: Iterable[Sequence[Any]],
    kernel_rows: Iterable[Sequence[Any]],
    handler: str | None = None,
    claim: Claim | None = None,
) -> list[SessionWithKernels]:
    """Sessions (rows of :data:`ENTITY_COLUMNS`) in order, each with its kernels in id order.

    The hot path of every lifecycle tick (a thousand sessions and four
    thousand kernels a tick): the per-row work is inlined, the timestamp
    cache of :class:`Times` included, because a method call per column costs
    more than the lookup it wraps. Kernels read together with identical spec
    text share one decoded, read-only spec. ``try_count`` is ``handler``'s
    count, or the highest of any handler. ``claim``: the tick's, given to each session.
    """
    seen_times: dict[float, datetime] = {}
    seen_specs: dict[str, Any] = {}
    from_ts = datetime.fromtimestamp
    kernel_status = _KERNEL_STATUS
    by_session: dict[str, list[KernelInfo]] = {}
    for kid, sid, status, changed, agent, spec, code, info, runtime in kernel_rows:
        at = seen_times.get(changed)
        if at is None:
            at = seen_times[changed] = from_ts(changed, UTC)
        if spec.__class__ is str:
            text = spec
            spec = seen_specs.get(text)
            if spec is None:
                spec = seen_specs[text] = _json(text)
        kernel = KernelInfo(
            kid,
            sid,
            kernel_status[status],
            at,
            agent,
            spec,
            code,
            info,
            runtime if runtime is None else _json(runtime),
        )
        found = by_session.get(sid)
        if found is None:
            by_session[sid] = [kernel]
        else:
            found.append(kernel)
    for kernels in by_session.values():
        if len(kernels) > 1:
            # Ids are time-ordered: id order is creation order. Rows mostly
            # arrive in it already, which a sort sees in one pass.
            kernels.sort(key=_kernel_id)
    session_status = _SESSION_STATUS
    no_kernels: list[KernelInfo] = []
    out: list[SessionWithKernels] = []
    append = out.append
    for row in session_rows:
        (sid, _kind, name, status, changed, priority, created, spec, data, info, result,
         tries_text, requeues, budgets, _parent, _code) = row  # fmt: skip
        tries: dict[str, int] = _json(tries_text) if tries_text is not None else {}
        if handler is not None:
            try_count = tries.get(handler, 0) if tries else 0
        else:
            try_count = max(tries.values(), default=0)
        at = seen_times.get(changed)
        if at is None:
            at = seen_times[changed] = from_ts(changed, UTC)
        born = seen_times.get(created)
        if born is None:
            born = seen_times[created] = from_ts(created, UTC)
        append(
            SessionWithKernels(
                sid,
                name or "",
                session_status[status],
                at,
                try_count,
                priority,
                born,
                _json(spec),
                info,
                result,
                tuple(by_session.get(sid, no_kernels)),
                tries or {},
                requeues,
                None if data is None else _json(data),
                None if budgets is None else _json(budgets),
                claim,
            )
        )
    return out


def _kernel_id(kernel: KernelInfo) -> str:
    return kernel.id


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
