"""Pushed reports: outside events move entities of any kind (one path for all of them).

A worker's heartbeat, a webhook, an agent, an operator's script
(``drover report``, ``POST /api/report``) and a backend's kernel reports all
come to :class:`ReportSink`, one of the services
:class:`~drover.storage.repository.Repository` is made of.

Each report is compare-and-set: it applies only if the entity has not ended
and (when ``expected`` is given) is in an expected status. A report that moves
an entity sets its ``status_info`` to the report's words (none: cleared), so
words of an earlier status never outlive it. An applied report
records a status change (``status_changes``, with the reporter as source),
which the entity's own history shows, and its parent's view of its children.
An entity a report ends gets its result and ends its live children, down the
tree, as any transition into a terminal status does. Reports on one entity in
one call apply in order; each entity is written once, in its final state.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import attrs
import sqlalchemy as sa

from drover.model.errors import InvalidSpecError, UnknownEntityError
from drover.model.kinds import EntityKind, Kinds
from drover.model.plan import REPORT_SOURCE
from drover.model.reporting import check_report, check_source, checked_report
from drover.model.values import Report
from drover.storage._service import Service
from drover.storage._sql import ids_value, statement
from drover.storage.descendants import ChildMoves
from drover.storage.inserts import merge_patch
from drover.storage.schema import entities, status_changes
from drover.storage.statements.apply import entity_data, result_expression, set_entity_data
from drover.storage.statements.ids import checked_only, ids_param

__all__ = ["REPORT_SOURCE", "ReportSink"]

e = entities


def _reported_entities(postgres: bool, kind: str | None = None) -> sa.Select[Any]:
    """Id, kind, parent and status of the entities ``:ids`` (locked on PostgreSQL);
    of ``kind`` only, when given."""
    query = sa.select(e.c.id, e.c.kind, e.c.parent_id, e.c.status).where(
        ids_param(e.c.id, "ids", postgres)
    )
    if kind is not None:
        query = query.where(checked_only(e.c.kind, postgres) == kind)
    return query.with_for_update() if postgres else query


def _apply_reports(
    postgres: bool, moving: bool = True, ends: EntityKind | None = None
) -> sa.Update:
    """Move the entities ``:ids`` from ``:from_status`` as their reports say.

    ``moving``: to ``:to_status`` at ``:now``, forgetting tries and result (a
    live entity has none; one that ends gets it right after); else the status
    is kept. ``ends``: the entities, of that kind without children, end, and
    their result is set in the same statement (a kernel's row is written once).
    ``:exit_code`` and ``:info`` (the ``status_info``) when not null; the
    ``status_info`` cleared when ``:clear_info``, the agent when ``:clear_agent``.
    """
    info = sa.func.coalesce(sa.bindparam("info", type_=sa.Text), e.c.status_info)
    values: dict[str, Any] = {
        "exit_code": sa.func.coalesce(sa.bindparam("exit_code", type_=sa.Integer), e.c.exit_code),
        "status_info": sa.case(
            (sa.bindparam("clear_info", type_=sa.Boolean), sa.null()), else_=info
        ),
        "agent_id": sa.case(
            (sa.bindparam("clear_agent", type_=sa.Boolean), sa.null()), else_=e.c.agent_id
        ),
    }
    if moving:
        values.update(
            status=sa.bindparam("to_status"),
            status_changed_at=sa.bindparam("now", type_=sa.Double),
            tries=None,
            result=None
            if ends is None
            else result_expression(
                ends, None, postgres, sa.bindparam("to_status", type_=sa.String)
            ),
        )
    return (
        sa.update(e)
        .where(
            ids_param(e.c.id, "ids", postgres),
            checked_only(e.c.status, postgres) == sa.bindparam("from_status"),
        )
        .values(**values)
    )


#: ``runtime = :rt`` of the entity ``:kid`` (executed with many rows).
_SET_RUNTIME = (
    sa.update(e)
    .where(e.c.id == sa.bindparam("kid"))
    .values(runtime=sa.bindparam("rt", type_=e.c.runtime.type))
)

#: Status changes recorded one by one (executed with many rows).
_INSERT_STATUS_CHANGES = sa.insert(status_changes)


#: The columns of ``status_changes`` that :func:`insert_status_changes` takes as arrays.
_CHANGE_ARRAYS = ("entity_id", "kind", "parent_id", "source", "from_status", "to_status", "message")


def _insert_status_changes() -> sa.Insert:
    """Many status changes as ONE statement (PostgreSQL): ``INSERT … SELECT`` from
    ``unnest`` of one array per column in :data:`_CHANGE_ARRAYS` (bound as ``:<column>s``),
    with ``:created_at`` the same for every row.

    asyncpg runs an executemany as one execution per row: a backend's report
    of a thousand kernels would be a thousand statements.
    """
    text_array = sa.ARRAY(sa.Text())
    rows = (
        sa.func.unnest(*(sa.bindparam(f"{name}s", type_=text_array) for name in _CHANGE_ARRAYS))
        .table_valued(*_CHANGE_ARRAYS)
        .render_derived()
    )
    created_at = sa.bindparam("created_at", type_=sa.Double)
    return sa.insert(status_changes).from_select(
        [*_CHANGE_ARRAYS, "created_at"], sa.select(*(rows.c[c] for c in _CHANGE_ARRAYS), created_at)
    )


#: ``status_info = :info`` of the entity ``:eid`` while it is still in ``:b_status`` (a
#: backend's progress words; no status change, so no history row).
_SET_STATUS_INFO = (
    sa.update(e)
    .where(e.c.id == sa.bindparam("eid"), e.c.status == sa.bindparam("b_status"))
    .values(status_info=sa.bindparam("info", type_=sa.Text))
)


@attrs.define
class _Final:
    """What the reports of one call leave an entity as: written once, in one statement."""

    before: str
    to: str
    exit_code: int | None = None
    info: str | None = None
    #: A move without words of its own: the words of the status it left go.
    clear_info: bool = False
    clear_agent: bool = False
    runtime: dict[str, Any] | None = None
    data: dict[str, Any] | None = None


class ReportSink(Service):
    """Reports pushed by backends and outside systems, applied with compare-and-set."""

    @functools.cached_property
    def _entered(self) -> set[tuple[str, str]]:
        return set()

    def take_entered(self) -> set[tuple[str, str]]:
        """The ``(kind, status)`` pairs applied reports moved entities into since the last
        call (what a wake-up after a backend's reports looks at)."""
        entered = set(self._entered)
        self._entered.clear()
        return entered

    async def report(
        self,
        entity_id: str,
        status: str,
        *,
        expected: Iterable[str] | None = None,
        status_info: str | None = None,
        data: Mapping[str, Any] | None = None,
        message: str | None = None,
        source: str = REPORT_SOURCE,
    ) -> bool:
        """Push an outside event's news about one entity of any kind; return whether it applied.

        Compare-and-set: it moves the entity to ``status`` only if it has not
        ended and (with ``expected``) is in one of those statuses; ``data``
        merge-patches its data (a report of its current status with ``data``
        only patches it). Recorded as a status change by ``source``; an entity
        it ends gets its result and ends its children, each recorded destroyed
        with how. A kind with ``strict_reports`` takes only its declared moves
        (:meth:`~drover.model.kinds.EntityKind.report_refusal`). Raises
        UnknownEntityError, or InvalidSpecError (a field
        :func:`~drover.model.reporting.check_report` refuses, a status its
        kind lacks or refuses from reports), writing nothing.
        """
        report = check_report(
            entity_id,
            status,
            expected=expected,
            status_info=status_info,
            data=data,
            message=message,
        )
        (ok,) = await self._report([report], check_source(source), None, backend=False)
        return ok

    async def report_many(
        self,
        reports: Sequence[Report],
        *,
        source: str = REPORT_SOURCE,
        of_kind: str | None = None,
        backend: bool = False,
    ) -> list[bool]:
        """Push many reports in one transaction (see :meth:`report`); per report, whether it
        applied. ``of_kind``: the entities must be of that kind (UnknownEntityError of it).
        ``backend``: a backend's own reports (``report_kernel_statuses``): drover's values,
        taken unchecked (thousands at once), and any status of the kind."""
        if not backend:
            reports = [checked_report(r) for r in reports]
            source = check_source(source)
        return await self._report(reports, source, of_kind, backend=backend)

    async def _report(
        self, reports: Sequence[Report], source: str, of_kind: str | None, *, backend: bool
    ) -> list[bool]:
        if not reports:
            return []
        now, db = self._db.clock.time(), self._db

        def work(conn: sa.Connection) -> tuple[list[bool], set[tuple[str, str]]]:
            return _write_reports(
                conn, reports, source, now, db.kinds, db.postgres, of_kind, backend=backend
            )

        applied, entered = await db.write(work)
        self._entered.update(entered)
        return applied

    async def report_status_info(self, entity_id: str, status: str, message: str) -> bool:
        """Set the entity's ``status_info`` to ``message`` while it is in ``status`` (a
        backend's progress words: no status change, no history row); whether it was."""
        params = {"eid": entity_id, "b_status": str(status), "info": message}
        return await self._db.write(
            lambda conn: bool(conn.execute(_SET_STATUS_INFO, params).rowcount)
        )


def _write_reports(
    conn: sa.Connection,
    reports: Sequence[Report],
    source: str,
    now: float,
    kinds: Kinds,
    postgres: bool,
    of_kind: str | None,
    *,
    backend: bool,
) -> tuple[list[bool], set[tuple[str, str]]]:
    """Apply ``reports`` in the caller's transaction: per report, whether it applied, and
    the ``(kind, status)`` pairs entered. Raises before anything is written."""
    ids = list(dict.fromkeys(r.entity_id for r in reports))
    query = statement(
        ("reported-entities", postgres, of_kind), lambda: _reported_entities(postgres, of_kind)
    )
    current: dict[str, tuple[str, str | None, str]] = {
        eid: (kind, parent, status)
        for eid, kind, parent, status in conn.execute(query, {"ids": ids_value(ids, postgres)})
    }
    applied, finals, changes = _plan(reports, current, kinds, source, now, of_kind, backend)
    if finals:
        _write_finals(conn, finals, current, kinds, postgres, now)
        _record_changes(conn, changes, postgres, now)
        _ended(conn, finals, current, source, now, kinds=kinds, postgres=postgres)
    entered = {(c["kind"], c["to_status"]) for c in changes}
    return applied, entered


def _plan(
    reports: Sequence[Report],
    current: dict[str, tuple[str, str | None, str]],
    kinds: Kinds,
    source: str,
    now: float,
    of_kind: str | None,
    backend: bool,
) -> tuple[list[bool], dict[str, _Final], list[dict[str, Any]]]:
    """Each report against the entity's state so far: applied?, the finals, the changes.

    An outside report (not ``backend``) names only its kind's statuses, and moves the
    entity only as its kind lets reports move it (``strict_reports``)."""
    applied: list[bool] = []
    finals: dict[str, _Final] = {}
    changes: list[dict[str, Any]] = []
    for report in reports:
        if report.entity_id not in current:
            raise UnknownEntityError(report.entity_id, of_kind)
        kind_name, parent, status = current[report.entity_id]
        kind = kinds[kind_name]
        to = str(report.status)
        if to not in kinds.members(kind_name):
            raise InvalidSpecError(
                f"{report.entity_id} is a {kind.name}: {to!r} is not one of its statuses "
                f"({', '.join(kind.status_names)})"
            )
        moves = to != status
        if not backend:
            _check_outside(report, kind, kinds, moves)
        ok = (
            status not in kind.terminal
            and (moves or report.data is not None)
            and (report.expected is None or status in report.expected)
            and (backend or not moves or kind.takes_report(status, to))
        )
        applied.append(ok)
        if not ok:
            continue
        current[report.entity_id] = (kind_name, parent, to)
        final = finals.setdefault(report.entity_id, _Final(status, status))
        _fold(final, report, to, moves, kind)
        if moves:
            changes.append({
                "entity_id": report.entity_id, "kind": kind_name, "parent_id": parent,
                "source": source, "from_status": status, "to_status": to,
                "message": report.message, "created_at": now,
            })  # fmt: skip
    return applied, finals, changes


def _check_outside(report: Report, kind: EntityKind, kinds: Kinds, moves: bool) -> None:
    """Refuse an outside report naming statuses its entity's kind lacks, or a move into
    a live status no report may make (a report of the status it has moves nothing)."""
    members = kinds.members(kind.name)
    unknown = sorted(s for s in report.expected or () if s not in members)
    if unknown:
        raise InvalidSpecError(
            f"{report.entity_id} is a {kind.name}: expected names unknown status(es) "
            f"{unknown} ({', '.join(kind.status_names)})"
        )
    refusal = kind.report_refusal(report.entity_id, str(report.status)) if moves else None
    if refusal is not None:
        raise InvalidSpecError(refusal)


def _fold(final: _Final, report: Report, to: str, moves: bool, kind: EntityKind) -> None:
    """``final`` with one more applied report."""
    final.to = to
    if report.exit_code is not None:
        final.exit_code = report.exit_code
    if moves:
        # status_info says how the entity is in its status: a pull's progress words
        # must not outlive PULLING.
        final.info, final.clear_info = report.status_info, report.status_info is None
    elif report.status_info is not None:
        final.info, final.clear_info = report.status_info, False
    if moves and kind.resource_slots is not None and to == kind.first_status:
        # Placed children that start over give their agent's capacity back.
        final.clear_agent = True
    if report.runtime is not None:
        final.runtime = report.runtime
    if report.data is not None:
        final.data = merge_patch(final.data, report.data) if final.data else report.data


def _write_finals(
    conn: sa.Connection,
    finals: dict[str, _Final],
    current: dict[str, tuple[str, str | None, str]],
    kinds: Kinds,
    postgres: bool,
    now: float,
) -> None:
    """Write the entities alike together (a backend reports many kernels the same way)."""
    groups: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    runtimes: list[dict[str, Any]] = []
    patches: dict[str, Any] = {}
    for eid, f in finals.items():
        key = (current[eid][0], f.before, f.to, f.exit_code, f.info, f.clear_info, f.clear_agent)
        groups[key].append(eid)
        if f.runtime is not None:
            runtimes.append({"kid": eid, "rt": f.runtime})
        if f.data is not None:
            patches[eid] = f.data
    for (kind_name, before, to, code, info, clear_info, clear), group in groups.items():
        moving = before != to
        # An entity without children that ends gets its result in the same write.
        kind = kinds[kind_name]
        ends = kind if moving and to in kind.terminal and not kinds.child_of(kind_name) else None
        build = partial(_apply_reports, postgres, moving, ends)
        update = statement(("apply-reports", postgres, moving, ends), build)
        params = {
            "ids": ids_value(group, postgres), "from_status": before, "exit_code": code,
            "info": info, "clear_info": clear_info, "clear_agent": clear,
        }  # fmt: skip
        if moving:
            params.update(to_status=to, now=now)
        conn.execute(update, params)
    if runtimes:
        conn.execute(_SET_RUNTIME, runtimes)
    if patches:
        _patch_data(conn, patches, postgres)


def _record_changes(
    conn: sa.Connection, changes: list[dict[str, Any]], postgres: bool, now: float
) -> None:
    if changes and postgres:
        arrays = {f"{name}s": [c[name] for c in changes] for name in _CHANGE_ARRAYS}
        batch = statement(("insert-status-changes",), _insert_status_changes)
        conn.execute(batch, {**arrays, "created_at": now})
    elif changes:
        # pysqlite's executemany runs one prepared statement over every row.
        conn.execute(_INSERT_STATUS_CHANGES, changes)


def _patch_data(conn: sa.Connection, patches: dict[str, Any], postgres: bool) -> None:
    query = statement(("entity-data", postgres), lambda: entity_data(postgres))
    found: dict[str, Any] = {
        eid: data for eid, data in conn.execute(query, {"ids": ids_value(list(patches), postgres)})
    }
    rows = [{"eid": eid, "new_data": merge_patch(found.get(eid), p)} for eid, p in patches.items()]
    conn.execute(statement(("set-entity-data",), set_entity_data), rows)


def _ended(
    conn: sa.Connection,
    finals: dict[str, _Final],
    current: dict[str, tuple[str, str | None, str]],
    source: str,
    now: float,
    *,
    kinds: Kinds,
    postgres: bool,
) -> None:
    """Results and children of the entities the reports ended (as any apply does)."""
    ended: dict[tuple[str, str], list[str]] = defaultdict(list)
    for eid, final in finals.items():
        kind_name = current[eid][0]
        childless = kinds.child_of(kind_name) is None  # their result is already set
        if not childless and final.to != final.before and final.to in kinds[kind_name].terminal:
            ended[(kind_name, final.to)].append(eid)
    if ended:
        moves = ChildMoves(conn, source, now, postgres=postgres, kinds=kinds)
        for (kind_name, status), ids in ended.items():
            # What a termination's destroy records on each child: that it did not end
            # on its own, and how it ended.
            info = f"destroyed: its {kind_name} was reported {status} by {source}"
            moves.ended(kinds[kind_name], ids, status, info=info)
