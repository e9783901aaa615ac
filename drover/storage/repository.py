"""The write store: what the engine, the backends and the API write, by name.

:class:`Repository` implements the coordinator's
:class:`~drover.coordinator.store.DaemonStore` and the backends'
:class:`~drover.backends.base.KernelReporter` protocols, and the API's
creation, termination and spec changes. It is a :class:`~drover.storage.queries.Queries`
too (the harness and tests read through it); the dashboard, the CLI's read
commands and handlers get a plain ``Queries``, which cannot write. Each
operation is implemented in the module of its concern.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from drover.kinds.sessions.requests import new_session
from drover.kinds.sessions.values import KernelReport, KernelStatus, SessionStatus
from drover.model.clock import Clock
from drover.model.creation import check_spec_patch
from drover.model.filters import CandidateFilter
from drover.model.kinds import Kinds
from drover.model.plan import REPORT_SOURCE, ApplyOutcome, Change, Claim, Move
from drover.model.promotion import PromotionRule
from drover.model.values import (
    CoordinatorInfo,
    Entity,
    NewEntity,
    Report,
    Target,
    TerminationOutcome,
)
from drover.storage import coordinators as _coordinators
from drover.storage import entities as _entities
from drover.storage import fetch as _fetch
from drover.storage import history as _history
from drover.storage import kernels as _kernels
from drover.storage import notify as _notify
from drover.storage import reopen as _reopen
from drover.storage import reports as _reports
from drover.storage import termination as _termination
from drover.storage import ticks as _ticks
from drover.storage.apply import Apply, promote
from drover.storage.notify import Subscription
from drover.storage.queries import Queries
from drover.storage.watermarks import Window

__all__ = ["Repository"]


class Repository(Queries):
    """Reads and writes entities, kernels and history on one async engine.

    ``kinds`` are the registered entity kinds: :class:`drover.app.App`
    collects them from the plugins (``App.kinds``); there is no default set.
    """

    def __init__(self, engine: AsyncEngine, *, clock: Clock | None = None, kinds: Kinds) -> None:
        super().__init__(engine, clock=clock, kinds=kinds)
        self._busy_promotions: set[str] = set()
        # Per promotion rule: what its last empty check saw (drover.storage.watermarks).
        self._windows: dict[str, Window] = {}

    async def create_session(
        self,
        *,
        kernels: Sequence[Mapping[str, Any]],
        name: str | None = None,
        priority: int = 0,
        status: SessionStatus = SessionStatus.PENDING,
        spec: Mapping[str, Any] | None = None,
    ) -> str:
        """Create one PENDING session with its kernels and return its id.

        Each kernel mapping is the kernel's spec (``cpu``, ``mem``, ``command``…),
        checked as :meth:`create_entities` checks every new entity. ``status``
        is there for tests: anything but PENDING is refused; :meth:`seed_sessions`
        starts elsewhere.
        """
        request = {
            "kernels": kernels, "name": name, "priority": priority, "status": status, "spec": spec
        }  # fmt: skip
        (sid,) = await self.create_sessions([request])
        return sid

    async def create_sessions(self, requests: Sequence[Mapping[str, Any]]) -> list[str]:
        """Create many sessions in one transaction; each request has create_session's keywords.

        A request is turned into a :class:`NewEntity` (:func:`~drover.model.spec.new_session`)
        and created like any entity: one bad request raises InvalidSpecError
        and nothing is written.
        """
        return await self.create_entities([new_session(r) for r in requests])

    async def seed_sessions(self, requests: Sequence[Mapping[str, Any]]) -> list[str]:
        """Like :meth:`create_sessions`, for tests and benchmarks: start anywhere.

        A request's ``status`` sets the session's initial status, and a
        kernel's ``"status"`` and ``"agent_id"`` keys its own (kernels otherwise
        follow the session).
        """
        news = [new_session(r, seeding=True) for r in requests]
        return await _entities.create_entities(self._db, news, seeding=True)

    async def request_termination(
        self,
        session_ids: Sequence[str],
        *,
        source: str = "api",
        reason: str | None = None,
        mode: str | None = None,
    ) -> list[TerminationOutcome]:
        """Ask for entities to end, each by its kind's termination rule (history: ``source``,
        with ``reason`` in the message); ``mode``: the kinds' rules of that termination mode
        (InvalidSpecError, nothing written, for a kind without it)."""
        return await _termination.request_termination(self._db, session_ids, source, reason, mode)

    async def reopen(
        self, entity_id: str, status: str, *, source: str = "api", message: str | None = None
    ) -> None:
        """Take an ended entity back to the live ``status`` and clear its result.

        The one way out of a terminal status (see :mod:`drover.storage.reopen`);
        history records it as ``REOPENED`` by ``source``.
        """
        await _reopen.reopen(self._db, entity_id, status, source=source, message=message)

    async def create_entities(self, news: Sequence[NewEntity]) -> list[str]:
        """Check and create entities of any kind (with children and links) in one transaction.

        Every entity is checked first (:func:`drover.model.creation.check_new_entities`,
        the check the apply uses for a handler's creations too): one bad entity
        raises InvalidSpecError and nothing is written.
        """
        return await _entities.create_entities(self._db, news)

    async def seed_entities(self, news: Sequence[NewEntity]) -> list[str]:
        """Like :meth:`create_entities`, for tests and benchmarks: any status of the kind
        (outside its ``created_in``), and children with an ``agent_id``."""
        return await _entities.create_entities(self._db, news, seeding=True)

    async def create_entity(
        self,
        kind: str,
        *,
        spec: Mapping[str, Any] | None = None,
        status: str | None = None,
        parent_id: str | None = None,
        priority: int = 0,
        name: str | None = None,
        children: Sequence[Mapping[str, Any]] = (),
        links: Sequence[tuple[str, str]] = (),
    ) -> str:
        """Create one entity of ``kind`` and return its id (history row ``CREATED`` by ``api``)."""
        new = NewEntity(
            kind,
            dict(spec or {}),
            parent_id=parent_id,
            status=status,
            name=name,
            priority=priority,
            children=list(children),
            links=list(links),
        )
        (entity_id,) = await self.create_entities([new])
        return entity_id

    async def update_spec(self, entity_id: str, patch: Mapping[str, Any]) -> Entity:
        """Merge-patch an entity's spec (desired state); history records it as ``api``."""
        return await _entities.update_spec(self._db, entity_id, patch)

    async def link(self, source_id: str, relation: str, target_id: str) -> None:
        """Link two entities (``depends_on``, or a plugin's own relation name)."""
        await _entities.link(self._db, source_id, relation, target_id)

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
    ) -> list[Target]:
        """Entities of ``kind`` in ``statuses`` passing ``filters``, in fetch order.

        With ``claim`` (PostgreSQL) only unclaimed entities are fetched, and
        they are claimed for the tick; ``order`` is the handler's
        ``HandlerOptions.order``; see :mod:`drover.storage.fetch`.
        """
        return await _fetch.fetch_lifecycle_targets(
            self._db, handler, kind, statuses, filters, limit, now, claim, order
        )

    async def renew_claims(self, claim: Claim, ids: Sequence[str], until: float) -> None:
        """Extend a tick's claim on ``ids`` until ``until`` (a live tick's lease); no-op on
        SQLite. Entities whose claim was taken over or released are left alone."""
        if not self._db.postgres or not ids:
            return
        await self._db.write(lambda conn: _fetch.renew_claims(conn, claim, ids, until))

    async def release_claims(self, claim: Claim, ids: Sequence[str]) -> None:
        """Drop a tick's claim from ``ids`` (a tick that could not apply); no-op on SQLite
        and for a solo tick (no row carries its claim)."""
        if not self._db.postgres or not ids or claim.solo:
            return
        await self._db.write(lambda conn: _fetch.release_claims(conn, claim.token, ids))

    async def hold_claim(self, claim: Claim, entity_id: str) -> float | None:
        """Renew a tick's ``claim`` on ``entity_id`` if it still holds it; return its new
        expiry, or ``None`` if it lapsed and was taken over or released (a backend's fence
        check, :mod:`drover.backends.fence`)."""
        return await _fetch.hold_claim(self._db, claim, entity_id)

    async def subscribe(self, on_news: Callable[[dict[str, Any]], None]) -> Subscription | None:
        """Listen for other processes' news (PostgreSQL ``LISTEN``); ``None`` on SQLite."""
        return await _notify.subscribe(self._db, on_news)

    async def promote(
        self,
        rule: PromotionRule,
        limit: int,
        *,
        now: float,
        inject_failure: Callable[[str], None] | None = None,
        by: str | None = None,
    ) -> ApplyOutcome:
        """Select the sessions ``rule`` promotes and promote them, in one transaction.

        A rule whose last promotion found work goes straight to the write (work
        tends to come in runs); otherwise a read probe comes first, reading only
        what changed since the rule's last empty check (:mod:`drover.storage.watermarks`).
        """
        busy = rule.name in self._busy_promotions
        window = self._windows.get(rule.name)
        if window is None:
            window = self._windows[rule.name] = Window(self._db.postgres)
        outcome = await promote(
            self._db,
            rule,
            limit,
            now,
            inject_failure,
            probe_first=not busy,
            window=window,
            by=by,
        )
        if outcome.changes:
            self._busy_promotions.add(rule.name)
        else:
            self._busy_promotions.discard(rule.name)
        return outcome

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
        """Apply one tick's changes (and its handler's targeted ``moves``) in ONE
        transaction, with compare-and-set on statuses.

        With ``claim`` (PostgreSQL) the compare-and-set also checks the claim's
        token: a change whose claim lapsed or was taken over is not written but
        recorded as SKIPPED ``fenced``; the claim is released on ``claimed``.
        ``inject_failure`` is a test hook called between the steps of the apply
        (by name) to prove atomicity.
        """
        if not changes and not moves:
            if claim is not None:
                await self.release_claims(claim, claimed)
            return ApplyOutcome(changes=())
        return await self._db.write(
            lambda conn: Apply(
                conn,
                source,
                now,
                postgres=self._db.postgres,
                kinds=self._db.kinds,
                inject_failure=inject_failure,
                claim=claim,
                claimed=claimed,
            ).run(changes, moves)
        )

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
        it ends gets its result and ends its children. Raises
        UnknownEntityError or InvalidSpecError (an unknown status), writing
        nothing. See :mod:`drover.storage.reports`.
        """
        report = Report(
            entity_id,
            str(status),
            expected=None if expected is None else frozenset(str(s) for s in expected),
            status_info=status_info,
            data=None if data is None else check_spec_patch(data),
            message=message,
        )
        (ok,) = await self.report_many([report], source=source)
        return ok

    async def report_many(
        self, reports: Sequence[Report], *, source: str = REPORT_SOURCE
    ) -> list[bool]:
        """Push many reports in one transaction (see :meth:`report`); per report, whether
        it applied."""
        now = self._db.clock.time()
        db = self._db

        def work(conn: Any) -> list[bool]:
            return _reports.write_reports(
                conn, reports, source, now, kinds=db.kinds, postgres=db.postgres
            )

        applied: list[bool] = await db.write(work)
        return applied

    async def report_kernel_statuses(self, reports: Sequence[KernelReport]) -> list[bool]:
        """Apply backend reports in one transaction; return, per report, whether it applied."""
        return await _kernels.report_kernel_statuses(self._db, reports)

    async def report_kernel_progress(
        self, kernel_id: str, status: KernelStatus, message: str
    ) -> bool:
        """A backend's progress words for a kernel still in ``status`` (its ``status_info``)."""
        return await _kernels.report_kernel_progress(self._db, kernel_id, status, message)

    async def report_kernel_status(
        self,
        kernel_id: str,
        status: KernelStatus,
        *,
        expected: Iterable[KernelStatus] | None = None,
        exit_code: int | None = None,
        message: str | None = None,
    ) -> bool:
        """Report one kernel's new status, as a backend would (see report_kernel_statuses)."""
        report = KernelReport(
            kernel_id=kernel_id,
            status=status,
            expected=frozenset(expected) if expected is not None else None,
            exit_code=exit_code,
            message=message,
        )
        (ok,) = await self.report_kernel_statuses([report])
        return ok

    async def assign_agents(self, placements: Mapping[str, str]) -> int:
        """Set ``agent_id`` on PENDING kernels (``kernel_id -> agent_id``); return how many."""
        return await _kernels.assign_agents(self._db, placements)

    async def prune_history(
        self,
        *,
        older_than: float | None,
        ticks_older_than: float | None = None,
        dry_run: bool = False,
        batch: int = 5000,
        on_batch: Callable[[str, int], None] | None = None,
    ) -> dict[str, int]:
        """Delete old history of ended sessions and old tick summaries, in batches; report counts.

        See :func:`drover.storage.history.prune_history`.
        """
        return await _history.prune_history(
            self._db,
            older_than=older_than,
            ticks_older_than=ticks_older_than,
            dry_run=dry_run,
            batch=batch,
            on_batch=on_batch,
        )

    async def release_memory(self) -> int:
        """Free idle SQLite connections' page caches (``PRAGMA shrink_memory``); ``0`` on
        PostgreSQL. See :meth:`drover.storage._db.Database.release_memory`."""
        return await self._db.release_memory()

    async def record_ticks(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Store tick summaries (handler, started_at, duration, fetched, counts, error)."""
        await _ticks.record_ticks(self._db, rows)

    async def register_coordinator(
        self, info: CoordinatorInfo, *, stale_after: float = 15.0
    ) -> str | None:
        """Insert a coordinator's row; its start and first heartbeat are now.

        On a SQLite file only one coordinator may run: this raises
        :class:`~drover.model.errors.CoordinatorConflictError` naming the
        running one, or takes over from one that died (the returned note says
        so). See :func:`drover.storage.coordinators.register_coordinator`.
        """
        return await _coordinators.register_coordinator(self._db, info, stale_after=stale_after)

    async def heartbeat(self, coordinator_id: str) -> None:
        """Refresh a coordinator's ``heartbeat_at``."""
        await _coordinators.heartbeat(self._db, coordinator_id)

    async def take_solo(
        self, coordinator_id: str, token: str, *, until: float, alive_since: float
    ) -> bool:
        """Take the solo lease if no other coordinator runs; see
        :func:`drover.storage.coordinators.take_solo`."""
        return await _coordinators.take_solo(
            self._db, coordinator_id, token, until=until, alive_since=alive_since
        )

    async def keep_solo(
        self, coordinator_id: str, token: str, *, until: float, alive_since: float
    ) -> bool:
        """Renew the solo lease while no other coordinator runs; see
        :func:`drover.storage.coordinators.keep_solo`."""
        return await _coordinators.keep_solo(
            self._db, coordinator_id, token, until=until, alive_since=alive_since
        )

    async def drop_solo(self, coordinator_id: str, token: str) -> None:
        """Give the solo lease up (:func:`drover.storage.coordinators.drop_solo`)."""
        await _coordinators.drop_solo(self._db, coordinator_id, token)

    async def coordinator_stopped(self, coordinator_id: str) -> None:
        """Mark a coordinator as cleanly stopped."""
        await _coordinators.coordinator_stopped(self._db, coordinator_id)

    @property
    def queries(self) -> Queries:
        """A read-only view of this repository's database (the same connections)."""
        return Queries.sharing(self._db)
