"""The statements of the apply (:class:`drover.storage.apply.Apply`), in the order it runs them.

1. the compare-and-set on the group's entities: :func:`move_entities`,
   :func:`count_try`, :func:`reset_tries` or :func:`lock_entities`, all
   guarded by :func:`entity_guard`; :func:`claim_state` says why one failed;
2. what the entities that passed bring along: :func:`place_kernels` and
   :func:`place_and_move_kernels` (a scheduler's placements),
   :func:`move_kernels` (their children), :func:`record_own_moves`,
   :func:`spend_budget`, :func:`set_result`, :func:`entity_data` and
   :func:`set_entity_data`;
3. the history: :func:`insert_history`, :func:`latest_history`,
   :data:`MERGE_HISTORY` and :data:`INSERT_HISTORY_ROWS`.

Ids are bound as one parameter (``:ids``, see :func:`drover.storage.statements.ids.ids_param`).
The executor builds each statement once per shape
(:func:`drover.storage._sql.statement`); the arguments of a builder are its
shape.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from drover.model.filters import slot_keys
from drover.model.kinds import FAILED_BECAUSE, STOP_REQUESTED, EntityKind
from drover.model.values import StatusInfoRule
from drover.storage.schema import coordinators, entities, scheduling_history, status_changes
from drover.storage.statements.children import (
    K,
    kernel_exists,
    kernel_status_in,
    latest_of_slot,
)
from drover.storage.statements.ids import checked_only, ids_param

__all__ = [
    "INSERT_HISTORY_ROWS",
    "MERGE_HISTORY",
    "SET_CHOSEN_RESULT",
    "change_values",
    "claim_state",
    "count_try",
    "descendant_of",
    "entity_data",
    "entity_guard",
    "incremented",
    "insert_history",
    "latest_history",
    "latest_history_ids",
    "lock_entities",
    "move_entities",
    "move_kernels",
    "place_and_move_kernels",
    "place_kernels",
    "record_own_moves",
    "reset_tries",
    "result_expression",
    "set_entity_data",
    "set_moved_results",
    "set_result",
    "set_status_info",
    "spend_budget",
    "status_info_expression",
    "without_keys",
]

e = entities
h = scheduling_history

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


# -- the compare-and-set -------------------------------------------------------------------


def entity_guard(
    postgres: bool, fenced: bool = False, solo: bool = False
) -> sa.ColumnElement[bool]:
    """The compare-and-set: the entities ``:ids`` of kind ``:of_kind`` still in ``:from_status``.

    ``fenced``: and still under our claim (``:b_claim_token``). ``solo`` (with
    ``fenced``): the claim is ``:b_claim_owner``'s solo lease, which no row
    carries: it must still hold, and no other coordinator may have claimed the
    entity since.
    """
    guard = sa.and_(
        ids_param(e.c.id, "ids", postgres),
        checked_only(e.c.status, postgres) == sa.bindparam("from_status"),
        checked_only(e.c.kind, postgres) == sa.bindparam("of_kind"),
    )
    if fenced and solo:
        c = coordinators
        lease = sa.exists().where(
            c.c.id == sa.bindparam("b_claim_owner"),
            c.c.solo_token == sa.bindparam("b_claim_token"),
        )
        guard = sa.and_(guard, e.c.claim_token.is_(None), lease)
    elif fenced:
        guard = sa.and_(guard, e.c.claim_token == sa.bindparam("b_claim_token"))
    return guard


def lock_entities(postgres: bool, fenced: bool = False, solo: bool = False) -> sa.Select[Any]:
    """The ids that pass :func:`entity_guard`, locked (PostgreSQL): a guard that writes nothing."""
    query = sa.select(e.c.id).where(entity_guard(postgres, fenced, solo))
    return query.with_for_update() if postgres else query


def claim_state(postgres: bool) -> sa.Select[Any]:
    """Status and claim token of the entities ``:ids`` (why a compare-and-set failed).

    Locked (``FOR SHARE``) on PostgreSQL: a ``fenced`` row names the entity's current
    status, and no other transaction may change that status (and write its own,
    earlier-numbered history row) before this one commits.
    """
    query = sa.select(e.c.id, e.c.status, e.c.claim_token, e.c.claim_owner).where(
        ids_param(e.c.id, "ids", postgres)
    )
    return query.with_for_update(read=True) if postgres else query


def without_keys(column: sa.Column[Any], keys: tuple[str, ...], postgres: bool) -> Any:
    """``column`` (a JSON object) without ``keys``."""
    if postgres:
        expression: Any = column
        for key in keys:
            expression = expression.op("-")(sa.literal(key))
        return expression
    return sa.func.json_remove(column, *[f'$."{key}"' for key in keys])


#: A fenced write drops the tick's claim in the same row write (no release UPDATE after).
_RELEASED: dict[str, Any] = {"claim_owner": None, "claim_token": None, "claim_expires": None}


def _guarded_update(values: dict[str, Any], postgres: bool, fenced: bool, solo: bool) -> sa.Update:
    """Set ``values`` where :func:`entity_guard` passes (a fenced write also drops the
    claim, :data:`_RELEASED`); returns the ids."""
    if fenced:
        values = {**values, **_RELEASED}
    guard = entity_guard(postgres, fenced, solo)
    return sa.update(e).where(guard).values(**values).returning(e.c.id)


def move_entities(
    postgres: bool,
    requeue: bool,
    rule: StatusInfoRule | None,
    resets: tuple[str, ...] = (),
    fenced: bool = False,
    solo: bool = False,
) -> sa.Update:
    """Move the entities that pass :func:`entity_guard` to ``:to_status`` at ``:now``.

    Every handler's tries and the result are forgotten; ``resets`` names the budgets a status
    change resets, ``requeue`` counts a requeue, and ``rule`` sets
    ``status_info``. Returns the ids moved.
    """
    values: dict[str, Any] = {
        "status": sa.bindparam("to_status"),
        "status_changed_at": sa.bindparam("now"),
        "tries": None,
        # A live entity has no result; one that ends gets it right after (set_result).
        "result": None,
    }
    if resets:
        values["budgets"] = without_keys(e.c.budgets, resets, postgres)
    if requeue:
        values["requeues"] = e.c.requeues + 1
    if rule is not None:
        values["status_info"] = status_info_expression(rule)
    return _guarded_update(values, postgres, fenced, solo)


def set_status_info(
    postgres: bool, rule: StatusInfoRule, fenced: bool = False, solo: bool = False
) -> sa.Update:
    """``status_info`` from ``rule`` where :func:`entity_guard` passes, the status kept (a
    named outcome into the status the entities are in); returns the ids."""
    return _guarded_update({"status_info": status_info_expression(rule)}, postgres, fenced, solo)


def incremented(column: sa.Column[Any], postgres: bool) -> sa.ColumnElement[Any]:
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


def count_try(postgres: bool, fenced: bool = False, solo: bool = False) -> sa.Update:
    """``tries[:handler] += 1`` where :func:`entity_guard` passes; returns the ids.

    ``:path`` is the SQLite JSON path of the handler.
    """
    return _guarded_update({"tries": incremented(e.c.tries, postgres)}, postgres, fenced, solo)


def reset_tries(postgres: bool, fenced: bool = False, solo: bool = False) -> sa.Update:
    """Forget ``tries[:handler]`` where :func:`entity_guard` passes; returns the ids."""
    expression: sa.ColumnElement[Any]
    if postgres:
        expression = e.c.tries.op("-")(sa.bindparam("handler", type_=sa.String))
    else:
        expression = sa.func.json_remove(e.c.tries, sa.bindparam("path", type_=sa.String))
    return _guarded_update({"tries": expression}, postgres, fenced, solo)


# -- what the entities that passed bring along ---------------------------------------------


def spend_budget(postgres: bool) -> sa.Update:
    """``budgets[:handler] += 1`` on the entities ``:ids`` (the budget's name as ``:handler``)."""
    expression = incremented(e.c.budgets, postgres)
    return sa.update(e).where(ids_param(e.c.id, "ids", postgres)).values(budgets=expression)


def record_own_moves(postgres: bool) -> sa.Insert:
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


def place_kernels(postgres: bool) -> sa.Update:
    """``agent_id = :agent_id`` on the children ``:ids`` still in ``:placeable`` (their
    kind's first status: a session's PENDING kernels)."""
    return (
        sa.update(e)
        .where(
            ids_param(e.c.id, "ids", postgres),
            checked_only(e.c.status, postgres) == sa.bindparam("placeable", type_=sa.String),
        )
        .values(agent_id=sa.bindparam("agent_id"))
    )


def place_and_move_kernels(child: EntityKind, target: str) -> sa.Update:
    """SQLite: set the agent of, and move, the eligible children (kernels) ``:kids``.

    ``child`` is the child kind of the entities placed (the kernels of sessions).
    """
    eligible = sorted(child.movable_to(target))
    return (
        sa.update(e)
        .where(ids_param(e.c.id, "kids", False), checked_only(e.c.status).in_(eligible))
        .values(
            agent_id=sa.bindparam("agent_id"),
            status=sa.bindparam("to_status"),
            status_changed_at=sa.bindparam("now"),
        )
    )


def change_values(from_status: sa.ColumnElement[Any]) -> tuple[sa.ColumnElement[Any], ...]:
    """source, from_status, to_status, message, created_at of a recorded status change."""
    return (
        sa.bindparam("source", type_=sa.String),
        from_status,
        sa.bindparam("to_status", type_=sa.String),
        sa.null(),
        sa.bindparam("now", type_=sa.Double),
    )


def descendant_of(postgres: bool, path: tuple[str, ...]) -> sa.ColumnElement[bool]:
    """``parent_id`` is one of the entities ``:ids`` (``path`` empty), or a descendant's.

    ``path`` gives, level by level, the status the entities in between are in
    (the status they were just moved to): ``("FAILED",)`` means "a FAILED
    child of ``:ids``", so the rows selected are grandchildren.
    """
    return _under(postgres, path, e.c.parent_id)


def _under(postgres: bool, path: tuple[str, ...], column: Any) -> sa.ColumnElement[bool]:
    if not path:
        return ids_param(column, "ids", postgres)
    between = e.alias(f"up{len(path)}")
    return column.in_(  # type: ignore[no-any-return]
        sa.select(between.c.id).where(
            _under(postgres, path[:-1], between.c.parent_id), between.c.status == path[-1]
        )
    )


def move_kernels(
    postgres: bool,
    child: EntityKind,
    target: str,
    path: tuple[str, ...] = (),
    *,
    info: bool = False,
) -> list[sa.Executable]:
    """Statements recording and moving the eligible children of the entities ``:ids``.

    With ``path``, the descendants that far down instead (see
    :func:`descendant_of`): a transition that ends children ends
    grandchildren too, each kind by its own rule. ``info``: set their
    ``status_info`` to ``:children_info``.

    The first statement records the status changes (its row count is the
    number of children moved); on SQLite a second one moves them. BEGIN
    IMMEDIATE already serialises writers there, so INSERT…SELECT then UPDATE
    with the same condition see the same rows. On PostgreSQL one
    data-modifying CTE locks the rows, updates them and records them from the
    old statuses it returns.
    """
    eligible = sorted(child.movable_to(target))
    where = sa.and_(descendant_of(postgres, path), e.c.status.in_(eligible))
    values: dict[str, Any] = {
        "status": sa.bindparam("to_status"),
        "status_changed_at": sa.bindparam("now"),
    }
    if info:
        values["status_info"] = sa.bindparam("children_info", type_=sa.Text)
    if child.resource_slots is not None and target == child.first_status:
        # Children placed on agents (kernels) that start over give the agent's capacity back.
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
            moved.c.id, moved.c.kind, moved.c.parent_id, *change_values(moved.c.status)
        )
        return [sa.insert(status_changes).from_select(_CHANGE_COLUMNS, source)]
    source = sa.select(e.c.id, e.c.kind, e.c.parent_id, *change_values(e.c.status)).where(where)
    return [
        sa.insert(status_changes).from_select(_CHANGE_COLUMNS, source),
        sa.update(e).where(where).values(**values),
    ]


