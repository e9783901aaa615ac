"""Read-only queries: what the CLI, the dashboard and handlers read, by name.

:class:`Queries` has no method that writes, so whatever holds one (the web
dashboard, a handler's :class:`~drover.plugins.registry.RuntimeContext`, the
CLI's read commands) is read-only by type. :class:`~drover.storage.repository.Repository`,
the write store of the engine and the backends, is a ``Queries`` too. Each
query is implemented in the module of its concern; the SQL is built there and
in :mod:`drover.storage.statements`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from drover.kinds.sessions.values import KernelInfo, KernelStatus, SessionStatus, SessionWithKernels
from drover.model.clock import Clock
from drover.model.kinds import Kinds
from drover.model.status import SchedulingResult
from drover.model.values import CoordinatorInfo, Entity, HistoryRecord, KernelHistoryRecord
from drover.storage import coordinators as _coordinators
from drover.storage import entities as _entities
from drover.storage import history as _history
from drover.storage import kernels as _kernels
from drover.storage import sessions as _sessions
from drover.storage import ticks as _ticks
from drover.storage._db import Database
from drover.storage.sessions import SESSION_ORDERS, SessionFilter
from drover.storage.statements.queries import PING
from drover.storage.ticks import BUCKETS, HandlerErrors, MetricsSnapshot

__all__ = [
    "BUCKETS",
    "SESSION_ORDERS",
    "HandlerErrors",
    "MetricsSnapshot",
    "Queries",
    "SessionFilter",
]


class Queries:
    """Read-only operations on one database (see the module's docstring).

    ``Queries(engine, kinds=…)`` opens its own; :attr:`Repository.queries`
    shares the repository's connections.
    """

    def __init__(self, engine: AsyncEngine, *, clock: Clock | None = None, kinds: Kinds) -> None:
        self._db = Database(engine, clock, kinds)

    @classmethod
    def sharing(cls, db: Database) -> Queries:
        """Queries on ``db``'s connections (a repository's read-only view)."""
        queries = cls.__new__(cls)
        queries._db = db
        return queries

    @property
    def engine(self) -> AsyncEngine:
        """The engine this repository uses."""
        return self._db.engine

    @property
    def kinds(self) -> Kinds:
        """The entity kinds this repository knows (built-in ones unless given)."""
        return self._db.kinds

    @property
    def clock(self) -> Clock:
        """The clock used to stamp writes made outside a tick."""
        return self._db.clock

    async def close(self) -> None:
        """Release the worker threads and connections this repository holds.

        The engine it was given stays open: whoever created it disposes of it.
        """
        self._db.close()

    async def ping(self) -> None:
        """Run ``SELECT 1``: raises if the database does not answer."""

        def work(conn: sa.Connection) -> None:
            conn.execute(PING)

        await self._db.read(work)

    async def get_session(self, session_id: str) -> SessionWithKernels:
        """One session with its kernels, or UnknownSessionError."""
        return await _sessions.get_session(self._db, session_id)

    async def resolve_session_id(self, ref: str) -> str:
        """The id of the session ``ref`` names: its id, its name, or an id prefix
        (see :meth:`resolve_entity_id`)."""
        return await _sessions.resolve_session_id(self._db, ref)

    async def list_sessions(
        self,
        *,
        statuses: Iterable[SessionStatus] | None = None,
        limit: int | None = None,
        order: str = "priority",
        name: str | None = None,
    ) -> list[SessionWithKernels]:
        """Sessions (with kernels), optionally filtered by status and name, in ``order``.

        ``order``: ``priority`` (fetch order, the default), ``newest`` or ``oldest``.
        ``name``: a pattern, shell-style with ``*`` and ``?`` (whole name), else a
        substring; case-insensitive.
        """
        return await _sessions.list_sessions(
            self._db, statuses=statuses, limit=limit, order=order, name=name
        )

    async def filtered_sessions(self, f: SessionFilter) -> list[SessionWithKernels]:
        """Sessions (with kernels) matching the dashboard's filters."""
        return await _sessions.filtered_sessions(self._db, f)

    async def latest_messages(self, ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """``id -> (result, message)`` of each entity's latest scheduling history row."""
        return await _sessions.latest_messages(self._db, ids)

    async def count_by_status(self) -> dict[SessionStatus, int]:
        """The number of sessions in each status (statuses with none are omitted)."""
        return await _sessions.count_by_status(self._db)

    async def count_by_result(self) -> dict[str, int]:
        """The number of ended sessions per result: SUCCESS, CANCELLED, FAILURE."""
        return await _sessions.count_by_result(self._db)

    async def latest_entity_id(self) -> str | None:
        """The newest id of anything created (ids are time-ordered)."""
        return await _sessions.latest_entity_id(self._db)

    async def resolve_entity_id(self, ref: str, kind: str | None = None) -> str:
        """The id of the one entity of ``kind`` (``None``: any) that ``ref`` names: its
        id; else its name, unique among live entities (none live: the newest ended
        one); else a unique id prefix. UnknownEntityError, or InvalidSpecError listing
        the candidates when ambiguous. Every command and page that takes an id uses it."""
        return await _sessions.resolve_session_id(self._db, ref, kind)

    async def find_by_name(self, kind: str, name: str) -> list[Entity]:
        """Entities of ``kind`` named ``name``, live ones first, then newest first."""
        return await _entities.find_by_name(self._db, kind, name)

    async def get_entity(self, entity_id: str) -> Entity:
        """One entity of any kind with its children, or UnknownEntityError."""
        return await _entities.get_entity(self._db, entity_id)

    async def list_entities(
        self, kind: str, *, statuses: Iterable[str] | None = None, limit: int | None = 100
    ) -> list[Entity]:
        """Entities of ``kind``, newest first."""
        return await _entities.list_entities(self._db, kind, statuses=statuses, limit=limit)

    async def state_fingerprint(self) -> tuple[Any, ...]:
        """A value that changes whenever a tick wrote something new (see the harness)."""
        return await _entities.state_fingerprint(self._db)

    async def claims_by_owner(self) -> dict[str, int]:
        """How many entities each coordinator holds an unexpired claim on right now."""
        return await _coordinators.claims_by_owner(self._db)

    async def agent_usage(self, slots: Iterable[str]) -> dict[str, dict[str, float]]:
        """Resources held per agent: the sum of each slot over its placed, live kernels."""
        return await _kernels.agent_usage(self._db, slots)

    async def kernels_in(self, statuses: Iterable[KernelStatus]) -> list[KernelInfo]:
        """Every kernel currently in one of ``statuses``."""
        return await _kernels.kernels_in(self._db, statuses)

    async def kernel_statuses(self, kernel_ids: Sequence[str]) -> dict[str, KernelStatus]:
        """Current status of each of ``kernel_ids`` (unknown ids are left out)."""
        return await _kernels.kernel_statuses(self._db, kernel_ids)

    async def get_kernel(self, kernel_id: str) -> KernelInfo:
        """One kernel, or UnknownKernelError."""
        return await _kernels.get_kernel(self._db, kernel_id)

    async def history(
        self, session_id: str | None = None, *, limit: int | None = None, kind: str | None = None
    ) -> list[HistoryRecord]:
        """Scheduling history rows, oldest first (of one entity, of one kind, or of all)."""
        return await _history.history(self._db, session_id, limit=limit, kind=kind)

    async def kernel_history(
        self, *, kernel_id: str | None = None, session_id: str | None = None
    ) -> list[KernelHistoryRecord]:
        """Status changes of a kernel or of a session's kernels, oldest first."""
        return await _history.kernel_history(self._db, kernel_id=kernel_id, session_id=session_id)

    async def search_history(
        self,
        *,
        session_id: str | None = None,
        handler: str | None = None,
        result: SchedulingResult | str | None = None,
        since: float | None = None,
        until: float | None = None,
        after_id: int | None = None,
        limit: int = 100,
        newest_first: bool = True,
        kind: str | None = None,
    ) -> list[HistoryRecord]:
        """History rows matching every filter given; times compare with ``updated_at``."""
        return await _history.search_history(
            self._db,
            kind=kind,
            session_id=session_id,
            handler=handler,
            result=result,
            since=since,
            until=until,
            after_id=after_id,
            limit=limit,
            newest_first=newest_first,
        )

    async def search_kernel_history(
        self,
        *,
        kernel_id: str,
        since: float | None = None,
        until: float | None = None,
        limit: int = 100,
    ) -> list[KernelHistoryRecord]:
        """One kernel's status changes, newest first."""
        return await _history.search_kernel_history(
            self._db, kernel_id=kernel_id, since=since, until=until, limit=limit
        )

    async def tick_rows(self, since: float | None) -> list[tuple[str, float, dict[str, int]]]:
        """``(handler, duration, counts)`` of the recorded ticks since ``since``."""
        return await _ticks.tick_rows(self._db, since)

    async def handler_errors(self, since: float) -> list[HandlerErrors]:
        """Handlers whose ``execute`` raised since ``since``, most errors first."""
        return await _ticks.handler_errors(self._db, since)

    async def status_ages(
        self, now: float, kind: str = "session"
    ) -> dict[Any, tuple[int, float, float]]:
        """Per status: sessions, and the p50 / p95 of the time they have held it."""
        return await _ticks.status_ages(self._db, now, kind)

    async def metrics_snapshot(self) -> MetricsSnapshot:
        """The figures ``/metrics`` reports, aggregated in SQL."""
        return await _ticks.metrics_snapshot(self._db)

    async def coordinators(self, *, alive_within: float | None = None) -> list[CoordinatorInfo]:
        """Coordinators, newest first; with ``alive_within``, only running ones that beat lately."""
        return await _coordinators.list_coordinators(self._db, alive_within=alive_within)
