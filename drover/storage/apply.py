"""The apply: one tick's changes written in one transaction, with compare-and-set.

Changes are grouped by (from status, result, transition, effect on tries,
status_info rule, requeue), so that each group is a few set-based statements:

1. compare-and-set the sessions (``UPDATE … WHERE status = :read RETURNING id``);
   a session no longer in the status the tick read gets nothing, and the race
   is only reported (``stale-status``): it never becomes the session's latest
   history row;
2. move the kernels of the sessions that passed, recording their status
   changes in SQL (no kernel row travels to Python);
3. set ``result`` of sessions that ended;
4. write the history: a row that changes the status is always new (the
   latest row of a session always ends in its current status, so it cannot
   repeat); a row that keeps it merges into the session's latest row when
   they are equal in handler, result, statuses and error code.

Every statement is built once per shape (see :func:`drover.storage._sql.statement`)
and takes its ids as one parameter.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from drover.model.kinds import KERNEL, EntityKind, Kinds
from drover.model.plan import (
    FENCED,
    STALE_STATUS,
    AppliedChange,
    ApplyOutcome,
    Change,
    Claim,
    TryCount,
)
from drover.model.promotion import PromotionRule
from drover.model.status import KernelMatchType, KernelStatus, SchedulingResult
from drover.model.values import NewEntity, StatusInfoRule
from drover.storage._children import K, kernel_exists, kernel_status_in, match_condition
from drover.storage._db import Database
from drover.storage._sql import ids_param, ids_value, statement
from drover.storage.entities import insert_new_entities, merge_patch
from drover.storage.fetch import release_claims
from drover.storage.notify import notify
from drover.storage.schema import entities, scheduling_history, status_changes
from drover.storage.sessions import FETCH_ORDER

__all__ = ["Apply", "promote"]

e = entities
h = scheduling_history

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


def _children_side(change: Change, kinds: Kinds) -> str | None:
    """The status a change moves children to (an entity never ends with live children)."""
    child = kinds.child_of(change.kind)
    if child is None:
        return None
    if (
        change.to_children is None
        and change.changes_status
        and change.to_status in kinds[change.kind].terminal
    ):
        assert change.to_status is not None
        return child.end_status_for(change.to_status)
    return change.to_children


# -- statements, built once per shape ----------------------------------------------------


def _session_guard(postgres: bool, fenced: bool = False) -> sa.ColumnElement[bool]:
    """The compare-and-set: still in the status read, and (``fenced``) still under our claim."""
    guard = sa.and_(
        ids_param(e.c.id, "ids", postgres),
        e.c.status == sa.bindparam("from_status"),
        e.c.kind == sa.bindparam("of_kind"),
    )
    if fenced:
        guard = sa.and_(guard, e.c.claim_token == sa.bindparam("b_claim_token"))
    return guard


def _lock_sessions(postgres: bool, fenced: bool = False) -> sa.Select[Any]:
    query = sa.select(e.c.id).where(_session_guard(postgres, fenced))
    return query.with_for_update() if postgres else query


def _claim_state(postgres: bool) -> sa.Select[Any]:
    """Status and claim token of the entities ``:ids`` (why a compare-and-set failed)."""
    return sa.select(e.c.id, e.c.status, e.c.claim_token, e.c.claim_owner).where(
        ids_param(e.c.id, "ids", postgres)
    )


def _without_keys(column: sa.Column[Any], keys: tuple[str, ...], postgres: bool) -> Any:
    """``column`` (a JSON object) without ``keys``."""
    if postgres:
        expression: Any = column
        for key in keys:
            expression = expression.op("-")(sa.literal(key))
        return expression
    return sa.func.json_remove(column, *[f'$."{key}"' for key in keys])


def _move_sessions(
    postgres: bool,
    requeue: bool,
    rule: StatusInfoRule | None,
    resets: tuple[str, ...] = (),
    fenced: bool = False,
) -> sa.Update:
    values: dict[str, Any] = {
        "status": sa.bindparam("to_status"),
        "status_changed_at": sa.bindparam("now"),
        "tries": None,
    }
    if resets:
        values["budgets"] = _without_keys(e.c.budgets, resets, postgres)
    if requeue:
        values["requeues"] = e.c.requeues + 1
    if rule is not None:
        values["status_info"] = _status_info_expression(rule)
    return sa.update(e).where(_session_guard(postgres, fenced)).values(**values).returning(e.c.id)


def _promotion_probe(rule: PromotionRule) -> sa.Select[Any]:
    """One session ``rule`` would promote, if there is any."""
    return (
        sa.select(e.c.id)
        .where(
            e.c.kind == rule.kind,
            e.c.status.in_(sorted(str(s) for s in rule.from_statuses)),
            match_condition(rule.match, rule.kernel_statuses),
        )
        .limit(1)
    )


def _leaves_no_live_kernel(rule: PromotionRule, child: EntityKind | None) -> bool:
    """Whether an entity the rule matches has no live child left (nothing to end)."""
    return child is None or (
        rule.match is KernelMatchType.NOT_ANY and rule.kernel_statuses >= child.live
    )


def _promote_sessions(postgres: bool, rule: PromotionRule, from_status: str) -> sa.Update:
    """Move the entities in ``from_status`` that ``rule`` matches, up to ``:limit``."""
    chosen = (
        sa.select(e.c.id)
        .where(
            e.c.kind == rule.kind,
            e.c.status == str(from_status),
            match_condition(rule.match, rule.kernel_statuses),
        )
        .order_by(*FETCH_ORDER)
        .limit(sa.bindparam("limit"))
        # Its own FROM: not correlated to the table being updated.
        .correlate(None)
    )
    if postgres:
        chosen = chosen.with_for_update(skip_locked=True)
    values: dict[str, Any] = {
        "status": sa.bindparam("to_status"),
        "status_changed_at": sa.bindparam("now"),
        "tries": None,
    }
    if rule.status_info is not None:
        values["status_info"] = _status_info_expression(rule.status_info)
    return (
        sa.update(e)
        .where(e.c.id.in_(chosen), e.c.status == str(from_status))
        .values(**values)
        .returning(e.c.id)
    )


def _incremented(column: sa.Column[Any], postgres: bool) -> sa.ColumnElement[Any]:
    """``column[:handler] + 1`` as a new JSON object (``:path`` on SQLite)."""
    if postgres:
        handler = sa.bindparam("handler", type_=sa.String)
        current = sa.cast(column.op("->>")(handler), sa.Integer)
        merged: sa.ColumnElement[Any] = sa.func.coalesce(column, sa.func.jsonb_build_object()).op(
            "||"
        )(sa.func.jsonb_build_object(handler, sa.func.coalesce(current, 0) + 1))
        return merged
    path = sa.bindparam("path", type_=sa.String)
    return sa.func.json_set(
        sa.func.coalesce(column, "{}"),
        path,
        sa.func.coalesce(sa.func.json_extract(column, path), 0) + 1,
    )


def _count_try(postgres: bool, fenced: bool = False) -> sa.Update:
    """``tries[:handler] += 1`` (``:path`` is the SQLite JSON path of the handler)."""
    expression = _incremented(e.c.tries, postgres)
    guard = _session_guard(postgres, fenced)
    return sa.update(e).where(guard).values(tries=expression).returning(e.c.id)


def _spend_budget(postgres: bool) -> sa.Update:
    """``budgets[:handler] += 1`` on the entities ``:ids`` (the budget's name as ``:handler``)."""
    expression = _incremented(e.c.budgets, postgres)
    return sa.update(e).where(ids_param(e.c.id, "ids", postgres)).values(budgets=expression)


def _record_own_moves(postgres: bool) -> sa.Insert:
    """Status changes of children moved by a handler of their own kind (``:ids``)."""
    source = sa.select(
        e.c.id,
        e.c.kind,
        e.c.parent_id,
        sa.bindparam("source", type_=sa.String),
        sa.bindparam("from_status", type_=sa.String),
        sa.bindparam("to_status", type_=sa.String),
        sa.null(),
        sa.bindparam("now", type_=sa.Double),
    ).where(ids_param(e.c.id, "ids", postgres))
    return sa.insert(status_changes).from_select(_CHANGE_COLUMNS, source)


def _reset_tries(postgres: bool, fenced: bool = False) -> sa.Update:
    """Forget ``tries[:handler]``."""
    expression: sa.ColumnElement[Any]
    if postgres:
        expression = e.c.tries.op("-")(sa.bindparam("handler", type_=sa.String))
    else:
        expression = sa.func.json_remove(e.c.tries, sa.bindparam("path", type_=sa.String))
    guard = _session_guard(postgres, fenced)
    return sa.update(e).where(guard).values(tries=expression).returning(e.c.id)


def _place_kernels(postgres: bool) -> sa.Update:
    """``agent_id = :agent_id`` on the PENDING kernels ``:ids``."""
    return (
        sa.update(e)
        .where(ids_param(e.c.id, "ids", postgres), e.c.status == KernelStatus.PENDING.value)
        .values(agent_id=sa.bindparam("agent_id"))
    )


def _place_and_move_kernels(target: str) -> sa.Update:
    """SQLite: set the agent of, and move, the eligible kernels ``:kids``."""
    eligible = sorted(KERNEL.movable_to(target))
    return (
        sa.update(e)
        .where(ids_param(e.c.id, "kids", False), e.c.status.in_(eligible))
        .values(
            agent_id=sa.bindparam("agent_id"),
            status=sa.bindparam("to_status"),
            status_changed_at=sa.bindparam("now"),
        )
    )


def _change_values(from_status: sa.ColumnElement[Any]) -> tuple[sa.ColumnElement[Any], ...]:
    """source, from_status, to_status, message, created_at of a recorded status change."""
    return (
        sa.bindparam("source", type_=sa.String),
        from_status,
        sa.bindparam("to_status", type_=sa.String),
        sa.null(),
        sa.bindparam("now", type_=sa.Double),
    )


def _move_kernels(postgres: bool, child: EntityKind, target: str) -> list[sa.Executable]:
    """Statements recording and moving the eligible children of the entities ``:ids``.

    On SQLite, BEGIN IMMEDIATE already serialises writers, so INSERT…SELECT
    then UPDATE with the same condition see the same rows. On PostgreSQL one
    data-modifying CTE locks the rows, updates them and records them from the
    old statuses it returns.
    """
    eligible = sorted(child.movable_to(target))
    where = sa.and_(ids_param(e.c.parent_id, "ids", postgres), e.c.status.in_(eligible))
    values: dict[str, Any] = {
        "status": sa.bindparam("to_status"),
        "status_changed_at": sa.bindparam("now"),
    }
    if child.name == KERNEL.name and target == KernelStatus.PENDING:
        # Rescheduled kernels give their agent's capacity back.
        values["agent_id"] = None
    if postgres:
        old = sa.select(e.c.id, e.c.status).where(where).with_for_update().cte("old")
        moved = (
            sa.update(e)
            .where(e.c.id == old.c.id)
            .values(**values)
            .returning(e.c.id, e.c.kind, e.c.parent_id, old.c.status)
            .cte("moved")
        )
        source = sa.select(
            moved.c.id, moved.c.kind, moved.c.parent_id, *_change_values(moved.c.status)
        )
        return [sa.insert(status_changes).from_select(_CHANGE_COLUMNS, source)]
    source = sa.select(e.c.id, e.c.kind, e.c.parent_id, *_change_values(e.c.status)).where(where)
    return [
        sa.insert(status_changes).from_select(_CHANGE_COLUMNS, source),
        sa.update(e).where(where).values(**values),
    ]


def _set_result(postgres: bool, kind: EntityKind, child: EntityKind | None) -> sa.Update:
    """SUCCESS iff the entity ended in a success status and no child ended otherwise.

    For sessions: TERMINATED, and every kernel TERMINATED with exit code 0.
    """
    good: sa.ColumnElement[bool] = e.c.status.in_(sorted(kind.success_statuses))
    if child is not None:
        failed = [~kernel_status_in(child.success_statuses)]
        if child.exit_codes:
            failed += [K.c.exit_code.is_(None), K.c.exit_code != 0]
        good = sa.and_(good, ~kernel_exists(sa.or_(*failed)))
    result = sa.case((good, "SUCCESS"), else_="FAILURE")
    return sa.update(e).where(ids_param(e.c.id, "ids", postgres)).values(result=result)


def _insert_history(postgres: bool) -> sa.Insert:
    """One history row per session ``:ids``, all alike."""
    now = sa.bindparam("now", type_=sa.Double)
    source = sa.select(
        e.c.id,
        e.c.kind,
        sa.bindparam("handler", type_=sa.String),
        sa.bindparam("result", type_=sa.String),
        sa.bindparam("from_status", type_=sa.String),
        sa.bindparam("to_status", type_=sa.String),
        sa.bindparam("error_code", type_=sa.String),
        sa.bindparam("message", type_=sa.Text),
        sa.literal(1),
        now,
        now,
    ).where(ids_param(e.c.id, "ids", postgres))
    return sa.insert(h).from_select(_HISTORY_COLUMNS, source)


def _latest_history(postgres: bool) -> sa.Select[Any]:
    """The latest history row of each entity ``:ids``."""
    newest = (
        sa.select(sa.func.max(h.c.id))
        .where(ids_param(h.c.entity_id, "ids", postgres))
        .group_by(h.c.entity_id)
    )
    return sa.select(
        h.c.id, h.c.entity_id, h.c.handler, h.c.result, h.c.from_status, h.c.to_status,
        h.c.error_code,
    ).where(h.c.id.in_(newest))  # fmt: skip


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


# -- the apply ----------------------------------------------------------------------------


class Apply:
    """One apply, inside one open write transaction."""

    def __init__(
        self,
        conn: sa.Connection,
        source: str,
        now: float,
        *,
        postgres: bool,
        kinds: Kinds,
        inject_failure: Callable[[str], None] | None = None,
        claim: Claim | None = None,
        claimed: Sequence[str] = (),
    ) -> None:
        self.conn = conn
        self.source = source
        # Fencing is PostgreSQL's: on SQLite one coordinator runs (enforced at
        # start-up) and its statements stay exactly as they were.
        self.claim = claim if postgres else None
        self._claimed = claimed
        self.now = now
        self.postgres = postgres
        self.kinds = kinds
        self.inject = inject_failure or (lambda _step: None)
        self.kernel_changes = 0
        # History of status changes, all alike per group: (ids, row).
        self._moved_history: list[tuple[list[str], AppliedChange]] = []
        self._moved_rows: list[AppliedChange] = []
        self._kept_rows: list[AppliedChange] = []
        self._creates: list[NewEntity] = []

    def _ids(self, ids: Sequence[str]) -> Any:
        return ids_value(ids, self.postgres)

    def _handler_param(self, name: str | None = None) -> dict[str, str]:
        # Handler and budget names are kebab-case: the JSON path needs no escaping.
        key = self.source if name is None else name
        return {"handler": key} if self.postgres else {"path": f'$."{key}"'}

    def run(self, changes: Sequence[Change]) -> ApplyOutcome:
        """Apply ``changes``; return what was written (stale ones as SKIPPED)."""
        groups: dict[tuple[Any, ...], list[Change]] = defaultdict(list)
        kinds = self.kinds
        for change in changes:
            key = (
                change.kind,
                change.from_status,
                change.result,
                change.to_status if change.changes_status else None,
                # What the children become follows from the key's other parts
                # (kind, to_status, to_children): worked out once per group.
                change.to_children,
                change.try_count,
                change.status_info,
                change.requeue and change.changes_status,
                change.budget,
            )
            groups[key].append(change)
        applied: list[AppliedChange] = []
        for group in groups.values():
            applied.extend(self._apply_group(group))
        if self._creates:
            insert_new_entities(self.conn, self._creates, self.now, self.source, kinds)
        self.inject("before-history")
        self._write_history()
        self.inject("after-history")
        if self.claim is not None:
            release_claims(self.conn, self.claim.token, self._claimed)
        self.announce(applied)
        return ApplyOutcome(changes=tuple(applied), kernel_changes=self.kernel_changes)

    def announce(self, applied: Sequence[AppliedChange]) -> None:
        """Tell other coordinators (PostgreSQL ``NOTIFY``) which statuses entities moved into."""
        if not self.postgres:
            return
        moved = sorted({str(c.to_status) for c in applied if c.to_status != c.from_status})
        if moved:
            notify(self.conn, {"moved": moved, "by": self.claim.owner if self.claim else None})

    def _fenced(self, ids: list[str], live: set[str]) -> dict[str, Any]:
        """Of the ids that failed the compare-and-set, those whose claim is no longer ours.

        Maps each to its row (current status, claim owner). The others lost to a
        status change (``stale-status``).
        """
        if self.claim is None:
            return {}
        missing = [i for i in ids if i not in live]
        if not missing:
            return {}
        pg = self.postgres
        query = statement(("claim-state", pg), lambda: _claim_state(pg))
        rows = self.conn.execute(query, {"ids": self._ids(missing)}).all()
        return {r.id: r for r in rows if r.claim_token != self.claim.token}

    def _apply_group(self, group: list[Change]) -> list[AppliedChange]:
        first = group[0]
        kind = self.kinds[first.kind]
        from_status = first.from_status
        ids = [c.entity_id for c in group]
        live = set(self._guard_sessions(first, kind, ids))
        self.inject("after-sessions")
        live_ids = [sid for sid in ids if sid in live]
        to_status = first.to_status if first.changes_status else from_status
        assert to_status is not None
        if live_ids:
            self._side_effects(first, kind, group, live, live_ids, to_status)
        fenced = self._fenced(ids, live)
        out: list[AppliedChange] = []
        written: list[AppliedChange] = []
        name = kind.name
        for change in group:
            lost = fenced.get(change.entity_id)
            if lost is not None:
                # Our claim lapsed or was taken over: nothing of the change is
                # written, but the entity's history says so, in its current status.
                holder = lost.claim_owner or "nobody"
                row = AppliedChange(
                    change.entity_id,
                    SchedulingResult.SKIPPED,
                    lost.status,
                    lost.status,
                    FENCED,
                    f"claim of coordinator {self.claim.owner if self.claim else '?'} lapsed "
                    f"(now held by {holder}); {change.result} by {self.source} not applied",
                    name,
                )
                out.append(row)
                self._kept_rows.append(row)
                continue
            if change.entity_id in live:
                row = AppliedChange(
                    change.entity_id,
                    change.result,
                    from_status,
                    to_status,
                    change.error_code,
                    change.message,
                    name,
                )
                written.append(row)
            else:
                row = AppliedChange(
                    change.entity_id,
                    SchedulingResult.SKIPPED,
                    from_status,
                    from_status,
                    STALE_STATUS,
                    f"status changed underneath (no longer {from_status}); "
                    f"{change.result} by {self.source} not applied",
                    name,
                )
            out.append(row)
        if not written:
            return out
        if first.changes_status:
            uniform = all(
                w.message == written[0].message and w.error_code == written[0].error_code
                for w in written
            )
            if uniform:
                self._moved_history.append(([w.entity_id for w in written], written[0]))
            else:
                self._moved_rows.extend(written)
        else:
            self._kept_rows.extend(written)
        return out

    def _side_effects(
        self,
        first: Change,
        kind: EntityKind,
        group: list[Change],
        live: set[str],
        live_ids: list[str],
        to_status: str,
    ) -> None:
        """Everything a group's applied changes write besides the entities' own status."""
        pg = self.postgres
        placements = [p for c in group if c.entity_id in live for p in c.placements]
        to_children = _children_side(first, self.kinds)
        if placements and (pg or to_children is None):
            self._place_kernels(placements)
            placements = []
        if to_children is not None:
            self._move_kernels(kind, live_ids, to_children, placements)
            self.inject("after-kernels")
        if first.changes_status and kind.parent is not None:
            # A child moved by a handler of its own kind: its parent's view records it.
            self.conn.execute(
                statement(("own-moves", pg), lambda: _record_own_moves(pg)),
                {
                    "ids": self._ids(live_ids),
                    "source": self.source,
                    "from_status": str(first.from_status),
                    "to_status": str(to_status),
                    "now": self.now,
                },
            )
        if first.budget is not None:
            resets = any(b.resets for b in kind.budgets if b.name == first.budget)
            if not (resets and first.changes_status):
                self.conn.execute(
                    statement(("spend-budget", pg), lambda: _spend_budget(pg)),
                    {"ids": self._ids(live_ids), **self._handler_param(first.budget)},
                )
        if first.changes_status and to_status in kind.terminal:
            child = self.kinds.child_of(kind.name)
            self.conn.execute(
                statement(("result", pg, kind, child), lambda: _set_result(pg, kind, child)),
                {"ids": self._ids(live_ids)},
            )
        patches = {c.entity_id: c.data for c in group if c.data and c.entity_id in live}
        if patches:
            self._patch_data(patches)
        for change in group:
            if change.creates and change.entity_id in live:
                self._creates.extend(change.creates)

    def _patch_data(self, patches: dict[str, Any]) -> None:
        """Merge-patch the entities' ``data`` (read and written in this transaction)."""
        query = sa.select(e.c.id, e.c.data).where(ids_param(e.c.id, "ids", self.postgres))
        current = dict(self.conn.execute(query, {"ids": self._ids(list(patches))}).all())
        rows = [
            {"eid": eid, "new_data": merge_patch(current.get(eid), patch)}
            for eid, patch in patches.items()
        ]
        update = (
            sa.update(e)
            .where(e.c.id == sa.bindparam("eid"))
            .values(data=sa.bindparam("new_data", type_=e.c.data.type))
        )
        self.conn.execute(update, rows)

    def promote(self, rule: PromotionRule, from_status: str, limit: int) -> list[AppliedChange]:
        """Select and move the entities in ``from_status`` that ``rule`` matches."""
        pg = self.postgres
        kind = self.kinds[rule.kind]
        stmt = statement(
            ("promote", pg, rule, from_status), lambda: _promote_sessions(pg, rule, from_status)
        )
        params = {"limit": limit, "to_status": str(rule.to_status), "now": self.now}
        live_ids = [r[0] for r in self.conn.execute(stmt, params)]
        self.inject("after-sessions")
        if not live_ids:
            return []
        if rule.to_status in kind.terminal:
            child = self.kinds.child_of(kind.name)
            if child is not None and not _leaves_no_live_kernel(rule, child):
                self._move_kernels(kind, live_ids, child.end_status_for(rule.to_status))
                self.inject("after-kernels")
            self.conn.execute(
                statement(("result", pg, kind, child), lambda: _set_result(pg, kind, child)),
                {"ids": self._ids(live_ids)},
            )
        done = SchedulingResult.SUCCESS
        rows = [
            AppliedChange(sid, done, from_status, rule.to_status, None, None, kind.name)
            for sid in live_ids
        ]
        self._moved_history.append((live_ids, rows[0]))
        return rows

    def _guard_sessions(self, first: Change, kind: EntityKind, ids: list[str]) -> list[str]:
        """Compare-and-set the group's entities; return the ids still in ``from_status``."""
        pg = self.postgres
        params: dict[str, Any] = {
            "ids": self._ids(ids),
            "from_status": str(first.from_status),
            "of_kind": kind.name,
        }
        fenced = self.claim is not None
        if self.claim is not None:
            params["b_claim_token"] = self.claim.token
        stmt: sa.Executable
        if first.changes_status:
            assert first.to_status is not None
            requeue, rule = first.requeue, first.status_info
            resets = tuple(sorted(b.name for b in kind.budgets if b.resets))
            stmt = statement(
                ("move-sessions", pg, requeue, rule, resets, fenced),
                lambda: _move_sessions(pg, requeue, rule, resets, fenced),
            )
            params.update(to_status=str(first.to_status), now=self.now)
        elif first.try_count is TryCount.INCREMENT:
            stmt = statement(("count-try", pg, fenced), lambda: _count_try(pg, fenced))
            params.update(self._handler_param())
        elif first.try_count is TryCount.RESET:
            stmt = statement(("reset-tries", pg, fenced), lambda: _reset_tries(pg, fenced))
            params.update(self._handler_param())
        else:
            stmt = statement(("lock-sessions", pg, fenced), lambda: _lock_sessions(pg, fenced))
        return [r[0] for r in self.conn.execute(stmt, params)]

    def _place_kernels(self, placements: list[tuple[str, str]]) -> None:
        """Set the agents of PENDING kernels: one statement per agent."""
        by_agent: dict[str, list[str]] = defaultdict(list)
        for kernel_id, agent_id in placements:
            by_agent[agent_id].append(kernel_id)
        pg = self.postgres
        stmt = statement(("place-kernels", pg), lambda: _place_kernels(pg))
        for agent_id, kernel_ids in by_agent.items():
            self.conn.execute(stmt, {"ids": self._ids(kernel_ids), "agent_id": agent_id})

    def _move_kernels(
        self,
        kind: EntityKind,
        session_ids: list[str],
        target: str,
        placements: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Record and move the entities' eligible children (SQLite: placing them as they move).

        On SQLite the kernels being placed are moved by the statement that sets
        their agent, one per agent: each row is written once, not twice.
        """
        pg = self.postgres
        child = self.kinds.child_of(kind.name)
        if child is None:
            return
        record, *move = statement(
            ("move-kernels", pg, child, target), lambda: _move_kernels(pg, child, target)
        )
        params = {
            "ids": self._ids(session_ids),
            "to_status": str(target),
            "now": self.now,
            "source": self.source,
        }
        recorded = max(self.conn.execute(record, params).rowcount, 0)
        moved = 0
        if placements:
            place = statement(("place-and-move", target), lambda: _place_and_move_kernels(target))
            by_agent: dict[str, list[str]] = defaultdict(list)
            for kernel_id, agent_id in placements:
                by_agent[agent_id].append(kernel_id)
            for agent_id, kernel_ids in by_agent.items():
                values = {"kids": self._ids(kernel_ids), "agent_id": agent_id}
                result = self.conn.execute(
                    place, {**values, "to_status": str(target), "now": self.now}
                )
                moved += max(result.rowcount, 0)
        if move and recorded > moved:
            self.conn.execute(move[0], params)
        self.kernel_changes += recorded

    def _write_history(self) -> None:
        pg = self.postgres
        for ids, row in self._moved_history:
            self.conn.execute(
                statement(("insert-history", pg), lambda: _insert_history(pg)),
                {
                    "ids": self._ids(ids),
                    "handler": self.source,
                    "result": str(row.result),
                    "from_status": str(row.from_status),
                    "to_status": str(row.to_status),
                    "error_code": row.error_code,
                    "message": row.message,
                    "now": self.now,
                },
            )
        inserts = [self._history_row(r) for r in self._moved_rows]
        merges: list[dict[str, Any]] = []
        if self._kept_rows:
            kept = [r.entity_id for r in self._kept_rows]
            query = statement(("latest-history", pg), lambda: _latest_history(pg))
            latest = {
                row.entity_id: row for row in self.conn.execute(query, {"ids": self._ids(kept)})
            }
            for row in self._kept_rows:
                prev = latest.get(row.entity_id)
                if (
                    prev is not None
                    and prev.handler == self.source
                    and prev.result == str(row.result)
                    and prev.from_status == str(row.from_status)
                    and prev.to_status == str(row.to_status)
                    and prev.error_code == row.error_code
                ):
                    merges.append({"hid": prev.id, "now": self.now, "msg": row.message})
                else:
                    inserts.append(self._history_row(row))
        if merges:
            self.conn.execute(_MERGE_HISTORY, merges)
        if inserts:
            self.conn.execute(sa.insert(h), inserts)

    def _history_row(self, row: AppliedChange) -> dict[str, Any]:
        return {
            "entity_id": row.entity_id,
            "kind": row.kind,
            "handler": self.source,
            "result": str(row.result),
            "from_status": str(row.from_status),
            "to_status": str(row.to_status),
            "error_code": row.error_code,
            "message": row.message,
            "attempts": 1,
            "created_at": self.now,
            "updated_at": self.now,
        }


async def promote(
    db: Database,
    rule: PromotionRule,
    limit: int,
    now: float,
    inject_failure: Callable[[str], None] | None = None,
    *,
    probe_first: bool = True,
) -> ApplyOutcome:
    """Promote the sessions ``rule`` matches, up to ``limit``, in one write transaction.

    No value is built for the sessions and no id list goes back and forth: for
    each of the rule's from statuses one ``UPDATE … WHERE id IN (SELECT …
    LIMIT)`` selects and moves the sessions (the selection locks and skips
    locked rows on PostgreSQL), then their kernels, result and history follow
    as in any apply. The statuses are taken one after another, each in fetch
    order.
    """

    # Most promotion ticks find nothing: unless the last one found work
    # (``probe_first=False``), a read probe first keeps them from taking the
    # write lock (SQLite has one writer) for nothing.
    probe = statement(("promote-probe", rule), lambda: _promotion_probe(rule))

    def any_candidate(conn: sa.Connection) -> bool:
        return (conn.execute(probe)).first() is not None

    if probe_first and not await db.read(any_candidate):
        return ApplyOutcome(changes=())

    def work(conn: sa.Connection) -> ApplyOutcome:
        apply = Apply(
            conn,
            rule.name,
            now,
            postgres=db.postgres,
            kinds=db.kinds,
            inject_failure=inject_failure,
        )
        applied: list[AppliedChange] = []
        for from_status in sorted(rule.from_statuses):
            if len(applied) >= limit:
                break
            applied.extend(apply.promote(rule, from_status, limit - len(applied)))
        apply.inject("before-history")
        apply._write_history()
        apply.inject("after-history")
        apply.announce(applied)
        return ApplyOutcome(changes=tuple(applied), kernel_changes=apply.kernel_changes)

    return await db.write(work)
