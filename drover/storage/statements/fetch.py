"""The statements of the fetch (:mod:`drover.storage.tick_store`): a lifecycle handler's targets.

:func:`targets_query` reads the batch (claiming it on PostgreSQL with
:func:`claim_rows`; an apply drops the claim with :func:`release_rows`; a
backend's fence reads it back with :data:`CLAIM_TOKEN`). The batch's values are read
by :func:`drover.storage._reading.values_of`, as every read of entities is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from drover.model.filters import CandidateFilter
from drover.model.pools import PoolHolders
from drover.storage._sql import ids_value, statement
from drover.storage.fairness import oldest_seen_order
from drover.storage.rows import ENTITY_COLUMNS
from drover.storage.schema import FETCH_ORDER, coordinators, entities
from drover.storage.statements.filters import compile_filters
from drover.storage.statements.ids import ids_param

__all__ = [
    "CLAIM_TOKEN",
    "RENEW_CLAIM",
    "claim_rows",
    "clear_lapsed_claims",
    "release_claims",
    "release_rows",
    "renew_rows",
    "targets_query",
]

e = entities


def targets_query(
    kind: str,
    statuses: frozenset[str],
    filters: tuple[CandidateFilter, ...],
    postgres: bool,
    claiming: bool = False,
    oldest_seen: bool = False,
    solo: bool = False,
    pools: Mapping[str, PoolHolders] | None = None,
) -> sa.Select[Any]:
    """The entities (:data:`~drover.storage.rows.ENTITY_COLUMNS`) of ``kind`` in ``statuses``
    passing ``filters``, in fetch order, up to ``:limit``.

    Filters that read the clock take ``:now``. ``claiming`` (PostgreSQL): only
    rows with no live claim at ``:claim_now``, locked, skipping those another
    transaction holds. ``oldest_seen``: those ``:mark_handler`` fetched least
    recently first, then in fetch order. ``pools``: the registered pools (what a
    :class:`~drover.model.filters.PoolHasRoom` filter counts).

    A claiming fetch returns nothing while another coordinator (not
    ``:claim_owner``) holds the solo lease; with ``solo`` (the fetching
    coordinator's own lease, ``:claim_token``), nothing unless it still holds it.
    """
    query = sa.select(*ENTITY_COLUMNS).where(
        e.c.kind == kind, e.c.status.in_(sorted(str(s) for s in statuses))
    )
    order: tuple[Any, ...] = FETCH_ORDER
    if oldest_seen:
        query, seen = oldest_seen_order(query)
        order = (seen, *FETCH_ORDER)
    conditions = compile_filters(filters, postgres, pools or {})
    if conditions:
        query = query.where(*conditions)
    if claiming:
        # Unclaimed or lapsed claims only; rows another coordinator's claim
        # transaction holds right now are skipped, not waited for.
        now = sa.bindparam("claim_now", type_=sa.Double)
        query = query.where(sa.or_(e.c.claim_expires.is_(None), e.c.claim_expires < now))
        c = coordinators
        owner = sa.bindparam("claim_owner", type_=sa.String)
        lease: sa.ColumnElement[bool]
        if solo:
            lease = sa.exists().where(
                c.c.id == owner, c.c.solo_token == sa.bindparam("claim_token", type_=sa.String)
            )
        else:
            lease = ~sa.exists().where(c.c.solo_token.is_not(None), c.c.id != owner)
        query = query.where(lease)
        return (
            query.order_by(*order)
            .limit(sa.bindparam("limit"))
            .with_for_update(skip_locked=True, of=e)
        )
    return query.order_by(*order).limit(sa.bindparam("limit"))


def claim_rows() -> sa.Update:
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


def clear_lapsed_claims() -> sa.Update:
    """Drop the lapsed claims (of other ticks) from the entities ``:ids`` a solo tick fetched:
    a paused coordinator that held them finds them taken over."""
    return (
        sa.update(e)
        .where(ids_param(e.c.id, "ids", True), e.c.claim_token.is_not(None))
        .values(claim_owner=None, claim_token=None, claim_expires=None)
    )


def release_rows() -> sa.Update:
    """Drop one tick's claim from the entities ``:ids`` that still carry its token."""
    return (
        sa.update(e)
        .where(
            ids_param(e.c.id, "ids", True),
            e.c.claim_token == sa.bindparam("b_claim_token"),
        )
        .values(claim_owner=None, claim_token=None, claim_expires=None)
    )


#: The claim token the entity ``:b_id`` carries now (a backend's fence check).
CLAIM_TOKEN = sa.select(e.c.claim_token).where(e.c.id == sa.bindparam("b_id"))

#: Renew the claim ``:b_claim_token`` on ``:b_id`` until ``:b_until``, if the row still
#: carries it (a backend's fence check on work in progress); returns the id if so.
RENEW_CLAIM = (
    sa.update(e)
    .where(e.c.id == sa.bindparam("b_id"), e.c.claim_token == sa.bindparam("b_claim_token"))
    .values(claim_expires=sa.bindparam("b_until"))
    .returning(e.c.id)
)


def renew_rows() -> sa.Update:
    """Extend one tick's claim on the entities ``:ids`` that still carry its token."""
    return (
        sa.update(e)
        .where(
            ids_param(e.c.id, "ids", True),
            e.c.claim_token == sa.bindparam("b_claim_token"),
        )
        .values(claim_expires=sa.bindparam("b_until"))
    )


def release_claims(conn: sa.Connection, token: str, ids: Sequence[str]) -> None:
    """Release a tick's claim on ``ids`` (PostgreSQL), inside an open transaction.

    A solo tick's (:attr:`Claim.solo`) marked no row: there is nothing to release.
    """
    if ids:
        conn.execute(
            statement(("release-claims",), release_rows),
            {"ids": ids_value(ids, True), "b_claim_token": token},
        )