def set_result(postgres: bool, kind: EntityKind, child: EntityKind | None) -> sa.Update:
    """``result`` of the entities ``:ids``, which have ended.

    SUCCESS iff the entity ended in a success status of its kind and no child
    ended otherwise; for sessions: TERMINATED, and every kernel TERMINATED
    with exit code 0. Else CANCELLED if a termination request reached it
    (``data`` has :data:`~drover.model.kinds.STOP_REQUESTED`), FAILURE otherwise.
    """
    return (
        sa.update(e)
        .where(ids_param(e.c.id, "ids", postgres))
        .values(result=result_expression(kind, child, postgres))
    )


def set_moved_results(
    postgres: bool, kind: EntityKind, child: EntityKind | None, path: tuple[str, ...]
) -> sa.Update:
    """``result`` of the entities of ``kind`` just ended in ``:to_status`` by their parent's
    (or an ancestor's) transition: the children of ``:ids`` (see :func:`descendant_of`)."""
    return (
        sa.update(e)
        .where(
            descendant_of(postgres, path),
            e.c.status == sa.bindparam("to_status"),
            e.c.result.is_(None),
        )
        .values(result=result_expression(kind, child, postgres))
    )


def result_expression(
    kind: EntityKind,
    child: EntityKind | None,
    postgres: bool,
    status: sa.ColumnElement[Any] | None = None,
) -> sa.ColumnElement[Any]:
    """SUCCESS, CANCELLED or FAILURE of an ended entity of ``kind`` (correlated to its row).

    FAILURE first if it was moved for a fault (``data`` has
    :data:`~drover.model.kinds.FAILED_BECAUSE`).

    The children counted follow :attr:`EntityKind.result_from`: all, the latest
    of each slot (a later sibling of the same slot supersedes a child), or none.
    ``status`` is the entity's status (default its column; an UPDATE that sets
    it passes the new value, since SET expressions read the old row).
    """
    status = e.c.status if status is None else status
    good: sa.ColumnElement[bool] = status.in_(sorted(kind.success_statuses))
    if child is not None and kind.result_from != "status":
        failed = [~kernel_status_in(child.success_statuses)]
        if child.exit_codes:
            failed += [K.c.exit_code.is_(None), K.c.exit_code != 0]
        counted: list[sa.ColumnElement[bool]] = [sa.or_(*failed)]
        if kind.result_from == "latest-child":
            counted.append(latest_of_slot(slot_keys(kind.result_slot)))
        good = sa.and_(good, ~kernel_exists(*counted))
    requested = _data_has(STOP_REQUESTED, postgres)
    # Moved for a fault (MoveTo.fails): a failure, whatever its children did or who
    # asked it to stop afterwards.
    faulted = _data_has(FAILED_BECAUSE, postgres)
    return sa.case(
        (faulted, "FAILURE"), (good, "SUCCESS"), (requested, "CANCELLED"), else_="FAILURE"
    )


