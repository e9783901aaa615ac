"""The tick's store: a lifecycle handler's targets (fetched, claimed), its apply, promotions.

:class:`TickStore` implements the coordinator's
:class:`~drover.coordinator.store.CoordinatorStore`, whose docstrings are the
contract; it is one of the services :class:`~drover.storage.repository.Repository`
is made of. All the filtering of a fetch happens in SQL, before the ``LIMIT``
(the statements are in :mod:`drover.storage.statements.fetch`, the candidate
filters compiled by :mod:`drover.storage.statements.filters`); the apply is the
one transaction of :class:`drover.storage.apply.Apply`; a promotion selects and
moves its entities in one write (:mod:`drover.storage.statements.promote`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from drover.model.filters import CandidateFilter
from drover.model.plan import AppliedChange, ApplyOutcome, Change, Claim, Move
from drover.model.promotion import PromotionRule
from drover.storage._reading import values_of
from drover.storage._service import Service
from drover.storage._sql import bounded_statement, chunked, driver_rows, ids_value, statement
from drover.storage.apply import Apply
from drover.storage.fairness import OLDEST_SEEN, mark
from drover.storage.schema import entities
from drover.storage.statements.coordinators import RENEW_SOLO, SOLO_HELD
from drover.storage.statements.fetch import (
    CLAIM_TOKEN,
    RENEW_CLAIM,
    claim_rows,
    clear_lapsed_claims,
    release_claims,
    renew_rows,
    targets_query,
)
from drover.storage.statements.filters import filter_shape
from drover.storage.statements.ids import checked_only
from drover.storage.statements.promote import (
    WATERMARKS,
    promotion_probe,
    recent_promotion_probe,
)
from drover.storage.watermarks import Watermarks, Window

__all__ = ["TickStore"]

e = entities
#: ``agent_id = :b_agent`` of the entities among ``:ids`` (a list) still in ``:b_status``
#: (found by id: the status is checked as an expression, see ``checked_only``).
_ASSIGN_AGENT = (
    sa.update(e)
    .where(
        e.c.id.in_(sa.bindparam("ids", expanding=True)),
        checked_only(e.c.status) == sa.bindparam("b_status"),
    )
    .values(agent_id=sa.bindparam("b_agent"))
)


class TickStore(Service):
    """A tick's reads and its one write: fetch, claims, apply, promote."""

    @functools.cached_property
    def _promotions(self) -> tuple[set[str], dict[str, Window]]:
        # The promotion rules whose last promotion found work, and per rule what its
        # last empty check saw (drover.storage.watermarks).
        return set(), {}

    async def fetch_lifecycle_targets(
        self,
        handler: str,
        kind: str,
        statuses: Iterable[str],
        filters: Sequence[CandidateFilter],
        limit: int,
        *,
        now: float,
        claim: Claim | None = None,
        order: str = "priority",
    ) -> list[Any]:
        """See :meth:`drover.coordinator.store.CoordinatorStore.fetch_lifecycle_targets`.

        With a ``claim`` on PostgreSQL the fetch is a short write transaction: the
        rows are selected ``FOR UPDATE SKIP LOCKED`` among the unclaimed (or
        lapsed) ones and marked with the claim; a solo claim marks no row. On
        SQLite (one coordinator, enforced at start-up) it stays a plain read.
        ``order="oldest-seen"`` marks the batch (:mod:`drover.storage.fairness`).
        """
        db = self._db
        wanted = frozenset(str(s) for s in statuses)
        checks = tuple(filters)
        pg = db.postgres
        claiming = claim is not None and pg
        solo = claiming and claim is not None and claim.solo
        # Cached by the filters' shape, their values bound: values that change every
        # tick reuse one statement.
        pools = db.kinds.pools
        shape, values = filter_shape(checks, pools)
        marking = order == OLDEST_SEEN
        query = bounded_statement(
            ("targets", kind, wanted, shape, pg, claiming, marking, solo),
            lambda: targets_query(kind, wanted, checks, pg, claiming, marking, solo, pools),
        )
        params: dict[str, Any] = {"limit": limit, **values}
        if marking:
            params["mark_handler"] = handler
        if checks:
            params["now"] = now
        if claiming:
            assert claim is not None
            params.update(claim_now=now, claim_owner=claim.owner)
            if solo:
                params["claim_token"] = claim.token

        def work(conn: sa.Connection) -> list[Any]:
            rows = driver_rows(conn, query, params)
            if not rows:
                return []
            ids = [r[0] for r in rows]
            if solo:
                # Alone, the tick marks no row; it only takes over lapsed claims (of a
                # coordinator that died or is paused), so that their holder is fenced.
                lapsed = statement(("clear-lapsed",), clear_lapsed_claims)
                conn.execute(lapsed, {"ids": ids_value(ids, True)})
            elif claiming:
                assert claim is not None
                conn.execute(statement(("claim-rows",), claim_rows), {
                    "ids": ids_value(ids, True), "b_claim_owner": claim.owner,
                    "b_claim_token": claim.token, "b_claim_expires": claim.expires,
                })  # fmt: skip
            if marking:
                mark(conn, handler, ids, now, kind, wanted)
            return values_of(conn, rows, db.kinds, kind, handler, claim if claiming else None)

        return await (db.write(work) if claiming or marking else db.read(work))

    async def renew_claims(self, claim: Claim, ids: Sequence[str], until: float) -> None:
        """Extend a tick's claim on ``ids`` until ``until`` (a live tick's lease; a solo
        tick's: the lease); no-op on SQLite. Entities whose claim was taken over or
        released are left alone."""
        if not self._db.postgres or not ids:
            return

        def work(conn: sa.Connection) -> None:
            if claim.solo:
                lease = {"b_id": claim.owner, "b_token": claim.token, "b_until": until}
                conn.execute(RENEW_SOLO, lease)
                return
            conn.execute(statement(("renew-claims",), renew_rows), {
                "ids": ids_value(ids, True), "b_claim_token": claim.token, "b_until": until,
            })  # fmt: skip

        await self._db.write(work)

    async def release_claims(self, claim: Claim, ids: Sequence[str]) -> None:
        """Drop a tick's claim from ``ids`` (a tick that could not apply); no-op on SQLite
        and for a solo tick (no row carries its claim)."""
        if not self._db.postgres or not ids or claim.solo:
            return
        await self._db.write(lambda conn: release_claims(conn, claim.token, ids))

    async def hold_claim(self, claim: Claim, entity_id: str) -> float | None:
        """If ``claim`` still holds ``entity_id`` (nobody took it over, it was not
        released), renew it for ``claim.ttl`` from now and return its new expiry; else
        ``None`` (a backend's fence check, :mod:`drover.backends.fence`).

        A claim without a ``ttl`` is only checked. On SQLite nothing is claimed (one
        coordinator, enforced at start-up): the claim always holds.
        """
        db = self._db
        if not db.postgres:
            return claim.expires
        if claim.solo:
            return await self._hold_solo(claim, entity_id)
        if claim.ttl is None:
            token = await db.read(
                lambda conn: conn.execute(CLAIM_TOKEN, {"b_id": entity_id}).scalar()
            )
            return claim.expires if token == claim.token else None
        until = db.clock.time() + claim.ttl
        params = {"b_id": entity_id, "b_claim_token": claim.token, "b_until": until}
        renewed = await db.write(lambda conn: conn.execute(RENEW_CLAIM, params).first())
        return until if renewed is not None else None

    async def _hold_solo(self, claim: Claim, entity_id: str) -> float | None:
        """:meth:`hold_claim` of a solo tick: the lease still holds (renewed if it has a
        ``ttl``) and no other coordinator claimed the entity."""
        until = claim.expires if claim.ttl is None else self._db.clock.time() + claim.ttl
        lease = {"b_id": claim.owner, "b_token": claim.token, "b_until": until}

        def work(conn: sa.Connection) -> float | None:
            check = SOLO_HELD if claim.ttl is None else RENEW_SOLO
            if conn.execute(check, lease).first() is None:
                return None
            token = conn.execute(CLAIM_TOKEN, {"b_id": entity_id}).scalar()
            return until if token is None else None

        return await self._db.write(work)

    async def apply(
        self,
        source: str,
        changes: Sequence[Change],
        *,
        now: float,
        inject_failure: Callable[[str], None] | None = None,
        claim: Claim | None = None,
        claimed: Sequence[str] = (),
        moves: Sequence[Move] = (),
    ) -> ApplyOutcome:
        """See :meth:`drover.coordinator.store.CoordinatorStore.apply`: ONE transaction,
        compare-and-set on statuses, fenced by ``claim``; ``inject_failure`` is a test
        hook called between the apply's steps (by name) to prove atomicity."""
        if not changes and not moves:
            if claim is not None:
                await self.release_claims(claim, claimed)
            return ApplyOutcome(changes=())
        db = self._db
        return await db.write(
            lambda conn: Apply(
                conn, source, now, postgres=db.postgres, kinds=db.kinds,
                inject_failure=inject_failure, claim=claim, claimed=claimed, clock=db.clock.time,
            ).run(changes, moves)
        )  # fmt: skip

    async def assign_agents(self, placements: Mapping[str, str], *, status: str) -> int:
        """Set ``agent_id`` on the entities still in ``status`` (``entity_id -> agent_id``);
        return how many. One statement per agent and chunk of entities."""
        by_agent: dict[str, list[str]] = {}
        for eid, agent in placements.items():
            by_agent.setdefault(agent, []).append(eid)

        def work(conn: sa.Connection) -> int:
            placed = 0
            for agent, ids in by_agent.items():
                for chunk in chunked(ids):
                    params = {"ids": chunk, "b_agent": agent, "b_status": str(status)}
                    placed += max(conn.execute(_ASSIGN_AGENT, params).rowcount, 0)
            return placed

        return await self._db.write(work) if by_agent else 0

    async def promote(
        self,
        rule: PromotionRule,
        limit: int,
        *,
        now: float,
        inject_failure: Callable[[str], None] | None = None,
        by: str | None = None,
    ) -> ApplyOutcome:
        """Select the entities ``rule`` promotes and promote them (up to ``limit``) in one
        write transaction; ``by`` (the coordinator's id) is named in the news of the moves.

        No value is built and no id list goes back and forth: for each of the
        rule's from statuses one ``UPDATE … WHERE id IN (SELECT … LIMIT)``
        selects and moves the entities (locking and skipping locked rows on
        PostgreSQL), then their children, result and history follow as in any
        apply. Most promotion ticks find nothing: unless the rule's last one
        found work (work comes in runs), a read probe first keeps them from
        taking the write lock (SQLite has one writer) for nothing, reading only
        what changed since the rule's last empty check
        (:mod:`drover.storage.watermarks`).
        """
        busy, windows = self._promotions
        window = windows.get(rule.name)
        if window is None:
            window = windows[rule.name] = Window(self._db.postgres)
        if rule.name not in busy and not await self._probe(rule, window):
            return ApplyOutcome(changes=())
        # The write checks every candidate: (when, watermarks) of its last attempt.
        checking: list[tuple[float, Watermarks]] = []
        db = self._db

        def work(conn: sa.Connection) -> ApplyOutcome:
            checking.append((time.monotonic(), _watermarks(conn)))
            apply = Apply(
                conn, rule.name, now, postgres=db.postgres, kinds=db.kinds,
                inject_failure=inject_failure, clock=db.clock.time,
            )  # fmt: skip
            applied: list[AppliedChange] = []
            for from_status in sorted(rule.from_statuses):
                if len(applied) >= limit:
                    break
                applied.extend(apply.promote(rule, from_status, limit - len(applied)))
            return apply.finish(applied, by)

        outcome = await db.write(work)
        if checking:
            # Promoting fewer than the limit means none is left; found work may hide more.
            window.checked(*checking[-1], full=True, found=bool(outcome.changes))
        if outcome.changes:
            busy.add(rule.name)
        else:
            busy.discard(rule.name)
        return outcome

    async def _probe(self, rule: PromotionRule, window: Window) -> bool:
        """Whether ``rule`` may have a candidate: the entities touched since its last empty
        check (or, when the window says so, all of them), read without the write lock."""
        full = statement(("promote-probe", rule), lambda: promotion_probe(rule))
        child = self._db.kinds.child_of(rule.kind)
        child_kind = child.name if child is not None else None
        recent = statement(
            ("promote-recent", rule, child_kind), lambda: recent_promotion_probe(rule, child_kind)
        )

        def any_candidate(conn: sa.Connection) -> tuple[bool, Watermarks, bool]:
            seen = _watermarks(conn)
            after = window.start(seen)
            started = time.perf_counter()
            if after is None:
                found = conn.execute(full).first() is not None
            else:
                params = {"changes_after": after[0], "history_after": after[1]}
                found = conn.execute(recent, params).first() is not None
            window.timed(seen, after, time.perf_counter() - started)
            return found, seen, after is None

        began = time.monotonic()
        found, seen, swept = await self._db.read(any_candidate)
        window.checked(began, seen, full=swept, found=found)
        return found


def _watermarks(conn: sa.Connection) -> Watermarks:
    row = conn.execute(WATERMARKS).one()
    return int(row[0]), int(row[1])
