"""The repository: every read and write drover makes, in SQLAlchemy Core.

Write transactions go through :func:`drover.storage.retry.run_transaction`, so a
transient database error retries the whole transaction and never leaves half of
it behind. On SQLite they start with ``BEGIN IMMEDIATE``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import attrs
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from drover.model.clock import Clock, SystemClock, from_timestamp
from drover.model.errors import InvalidSpecError, UnknownKernelError, UnknownSessionError
from drover.model.ids import new_id
from drover.model.plan import (
    STALE_STATUS,
    AppliedChange,
    ApplyOutcome,
    Change,
    TryCount,
)
from drover.model.status import (
    KERNEL_STATUS_ORDER,
    TERMINAL_KERNEL_STATUSES,
    TERMINAL_SESSION_STATUSES,
    KernelMatchType,
    KernelStatus,
    SchedulingResult,
    SessionStatus,
)
from drover.model.values import (
    HistoryRecord,
    KernelHistoryRecord,
    KernelInfo,
    SessionWithKernels,
    StatusInfoRule,
)
from drover.storage._sql import chunked
from drover.storage.connect import WRITE_OPTION
from drover.storage.retry import run_transaction
from drover.storage.schema import (
    coordinators,
    handler_ticks,
    kernel_history,
    kernels,
    scheduling_history,
    sessions,
)

__all__ = [
    "API_SOURCE",
    "BACKEND_SOURCE",
    "CoordinatorInfo",
    "KernelReport",
    "Repository",
    "TerminationOutcome",
]

T = TypeVar("T")

#: ``handler`` of history rows written for requests made through the API or CLI.
API_SOURCE = "api"
#: ``source`` of kernel history rows for changes a backend reports.
BACKEND_SOURCE = "backend"

_OPTION_KEYS = {"max_retries", "timeout"}
_NON_TERMINAL_KERNEL = [s for s in KernelStatus if s not in TERMINAL_KERNEL_STATUSES]
#: Kernel statuses that hold an agent's resources.
_HOLDING_KERNEL = [s.value for s in _NON_TERMINAL_KERNEL if s != KernelStatus.PENDING]


@attrs.frozen
class KernelReport:
    """A backend's report of one kernel's new status.

    ``expected``: apply only if the kernel is currently in one of these statuses
    (compare-and-set); ``None`` applies to any non-terminal kernel. A terminal
    kernel never changes again.
    """

    kernel_id: str
    status: KernelStatus
    expected: frozenset[KernelStatus] | None = None
    exit_code: int | None = None
    message: str | None = None
    #: Replaces the kernel's ``runtime`` bookkeeping when given.
    runtime: dict[str, Any] | None = None


@attrs.frozen
class CoordinatorInfo:
    """One row of the ``coordinators`` heartbeat table."""

    id: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    version: str
    stopped_at: datetime | None


@attrs.frozen
class TerminationOutcome:
    """What a termination request did to one session."""

    session_id: str
    from_status: SessionStatus
    to_status: SessionStatus
    changed: bool


def _kernel_exists(*conditions: sa.ColumnElement[bool]) -> sa.Exists:
    """``EXISTS (a kernel of this session such that …)``, correlated to ``sessions``."""
    return sa.exists().where(kernels.c.session_id == sessions.c.id, *conditions)


def _kernel_status_in(statuses: Iterable[str]) -> sa.ColumnElement[bool]:
    """``kernels.status IN (…)`` for correlated subqueries, never served by kernels(status).

    Given a single status, SQLite's planner would pick the kernels(status) index
    and scan every kernel in that status for each candidate session, which is
    quadratic; wrapping the column in an expression (``status || ''``) keeps it
    on kernels(session_id). PostgreSQL plans the same query either way.
    """
    return kernels.c.status.concat("").in_(list(statuses))


def _eligible_kernel_statuses(target: KernelStatus) -> list[str]:
    """Kernels a transition to ``target`` may move.

    Terminal kernels never move. A transition back to PENDING (rescheduling)
    moves every other non-terminal kernel. Any other transition only moves
    kernels that are *behind* ``target`` in lifecycle order, so a backend report
    that arrived first (say PREPARED, before the tick's PREPARING) is not lost.
    """
    if target in TERMINAL_KERNEL_STATUSES:
        return [s.value for s in _NON_TERMINAL_KERNEL]
    if target == KernelStatus.PENDING:
        return [s.value for s in _NON_TERMINAL_KERNEL if s != KernelStatus.PENDING]
    rank = KERNEL_STATUS_ORDER[target]
    return [s.value for s in _NON_TERMINAL_KERNEL if KERNEL_STATUS_ORDER[s] < rank]


def validate_session_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Check a session spec and return a JSON-safe copy, or raise InvalidSpecError."""
    if not isinstance(spec, Mapping):
        raise InvalidSpecError(f"session spec must be a mapping, got {type(spec).__name__}")
    try:
        copy: dict[str, Any] = json.loads(json.dumps(dict(spec)))
    except (TypeError, ValueError) as error:
        raise InvalidSpecError(f"session spec is not JSON-serializable: {error}") from None
    options = copy.get("options")
    if options is None:
        return copy
    if not isinstance(options, dict):
        raise InvalidSpecError("spec['options'] must map handler names to option tables")
    for handler, values in options.items():
        if not isinstance(values, dict):
            raise InvalidSpecError(f"spec['options'][{handler!r}] must be a table of options")
        for key, value in values.items():
            if key not in _OPTION_KEYS:
                raise InvalidSpecError(
                    f"spec['options'][{handler!r}] has unknown option {key!r}; "
                    f"a session may set {sorted(_OPTION_KEYS)}"
                )
            if value is None:
                continue
            if key == "max_retries" and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise InvalidSpecError(
                    f"spec['options'][{handler!r}]['max_retries'] must be a whole number >= 0 "
                    f"or null, got {value!r}"
                )
            if key == "timeout" and (
                isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
            ):
                raise InvalidSpecError(
                    f"spec['options'][{handler!r}]['timeout'] must be a number of seconds > 0 "
                    f"or null, got {value!r}"
                )
    return copy


def _kernel_from_row(row: Any) -> KernelInfo:
    return KernelInfo(
        id=row.id,
        session_id=row.session_id,
        status=KernelStatus(row.status),
        status_changed_at=from_timestamp(row.status_changed_at),
        agent_id=row.agent_id,
        spec=row.spec,
        exit_code=row.exit_code,
        status_info=row.status_info,
        runtime=row.runtime,
    )


def _session_from_row(row: Any, kernel_rows: Sequence[KernelInfo]) -> SessionWithKernels:
    return SessionWithKernels(
        id=row.id,
        name=row.name,
        status=SessionStatus(row.status),
        status_changed_at=from_timestamp(row.status_changed_at),
        try_count=row.try_count,
        priority=row.priority,
        created_at=from_timestamp(row.created_at),
        spec=row.spec,
        status_info=row.status_info,
        result=row.result,
        kernels=tuple(kernel_rows),
    )


def _history_from_row(row: Any) -> HistoryRecord:
    return HistoryRecord(
        id=row.id,
        session_id=row.session_id,
        handler=row.handler,
        result=SchedulingResult(row.result),
        from_status=SessionStatus(row.from_status),
        to_status=SessionStatus(row.to_status),
        error_code=row.error_code,
        message=row.message,
        attempts=row.attempts,
        created_at=from_timestamp(row.created_at),
        updated_at=from_timestamp(row.updated_at),
    )


def _kernel_history_from_row(row: Any) -> KernelHistoryRecord:
    return KernelHistoryRecord(
        id=row.id,
        kernel_id=row.kernel_id,
        session_id=row.session_id,
        source=row.source,
        from_status=KernelStatus(row.from_status),
        to_status=KernelStatus(row.to_status),
        message=row.message,
        created_at=from_timestamp(row.created_at),
    )


_ORDER = (sessions.c.priority.desc(), sessions.c.created_at, sessions.c.id)

# Statements built once; expanding bind parameters take the id lists.
_KERNELS_OF = (
    sa.select(kernels)
    .where(kernels.c.session_id.in_(sa.bindparam("ids", expanding=True)))
    .order_by(kernels.c.session_id, kernels.c.id)
)
_LATEST_HISTORY = sa.select(
    scheduling_history.c.id,
    scheduling_history.c.session_id,
    scheduling_history.c.handler,
    scheduling_history.c.result,
    scheduling_history.c.from_status,
    scheduling_history.c.to_status,
    scheduling_history.c.error_code,
).where(
    scheduling_history.c.id.in_(
        sa.select(sa.func.max(scheduling_history.c.id))
        .where(scheduling_history.c.session_id.in_(sa.bindparam("ids", expanding=True)))
        .group_by(scheduling_history.c.session_id)
        .scalar_subquery()
    )
)
_MERGE_HISTORY = (
    sa.update(scheduling_history)
    .where(scheduling_history.c.id == sa.bindparam("hid"))
    .values(
        attempts=scheduling_history.c.attempts + 1,
        updated_at=sa.bindparam("now"),
        message=sa.bindparam("msg"),
    )
)


class Repository:
    """Reads and writes sessions, kernels and history on one async engine."""

    def __init__(self, engine: AsyncEngine, *, clock: Clock | None = None) -> None:
        self._engine = engine
        self._write_engine = engine.execution_options(**{WRITE_OPTION: True})
        self._clock: Clock = clock or SystemClock()
        self._pg = engine.dialect.name == "postgresql"

    @property
    def engine(self) -> AsyncEngine:
        """The engine this repository uses."""
        return self._engine

    @property
    def clock(self) -> Clock:
        """The clock used to stamp writes made outside a tick."""
        return self._clock

    # -- transactions ---------------------------------------------------------------

    async def write(self, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run ``work`` in one write transaction, retrying it whole on transient errors."""

        async def attempt() -> T:
            async with self._write_engine.begin() as conn:
                return await work(conn)

        return await run_transaction(attempt)

    async def read(self, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run ``work`` in one read transaction, retrying it whole on transient errors."""

        async def attempt() -> T:
            async with self._engine.connect() as conn:
                return await work(conn)

        return await run_transaction(attempt)

    # -- sessions -------------------------------------------------------------------

    async def create_session(
        self,
        *,
        kernels: Sequence[Mapping[str, Any]],
        name: str | None = None,
        priority: int = 0,
        status: SessionStatus = SessionStatus.PENDING,
        spec: Mapping[str, Any] | None = None,
    ) -> str:
        """Create one session with its kernels and return its id.

        Each kernel mapping is the kernel's spec (``cpu``, ``mem``, ``command``…);
        an optional ``"status"`` key sets the kernel's initial status, which
        otherwise follows the session's.
        """
        (sid,) = await self.create_sessions(
            [
                {
                    "kernels": kernels,
                    "name": name,
                    "priority": priority,
                    "status": status,
                    "spec": spec,
                }
            ]
        )
        return sid

    async def create_sessions(self, requests: Sequence[Mapping[str, Any]]) -> list[str]:
        """Create many sessions in one transaction; each request has create_session's keywords."""
        now = self._clock.time()
        session_rows: list[dict[str, Any]] = []
        kernel_rows: list[dict[str, Any]] = []
        for request in requests:
            session_row, krows = self._session_rows(request, now)
            session_rows.append(session_row)
            kernel_rows.extend(krows)

        async def work(conn: AsyncConnection) -> None:
            await conn.execute(sa.insert(sessions), session_rows)
            if kernel_rows:
                await conn.execute(sa.insert(kernels), kernel_rows)

        await self.write(work)
        return [row["id"] for row in session_rows]

    def _session_rows(
        self, request: Mapping[str, Any], now: float
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        unknown = set(request) - {"kernels", "name", "priority", "status", "spec"}
        if unknown:
            raise InvalidSpecError(f"unknown session field(s): {sorted(unknown)}")
        try:
            status = SessionStatus(request.get("status") or SessionStatus.PENDING)
        except ValueError:
            raise InvalidSpecError(
                f"unknown session status {request.get('status')!r}; "
                f"expected one of {[s.value for s in SessionStatus]}"
            ) from None
        priority = request.get("priority", 0) or 0
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise InvalidSpecError(f"priority must be an integer, got {priority!r}")
        spec = validate_session_spec(request.get("spec") or {})
        kernel_specs = request.get("kernels")
        if kernel_specs is None or isinstance(kernel_specs, str | bytes | Mapping):
            raise InvalidSpecError("kernels must be a list of kernel specs (it may be empty)")
        sid = new_id()
        name = request.get("name") or f"session-{sid[-12:]}"
        krows: list[dict[str, Any]] = []
        for index, kspec in enumerate(kernel_specs):
            if not isinstance(kspec, Mapping):
                raise InvalidSpecError(f"kernel {index} must be a mapping, got {kspec!r}")
            body = dict(kspec)
            raw_status = body.pop("status", None)
            try:
                kstatus = KernelStatus(raw_status or status.value)
            except ValueError:
                raise InvalidSpecError(
                    f"kernel {index}: unknown kernel status {raw_status!r}; "
                    f"expected one of {[s.value for s in KernelStatus]}"
                ) from None
            agent_id = body.pop("agent_id", None)
            for slot in ("cpu", "mem"):
                value = body.get(slot)
                if value is not None and (
                    isinstance(value, bool) or not isinstance(value, int | float) or value < 0
                ):
                    raise InvalidSpecError(
                        f"kernel {index}: {slot!r} must be a number >= 0, got {value!r}"
                    )
            try:
                body = json.loads(json.dumps(body))
            except (TypeError, ValueError) as error:
                raise InvalidSpecError(
                    f"kernel {index} spec is not JSON-serializable: {error}"
                ) from None
            krows.append(
                {
                    "id": new_id(),
                    "session_id": sid,
                    "status": kstatus.value,
                    "status_changed_at": now,
                    "agent_id": agent_id,
                    "spec": body,
                    "exit_code": None,
                    "status_info": None,
                }
            )
        row = {
            "id": sid,
            "name": str(name),
            "status": status.value,
            "status_changed_at": now,
            "try_count": 0,
            "priority": priority,
            "created_at": now,
            "spec": spec,
            "status_info": None,
            "result": None,
        }
        return row, krows

    async def get_session(self, session_id: str) -> SessionWithKernels:
        """Return one session with its kernels, or raise UnknownSessionError."""

        async def work(conn: AsyncConnection) -> SessionWithKernels:
            row = (
                await conn.execute(sa.select(sessions).where(sessions.c.id == session_id))
            ).first()
            if row is None:
                raise UnknownSessionError(session_id)
            krows = (await conn.execute(_KERNELS_OF, {"ids": [session_id]})).all()
            return _session_from_row(row, [_kernel_from_row(k) for k in krows])

        return await self.read(work)

    async def resolve_session_id(self, prefix: str) -> str:
        """The id of the one session whose id starts with ``prefix`` (or equals it)."""
        if not prefix:
            raise UnknownSessionError(prefix)

        async def work(conn: AsyncConnection) -> list[str]:
            query = (
                sa.select(sessions.c.id)
                .where(sessions.c.id.startswith(prefix, autoescape=True))
                .order_by(sessions.c.id)
                .limit(3)
            )
            return [r[0] for r in await conn.execute(query)]

        found = await self.read(work)
        if prefix in found or len(found) == 1:
            return prefix if prefix in found else found[0]
        if not found:
            raise UnknownSessionError(prefix)
        raise InvalidSpecError(
            f"session id prefix {prefix!r} is ambiguous: it matches {', '.join(found[:2])}, …"
        )

    async def list_sessions(
        self,
        *,
        statuses: Iterable[SessionStatus] | None = None,
        limit: int | None = None,
    ) -> list[SessionWithKernels]:
        """Return sessions (with kernels), in fetch order, optionally filtered by status."""

        async def work(conn: AsyncConnection) -> list[SessionWithKernels]:
            query = sa.select(sessions).order_by(*_ORDER)
            if statuses is not None:
                query = query.where(sessions.c.status.in_([s.value for s in statuses]))
            if limit is not None:
                query = query.limit(limit)
            rows = (await conn.execute(query)).all()
            return await self._with_kernels(conn, rows)

        return await self.read(work)

    async def latest_session_id(self) -> str | None:
        """The newest session id (ids are time-ordered): one primary-key index lookup."""

        async def work(conn: AsyncConnection) -> str | None:
            value = (await conn.execute(sa.select(sa.func.max(sessions.c.id)))).scalar()
            return str(value) if value is not None else None

        return await self.read(work)

    async def count_by_status(self) -> dict[SessionStatus, int]:
        """Return the number of sessions in each status (statuses with none are omitted)."""

        async def work(conn: AsyncConnection) -> dict[SessionStatus, int]:
            rows = await conn.execute(
                sa.select(sessions.c.status, sa.func.count()).group_by(sessions.c.status)
            )
            return {SessionStatus(status): count for status, count in rows}

        return await self.read(work)

    async def _with_kernels(
        self, conn: AsyncConnection, rows: Sequence[Any]
    ) -> list[SessionWithKernels]:
        by_session: dict[str, list[KernelInfo]] = defaultdict(list)
        ids = [row.id for row in rows]
        for chunk in chunked(ids):
            for krow in await conn.execute(_KERNELS_OF, {"ids": chunk}):
                by_session[krow.session_id].append(_kernel_from_row(krow))
        return [_session_from_row(row, by_session.get(row.id, ())) for row in rows]

    # -- history --------------------------------------------------------------------

    async def history(
        self, session_id: str | None = None, *, limit: int | None = None
    ) -> list[HistoryRecord]:
        """Return scheduling history rows, oldest first (of one session, or of all)."""

        async def work(conn: AsyncConnection) -> list[HistoryRecord]:
            query = sa.select(scheduling_history).order_by(scheduling_history.c.id)
            if session_id is not None:
                query = query.where(scheduling_history.c.session_id == session_id)
            if limit is not None:
                query = query.limit(limit)
            return [_history_from_row(r) for r in await conn.execute(query)]

        return await self.read(work)

    async def kernel_history(
        self, *, kernel_id: str | None = None, session_id: str | None = None
    ) -> list[KernelHistoryRecord]:
        """Return kernel history rows of a kernel or of a session's kernels, oldest first."""

        async def work(conn: AsyncConnection) -> list[KernelHistoryRecord]:
            query = sa.select(kernel_history).order_by(kernel_history.c.id)
            if kernel_id is not None:
                query = query.where(kernel_history.c.kernel_id == kernel_id)
            if session_id is not None:
                query = query.where(kernel_history.c.session_id == session_id)
            return [_kernel_history_from_row(r) for r in await conn.execute(query)]

        return await self.read(work)

    # -- the coordinator's hot path ---------------------------------------------------

    async def fetch_lifecycle_targets(
        self,
        session_statuses: Iterable[SessionStatus],
        kernel_statuses: Iterable[KernelStatus] | None,
        limit: int,
    ) -> list[SessionWithKernels]:
        """Sessions in ``session_statuses`` with a kernel in ``kernel_statuses``, in fetch order."""
        query = sa.select(sessions).where(
            sessions.c.status.in_([s.value for s in session_statuses])
        )
        if kernel_statuses is not None:
            query = query.where(_kernel_exists(_kernel_status_in(s.value for s in kernel_statuses)))
        query = query.order_by(*_ORDER).limit(limit)

        async def work(conn: AsyncConnection) -> list[SessionWithKernels]:
            rows = (await conn.execute(query)).all()
            return await self._with_kernels(conn, rows)

        return await self.read(work)

    async def fetch_promotion_candidates(
        self,
        session_statuses: Iterable[SessionStatus],
        check_kernel_statuses: Iterable[KernelStatus],
        match: KernelMatchType,
        limit: int,
    ) -> list[tuple[str, SessionStatus]]:
        """Ids and statuses of sessions whose kernels meet the match, evaluated in SQL.

        A session with no kernels never matches.
        """
        check = [s.value for s in check_kernel_statuses]
        any_kernel = _kernel_exists()
        in_check = _kernel_exists(_kernel_status_in(check))
        outside_check = _kernel_exists(~_kernel_status_in(check))
        condition: sa.ColumnElement[bool]
        if match is KernelMatchType.ALL:
            condition = sa.and_(any_kernel, ~outside_check)
        elif match is KernelMatchType.ANY:
            condition = in_check
        else:
            condition = sa.and_(any_kernel, ~in_check)
        query = (
            sa.select(sessions.c.id, sessions.c.status)
            .where(sessions.c.status.in_([s.value for s in session_statuses]), condition)
            .order_by(*_ORDER)
            .limit(limit)
        )

        async def work(conn: AsyncConnection) -> list[tuple[str, SessionStatus]]:
            return [(sid, SessionStatus(st)) for sid, st in await conn.execute(query)]

        return await self.read(work)

    async def apply(
        self,
        source: str,
        changes: Sequence[Change],
        *,
        now: float,
        inject_failure: Callable[[str], None] | None = None,
    ) -> ApplyOutcome:
        """Apply one tick's changes in ONE transaction, with compare-and-set on statuses.

        A session whose status is no longer ``from_status`` gets no change and a
        SKIPPED ``stale-status`` history row instead. ``inject_failure`` is a test
        hook called between the steps of the apply (by name) to prove atomicity.
        """
        if not changes:
            return ApplyOutcome(changes=())
        return await self.write(
            lambda conn: _Apply(conn, source, now, self._pg, inject_failure).run(changes)
        )

    # -- backends and the scheduler ---------------------------------------------------

    async def report_kernel_statuses(self, reports: Sequence[KernelReport]) -> list[bool]:
        """Apply backend reports in one transaction; return, per report, whether it applied.

        Each report is compare-and-set: it applies only if the kernel is not
        terminal and (when ``expected`` is given) is in an expected status.
        Applied reports write ``kernel_history`` rows with source ``backend``.
        """
        if not reports:
            return []
        now = self._clock.time()

        async def work(conn: AsyncConnection) -> list[bool]:
            ids = list({r.kernel_id for r in reports})
            current: dict[str, tuple[str, str]] = {}
            for chunk in chunked(ids):
                query = sa.select(kernels.c.id, kernels.c.session_id, kernels.c.status).where(
                    kernels.c.id.in_(chunk)
                )
                if self._pg:
                    query = query.with_for_update()
                for kid, sid, status in await conn.execute(query):
                    current[kid] = (sid, status)
            applied: list[bool] = []
            updates: list[dict[str, Any]] = []
            history: list[dict[str, Any]] = []
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
                updates.append(
                    {
                        "kid": report.kernel_id,
                        "from_status": status,
                        "to_status": report.status.value,
                        "now": now,
                        "exit_code": report.exit_code,
                        "info": report.message,
                        "clear_agent": report.status == KernelStatus.PENDING,
                        # not "runtime": a key named like a column becomes an implicit SET
                        "new_runtime": report.runtime,
                    }
                )
                history.append(
                    {
                        "kernel_id": report.kernel_id,
                        "session_id": sid,
                        "source": BACKEND_SOURCE,
                        "from_status": status,
                        "to_status": report.status.value,
                        "message": report.message,
                        "created_at": now,
                    }
                )
            if updates:
                await conn.execute(
                    sa.update(kernels)
                    .where(
                        kernels.c.id == sa.bindparam("kid"),
                        kernels.c.status == sa.bindparam("from_status"),
                    )
                    .values(
                        status=sa.bindparam("to_status"),
                        status_changed_at=sa.bindparam("now"),
                        exit_code=sa.func.coalesce(sa.bindparam("exit_code"), kernels.c.exit_code),
                        status_info=sa.func.coalesce(sa.bindparam("info"), kernels.c.status_info),
                        agent_id=sa.case(
                            (sa.bindparam("clear_agent"), sa.null()), else_=kernels.c.agent_id
                        ),
                    ),
                    updates,
                )
                runtimes = [
                    {"kid": u["kid"], "rt": u["new_runtime"]}
                    for u in updates
                    if u["new_runtime"] is not None
                ]
                if runtimes:
                    await conn.execute(
                        sa.update(kernels)
                        .where(kernels.c.id == sa.bindparam("kid"))
                        .values(runtime=sa.bindparam("rt", type_=sa.JSON())),
                        runtimes,
                    )
                await conn.execute(sa.insert(kernel_history), history)
            return applied

        return await self.write(work)

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
        (ok,) = await self.report_kernel_statuses(
            [
                KernelReport(
                    kernel_id=kernel_id,
                    status=status,
                    expected=frozenset(expected) if expected is not None else None,
                    exit_code=exit_code,
                    message=message,
                )
            ]
        )
        return ok

    async def agent_usage(self, slots: Iterable[str]) -> dict[str, dict[str, float]]:
        """Resources held per agent: the sum of each slot over its placed, live kernels.

        A kernel holds resources while it has an agent and is neither PENDING
        nor terminal. A kernel asks for slot ``X`` with ``spec["X"]`` (default 0).
        """
        slot_names = sorted(set(slots))
        columns = [
            sa.func.sum(self._numeric_request(name)).label(f"s{i}")
            for i, name in enumerate(slot_names)
        ]
        query = (
            sa.select(kernels.c.agent_id, *columns)
            .where(
                kernels.c.agent_id.is_not(None),
                # A positive list so the kernels(status) index serves it: finished
                # kernels, the bulk of the table, are never read.
                kernels.c.status.in_(_HOLDING_KERNEL),
            )
            .group_by(kernels.c.agent_id)
        )

        async def work(conn: AsyncConnection) -> dict[str, dict[str, float]]:
            usage: dict[str, dict[str, float]] = {}
            for row in await conn.execute(query):
                usage[row[0]] = {name: float(row[i + 1] or 0) for i, name in enumerate(slot_names)}
            return usage

        return await self.read(work)

    def _numeric_request(self, slot: str) -> sa.ColumnElement[Any]:
        """``spec[slot]`` when it is a JSON number, else 0: a bad value never breaks the sum."""
        if self._pg:
            is_number = sa.func.json_typeof(kernels.c.spec[slot]) == "number"
        else:
            is_number = sa.func.json_type(kernels.c.spec, f'$."{slot}"').in_(["integer", "real"])
        return sa.case((is_number, kernels.c.spec[slot].as_float()), else_=0.0)

    async def assign_agents(self, placements: Mapping[str, str]) -> int:
        """Set ``agent_id`` on PENDING kernels (``kernel_id -> agent_id``); return how many."""
        if not placements:
            return 0
        params = [{"kid": kid, "agent": agent} for kid, agent in placements.items()]

        async def work(conn: AsyncConnection) -> int:
            await conn.execute(
                sa.update(kernels)
                .where(
                    kernels.c.id == sa.bindparam("kid"),
                    kernels.c.status == KernelStatus.PENDING.value,
                )
                .values(agent_id=sa.bindparam("agent")),
                params,
            )
            return len(params)

        return await self.write(work)

    async def kernels_in(self, statuses: Iterable[KernelStatus]) -> list[KernelInfo]:
        """Every kernel currently in one of ``statuses`` (a backend's view at start-up)."""
        query = (
            sa.select(kernels)
            .where(kernels.c.status.in_([s.value for s in statuses]))
            .order_by(kernels.c.id)
        )

        async def work(conn: AsyncConnection) -> list[KernelInfo]:
            return [_kernel_from_row(r) for r in await conn.execute(query)]

        return await self.read(work)

    async def kernel_statuses(self, kernel_ids: Sequence[str]) -> dict[str, KernelStatus]:
        """Current status of each of ``kernel_ids`` (unknown ids are left out)."""

        async def work(conn: AsyncConnection) -> dict[str, KernelStatus]:
            found: dict[str, KernelStatus] = {}
            for chunk in chunked(list(kernel_ids)):
                query = sa.select(kernels.c.id, kernels.c.status).where(kernels.c.id.in_(chunk))
                for kid, status in await conn.execute(query):
                    found[kid] = KernelStatus(status)
            return found

        return await self.read(work)

    async def get_kernel(self, kernel_id: str) -> KernelInfo:
        """One kernel, or UnknownKernelError."""

        async def work(conn: AsyncConnection) -> KernelInfo:
            row = (await conn.execute(sa.select(kernels).where(kernels.c.id == kernel_id))).first()
            if row is None:
                raise UnknownKernelError(kernel_id)
            return _kernel_from_row(row)

        return await self.read(work)

    # -- inspection -------------------------------------------------------------------

    async def record_ticks(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Store tick summaries (handler, started_at, duration, fetched, counts) for stats."""
        if not rows:
            return
        await self.write(lambda conn: conn.execute(sa.insert(handler_ticks), list(rows)))

    async def search_history(
        self,
        *,
        session_id: str | None = None,
        handler: str | None = None,
        result: SchedulingResult | None = None,
        since: float | None = None,
        until: float | None = None,
        after_id: int | None = None,
        limit: int = 100,
        newest_first: bool = True,
    ) -> list[HistoryRecord]:
        """History rows matching every filter given; times compare with ``updated_at``."""
        h = scheduling_history
        query = sa.select(h)
        if session_id is not None:
            query = query.where(h.c.session_id == session_id)
        if handler is not None:
            query = query.where(h.c.handler == handler)
        if result is not None:
            query = query.where(h.c.result == result.value)
        if since is not None:
            query = query.where(h.c.updated_at >= since)
        if until is not None:
            query = query.where(h.c.created_at <= until)
        if after_id is not None:
            query = query.where(h.c.id > after_id)
        query = query.order_by(h.c.id.desc() if newest_first else h.c.id).limit(limit)

        async def work(conn: AsyncConnection) -> list[HistoryRecord]:
            return [_history_from_row(r) for r in await conn.execute(query)]

        return await self.read(work)

    async def search_kernel_history(
        self,
        *,
        kernel_id: str,
        since: float | None = None,
        until: float | None = None,
        limit: int = 100,
    ) -> list[KernelHistoryRecord]:
        """One kernel's history rows, newest first."""
        k = kernel_history
        query = sa.select(k).where(k.c.kernel_id == kernel_id)
        if since is not None:
            query = query.where(k.c.created_at >= since)
        if until is not None:
            query = query.where(k.c.created_at <= until)
        query = query.order_by(k.c.id.desc()).limit(limit)

        async def work(conn: AsyncConnection) -> list[KernelHistoryRecord]:
            return [_kernel_history_from_row(r) for r in await conn.execute(query)]

        return await self.read(work)

    async def tick_rows(self, since: float | None) -> list[tuple[str, float, dict[str, int]]]:
        """``(handler, duration, counts)`` of the recorded ticks since ``since``."""
        query = sa.select(handler_ticks.c.handler, handler_ticks.c.duration, handler_ticks.c.counts)
        if since is not None:
            query = query.where(handler_ticks.c.started_at >= since)

        async def work(conn: AsyncConnection) -> list[tuple[str, float, dict[str, int]]]:
            return [(r[0], float(r[1]), dict(r[2] or {})) for r in await conn.execute(query)]

        return await self.read(work)

    async def status_ages(self, now: float) -> dict[SessionStatus, tuple[int, float, float]]:
        """Per status: sessions, and the p50 / p95 of the time they have held it (seconds)."""
        counts = await self.count_by_status()

        async def work(conn: AsyncConnection) -> dict[SessionStatus, tuple[int, float, float]]:
            out: dict[SessionStatus, tuple[int, float, float]] = {}
            for status, n in counts.items():
                ages = []
                # Percentiles by offset into the sorted column: no sorting in Python.
                for q in (0.5, 0.95):
                    # Newest first: the age at offset i grows with i.
                    offset = min(n - 1, int(q * (n - 1) + 0.5))
                    value = (
                        await conn.execute(
                            sa.select(sessions.c.status_changed_at)
                            .where(sessions.c.status == status.value)
                            .order_by(sessions.c.status_changed_at.desc())
                            .offset(offset)
                            .limit(1)
                        )
                    ).scalar()
                    ages.append(max(0.0, now - float(value)) if value is not None else 0.0)
                out[status] = (n, ages[0], ages[1])
            return out

        return await self.read(work)

    async def prune_history(
        self, *, older_than: float, dry_run: bool = False, batch: int = 5000
    ) -> dict[str, int]:
        """Delete history older than ``older_than`` of sessions in a terminal status.

        Rows of live sessions are never touched (so their latest row survives),
        nor rows updated after the cutoff. Deletes in batches, each its own
        transaction; ``dry_run`` only counts. Old tick summaries go too.
        """
        terminal = [s.value for s in TERMINAL_SESSION_STATUSES]
        done_sessions = sa.select(sessions.c.id).where(sessions.c.status.in_(terminal))
        targets = {
            "scheduling_history": (
                scheduling_history,
                sa.and_(
                    scheduling_history.c.updated_at < older_than,
                    scheduling_history.c.session_id.in_(done_sessions),
                ),
            ),
            "kernel_history": (
                kernel_history,
                sa.and_(
                    kernel_history.c.created_at < older_than,
                    kernel_history.c.session_id.in_(done_sessions),
                ),
            ),
            "handler_ticks": (handler_ticks, handler_ticks.c.started_at < older_than),
        }
        report: dict[str, int] = {}
        for name, (table, condition) in targets.items():
            if dry_run:

                async def count(conn: AsyncConnection, t: Any = table, c: Any = condition) -> int:
                    query = sa.select(sa.func.count()).select_from(t).where(c)
                    return int((await conn.execute(query)).scalar() or 0)

                report[name] = await self.read(count)
                continue
            total = 0
            while True:

                async def delete(conn: AsyncConnection, t: Any = table, c: Any = condition) -> int:
                    ids = [
                        r[0] for r in await conn.execute(sa.select(t.c.id).where(c).limit(batch))
                    ]
                    if ids:
                        await conn.execute(sa.delete(t).where(t.c.id.in_(ids)))
                    return len(ids)

                deleted = await self.write(delete)
                total += deleted
                if deleted < batch:
                    break
            report[name] = total
        return report

    # -- coordinator liveness ---------------------------------------------------------

    async def heartbeat(
        self, info: CoordinatorInfo | None = None, *, coordinator_id: str = ""
    ) -> None:
        """Insert a coordinator's row (``info``) or refresh its ``heartbeat_at``."""
        now = self._clock.time()

        async def work(conn: AsyncConnection) -> None:
            if info is not None:
                await conn.execute(
                    sa.insert(coordinators).values(
                        id=info.id,
                        host=info.host,
                        pid=info.pid,
                        started_at=now,
                        heartbeat_at=now,
                        version=info.version,
                        stopped_at=None,
                    )
                )
            else:
                await conn.execute(
                    sa.update(coordinators)
                    .where(coordinators.c.id == coordinator_id)
                    .values(heartbeat_at=now)
                )

        await self.write(work)

    async def coordinator_stopped(self, coordinator_id: str) -> None:
        """Mark a coordinator as cleanly stopped."""
        now = self._clock.time()

        async def work(conn: AsyncConnection) -> None:
            await conn.execute(
                sa.update(coordinators)
                .where(coordinators.c.id == coordinator_id)
                .values(stopped_at=now, heartbeat_at=now)
            )

        await self.write(work)

    async def coordinators(self, *, alive_within: float | None = None) -> list[CoordinatorInfo]:
        """Coordinators, newest first; with ``alive_within``, only running ones that beat lately."""
        query = sa.select(coordinators).order_by(coordinators.c.started_at.desc())
        if alive_within is not None:
            query = query.where(
                coordinators.c.stopped_at.is_(None),
                coordinators.c.heartbeat_at >= self._clock.time() - alive_within,
            )

        async def work(conn: AsyncConnection) -> list[CoordinatorInfo]:
            return [
                CoordinatorInfo(
                    id=r.id,
                    host=r.host,
                    pid=r.pid,
                    started_at=from_timestamp(r.started_at),
                    heartbeat_at=from_timestamp(r.heartbeat_at),
                    version=r.version,
                    stopped_at=from_timestamp(r.stopped_at) if r.stopped_at else None,
                )
                for r in await conn.execute(query)
            ]

        return await self.read(work)

    # -- requests from the API / CLI ----------------------------------------------------

    async def request_termination(self, session_ids: Sequence[str]) -> list[TerminationOutcome]:
        """Ask for sessions to end, recorded as SUCCESS rows of handler ``api``.

        A PENDING session (and its kernels) becomes CANCELLED; any other
        non-terminal session becomes TERMINATING (TERMINATED at once if it has
        no kernels, since nothing would ever promote it); all get ``status_info``
        ``USER_REQUESTED``. A terminal session is left as it is. Raises
        UnknownSessionError, writing nothing, if any id is unknown.
        """
        now = self._clock.time()
        info = StatusInfoRule(default="USER_REQUESTED")

        async def work(conn: AsyncConnection) -> list[TerminationOutcome]:
            found: dict[str, SessionStatus] = {}
            for chunk in chunked(list(session_ids)):
                for sid, status in await conn.execute(
                    sa.select(sessions.c.id, sessions.c.status).where(sessions.c.id.in_(chunk))
                ):
                    found[sid] = SessionStatus(status)
            for sid in session_ids:
                if sid not in found:
                    raise UnknownSessionError(sid)
            with_kernels: set[str] = set()
            for chunk in chunked(list(found)):
                with_kernels.update(
                    r[0]
                    for r in await conn.execute(
                        sa.select(kernels.c.session_id).where(kernels.c.session_id.in_(chunk))
                    )
                )
            changes: list[Change] = []
            outcomes: list[TerminationOutcome] = []
            for sid in dict.fromkeys(session_ids):
                status = found[sid]
                if status in TERMINAL_SESSION_STATUSES or status == SessionStatus.TERMINATING:
                    outcomes.append(TerminationOutcome(sid, status, status, changed=False))
                    continue
                to_kernel: KernelStatus | None = None
                if status == SessionStatus.PENDING:
                    to_session, to_kernel = SessionStatus.CANCELLED, KernelStatus.CANCELLED
                    message = "termination requested: cancelled before it was scheduled"
                elif sid not in with_kernels:
                    # Nothing to destroy, and no promotion matches a kernel-less session.
                    to_session = SessionStatus.TERMINATED
                    message = "termination requested: no kernels to stop"
                else:
                    to_session = SessionStatus.TERMINATING
                    message = "termination requested"
                change = Change(
                    session_id=sid,
                    from_status=status,
                    result=SchedulingResult.SUCCESS,
                    to_session=to_session,
                    to_kernel=to_kernel,
                    message=message,
                    status_info=info,
                )
                changes.append(change)
                outcomes.append(TerminationOutcome(sid, status, to_session, changed=True))
            if changes:
                await _Apply(conn, API_SOURCE, now, self._pg, None).run(changes)
            return outcomes

        return await self.write(work)


class _Apply:
    """One apply, inside one open transaction."""

    def __init__(
        self,
        conn: AsyncConnection,
        source: str,
        now: float,
        postgres: bool,
        inject_failure: Callable[[str], None] | None,
    ) -> None:
        self.conn = conn
        self.source = source
        self.now = now
        self.postgres = postgres
        self.inject = inject_failure or (lambda _step: None)
        self.kernel_changes = 0

    async def run(self, changes: Sequence[Change]) -> ApplyOutcome:
        groups: dict[tuple[Any, ...], list[Change]] = defaultdict(list)
        for change in changes:
            key = (
                change.from_status,
                change.result,
                change.to_session if change.changes_session else None,
                change.to_kernel,
                change.try_count,
                change.status_info,
            )
            groups[key].append(change)
        applied: list[AppliedChange] = []
        history_rows: list[AppliedChange] = []
        for group in groups.values():
            written = await self._apply_group(group)
            applied.extend(written)
            by_id = {c.session_id: c for c in group}
            history_rows.extend(w for w in written if by_id[w.session_id].write_history)
        self.inject("before-history")
        await self._write_history(history_rows)
        self.inject("after-history")
        return ApplyOutcome(changes=tuple(applied), kernel_changes=self.kernel_changes)

    async def _apply_group(self, group: list[Change]) -> list[AppliedChange]:
        first = group[0]
        from_status = first.from_status
        ids = [c.session_id for c in group]
        live = set(await self._guard_sessions(first, ids))
        self.inject("after-sessions")
        live_ids = [sid for sid in ids if sid in live]
        if live_ids and first.to_kernel is not None:
            await self._move_kernels(live_ids, first.to_kernel)
            self.inject("after-kernels")
        to_status = first.to_session if first.changes_session else from_status
        assert to_status is not None
        if live_ids and first.changes_session and to_status in TERMINAL_SESSION_STATUSES:
            await self._set_result(live_ids)
        out: list[AppliedChange] = []
        for change in group:
            if change.session_id in live:
                out.append(
                    AppliedChange(
                        session_id=change.session_id,
                        result=change.result,
                        from_status=from_status,
                        to_status=to_status,
                        error_code=change.error_code,
                        message=change.message,
                    )
                )
            else:
                out.append(
                    AppliedChange(
                        session_id=change.session_id,
                        result=SchedulingResult.SKIPPED,
                        from_status=from_status,
                        to_status=from_status,
                        error_code=STALE_STATUS,
                        message=(
                            f"status changed underneath (no longer {from_status}); "
                            f"{change.result} by {self.source} not applied"
                        ),
                    )
                )
        return out

    async def _guard_sessions(self, first: Change, ids: list[str]) -> list[str]:
        """Compare-and-set the group's sessions; return the ids still in ``from_status``."""
        where = sessions.c.status == first.from_status.value
        values: dict[str, Any] | None = None
        if first.changes_session:
            assert first.to_session is not None
            values = {
                "status": first.to_session.value,
                "status_changed_at": self.now,
                "try_count": 0,
            }
        elif first.try_count is TryCount.INCREMENT:
            values = {"try_count": sessions.c.try_count + 1}
        elif first.try_count is TryCount.RESET:
            values = {"try_count": 0}
        if first.changes_session and values is not None and first.status_info is not None:
            values["status_info"] = _status_info_expression(first.status_info)
        live: list[str] = []
        for chunk in chunked(ids):
            if values is None:
                query = sa.select(sessions.c.id).where(sessions.c.id.in_(chunk), where)
                if self.postgres:
                    query = query.with_for_update()
                live.extend(r[0] for r in await self.conn.execute(query))
            else:
                stmt = (
                    sa.update(sessions)
                    .where(sessions.c.id.in_(chunk), where)
                    .values(**values)
                    .returning(sessions.c.id)
                )
                live.extend(r[0] for r in await self.conn.execute(stmt))
        return live

    async def _move_kernels(self, session_ids: list[str], target: KernelStatus) -> None:
        """Move the sessions' eligible kernels to ``target``, writing kernel history in SQL.

        No kernel row travels to Python: history rows are inserted from the
        kernels themselves. On SQLite, BEGIN IMMEDIATE already serialises
        writers, so INSERT…SELECT then UPDATE with the same condition see the
        same rows. On PostgreSQL one data-modifying CTE locks the rows, updates
        them and inserts their history from the old statuses it returns.
        """
        eligible = _eligible_kernel_statuses(target)
        if not eligible:
            return
        values: dict[str, Any] = {"status": target.value, "status_changed_at": self.now}
        if target == KernelStatus.PENDING:
            values["agent_id"] = None
        columns = ["kernel_id", "session_id", "source", "from_status", "to_status", "created_at"]
        for chunk in chunked(session_ids):
            where = sa.and_(kernels.c.session_id.in_(chunk), kernels.c.status.in_(eligible))
            if self.postgres:
                old = (
                    sa.select(kernels.c.id, kernels.c.status)
                    .where(where)
                    .with_for_update()
                    .cte("old")
                )
                moved = (
                    sa.update(kernels)
                    .where(kernels.c.id == old.c.id)
                    .values(**values)
                    .returning(kernels.c.id, kernels.c.session_id, old.c.status)
                    .cte("moved")
                )
                source = sa.select(
                    moved.c.id,
                    moved.c.session_id,
                    sa.literal(self.source),
                    moved.c.status,
                    sa.literal(target.value),
                    sa.literal(self.now, sa.Double()),
                )
                result = await self.conn.execute(
                    sa.insert(kernel_history).from_select(columns, source)
                )
            else:
                source = sa.select(
                    kernels.c.id,
                    kernels.c.session_id,
                    sa.literal(self.source),
                    kernels.c.status,
                    sa.literal(target.value),
                    sa.literal(self.now, sa.Double()),
                ).where(where)
                result = await self.conn.execute(
                    sa.insert(kernel_history).from_select(columns, source)
                )
                await self.conn.execute(sa.update(kernels).where(where).values(**values))
            self.kernel_changes += max(result.rowcount, 0)

    async def _set_result(self, session_ids: list[str]) -> None:
        """SUCCESS iff the session TERMINATED and every kernel TERMINATED with exit code 0."""
        bad_kernel = _kernel_exists(
            sa.or_(
                kernels.c.status != KernelStatus.TERMINATED.value,
                kernels.c.exit_code.is_(None),
                kernels.c.exit_code != 0,
            ),
        )
        result = sa.case(
            (
                sa.and_(sessions.c.status == SessionStatus.TERMINATED.value, ~bad_kernel),
                "SUCCESS",
            ),
            else_="FAILURE",
        )
        for chunk in chunked(session_ids):
            await self.conn.execute(
                sa.update(sessions).where(sessions.c.id.in_(chunk)).values(result=result)
            )

    async def _write_history(self, rows: list[AppliedChange]) -> None:
        """Insert history rows, merging each into the session's latest row when it repeats."""
        if not rows:
            return
        latest: dict[str, Any] = {}
        for chunk in chunked([r.session_id for r in rows]):
            for hrow in await self.conn.execute(_LATEST_HISTORY, {"ids": chunk}):
                latest[hrow.session_id] = hrow
        merges: list[dict[str, Any]] = []
        inserts: list[dict[str, Any]] = []
        for row in rows:
            prev = latest.get(row.session_id)
            if (
                prev is not None
                and prev.handler == self.source
                and prev.result == row.result.value
                and prev.from_status == row.from_status.value
                and prev.to_status == row.to_status.value
                and prev.error_code == row.error_code
            ):
                merges.append({"hid": prev.id, "now": self.now, "msg": row.message})
            else:
                inserts.append(
                    {
                        "session_id": row.session_id,
                        "handler": self.source,
                        "result": row.result.value,
                        "from_status": row.from_status.value,
                        "to_status": row.to_status.value,
                        "error_code": row.error_code,
                        "message": row.message,
                        "attempts": 1,
                        "created_at": self.now,
                        "updated_at": self.now,
                    }
                )
        if merges:
            await self.conn.execute(_MERGE_HISTORY, merges)
        if inserts:
            await self.conn.execute(sa.insert(scheduling_history), inserts)


def _status_info_expression(rule: StatusInfoRule) -> sa.ColumnElement[Any]:
    """Build ``status_info`` for a status change from a rule, evaluated per session in SQL."""
    whens: list[tuple[sa.ColumnElement[bool], Any]] = [
        (
            _kernel_exists(_kernel_status_in(s.value for s in statuses)),
            sa.literal(text),
        )
        for statuses, text in rule.if_any_kernel
    ]
    default: Any = sa.literal(rule.default) if rule.default is not None else sessions.c.status_info
    if not whens:
        return default  # type: ignore[no-any-return]
    return sa.case(*whens, else_=default)
