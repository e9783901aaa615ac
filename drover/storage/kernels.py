"""Kernels and agents: backend reports, placements, and the resources agents hold."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import sqlalchemy as sa

from drover.kinds.sessions.values import KernelInfo, KernelReport, KernelStatus, UnknownKernelError
from drover.model.errors import UnknownEntityError
from drover.model.values import Report
from drover.storage._db import Database
from drover.storage._sql import chunked, statement
from drover.storage.reports import write_reports
from drover.storage.rows import Times, kernel_from_row
from drover.storage.statements.kernels import (
    ASSIGN_AGENT,
    KERNEL_BY_ID,
    KERNEL_KIND,
    KERNEL_STATUSES,
    KERNELS_IN,
    SET_STATUS_INFO,
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

    A kernel report is one case of a pushed report (:mod:`drover.storage.reports`),
    with source ``backend``: compare-and-set (not terminal, and in ``expected``
    when given), a recorded status change, ``message`` as the kernel's
    ``status_info``. Raises UnknownKernelError, writing nothing, for an unknown
    kernel id.
    """
    if not reports:
        return []
    now = db.clock.time()
    # Kernel statuses are StrEnum members: strings already, no conversion needed.
    pushed = [
        Report(
            r.kernel_id, r.status, r.expected, r.message, None, r.message, r.exit_code, r.runtime
        )
        for r in reports
    ]

    def work(conn: sa.Connection) -> list[bool]:
        try:
            return write_reports(
                conn, pushed, BACKEND_SOURCE, now,
                kinds=db.kinds, postgres=db.postgres, of_kind=KERNEL_KIND,
            )  # fmt: skip
        except UnknownEntityError as error:
            raise UnknownKernelError(error.entity_id) from None

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
