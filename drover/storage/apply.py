"""The apply: one tick's changes written in one transaction, with compare-and-set.

Changes are grouped by (kind, from status, result, transition, effect on
tries, status_info rule, requeue, budget), so that each group is a few
set-based statements:

1. compare-and-set the entities (``UPDATE … WHERE status = :read RETURNING
   id``); an entity no longer in the status the tick read gets nothing, and
   the race is only reported (``stale-status``): it never becomes the
   entity's latest history row;
2. move the children (a session's kernels) of the entities that passed,
   recording their status changes in SQL (no child row travels to Python);
3. set ``result`` of entities that ended;
4. write the history: a row that changes the status is always new (the
   latest row of an entity always ends in its current status, so it cannot
   repeat); a row that keeps it merges into the entity's latest row when
   they are equal in handler, result, statuses and error code.

:func:`promote` moves the entities a promotion rule matches, then does 2-4
the same way.

The statements are built in :mod:`drover.storage.statements.apply` and
:mod:`drover.storage.statements.promote`; this module executes them, each
built once per shape (see :func:`drover.storage._sql.statement`) and taking
its ids as one parameter.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from drover.model.kinds import EntityKind, Kinds
from drover.model.plan import (
    FENCED,
    STALE_STATUS,
    AppliedChange,
    ApplyOutcome,
    Change,
    Claim,
    Move,
    TryCount,
)
from drover.model.pools import POOL_FULL
from drover.model.promotion import PromotionRule
from drover.model.status import KernelMatchType, SchedulingResult
from drover.model.values import NewEntity, TerminationOutcome
from drover.storage._sql import bounded_statement, driver_execute, ids_value, statement
from drover.storage.descendants import ChildMoves
from drover.storage.ending import end_entities
from drover.storage.inserts import insert_new_entities, merge_patch
from drover.storage.journal import history_row, history_time, write_history
from drover.storage.moves import move_changes
from drover.storage.notify import notify
from drover.storage.pools import PoolGate
from drover.storage.statements.apply import (
    MERGE_HISTORY,
    SET_CHOSEN_RESULT,
    claim_state,
    count_try,
    entity_data,
    insert_history,
    latest_history,
    lock_entities,
    move_entities,
    record_own_moves,
    reset_tries,
    set_entity_data,
    set_result,
    set_status_info,
    spend_budget,
)
from drover.storage.statements.coordinators import SOLO_HELD
from drover.storage.statements.fetch import release_claims
from drover.storage.statements.promote import promote_entities

__all__ = ["Apply", "release_claims"]


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


def _leaves_no_live_kernel(rule: PromotionRule, child: EntityKind | None) -> bool:
    """Whether an entity the rule matches has no live child left (nothing to end)."""
    return child is None or (
        rule.match is KernelMatchType.NOT_ANY and rule.kernel_statuses >= child.live
    )


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
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.conn = conn
        # History rows are dated when written (journal.history_time), not when the tick read.
        self.clock = clock or (lambda: now)
        self.source = source
        # Fencing is PostgreSQL's: on SQLite one coordinator runs (enforced at
        # start-up) and its statements stay exactly as they were.
        self.claim = claim if postgres else None
        self._claimed = claimed
        # Claimed ids whose claim a fenced write already dropped.
        self._released: set[str] = set()
        self.now = now
        self.postgres = postgres
        self.kinds = kinds
        self.inject = inject_failure or (lambda _step: None)
        #: The children this apply moves (and what they entered).
        self.children = ChildMoves(conn, source, now, postgres=postgres, kinds=kinds)
        # History of status changes, all alike per group: (ids, row).
        self._moved_history: list[tuple[list[str], AppliedChange]] = []
        self._moved_rows: list[AppliedChange] = []
        self._kept_rows: list[AppliedChange] = []
        self._creates: list[NewEntity] = []
        # Entities the applied changes asked to end (HandlerResult.terminate).
        self._ends: list[str] = []
        # Entities moved by HandlerResult.moves: the tick never claimed them.
        self._unclaimed: set[str] = set()
        # Pools of counter tokens: only kinds that declare some pay for them.
        self._pools = PoolGate(conn, kinds, postgres) if kinds.pools else None

    def _ids(self, ids: Sequence[str]) -> Any:
        return ids_value(ids, self.postgres)

    def _handler_param(self, name: str | None = None) -> dict[str, str]:
        # Handler and budget names are kebab-case: the JSON path needs no escaping.
        key = self.source if name is None else name
        return {"handler": key} if self.postgres else {"path": f'$."{key}"'}

    def run(self, changes: Sequence[Change], moves: Sequence[Move] = ()) -> ApplyOutcome:
        """Apply ``changes`` and the handler's targeted ``moves``; return what was written
        (stale ones as SKIPPED)."""
        groups: dict[tuple[Any, ...], list[Change]] = defaultdict(list)
        kinds = self.kinds
        refused: list[AppliedChange] = []
        if moves:
            moved, refused = move_changes(
                self.conn, moves, self.source, kinds=kinds, postgres=self.postgres
            )
            changes = [*changes, *moved]
            # Not the tick's targets: no claim of ours to check (compare-and-set only).
            self._unclaimed.update(c.entity_id for c in moved)
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
                change.children_info,
            )
            groups[key].append(change)
        if self._pools is not None:
            self._pools.lock_for(changes)
        applied: list[AppliedChange] = []
        for group in groups.values():
            applied.extend(self._apply_group(group))
        applied.extend(refused)
        if self._creates:
            insert_new_entities(self.conn, self._creates, self.now, self.source, kinds)
        if self._ends:
            # Its own apply (own history rows), in this transaction.
            self._again().end(self._ends, strict=False)
        if self.claim is not None and not self.claim.solo:
            # The fenced writes released what they wrote; the rest is released here,
            # before the history lock is taken (no row lock is waited for under it).
            done = self._released
            rest = [i for i in self._claimed if i not in done] if done else self._claimed
            release_claims(self.conn, self.claim.token, rest)
        return self.finish(applied)

    def announce(self, applied: Sequence[AppliedChange], by: str | None = None) -> None:
        """Tell other coordinators (PostgreSQL ``NOTIFY``) which ``[kind, status]`` pairs
        entities moved into; ``by`` (default: the claim's owner) is the coordinator that
        moved them, whose own wake-ups came first."""
        if not self.postgres:
            return
        moved = sorted(
            {(c.kind, str(c.to_status)) for c in applied if c.to_status != c.from_status}
        )
        if moved:
            owner = by if by is not None else (self.claim.owner if self.claim else None)
            notify(self.conn, {"moved": [list(m) for m in moved], "by": owner})

    def _fenced(self, ids: list[str], live: set[str]) -> dict[str, Any]:
        """Of the ids that failed the compare-and-set, those whose claim is no longer ours.

        Maps each to its row (current status, claim owner). The others lost to a
        status change (``stale-status``).
        """
        if self.claim is None or ids[0] in self._unclaimed:
            return {}
        missing = [i for i in ids if i not in live]
        if not missing:
            return {}
        pg = self.postgres
        query = statement(("claim-state", pg), lambda: claim_state(pg))
        rows = self.conn.execute(query, {"ids": self._ids(missing)}).all()
        if self.claim.solo:
            # No row carries a solo lease: lost if the lease is, or another coordinator
            # claimed the entity.
            lease = {"b_id": self.claim.owner, "b_token": self.claim.token}
            held = self.conn.execute(SOLO_HELD, lease).first() is not None
            return {r.id: r for r in rows if not held or r.claim_token is not None}
        return {r.id: r for r in rows if r.claim_token != self.claim.token}

    def _apply_group(self, group: list[Change]) -> list[AppliedChange]:
        if self._pools is None:
            return self._apply_admitted(group)
        admitted, refused = self._pools.admit(group)
        rows = [
            AppliedChange(
                c.entity_id,
                SchedulingResult.SKIPPED,
                c.from_status,
                c.from_status,
                POOL_FULL,
                f"{reason}; {c.result} by {self.source} not applied",
                kind=c.kind,
            )
            for c, reason in refused
        ]
        self._kept_rows.extend(rows)
        if not admitted:
            return rows
        written = self._apply_admitted(admitted)
        self._pools.write_claims(admitted, written)
        return rows + written

    def _apply_admitted(self, group: list[Change]) -> list[AppliedChange]:
        first = group[0]
        kind = self.kinds[first.kind]
        from_status = first.from_status
        ids = [c.entity_id for c in group]
        live = set(self._guard_entities(first, kind, ids))
        self.inject("after-entities")
        live_ids = [eid for eid in ids if eid in live]
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
                    kind=name,
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
                    kind=name,
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
                    kind=name,
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
            self.children.place(kind, placements)
            placements = []
        if to_children is not None:
            self.children.move(kind, live_ids, to_children, placements, first.children_info)
            self.inject("after-kernels")
        if first.changes_status and kind.parent is not None:
            # A child moved by a handler of its own kind: its parent's view records it.
            driver_execute(
                self.conn,
                statement(("own-moves", pg), lambda: record_own_moves(pg)),
                {
                    "ids": self._ids(live_ids),
                    "source": self.source,
                    "from_status": str(first.from_status),
                    "to_status": str(to_status),
                    "now": self.now,
                },
            )
        if first.budget is not None:
            # A move that refills the budget (resets, resets_on) leaves it unspent.
            refills = first.changes_status and any(
                b.refills_on(to_status) for b in kind.budgets if b.name == first.budget
            )
            if not refills:
                driver_execute(
                    self.conn,
                    statement(("spend-budget", pg), lambda: spend_budget(pg)),
                    {"ids": self._ids(live_ids), **self._handler_param(first.budget)},
                )
        # Data first: the result reads it (a termination request's record).
        patches = {c.entity_id: c.data for c in group if c.data and c.entity_id in live}
        if patches:
            self._patch_data(patches)
        if first.changes_status and to_status in kind.terminal:
            child = self.kinds.child_of(kind.name)
            driver_execute(
                self.conn,
                statement(("result", pg, kind, child), lambda: set_result(pg, kind, child)),
                {"ids": self._ids(live_ids)},
            )
        if to_status in kind.terminal:
            chosen = [
                {"eid": c.entity_id, "result": c.sets_result}
                for c in group
                if c.sets_result is not None and c.entity_id in live
            ]
            if chosen:
                self.conn.execute(SET_CHOSEN_RESULT, chosen)
        for change in group:
            if change.entity_id in live:
                self._creates.extend(change.creates)
                self._ends.extend(change.terminates)

    def _patch_data(self, patches: dict[str, Any]) -> None:
        """Merge-patch the entities' ``data`` (read and written in this transaction)."""
        pg = self.postgres
        query = statement(("entity-data", pg), lambda: entity_data(pg))
        found = self.conn.execute(query, {"ids": self._ids(list(patches))}).all()
        current: dict[str, Any] = {eid: data for eid, data in found}
        rows = [
            {"eid": eid, "new_data": merge_patch(current.get(eid), patch)}
            for eid, patch in patches.items()
        ]
        self.conn.execute(statement(("set-entity-data",), set_entity_data), rows)

    def promote(self, rule: PromotionRule, from_status: str, limit: int) -> list[AppliedChange]:
        """Select and move the entities in ``from_status`` that ``rule`` matches."""
        pg = self.postgres
        kind = self.kinds[rule.kind]
        stmt = statement(
            ("promote", pg, rule, from_status), lambda: promote_entities(pg, rule, from_status)
        )
        if self._pools is not None:
            # A promotion into a pool's status moves at most as many as there are tokens.
            for pool in self._pools.entered(kind.name, from_status, str(rule.to_status)):
                if pool.name.endswith("*"):
                    continue  # a family is claimed: validation refuses such a promotion
                held, capacity = self._pools.usage(pool)
                limit = min(limit, max(capacity - held, 0))
            if limit <= 0:
                return []
        params = {"limit": limit, "to_status": str(rule.to_status), "now": self.now}
        live_ids = [r[0] for r in driver_execute(self.conn, stmt, params)]
        self.inject("after-entities")
        if not live_ids:
            return []
        if rule.to_status in kind.terminal:
            child = self.kinds.child_of(kind.name)
            if child is not None and not _leaves_no_live_kernel(rule, child):
                self.children.move(kind, live_ids, child.end_status_for(rule.to_status))
                self.inject("after-kernels")
            driver_execute(
                self.conn,
                statement(("result", pg, kind, child), lambda: set_result(pg, kind, child)),
                {"ids": self._ids(live_ids)},
            )
        done = SchedulingResult.SUCCESS
        rows = [
            AppliedChange(eid, done, from_status, rule.to_status, None, None, kind=kind.name)
            for eid in live_ids
        ]
        self._moved_history.append((live_ids, rows[0]))
        return rows

    def _guard_entities(self, first: Change, kind: EntityKind, ids: list[str]) -> list[str]:
        """Compare-and-set the group's entities; return the ids still in ``from_status``."""
        pg = self.postgres
        params: dict[str, Any] = {
            "ids": self._ids(ids),
            "from_status": str(first.from_status),
            "of_kind": kind.name,
        }
        fenced = self.claim is not None and first.entity_id not in self._unclaimed
        solo = fenced and self.claim is not None and self.claim.solo
        if fenced and self.claim is not None:
            params["b_claim_token"] = self.claim.token
            if solo:
                params["b_claim_owner"] = self.claim.owner
        stmt: sa.Executable
        if first.changes_status:
            assert first.to_status is not None
            requeue, rule = first.requeue, first.status_info
            to = str(first.to_status)
            resets = tuple(sorted(b.name for b in kind.budgets if b.refills_on(to)))
            # status_info is a literal: varying texts keep only recently used statements.
            build = statement if rule is None else bounded_statement
            stmt = build(
                ("move-entities", pg, requeue, rule, resets, fenced, solo),
                lambda: move_entities(pg, requeue, rule, resets, fenced, solo),
            )
            params.update(to_status=str(first.to_status), now=self.now)
        elif (info := first.status_info) is not None:
            key = ("set-status-info", pg, info, fenced, solo)
            stmt = bounded_statement(key, lambda: set_status_info(pg, info, fenced, solo))
        elif first.try_count is TryCount.INCREMENT:
            stmt = statement(("count-try", pg, fenced, solo), lambda: count_try(pg, fenced, solo))
            params.update(self._handler_param())
        elif first.try_count is TryCount.RESET:
            stmt = statement(
                ("reset-tries", pg, fenced, solo), lambda: reset_tries(pg, fenced, solo)
            )
            params.update(self._handler_param())
        else:
            stmt = statement(
                ("lock-entities", pg, fenced, solo), lambda: lock_entities(pg, fenced, solo)
            )
            return [r[0] for r in driver_execute(self.conn, stmt, params)]
        live = [r[0] for r in driver_execute(self.conn, stmt, params)]
        if fenced:
            self._released.update(live)
        return live

    def end(
        self,
        ids: Sequence[str],
        *,
        strict: bool = True,
        reason: str | None = None,
        mode: str | None = None,
    ) -> list[TerminationOutcome]:
        """Move ``ids`` (any kind) as their kinds' termination rules (of ``mode``) say;
        return what happened.

        See :func:`drover.storage.ending.end_entities` (``strict``: the API's
        refusal of unknown ids, of kinds that end only with their parent, and of an
        unknown mode).
        """
        return end_entities(
            self.conn, ids, self.source, lambda changes: self._again().run(changes).stale,
            kinds=self.kinds, postgres=self.postgres, strict=strict, reason=reason, mode=mode,
        )  # fmt: skip

    def _again(self) -> Apply:
        """A new apply in this transaction, by the same source (its own history rows)."""
        pg, clock = self.postgres, self.clock
        return Apply(self.conn, self.source, self.now, postgres=pg, kinds=self.kinds, clock=clock)

    def finish(self, applied: list[AppliedChange], by: str | None = None) -> ApplyOutcome:
        """The rest of an apply (or a promotion) once its entities moved: history, news."""
        self.inject("before-history")
        self._write_history()
        self.inject("after-history")
        self.announce(applied, by)
        return ApplyOutcome(
            changes=tuple(applied),
            kernel_changes=self.children.kernel_changes,
            children_entered=frozenset(self.children.children_entered),
        )

    def _write_history(self) -> None:
        if not (self._moved_history or self._moved_rows or self._kept_rows):
            return
        pg = self.postgres
        at = history_time(self.conn, max(self.now, self.clock()))
        for ids, row in self._moved_history:
            driver_execute(
                self.conn,
                statement(("insert-history", pg), lambda: insert_history(pg)),
                {
                    "ids": self._ids(ids),
                    "handler": self.source,
                    "result": str(row.result),
                    "from_status": str(row.from_status),
                    "to_status": str(row.to_status),
                    "error_code": row.error_code,
                    "message": row.message,
                    "now": at,
                },
            )
        inserts = [self._history_row(r, at) for r in self._moved_rows]
        merges: list[dict[str, Any]] = []
        if self._kept_rows:
            kept = [r.entity_id for r in self._kept_rows]
            query = statement(("latest-history", pg), lambda: latest_history(pg))
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
                    merges.append({"hid": prev.id, "now": at, "msg": row.message})
                else:
                    # Never dated before the entity's latest row, merged into since
                    # it was written (by a coordinator whose clock is ahead).
                    latest_at = max(prev.created_at, prev.updated_at or 0) if prev else 0
                    inserts.append(self._history_row(row, max(at, latest_at)))
        if merges:
            self.conn.execute(MERGE_HISTORY, merges)
        write_history(self.conn, inserts, at=at)

    def _history_row(self, row: AppliedChange, at: float) -> dict[str, Any]:
        return history_row(
            row.entity_id, row.kind, self.source, str(row.result), str(row.from_status),
            str(row.to_status), row.error_code, row.message, at,
        )  # fmt: skip