#: ``result = :result`` of the entity ``:eid`` (a handler's choice; executed with many rows).
SET_CHOSEN_RESULT = (
    sa.update(e).where(e.c.id == sa.bindparam("eid")).values(result=sa.bindparam("result"))
)


def _data_has(key: str, postgres: bool) -> sa.ColumnElement[bool]:
    """The entity's ``data`` has the top-level ``key`` (JSON null counts as absent)."""
    if postgres:
        return e.c.data.op("->")(sa.literal(key)).is_not(None)
    return sa.func.json_extract(e.c.data, f'$."{key}"').is_not(None)


def entity_data(postgres: bool) -> sa.Select[Any]:
    """Id and ``data`` of the entities ``:ids`` (read before a merge-patch)."""
    return sa.select(e.c.id, e.c.data).where(ids_param(e.c.id, "ids", postgres))


def set_entity_data() -> sa.Update:
    """``data = :new_data`` of the entity ``:eid`` (executed with many rows)."""
    return (
        sa.update(e)
        .where(e.c.id == sa.bindparam("eid"))
        .values(data=sa.bindparam("new_data", type_=e.c.data.type))
    )


def status_info_expression(rule: StatusInfoRule) -> sa.ColumnElement[Any]:
    """``status_info`` for a status change from a rule, evaluated per entity in SQL."""
    whens: list[tuple[sa.ColumnElement[bool], Any]] = [
        (kernel_exists(kernel_status_in(statuses)), sa.literal(text))
        for statuses, text in rule.if_any_kernel
    ]
    default: Any = sa.literal(rule.default) if rule.default is not None else e.c.status_info
    if not whens:
        return default  # type: ignore[no-any-return]
    return sa.case(*whens, else_=default)


