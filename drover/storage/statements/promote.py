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
from drover.storage.schema import entities
from drover.storage.statements.apply import status_info_expression
from drover.storage.statements.children import match_condition
from drover.storage.statements.sessions import FETCH_ORDER

__all__ = ["promote_entities", "promotion_candidates", "promotion_probe"]

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
    }
    if rule.status_info is not None:
        values["status_info"] = status_info_expression(rule.status_info)
    return (
        sa.update(e).where(where, e.c.status == str(from_status)).values(**values).returning(e.c.id)
    )
