"""The statements of :mod:`drover.storage.reports`: pushed reports on entities of any kind.

:func:`reported_entities` reads the entities' current state (locked on
PostgreSQL), :func:`apply_reports` moves them, :data:`SET_RUNTIME` keeps a
backend's bookkeeping and :data:`INSERT_STATUS_CHANGES` records the changes.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from drover.model.kinds import EntityKind
from drover.storage.schema import entities, status_changes
from drover.storage.statements.apply import result_expression
from drover.storage.statements.ids import checked_only, ids_param

__all__ = [
    "CHANGE_ARRAYS",
    "INSERT_STATUS_CHANGES",
    "SET_RUNTIME",
    "apply_reports",
    "insert_status_changes",
    "reported_entities",
]

e = entities


def reported_entities(postgres: bool, kind: str | None = None) -> sa.Select[Any]:
    """Id, kind, parent and status of the entities ``:ids`` (locked on PostgreSQL);
    of ``kind`` only, when given."""
    query = sa.select(e.c.id, e.c.kind, e.c.parent_id, e.c.status).where(
        ids_param(e.c.id, "ids", postgres)
    )
    if kind is not None:
        query = query.where(checked_only(e.c.kind, postgres) == kind)
    return query.with_for_update() if postgres else query


def apply_reports(postgres: bool, moving: bool = True, ends: EntityKind | None = None) -> sa.Update:
    """Move the entities ``:ids`` from ``:from_status`` as their reports say.

    ``moving``: to ``:to_status`` at ``:now``, forgetting tries and result (a
    live entity has none; one that ends gets it right after); else the status
    is kept. ``ends``: the entities, of that kind without children, end, and
    their result is set in the same statement (a kernel's row is written once).
    ``:exit_code`` and ``:info`` (the ``status_info``) when not null; the agent
    cleared when ``:clear_agent``.
    """
    values: dict[str, Any] = {
        "exit_code": sa.func.coalesce(sa.bindparam("exit_code", type_=sa.Integer), e.c.exit_code),
        "status_info": sa.func.coalesce(sa.bindparam("info", type_=sa.Text), e.c.status_info),
        "agent_id": sa.case(
            (sa.bindparam("clear_agent", type_=sa.Boolean), sa.null()), else_=e.c.agent_id
        ),
    }
    if moving:
        values.update(
            status=sa.bindparam("to_status"),
            status_changed_at=sa.bindparam("now", type_=sa.Double),
            tries=None,
            result=None
            if ends is None
            else result_expression(
                ends, None, postgres, sa.bindparam("to_status", type_=sa.String)
            ),
        )
    return (
        sa.update(e)
        .where(
            ids_param(e.c.id, "ids", postgres),
            checked_only(e.c.status, postgres) == sa.bindparam("from_status"),
        )
        .values(**values)
    )


#: ``runtime = :rt`` of the entity ``:kid`` (executed with many rows).
SET_RUNTIME = (
    sa.update(e)
    .where(e.c.id == sa.bindparam("kid"))
    .values(runtime=sa.bindparam("rt", type_=e.c.runtime.type))
)

#: Status changes recorded one by one (executed with many rows).
INSERT_STATUS_CHANGES = sa.insert(status_changes)


#: The columns of ``status_changes`` that :func:`insert_status_changes` takes as arrays.
CHANGE_ARRAYS = ("entity_id", "kind", "parent_id", "source", "from_status", "to_status", "message")


def insert_status_changes() -> sa.Insert:
    """Many status changes as ONE statement (PostgreSQL): ``INSERT … SELECT`` from
    ``unnest`` of one array per column in :data:`CHANGE_ARRAYS` (bound as ``:<column>s``),
    with ``:created_at`` the same for every row.

    asyncpg runs an executemany as one execution per row: a backend's report
    of a thousand kernels would be a thousand statements.
    """
    text_array = postgresql.ARRAY(sa.Text())
    rows = (
        sa.func.unnest(*(sa.bindparam(f"{name}s", type_=text_array) for name in CHANGE_ARRAYS))
        .table_valued(*CHANGE_ARRAYS)
        .render_derived()
    )
    created_at = sa.bindparam("created_at", type_=sa.Double)
    return sa.insert(status_changes).from_select(
        [*CHANGE_ARRAYS, "created_at"], sa.select(*(rows.c[c] for c in CHANGE_ARRAYS), created_at)
    )
