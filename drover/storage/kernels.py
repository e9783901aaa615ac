"""Kernels and agents: backend reports, placements, and the resources agents hold."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from drover.model.errors import UnknownKernelError
from drover.model.status import TERMINAL_KERNEL_STATUSES, KernelStatus
from drover.model.values import KernelInfo, KernelReport
from drover.storage._db import Database
from drover.storage._sql import chunked, ids_value, statement
from drover.storage.rows import Times, kernel_from_row
from drover.storage.statements.kernels import (
    ASSIGN_AGENT,
    INSERT_STATUS_CHANGES,
    KERNEL_BY_ID,
    KERNEL_KIND,
    KERNEL_STATUSES,
    KERNELS_IN,
    SET_RUNTIME,
    SET_STATUS_INFO,
    apply_reports,
    current_kernels,
    usage_per_agent,
)

__all__ = [
    "BACKEND_SOURCE",
    "agent_usage",
    "assign_agents",
    "get_kernel",
    "kernel_statuses",
    "kernels_in",
    "report_kernel_progress",
    "report_kernel_statuses",
]

#: ``source`` of the status changes a backend reports.
BACKEND_SOURCE = "backend"


async def report_kernel_statuses(db: Database, reports: Sequence[KernelReport]) -> list[bool]:
    """Apply backend reports in one transaction; return, per report, whether it applied.

    Each report is compare-and-set: it applies only if the kernel is not
    terminal and (when ``expected`` is given) is in an expected status. Each
    applied report records a status change with source ``backend``. Raises
    UnknownKernelError, writing nothing, for an unknown kernel id.
    """
    if not reports:
        return []
    now = db.clock.time()

    def work(conn: sa.Connection) -> list[bool]:
        ids = list({r.kernel_id for r in reports})
        query = statement(("kernels-current", db.postgres), lambda: current_kernels(db.postgres))
        current: dict[str, tuple[str, str]] = {
            kid: (sid, status)
            for kid, sid, status in conn.execute(query, {"ids": ids_value(ids, db.postgres)})
        }
        applied: list[bool] = []
        # kernel id -> [status before the call, to, exit_code, info, clear agent, runtime]
        finals: dict[str, list[Any]] = {}
        changes: list[dict[str, Any]] = []
        for report in reports:
            if report.kernel_id not in current:
                raise UnknownKernelError(report.kernel_id)
            sid, status = current[report.kernel_id]
            ok = (
                status not in TERMINAL_KERNEL_STATUSES
                and status != report.status
                and (report.expected is None or status in report.expected)
            )
            applied.append(ok)
            if not ok:
                continue
            current[report.kernel_id] = (sid, report.status.value)
            final = finals.setdefault(report.kernel_id, [status, None, None, None, False, None])
            final[1] = report.status.value
            if report.exit_code is not None:
                final[2] = report.exit_code
            if report.message is not None:
                final[3] = report.message
            if report.status == KernelStatus.PENDING:
                final[4] = True
            if report.runtime is not None:
                final[5] = report.runtime
            changes.append(
                {
                    "entity_id": report.kernel_id,
                    "kind": KERNEL_KIND,
                    "parent_id": sid,
                    "source": BACKEND_SOURCE,
                    "from_status": status,
                    "to_status": report.status.value,
                    "message": report.message,
                    "created_at": now,
                }
            )
        if not finals:
            return applied
        # Each kernel is written once, in its final state; kernels alike are
        # written together (a backend reports many kernels the same way).
        groups: dict[tuple[Any, ...], list[str]] = defaultdict(list)
        runtimes: list[dict[str, Any]] = []
        for kid, (before, to, code, info, clear, runtime) in finals.items():
            groups[(before, to, code, info, clear)].append(kid)
            if runtime is not None:
                runtimes.append({"kid": kid, "rt": runtime})
        update = statement(("apply-reports", db.postgres), lambda: apply_reports(db.postgres))
        for (before, to, code, info, clear), kids in groups.items():
            conn.execute(
                update,
                {
                    "ids": ids_value(kids, db.postgres),
                    "from_status": before,
                    "to_status": to,
                    "now": now,
                    "exit_code": code,
                    "info": info,
                    "clear_agent": clear,
                },
            )
        if runtimes:
            conn.execute(SET_RUNTIME, runtimes)
        conn.execute(INSERT_STATUS_CHANGES, changes)
        return applied

    return await db.write(work)


async def report_kernel_progress(
    db: Database, kernel_id: str, status: KernelStatus, message: str
) -> bool:
    """Set a kernel's ``status_info`` to ``message`` if it is still in ``status``.

    A backend's progress words (an image pull's): no status change, no history
    row. Returns whether the kernel was in ``status``.
    """

    def work(conn: sa.Connection) -> bool:
        result = conn.execute(
            SET_STATUS_INFO, {"kid": kernel_id, "b_status": status.value, "info": message}
        )
        return bool(result.rowcount)

    return await db.write(work)


async def agent_usage(db: Database, slots: Iterable[str]) -> dict[str, dict[str, float]]:
    """Resources held per agent: the sum of each slot over its placed, live kernels.

    A kernel holds resources while it has an agent and is neither PENDING nor
    ended (:data:`drover.model.rules.HOLDING_KERNEL_STATUSES`). It asks for
    slot ``X`` with ``spec["X"]`` (default 0).
    """
    slot_names = sorted(set(slots))
    pg = db.postgres
    query = statement(
        ("agent-usage", tuple(slot_names), pg), lambda: usage_per_agent(slot_names, pg)
    )

    def work(conn: sa.Connection) -> dict[str, dict[str, float]]:
        usage: dict[str, dict[str, float]] = {}
        for row in conn.execute(query):
            usage[row[0]] = {name: float(row[i + 1] or 0) for i, name in enumerate(slot_names)}
        return usage

    return await db.read(work)


async def assign_agents(db: Database, placements: Mapping[str, str]) -> int:
    """Set ``agent_id`` on PENDING kernels (``kernel_id -> agent_id``); return how many.

    One statement per agent and chunk of kernels: a thousand placements on a
    few agents are a few statements, not a thousand.
    """
    by_agent: dict[str, list[str]] = {}
    for kid, agent in placements.items():
        by_agent.setdefault(agent, []).append(kid)

    def work(conn: sa.Connection) -> int:
        placed = 0
        for agent, kernel_ids in by_agent.items():
            for chunk in chunked(kernel_ids):
                result = conn.execute(ASSIGN_AGENT, {"ids": chunk, "b_agent": agent})
                placed += max(result.rowcount, 0)
        return placed

    return await db.write(work) if by_agent else 0


async def kernels_in(db: Database, statuses: Iterable[KernelStatus]) -> list[KernelInfo]:
    """Every kernel currently in one of ``statuses`` (a backend's view at start-up)."""
    params = {"statuses": sorted(s.value for s in statuses)}

    def work(conn: sa.Connection) -> list[KernelInfo]:
        times = Times()
        return [kernel_from_row(r, times) for r in conn.execute(KERNELS_IN, params)]

    return await db.read(work)


async def kernel_statuses(db: Database, kernel_ids: Sequence[str]) -> dict[str, KernelStatus]:
    """Current status of each of ``kernel_ids`` (unknown ids are left out)."""

    def work(conn: sa.Connection) -> dict[str, KernelStatus]:
        found: dict[str, KernelStatus] = {}
        for chunk in chunked(list(kernel_ids)):
            for kid, status in conn.execute(KERNEL_STATUSES, {"ids": chunk}):
                found[kid] = KernelStatus(status)
        return found

    return await db.read(work)


async def get_kernel(db: Database, kernel_id: str) -> KernelInfo:
    """One kernel, or UnknownKernelError."""

    def work(conn: sa.Connection) -> KernelInfo:
        row = (conn.execute(KERNEL_BY_ID, {"b_id": kernel_id})).first()
        if row is None:
            raise UnknownKernelError(kernel_id)
        return kernel_from_row(row, Times())

    return await db.read(work)
