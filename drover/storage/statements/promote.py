"""The statements of a promotion: the entities a rule matches, and moving them.

:func:`promotion_candidates` is the one definition of "the entities in these
statuses that a :class:`~drover.model.promotion.PromotionRule` matches, in
fetch order"; the probe (:func:`promotion_probe`) and the update
(:func:`promote_entities`) are both built from it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from drover.model.promotion import PromotionRule
from drover.model.rules import MATCH_CONDITIONS
from drover.storage.inserts import CREATED
from drover.storage.schema import FETCH_ORDER, entities, scheduling_history, status_changes
from drover.storage.statements.apply import status_info_expression
from drover.storage.statements.children import K, kernel_status_in, match_condition
from drover.storage.statements.ids import checked_only

__all__ = [
    "WATERMARKS",
    "promote_entities",
    "promotion_candidates",
    "promotion_probe",
    "recent_promotion_probe",
]

e = entities


def promotion_candidates(rule: PromotionRule, statuses: Iterable[str]) -> sa.Select[Any]:
    """Ids of the entities of ``rule.kind`` in ``statuses`` that ``rule`` matches, in fetch order.

    The match is :func:`drover.storage.statements.children.match_condition` (ALL / ANY /
    NOT_ANY over the entity's children), correlated to this select's own
    ``entities``.
    """
    wanted = sorted(str(s) for s in statuses)
    in_status = e.c.status == wanted[0] if len(wanted) == 1 else e.c.status.in_(wanted)
    return (
        sa.select(e.c.id)
        .where(e.c.kind == rule.kind, in_status, match_condition(rule.match, rule.kernel_statuses))
        .order_by(*FETCH_ORDER)
    )


def promotion_probe(rule: PromotionRule) -> sa.Select[Any]:
    """One entity ``rule`` would promote, if there is any (any one: the probe only asks whether).

    The fetch order is dropped: across several statuses it would make the
    database sort every match to return the first.
    """
    return promotion_candidates(rule, rule.from_statuses).order_by(None).limit(1)


#: The largest ids of ``status_changes`` and ``scheduling_history`` (0 when empty): two
#: primary-key lookups (:mod:`drover.storage.watermarks`).
WATERMARKS = sa.select(
    sa.select(sa.func.coalesce(sa.func.max(status_changes.c.id), 0)).scalar_subquery(),
    sa.select(sa.func.coalesce(sa.func.max(scheduling_history.c.id), 0)).scalar_subquery(),
)


def recent_promotion_probe(rule: PromotionRule, child_kind: str | None) -> sa.Select[Any]:
    """:func:`promotion_probe` among the entities touched by the rows recorded after
    ``:changes_after`` (a ``status_changes`` id) and ``:history_after`` (a
    ``scheduling_history`` id).

    Whether an entity matches a rule depends only on its own status and its
    children's (of kind ``child_kind``), and every change of either is
    recorded: an entity's move or creation writes a history row, a child's
    move a ``status_changes`` row naming its parent, a child's creation (with
    its parent or later) a CREATED history row of its own. So an entity that
    became a candidate after those rows is named by a later row, and only by
    a row of a change that can make a candidate: an entity entering one of
    the rule's statuses from outside them (or created in one, where the rule
    can match an entity without children); a child entering the checked
    statuses (ANY, ALL) or leaving them (NOT_ANY); a child created where it
    can make its parent match. The probe reads
    those rows by primary key and looks each entity up by id: its cost grows
    with what changed, not with how many entities wait in the rule's statuses.

    The entity's ``kind`` and ``status`` are compared through an expression
    (``|| ''``), so that SQLite's planner drives the probe from the recent
    ids rather than scanning the statuses' index.
    """
    changes_after = sa.bindparam("changes_after", type_=sa.BigInteger)
    history_after = sa.bindparam("history_after", type_=sa.BigInteger)
    c, h = status_changes, scheduling_history
    condition = MATCH_CONDITIONS[rule.match]
    checked = sorted(str(s) for s in rule.kernel_statuses)
    wanted = sorted(str(s) for s in rule.from_statuses)
    # A child's move can make a candidate by entering the checked statuses (some kernel
    # in them; none outside them) or by leaving them (none in them).
    moves: list[sa.ColumnElement[bool]] = []
    if condition.some_in or condition.none_outside:
        moves.append(c.c.to_status.in_(checked))
    if condition.none_in:
        moves.append(c.c.from_status.in_(checked))
    # A move from one of the rule's statuses to another changes nothing the rule looks
    # at (the entity was in its statuses at the last check, its children as they were):
    # only entering them from elsewhere, or being created, can make a candidate. The
    # bulk of a busy table's rows (PENDING -> SCHEDULED -> ... for an early-status
    # rule) are such moves.
    entered = sa.or_(h.c.from_status.not_in(wanted), h.c.result == CREATED)
    if child_kind is not None and (condition.some_in or condition.needs_kernels):
        # A match needs a child (one in the checked statuses, or any for NOT_ANY), and
        # every child is created with a CREATED row of its own, read below: an entity's
        # own CREATED row cannot name a candidate those rows do not. A thousand sessions
        # just submitted are then not looked up by every empty probe.
        entered = h.c.from_status.not_in(wanted)
    # Only the rule's own kind's rows: a kernel's CREATED row (to_status PENDING, a
    # session status's name too) names no candidate, and looking its id up costs.
    branches: list[sa.Select[Any]] = [
        sa.select(h.c.entity_id).where(
            h.c.id > history_after, h.c.kind == rule.kind, h.c.to_status.in_(wanted), entered
        )
    ]
    if moves:
        # The status test first: SQLite evaluates the terms in this order, and it
        # rejects most rows read (every move within the lifecycle's live statuses),
        # sparing them the other columns' reads (measured: 10-20% of this scan).
        branches.append(
            sa.select(c.c.parent_id).where(
                c.c.id > changes_after,
                sa.or_(*moves),
                c.c.parent_id.is_not(None),
                *([c.c.kind == child_kind] if child_kind is not None else []),
            )
        )
    if child_kind is not None:
        # A child created in the checked statuses can make its parent match ANY or ALL;
        # one created outside them, NOT_ANY (the parent had no children before or
        # was created with it).
        born: list[sa.ColumnElement[bool]] = []
        if condition.some_in or condition.none_outside:
            born.append(h.c.to_status.in_(checked))
        if condition.none_in:
            born.append(h.c.to_status.not_in(checked))
        created = entities.alias("created")
        branches.append(
            sa.select(created.c.parent_id)
            .join(h, h.c.entity_id == created.c.id)
            .where(
                h.c.id > history_after,
                h.c.kind == child_kind,
                h.c.result == CREATED,
                sa.or_(*born),
            )
        )
    return (
        sa.select(e.c.id)
        .where(
            e.c.id.in_(sa.union_all(*branches)),
            checked_only(e.c.kind) == rule.kind,
            checked_only(e.c.status).in_(wanted),
            match_condition(rule.match, rule.kernel_statuses),
        )
        .limit(1)
    )


def _matching_child_info(rule: PromotionRule) -> sa.ScalarSelect[Any]:
    """The ``status_info`` of the entity's child in ``rule.kernel_statuses`` that changed
    last and has one (correlated to the promoted row)."""
    return (
        sa.select(K.c.status_info)
        .where(
            K.c.parent_id == e.c.id,
            kernel_status_in(rule.kernel_statuses),
            K.c.status_info.is_not(None),
        )
        .order_by(K.c.status_changed_at.desc(), K.c.id.desc())
        .limit(1)
        .scalar_subquery()
    )


def promote_entities(postgres: bool, rule: PromotionRule, from_status: str) -> sa.Update:
    """Move the entities in ``from_status`` that ``rule`` matches, up to ``:limit``, in fetch order.

    To ``:to_status`` at ``:now``, forgetting every handler's tries and setting
    ``status_info`` by the rule's :class:`~drover.model.values.StatusInfoRule`.
    On PostgreSQL the selection locks its rows and skips those another
    transaction holds. Returns the ids moved.
    """
    chosen = (
        promotion_candidates(rule, (from_status,))
        .limit(sa.bindparam("limit"))
        # Its own FROM: not correlated to the table being updated.
        .correlate(None)
    )
    where: sa.ColumnElement[bool]
    if postgres:
        # A materialized CTE runs its LIMIT once: as an IN (subquery) PostgreSQL may
        # rescan the locking subquery and move more than :limit rows.
        picked = (
            chosen.with_for_update(skip_locked=True)
            .cte("chosen")
            .prefix_with("MATERIALIZED", dialect="postgresql")
        )
        where = e.c.id.in_(sa.select(picked.c.id))
    else:
        where = e.c.id.in_(chosen)
    values: dict[str, Any] = {
        "status": sa.bindparam("to_status"),
        "status_changed_at": sa.bindparam("now"),
        "tries": None,
        # A live entity has no result; one that ends gets it right after.
        "result": None,
    }
    if rule.status_info is not None:
        values["status_info"] = status_info_expression(rule.status_info)
    if rule.copy_child_info:
        values["status_info"] = sa.func.coalesce(
            _matching_child_info(rule), values.get("status_info", e.c.status_info)
        )
    return (
        sa.update(e).where(where, e.c.status == str(from_status)).values(**values).returning(e.c.id)
    )
