"""The coordinator's reads: a lifecycle handler's targets and a promotion's candidates.

All the filtering happens in SQL, before the ``LIMIT``; the promotion match is
compiled from :data:`drover.model.rules.MATCH_CONDITIONS`, the one definition
of ALL / ANY / NOT_ANY.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from drover.model.promotion import PromotionRule
from drover.model.status import KernelStatus, SessionStatus
from drover.model.values import SessionWithKernels
from drover.storage._children import kernel_exists, kernel_status_in, match_condition
from drover.storage._db import Database
from drover.storage._sql import statement
from drover.storage.rows import SESSION_COLUMNS, SESSION_KIND, sessions_with_kernels
from drover.storage.schema import entities
from drover.storage.sessions import FETCH_ORDER, read_kernels_of

__all__ = ["candidates_query", "fetch_lifecycle_targets", "fetch_promotion_candidates"]

e = entities

_SESSION_STATUS = {s.value: s for s in SessionStatus}


def _targets_query(
    session_statuses: frozenset[SessionStatus], kernel_statuses: frozenset[KernelStatus] | None
) -> sa.Select[Any]:
    query = sa.select(*SESSION_COLUMNS).where(
        e.c.kind == SESSION_KIND, e.c.status.in_(sorted(s.value for s in session_statuses))
    )
    if kernel_statuses is not None:
        query = query.where(kernel_exists(kernel_status_in(kernel_statuses)))
    return query.order_by(*FETCH_ORDER).limit(sa.bindparam("limit"))


async def fetch_lifecycle_targets(
    db: Database,
    handler: str,
    session_statuses: Iterable[SessionStatus],
    kernel_statuses: Iterable[KernelStatus] | None,
    limit: int,
) -> list[SessionWithKernels]:
    """Sessions in ``session_statuses`` with a kernel in ``kernel_statuses``, in fetch order.

    Each session's ``try_count`` is ``handler``'s.
    """
    statuses = frozenset(session_statuses)
    kernels = None if kernel_statuses is None else frozenset(kernel_statuses)
    query = statement(("targets", statuses, kernels), lambda: _targets_query(statuses, kernels))

    def work(conn: sa.Connection) -> list[SessionWithKernels]:
        rows = (conn.execute(query, {"limit": limit})).all()
        if not rows:
            return []
        kernel_rows = read_kernels_of(conn, [r[0] for r in rows])
        return sessions_with_kernels(rows, kernel_rows, handler)

    return await db.read(work)


def candidates_query(rule: PromotionRule, *, lock: bool = False) -> sa.Select[Any]:
    """Ids and statuses of the sessions ``rule`` promotes, in fetch order, up to ``:limit``.

    ``lock`` (PostgreSQL) locks them for the transaction, skipping rows another
    transaction holds.
    """
    query = (
        sa.select(e.c.id, e.c.status)
        .where(
            e.c.kind == SESSION_KIND,
            e.c.status.in_(sorted(s.value for s in rule.from_statuses)),
            match_condition(rule.match, rule.kernel_statuses),
        )
        .order_by(*FETCH_ORDER)
        .limit(sa.bindparam("limit"))
    )
    return query.with_for_update(skip_locked=True, of=e) if lock else query


async def fetch_promotion_candidates(
    db: Database, rule: PromotionRule, limit: int
) -> list[tuple[str, SessionStatus]]:
    """Ids and statuses of sessions the rule promotes, in fetch order (no values built)."""
    query = statement(("candidates", rule), lambda: candidates_query(rule))

    def work(conn: sa.Connection) -> list[tuple[str, SessionStatus]]:
        return [(sid, _SESSION_STATUS[st]) for sid, st in conn.execute(query, {"limit": limit})]

    return await db.read(work)
