"""Pushed reports: outside events move entities of any kind (one path for all of them).

A worker's heartbeat, a webhook, an agent, an operator's script
(``drover report``, ``POST /api/report``) and a backend's kernel reports
(:func:`drover.storage.kernels.report_kernel_statuses`) all come here.

Each report is compare-and-set: it applies only if the entity has not ended
and (when ``expected`` is given) is in an expected status. An applied report
records a status change (``status_changes``, with the reporter as source),
which the entity's own history shows, and its parent's view of its children.
An entity a report ends gets its result and ends its live children, down the
tree, as any transition into a terminal status does. Reports on one entity in
one call apply in order; each entity is written once, in its final state.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from functools import partial
from typing import Any

import sqlalchemy as sa

from drover.model.errors import InvalidSpecError, UnknownEntityError
from drover.model.kinds import Kinds
from drover.model.plan import REPORT_SOURCE
from drover.model.values import Report
from drover.storage._sql import ids_value, statement
from drover.storage.apply import Apply
from drover.storage.entities import merge_patch
from drover.storage.statements.apply import entity_data, set_entity_data
from drover.storage.statements.reports import (
    CHANGE_ARRAYS,
    INSERT_STATUS_CHANGES,
    SET_RUNTIME,
    apply_reports,
    insert_status_changes,
    reported_entities,
)

__all__ = ["REPORT_SOURCE", "write_reports"]


def write_reports(
    conn: sa.Connection,
    reports: Sequence[Report],
    source: str,
    now: float,
    *,
    kinds: Kinds,
    postgres: bool,
    of_kind: str | None = None,
) -> list[bool]:
    """Apply ``reports`` in the caller's write transaction; per report, whether it applied.

    Raises UnknownEntityError (of ``of_kind``, when given) for an unknown id
    and InvalidSpecError for a status the entity's kind lacks, before anything
    is written.
    """
    if not reports:
        return []
    ids = list(dict.fromkeys(r.entity_id for r in reports))
    query = statement(
        ("reported-entities", postgres, of_kind), lambda: reported_entities(postgres, of_kind)
    )
    current: dict[str, tuple[str, str | None, str]] = {
        eid: (kind, parent, status)
        for eid, kind, parent, status in conn.execute(query, {"ids": ids_value(ids, postgres)})
    }
    applied: list[bool] = []
    # entity id -> [status before the call, to, exit_code, info, clear agent, runtime, data]
    finals: dict[str, list[Any]] = {}
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
        ok = (
            status not in kind.terminal
            and (moves or report.data is not None)
            and (report.expected is None or status in report.expected)
        )
        applied.append(ok)
        if not ok:
            continue
        current[report.entity_id] = (kind_name, parent, to)
        final = finals.setdefault(report.entity_id, [status, status, None, None, False, None, None])
        final[1] = to
        if report.exit_code is not None:
            final[2] = report.exit_code
        if report.status_info is not None:
            final[3] = report.status_info
        if moves and kind.resource_slots is not None and to == kind.first_status:
            # Placed children that start over give their agent's capacity back.
            final[4] = True
        if report.runtime is not None:
            final[5] = report.runtime
        if report.data is not None:
            final[6] = merge_patch(final[6], report.data) if final[6] else report.data
        if moves:
            changes.append(
                {
                    "entity_id": report.entity_id,
                    "kind": kind_name,
                    "parent_id": parent,
                    "source": source,
                    "from_status": status,
                    "to_status": to,
                    "message": report.message,
                    "created_at": now,
                }
            )
    if not finals:
        return applied
    # Entities alike are written together (a backend reports many kernels the same way).
    groups: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    runtimes: list[dict[str, Any]] = []
    patches: dict[str, Any] = {}
    for eid, (before, to, code, info, clear, runtime, data) in finals.items():
        groups[(current[eid][0], before, to, code, info, clear)].append(eid)
        if runtime is not None:
            runtimes.append({"kid": eid, "rt": runtime})
        if data is not None:
            patches[eid] = data
    for (kind_name, before, to, code, info, clear), group in groups.items():
        moving = before != to
        # An entity without children that ends gets its result in the same write.
        kind = kinds[kind_name]
        ends = kind if moving and to in kind.terminal and not kinds.child_of(kind_name) else None
        build = partial(apply_reports, postgres, moving, ends)
        update = statement(("apply-reports", postgres, moving, ends), build)
        params = {
            "ids": ids_value(group, postgres),
            "from_status": before,
            "exit_code": code,
            "info": info,
            "clear_agent": clear,
        }
        if moving:
            params.update(to_status=to, now=now)
        conn.execute(update, params)
    if runtimes:
        conn.execute(SET_RUNTIME, runtimes)
    if patches:
        _patch_data(conn, patches, postgres)
    if changes and postgres:
        arrays: dict[str, Any] = {f"{name}s": [c[name] for c in changes] for name in CHANGE_ARRAYS}
        batch = statement(("insert-status-changes",), insert_status_changes)
        conn.execute(batch, {**arrays, "created_at": now})
    elif changes:
        # pysqlite's executemany runs one prepared statement over every row.
        conn.execute(INSERT_STATUS_CHANGES, changes)
    _ended(conn, finals, current, source, now, kinds=kinds, postgres=postgres)
    return applied


def _patch_data(conn: sa.Connection, patches: dict[str, Any], postgres: bool) -> None:
    query = statement(("entity-data", postgres), lambda: entity_data(postgres))
    found: dict[str, Any] = {
        eid: data for eid, data in conn.execute(query, {"ids": ids_value(list(patches), postgres)})
    }
    rows = [{"eid": eid, "new_data": merge_patch(found.get(eid), p)} for eid, p in patches.items()]
    conn.execute(statement(("set-entity-data",), set_entity_data), rows)


def _ended(
    conn: sa.Connection,
    finals: dict[str, list[Any]],
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
        if not childless and final[1] != final[0] and final[1] in kinds[kind_name].terminal:
            ended[(kind_name, final[1])].append(eid)
    if ended:
        apply = Apply(conn, source, now, postgres=postgres, kinds=kinds)
        for (kind_name, status), ids in ended.items():
            apply.ended(kinds[kind_name], ids, status)
