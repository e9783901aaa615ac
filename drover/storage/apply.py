"""The apply: one tick's changes written in one transaction, with compare-and-set.

Changes are grouped by (from status, result, transition, effect on tries,
status_info rule, requeue), so that each group is a few set-based statements:

1. compare-and-set the sessions (``UPDATE … WHERE status = :read RETURNING id``);
   a session no longer in the status the tick read gets nothing, and the race
   is only reported (``stale-status``): it never becomes the session's latest
   history row;
2. move the kernels of the sessions that passed, writing their status changes
   in SQL (no kernel row travels to Python);
3. set ``result`` of sessions that ended;
4. write the history: a row that changes the status is always new (the
   latest row of a session always ends in its current status, so it cannot
   repeat); a row that keeps it merges into the session's latest row when
   they are equal in handler, result, statuses and error code.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from drover.model.plan import STALE_STATUS, AppliedChange, ApplyOutcome, Change, TryCount
from drover.model.rules import eligible_kernel_statuses, kernel_end_status
from drover.model.status import (
    TERMINAL_SESSION_STATUSES,
    KernelStatus,
    SchedulingResult,
    SessionStatus,
)
from drover.model.values import StatusInfoRule
from drover.storage._children import K, kernel_exists, kernel_status_in
from drover.storage._sql import chunked
from drover.storage.rows import SESSION_KIND
from drover.storage.schema import entities, scheduling_history, status_changes

__all__ = ["Apply"]

e = entities
h = scheduling_history

_LATEST_HISTORY = sa.select(
    h.c.id, h.c.entity_id, h.c.handler, h.c.result, h.c.from_status, h.c.to_status, h.c.error_code
).where(
    h.c.id.in_(
        sa.select(sa.func.max(h.c.id))
        .where(h.c.entity_id.in_(sa.bindparam("ids", expanding=True)))
        .group_by(h.c.entity_id)
        .scalar_subquery()
    )
)
_MERGE_HISTORY = (
    sa.update(h)
    .where(h.c.id == sa.bindparam("hid"))
    .values(
        attempts=h.c.attempts + 1,
        updated_at=sa.bindparam("now"),
        message=sa.bindparam("msg"),
    )
)
_HISTORY_COLUMNS = [
    "entity_id",
    "kind",
    "handler",
    "result",
    "from_status",
    "to_status",
    "error_code",
    "message",
    "attempts",
    "created_at",
    "updated_at",
]
_CHANGE_COLUMNS = [
    "entity_id",
    "kind",
    "parent_id",
    "source",
    "from_status",
    "to_status",
    "message",
    "created_at",
]


def _kernel_side(change: Change) -> KernelStatus | None:
    """The kernel status a change moves kernels to (a session never ends with live kernels)."""
    if (
        change.to_kernel is None
        and change.changes_session
        and change.to_session in TERMINAL_SESSION_STATUSES
    ):
        assert change.to_session is not None
        return kernel_end_status(change.to_session)
    return change.to_kernel


class Apply:
    """One apply, inside one open write transaction."""

    def __init__(
        self,
        conn: AsyncConnection,
        source: str,
        now: float,
        *,
        postgres: bool,
        inject_failure: Callable[[str], None] | None = None,
    ) -> None:
        self.conn = conn
        self.source = source
        self.now = now
        self.postgres = postgres
        self.inject = inject_failure or (lambda _step: None)
        self.kernel_changes = 0
        # History of status changes: (ids, result, from, to, code, message) per group.
        self._moved_history: list[tuple[list[str], AppliedChange]] = []
        self._moved_rows: list[AppliedChange] = []
        self._kept_rows: list[AppliedChange] = []

    async def run(self, changes: Sequence[Change]) -> ApplyOutcome:
        """Apply ``changes``; return what was written (stale ones as SKIPPED)."""
        groups: dict[tuple[Any, ...], list[Change]] = defaultdict(list)
        for change in changes:
            key = (
                change.from_status,
                change.result,
                change.to_session if change.changes_session else None,
                _kernel_side(change),
                change.try_count,
                change.status_info,
                change.requeue and change.changes_session,
            )
            groups[key].append(change)
        applied: list[AppliedChange] = []
        for group in groups.values():
            applied.extend(await self._apply_group(group))
        self.inject("before-history")
        await self._write_history()
        self.inject("after-history")
        return ApplyOutcome(changes=tuple(applied), kernel_changes=self.kernel_changes)

    async def _apply_group(self, group: list[Change]) -> list[AppliedChange]:
        first = group[0]
        from_status = first.from_status
        ids = [c.session_id for c in group]
        live = set(await self._guard_sessions(first, ids))
        self.inject("after-sessions")
        live_ids = [sid for sid in ids if sid in live]
        to_kernel = _kernel_side(first)
        if live_ids and to_kernel is not None:
            await self._move_kernels(live_ids, to_kernel)
            self.inject("after-kernels")
        to_status = first.to_session if first.changes_session else from_status
        assert to_status is not None
        if live_ids and first.changes_session and to_status in TERMINAL_SESSION_STATUSES:
            await self._set_result(live_ids)
        out: list[AppliedChange] = []
        written: list[AppliedChange] = []
        for change in group:
            if change.session_id in live:
                row = AppliedChange(
                    session_id=change.session_id,
                    result=change.result,
                    from_status=from_status,
                    to_status=to_status,
                    error_code=change.error_code,
                    message=change.message,
                )
                written.append(row)
            else:
                row = AppliedChange(
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
            out.append(row)
        if not written:
            return out
        if first.changes_session:
            uniform = all(
                w.message == written[0].message and w.error_code == written[0].error_code
                for w in written
            )
            if uniform:
                self._moved_history.append(([w.session_id for w in written], written[0]))
            else:
                self._moved_rows.extend(written)
        else:
            self._kept_rows.extend(written)
        return out

    # -- 1. compare-and-set ------------------------------------------------------------

    def _tries_increment(self) -> sa.ColumnElement[Any]:
        if self.postgres:
            current = sa.cast(e.c.tries.op("->>")(self.source), sa.Integer)
            return sa.func.coalesce(e.c.tries, sa.func.jsonb_build_object()).op("||")(
                sa.func.jsonb_build_object(self.source, sa.func.coalesce(current, 0) + 1)
            )
        path = f'$."{self.source}"'
        return sa.func.json_set(
            sa.func.coalesce(e.c.tries, "{}"),
            path,
            sa.func.coalesce(sa.func.json_extract(e.c.tries, path), 0) + 1,
        )

    def _tries_reset(self) -> sa.ColumnElement[Any]:
        if self.postgres:
            return e.c.tries.op("-")(sa.literal(self.source, sa.String))
        return sa.func.json_remove(e.c.tries, f'$."{self.source}"')

    async def _guard_sessions(self, first: Change, ids: list[str]) -> list[str]:
        """Compare-and-set the group's sessions; return the ids still in ``from_status``."""
        where = sa.and_(e.c.status == first.from_status.value, e.c.kind == SESSION_KIND)
        values: dict[str, Any] | None = None
        if first.changes_session:
            assert first.to_session is not None
            values = {
                "status": first.to_session.value,
                "status_changed_at": self.now,
                "tries": None,
            }
            if first.requeue:
                values["requeues"] = e.c.requeues + 1
            if first.status_info is not None:
                values["status_info"] = _status_info_expression(first.status_info)
        elif first.try_count is TryCount.INCREMENT:
            values = {"tries": self._tries_increment()}
        elif first.try_count is TryCount.RESET:
            values = {"tries": self._tries_reset()}
        live: list[str] = []
        for chunk in chunked(ids):
            if values is None:
                query = sa.select(e.c.id).where(e.c.id.in_(chunk), where)
                if self.postgres:
                    query = query.with_for_update()
                live.extend(r[0] for r in await self.conn.execute(query))
            else:
                stmt = (
                    sa.update(e).where(e.c.id.in_(chunk), where).values(**values).returning(e.c.id)
                )
                live.extend(r[0] for r in await self.conn.execute(stmt))
        return live

    # -- 2. kernels --------------------------------------------------------------------

    async def _move_kernels(self, session_ids: list[str], target: KernelStatus) -> None:
        """Move the sessions' eligible kernels to ``target``, recording each change in SQL.

        On SQLite, BEGIN IMMEDIATE already serialises writers, so INSERT…SELECT
        then UPDATE with the same condition see the same rows. On PostgreSQL one
        data-modifying CTE locks the rows, updates them and records them from
        the old statuses it returns.
        """
        eligible = sorted(s.value for s in eligible_kernel_statuses(target))
        values: dict[str, Any] = {"status": target.value, "status_changed_at": self.now}
        if target == KernelStatus.PENDING:
            values["agent_id"] = None
        for chunk in chunked(session_ids):
            where = sa.and_(e.c.parent_id.in_(chunk), e.c.status.in_(eligible))
            if self.postgres:
                old = sa.select(e.c.id, e.c.status).where(where).with_for_update().cte("old")
                moved = (
                    sa.update(e)
                    .where(e.c.id == old.c.id)
                    .values(**values)
                    .returning(e.c.id, e.c.kind, e.c.parent_id, old.c.status)
                    .cte("moved")
                )
                source = sa.select(
                    moved.c.id,
                    moved.c.kind,
                    moved.c.parent_id,
                    sa.literal(self.source),
                    moved.c.status,
                    sa.literal(target.value),
                    sa.null(),
                    sa.literal(self.now, sa.Double()),
                )
                result = await self.conn.execute(
                    sa.insert(status_changes).from_select(_CHANGE_COLUMNS, source)
                )
            else:
                source = sa.select(
                    e.c.id,
                    e.c.kind,
                    e.c.parent_id,
                    sa.literal(self.source),
                    e.c.status,
                    sa.literal(target.value),
                    sa.null(),
                    sa.literal(self.now, sa.Double()),
                ).where(where)
                result = await self.conn.execute(
                    sa.insert(status_changes).from_select(_CHANGE_COLUMNS, source)
                )
                if result.rowcount:
                    await self.conn.execute(sa.update(e).where(where).values(**values))
            self.kernel_changes += max(result.rowcount, 0)

    # -- 3. result ---------------------------------------------------------------------

    async def _set_result(self, session_ids: list[str]) -> None:
        """SUCCESS iff the session TERMINATED and every kernel TERMINATED with exit code 0."""
        bad_kernel = kernel_exists(
            sa.or_(
                ~kernel_status_in([KernelStatus.TERMINATED]),
                K.c.exit_code.is_(None),
                K.c.exit_code != 0,
            )
        )
        result = sa.case(
            (sa.and_(e.c.status == SessionStatus.TERMINATED.value, ~bad_kernel), "SUCCESS"),
            else_="FAILURE",
        )
        for chunk in chunked(session_ids):
            await self.conn.execute(sa.update(e).where(e.c.id.in_(chunk)).values(result=result))

    # -- 4. history --------------------------------------------------------------------

    async def _write_history(self) -> None:
        for ids, row in self._moved_history:
            for chunk in chunked(ids):
                source = sa.select(
                    e.c.id,
                    e.c.kind,
                    sa.literal(self.source),
                    sa.literal(row.result.value),
                    sa.literal(row.from_status.value),
                    sa.literal(row.to_status.value),
                    sa.literal(row.error_code, sa.String()),
                    sa.literal(row.message, sa.Text()),
                    sa.literal(1),
                    sa.literal(self.now, sa.Double()),
                    sa.literal(self.now, sa.Double()),
                ).where(e.c.id.in_(chunk))
                await self.conn.execute(sa.insert(h).from_select(_HISTORY_COLUMNS, source))
        inserts = [self._history_row(r) for r in self._moved_rows]
        merges: list[dict[str, Any]] = []
        if self._kept_rows:
            latest: dict[str, Any] = {}
            for chunk in chunked([r.session_id for r in self._kept_rows]):
                for hrow in await self.conn.execute(_LATEST_HISTORY, {"ids": chunk}):
                    latest[hrow.entity_id] = hrow
            for row in self._kept_rows:
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
                    inserts.append(self._history_row(row))
        if merges:
            await self.conn.execute(_MERGE_HISTORY, merges)
        if inserts:
            await self.conn.execute(sa.insert(h), inserts)

    def _history_row(self, row: AppliedChange) -> dict[str, Any]:
        return {
            "entity_id": row.session_id,
            "kind": SESSION_KIND,
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


def _status_info_expression(rule: StatusInfoRule) -> sa.ColumnElement[Any]:
    """``status_info`` for a status change from a rule, evaluated per session in SQL."""
    whens: list[tuple[sa.ColumnElement[bool], Any]] = [
        (kernel_exists(kernel_status_in(statuses)), sa.literal(text))
        for statuses, text in rule.if_any_kernel
    ]
    default: Any = sa.literal(rule.default) if rule.default is not None else e.c.status_info
    if not whens:
        return default  # type: ignore[no-any-return]
    return sa.case(*whens, else_=default)
