"""The coordinator's reads: a lifecycle handler's targets, and the claims on them.

All the filtering happens in SQL, before the ``LIMIT``: the statuses, and the
handler's candidate filters compiled by :mod:`drover.storage.statements.filters`. The
statements are in :mod:`drover.storage.statements.fetch`; a promotion's
candidates are selected inside its write (:func:`drover.storage.apply.promote`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from drover.kinds.sessions.values import SessionWithKernels
from drover.model.filters import CandidateFilter
from drover.model.kinds import Kinds
from drover.model.plan import Claim
from drover.storage._db import Database
from drover.storage._sql import bounded_statement, driver_rows, ids_value, statement
from drover.storage.fairness import OLDEST_SEEN, mark
from drover.storage.rows import (
    entities_with_children,
    sessions_with_kernels,
)
from drover.storage.sessions import read_kernels_of
from drover.storage.statements.coordinators import RENEW_SOLO, SOLO_HELD
from drover.storage.statements.fetch import (
    CLAIM_TOKEN,
    RENEW_CLAIM,
    children_of,
    claim_rows,
    clear_lapsed_claims,
    links_of,
    release_rows,
    renew_rows,
    targets_query,
)
from drover.storage.statements.filters import filter_shape

__all__ = [
    "fetch_lifecycle_targets",
    "hold_claim",
    "read_children_of",
    "read_links_of",
    "release_claims",
    "renew_claims",
]


def _read_sessions(
    conn: sa.Connection, rows: Sequence[Any], kinds: Kinds, handler: str, claim: Claim | None
) -> list[Any]:
    kernels = read_kernels_of(conn, [r[0] for r in rows])
    return sessions_with_kernels(rows, kernels, handler, claim)


def _read_entities(
    conn: sa.Connection, rows: Sequence[Any], kinds: Kinds, handler: str, claim: Claim | None
) -> list[Any]:
    ids = [r[0] for r in rows]
    children = read_children_of(conn, ids)
    return entities_with_children(rows, children, kinds, handler, read_links_of(conn, ids), claim)


# How a kind's value type is read from rows of ENTITY_COLUMNS, children included.
# SessionWithKernels has its own, faster reader: a tick's thousand sessions and four
# thousand kernels, the kernels with their narrow columns.
_READERS: dict[type, Any] = {SessionWithKernels: _read_sessions}


def release_claims(conn: sa.Connection, token: str, ids: Sequence[str]) -> None:
    """Release a tick's claim on ``ids`` (PostgreSQL), inside an open transaction.

    A solo tick's (:attr:`Claim.solo`) marked no row: there is nothing to release.
    """
    if ids:
        conn.execute(
            statement(("release-claims",), release_rows),
            {"ids": ids_value(ids, True), "b_claim_token": token},
        )


async def hold_claim(db: Database, claim: Claim, entity_id: str) -> float | None:
    """If ``claim`` still holds ``entity_id`` (its row carries the claim's token: nobody
    took it over, it was not released), renew it for ``claim.ttl`` from now and return
    its new expiry; else ``None``.

    A claim without a ``ttl`` is only checked (its expiry returned). On SQLite nothing
    is claimed (one coordinator, enforced at start-up): the claim always holds.
    """
    if not db.postgres:
        return claim.expires
    if claim.solo:
        return await _hold_solo(db, claim, entity_id)
    if claim.ttl is None:

        def token_of(conn: sa.Connection) -> Any:
            return conn.execute(CLAIM_TOKEN, {"b_id": entity_id}).scalar()

        return claim.expires if await db.read(token_of) == claim.token else None
    until = db.clock.time() + claim.ttl
    params = {"b_id": entity_id, "b_claim_token": claim.token, "b_until": until}
    renewed = await db.write(lambda conn: conn.execute(RENEW_CLAIM, params).first())
    return until if renewed is not None else None


async def _hold_solo(db: Database, claim: Claim, entity_id: str) -> float | None:
    """:func:`hold_claim` of a solo tick: the lease still holds (renewed if it has a
    ``ttl``) and no other coordinator claimed the entity."""
    until = claim.expires if claim.ttl is None else db.clock.time() + claim.ttl
    lease = {"b_id": claim.owner, "b_token": claim.token, "b_until": until}

    def work(conn: sa.Connection) -> float | None:
        check = SOLO_HELD if claim.ttl is None else RENEW_SOLO
        if conn.execute(check, lease).first() is None:
            return None
        token = conn.execute(CLAIM_TOKEN, {"b_id": entity_id}).scalar()
        return until if token is None else None

    return await db.write(work)


def renew_claims(conn: sa.Connection, claim: Claim, ids: Sequence[str], until: float) -> None:
    """Extend a tick's claim on ``ids`` (PostgreSQL) until ``until``, inside a transaction
    (a solo tick's: the lease)."""
    if claim.solo:
        conn.execute(RENEW_SOLO, {"b_id": claim.owner, "b_token": claim.token, "b_until": until})
        return
    if ids:
        conn.execute(
            statement(("renew-claims",), renew_rows),
            {"ids": ids_value(ids, True), "b_claim_token": claim.token, "b_until": until},
        )


def read_children_of(conn: sa.Connection, ids: Sequence[str]) -> Sequence[Any]:
    """Rows (:data:`~drover.storage.rows.ENTITY_COLUMNS`) of the children of ``ids``."""
    if not ids:
        return []
    postgres = conn.dialect.name == "postgresql"
    query = statement(("children-of", postgres), lambda: children_of(postgres))
    return driver_rows(conn, query, {"ids": ids_value(ids, postgres)})


def read_links_of(conn: sa.Connection, ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
    """``{source id: [(relation, target id), …]}`` of the links from ``ids``."""
    if not ids:
        return {}
    postgres = conn.dialect.name == "postgresql"
    query = statement(("links-of", postgres), lambda: links_of(postgres))
    found: dict[str, list[tuple[str, str]]] = {}
    for source, name, target in conn.execute(query, {"ids": ids_value(ids, postgres)}):
        found.setdefault(source, []).append((name, target))
    return found


async def fetch_lifecycle_targets(
    db: Database,
    handler: str,
    kind: str,
    statuses: Iterable[str],
    filters: Sequence[CandidateFilter],
    limit: int,
    now: float,
    claim: Claim | None = None,
    order: str = "priority",
) -> list[Any]:
    """Entities of ``kind`` in ``statuses`` passing ``filters``, in fetch order.

    Each comes as its kind's ``value_type`` (:class:`~drover.model.values.Entity`,
    or the session kind's :class:`SessionWithKernels`), its status a member of
    its kind's enum. Each target's ``try_count`` is ``handler``'s.

    With a ``claim`` on PostgreSQL the fetch is a short write transaction: the
    rows are selected ``FOR UPDATE SKIP LOCKED`` among the unclaimed (or
    lapsed) ones and marked with the claim, so several coordinators fetch
    disjoint batches. A solo claim (the coordinator runs alone, under its
    solo lease) marks no row. On SQLite (one coordinator, enforced at start-up) the
    claim is ignored and the fetch stays a plain read. Each target carries the
    claim it was fetched under (``claim``; ``None`` when not claimed), which
    backends check before side effects (:mod:`drover.backends.fence`).

    ``order="oldest-seen"`` takes those ``handler`` fetched least recently
    first and marks the batch (a write transaction; :mod:`drover.storage.fairness`).
    """
    wanted = frozenset(str(s) for s in statuses)
    checks = tuple(filters)
    pg = db.postgres
    claiming = claim is not None and pg
    solo = claiming and claim is not None and claim.solo
    kinds = db.kinds
    read = _READERS.get(kinds[kind].value_type, _read_entities)
    # Cached by the filters' shape, their values bound: values that change every
    # tick reuse one statement.
    shape, values = filter_shape(checks)
    marking = order == OLDEST_SEEN
    query = bounded_statement(
        ("targets", kind, wanted, shape, pg, claiming, marking, solo),
        lambda: targets_query(kind, wanted, checks, pg, claiming, marking, solo),
    )
    params: dict[str, Any] = {"limit": limit, **values}
    if marking:
        params["mark_handler"] = handler
    if checks:
        params["now"] = now
    if claiming:
        assert claim is not None
        params["claim_now"] = now
        params["claim_owner"] = claim.owner
        if solo:
            params["claim_token"] = claim.token

    def work(conn: sa.Connection) -> list[Any]:
        rows = driver_rows(conn, query, params)
        if not rows:
            return []
        if solo:
            # Alone, the tick marks no row; it only takes over lapsed claims (of a
            # coordinator that died or is paused), so that their holder is fenced.
            ids = ids_value([r[0] for r in rows], True)
            conn.execute(statement(("clear-lapsed",), clear_lapsed_claims), {"ids": ids})
        elif claiming:
            assert claim is not None
            conn.execute(
                statement(("claim-rows",), claim_rows),
                {
                    "ids": ids_value([r[0] for r in rows], True),
                    "b_claim_owner": claim.owner,
                    "b_claim_token": claim.token,
                    "b_claim_expires": claim.expires,
                },
            )
        if marking:
            mark(conn, handler, [r[0] for r in rows], now, kind, wanted)
        held = claim if claiming else None
        return read(conn, rows, kinds, handler, held)  # type: ignore[no-any-return]

    return await (db.write(work) if claiming or marking else db.read(work))
