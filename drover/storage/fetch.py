"""The coordinator's reads: a lifecycle handler's targets and a promotion's candidates.

All the filtering happens in SQL, before the ``LIMIT``: the statuses, and the
handler's candidate filters compiled by :mod:`drover.storage._filters` (the
promotion match comes from :data:`drover.model.rules.MATCH_CONDITIONS`, the
one definition of ALL / ANY / NOT_ANY).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from drover.model.filters import CandidateFilter
from drover.model.plan import Claim
from drover.model.promotion import PromotionRule
from drover.model.status import SessionStatus
from drover.storage._children import match_condition
from drover.storage._db import Database
from drover.storage._filters import compile_filters
from drover.storage._sql import ids_param, ids_value, statement
from drover.storage.rows import (
    ENTITY_COLUMNS,
    SESSION_COLUMNS,
    SESSION_KIND,
    entities_with_children,
    sessions_with_kernels,
)
from drover.storage.schema import entities
from drover.storage.sessions import FETCH_ORDER, read_kernels_of

__all__ = [
    "candidates_query",
    "fetch_lifecycle_targets",
    "fetch_promotion_candidates",
    "read_children_of",
    "release_claims",
]

e = entities

_SESSION_STATUS = {s.value: s for s in SessionStatus}


def _targets_query(
    kind: str,
    statuses: frozenset[str],
    filters: tuple[CandidateFilter, ...],
    postgres: bool,
    claiming: bool = False,
) -> sa.Select[Any]:
    columns = SESSION_COLUMNS if kind == SESSION_KIND else ENTITY_COLUMNS
    query = sa.select(*columns).where(
        e.c.kind == kind, e.c.status.in_(sorted(str(s) for s in statuses))
    )
    conditions = compile_filters(filters, postgres)
    if conditions:
        query = query.where(*conditions)
    if claiming:
        # Unclaimed or lapsed claims only; rows another coordinator's claim
        # transaction holds right now are skipped, not waited for.
        now = sa.bindparam("claim_now", type_=sa.Double)
        query = query.where(sa.or_(e.c.claim_expires.is_(None), e.c.claim_expires < now))
        return (
            query.order_by(*FETCH_ORDER)
            .limit(sa.bindparam("limit"))
            .with_for_update(skip_locked=True, of=e)
        )
    return query.order_by(*FETCH_ORDER).limit(sa.bindparam("limit"))


def _claim_rows() -> sa.Update:
    """Mark the entities ``:ids`` (PostgreSQL) as claimed by one tick."""
    return (
        sa.update(e)
        .where(ids_param(e.c.id, "ids", True))
        .values(
            claim_owner=sa.bindparam("b_claim_owner"),
            claim_token=sa.bindparam("b_claim_token"),
            claim_expires=sa.bindparam("b_claim_expires"),
        )
    )


def _release_rows() -> sa.Update:
    """Drop one tick's claim from the entities ``:ids`` that still carry its token."""
    return (
        sa.update(e)
        .where(
            ids_param(e.c.id, "ids", True),
            e.c.claim_token == sa.bindparam("b_claim_token"),
        )
        .values(claim_owner=None, claim_token=None, claim_expires=None)
    )


def release_claims(conn: sa.Connection, token: str, ids: Sequence[str]) -> None:
    """Release a tick's claim on ``ids`` (PostgreSQL), inside an open transaction."""
    if ids:
        conn.execute(
            statement(("release-claims",), _release_rows),
            {"ids": ids_value(ids, True), "b_claim_token": token},
        )


def _children_of(postgres: bool) -> sa.Select[Any]:
    return sa.select(*ENTITY_COLUMNS).where(ids_param(e.c.parent_id, "ids", postgres))


def read_children_of(conn: sa.Connection, ids: Sequence[str]) -> Sequence[Any]:
    """Rows (:data:`ENTITY_COLUMNS`) of the children of the entities ``ids``."""
    if not ids:
        return []
    postgres = conn.dialect.name == "postgresql"
    query = statement(("children-of", postgres), lambda: _children_of(postgres))
    return conn.execute(query, {"ids": ids_value(ids, postgres)}).all()


async def fetch_lifecycle_targets(
    db: Database,
    handler: str,
    kind: str,
    statuses: Iterable[str],
    filters: Sequence[CandidateFilter],
    limit: int,
    now: float,
    claim: Claim | None = None,
) -> list[Any]:
    """Entities of ``kind`` in ``statuses`` passing ``filters``, in fetch order.

    Sessions come as :class:`SessionWithKernels`, other kinds as
    :class:`~drover.model.values.Entity`. Each target's ``try_count`` is
    ``handler``'s.

    With a ``claim`` on PostgreSQL the fetch is a short write transaction: the
    rows are selected ``FOR UPDATE SKIP LOCKED`` among the unclaimed (or
    lapsed) ones and marked with the claim, so several coordinators fetch
    disjoint batches. On SQLite (one coordinator, enforced at start-up) the
    claim is ignored and the fetch stays a plain read.
    """
    wanted = frozenset(str(s) for s in statuses)
    checks = tuple(filters)
    pg = db.postgres
    claiming = claim is not None and pg
    query = statement(
        ("targets", kind, wanted, checks, pg, claiming),
        lambda: _targets_query(kind, wanted, checks, pg, claiming),
    )
    params: dict[str, Any] = {"limit": limit}
    if checks:
        params["now"] = now
    if claiming:
        assert claim is not None
        params["claim_now"] = now

    def work(conn: sa.Connection) -> list[Any]:
        rows = (conn.execute(query, params)).all()
        if not rows:
            return []
        if claiming:
            assert claim is not None
            conn.execute(
                statement(("claim-rows",), _claim_rows),
                {
                    "ids": ids_value([r[0] for r in rows], True),
                    "b_claim_owner": claim.owner,
                    "b_claim_token": claim.token,
                    "b_claim_expires": claim.expires,
                },
            )
        if kind == SESSION_KIND:
            kernel_rows = read_kernels_of(conn, [r[0] for r in rows])
            return sessions_with_kernels(rows, kernel_rows, handler)
        child_rows = read_children_of(conn, [r[0] for r in rows])
        return entities_with_children(rows, child_rows, handler)

    return await (db.write(work) if claiming else db.read(work))


def candidates_query(rule: PromotionRule, *, lock: bool = False) -> sa.Select[Any]:
    """Ids and statuses of the sessions ``rule`` promotes, in fetch order, up to ``:limit``.

    ``lock`` (PostgreSQL) locks them for the transaction, skipping rows another
    transaction holds.
    """
    query = (
        sa.select(e.c.id, e.c.status)
        .where(
            e.c.kind == rule.kind,
            e.c.status.in_(sorted(str(s) for s in rule.from_statuses)),
            match_condition(rule.match, rule.kernel_statuses),
        )
        .order_by(*FETCH_ORDER)
        .limit(sa.bindparam("limit"))
    )
    return query.with_for_update(skip_locked=True, of=e) if lock else query


async def fetch_promotion_candidates(
    db: Database, rule: PromotionRule, limit: int
) -> list[tuple[str, str]]:
    """Ids and statuses of entities the rule promotes, in fetch order (no values built)."""
    query = statement(("candidates", rule), lambda: candidates_query(rule))

    def work(conn: sa.Connection) -> list[tuple[str, str]]:
        return [
            (sid, _SESSION_STATUS.get(st, st)) for sid, st in conn.execute(query, {"limit": limit})
        ]

    return await db.read(work)