# -- the history ---------------------------------------------------------------------------


def insert_history(postgres: bool) -> sa.Insert:
    """One history row per entity ``:ids``, all alike."""
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


def latest_history_ids(postgres: bool) -> sa.Select[Any]:
    """The id of the latest history row of each entity ``:ids``."""
    return (
        sa.select(sa.func.max(h.c.id))
        .where(ids_param(h.c.entity_id, "ids", postgres))
        .group_by(h.c.entity_id)
    )


def latest_history(postgres: bool) -> sa.Select[Any]:
    """The latest history row of each entity ``:ids``."""
    return sa.select(
        h.c.id, h.c.entity_id, h.c.handler, h.c.result, h.c.from_status, h.c.to_status,
        h.c.error_code, h.c.created_at, h.c.updated_at,
    ).where(h.c.id.in_(latest_history_ids(postgres)))  # fmt: skip


#: A repeated outcome merged into the row ``:hid``: one more attempt, the newest message.
MERGE_HISTORY = (
    sa.update(h)
    .where(h.c.id == sa.bindparam("hid"))
    .values(
        attempts=h.c.attempts + 1,
        updated_at=sa.bindparam("now"),
        message=sa.bindparam("msg"),
    )
)

#: History rows written one by one (executed with many rows, one per outcome).
INSERT_HISTORY_ROWS = sa.insert(h)
