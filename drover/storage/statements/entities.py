"""The statements of :mod:`drover.storage.entities`: entities of any kind, their links and specs.

Creating (:data:`INSERT_ENTITIES`, :data:`INSERT_RELATIONS`, checked with
:data:`KINDS_OF`), reading (:data:`ENTITY_BY_ID`, :data:`CHILDREN_OF_ENTITY`,
:func:`entities_of_kind`, :func:`entities_named`), changing a spec
(:func:`spec_of`, :data:`SET_SPEC`), linking (:data:`EXISTING_IDS`,
:data:`RELATION_EXISTS`) and the harness's fingerprint
(:data:`LATEST_HISTORY_ID`, :data:`LATEST_CHANGE_ID`, :data:`FINGERPRINT_ROWS`).
Rows are read as :data:`~drover.storage.rows.ENTITY_COLUMNS`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from drover.storage.rows import ENTITY_COLUMNS
from drover.storage.schema import entities, relations, scheduling_history, status_changes

__all__ = [
    "CHILDREN_OF_ENTITY",
    "ENTITY_BY_ID",
    "EXISTING_IDS",
    "FINGERPRINT_ROWS",
    "INSERT_ENTITIES",
    "INSERT_RELATIONS",
    "KINDS_OF",
    "LATEST_CHANGE_ID",
    "LATEST_HISTORY_ID",
    "RELATION_EXISTS",
    "SET_SPEC",
    "entities_named",
    "entities_of_kind",
    "spec_of",
]

e = entities

#: Entity rows (executed with many rows, every row naming the same columns).
INSERT_ENTITIES = sa.insert(e)
#: Links ``source_id --name--> target_id`` (executed with one row or many).
INSERT_RELATIONS = sa.insert(relations)
#: Id and kind of the entities among ``:ids`` (a list) that exist.
KINDS_OF = sa.select(e.c.id, e.c.kind).where(e.c.id.in_(sa.bindparam("ids", expanding=True)))
#: The ids among ``:ids`` (a list) that exist.
EXISTING_IDS = sa.select(e.c.id).where(e.c.id.in_(sa.bindparam("ids", expanding=True)))

#: The entity ``:b_id``.
ENTITY_BY_ID = sa.select(*ENTITY_COLUMNS).where(e.c.id == sa.bindparam("b_id"))
#: The children of the entity ``:b_id``.
CHILDREN_OF_ENTITY = sa.select(*ENTITY_COLUMNS).where(e.c.parent_id == sa.bindparam("b_id"))


def entities_of_kind(
    kind: str, statuses: Iterable[str] | None, limit: int | None
) -> sa.Select[Any]:
    """Entities of ``kind`` in ``statuses`` (``None``: any), newest first, at most ``limit``."""
    query = sa.select(*ENTITY_COLUMNS).where(e.c.kind == kind)
    if statuses is not None:
        query = query.where(e.c.status.in_(list(statuses)))
    query = query.order_by(e.c.created_at.desc(), e.c.id.desc())
    if limit is not None:
        query = query.limit(limit)
    return query


def entities_named(kind: str, name: str, terminal: Iterable[str]) -> sa.Select[Any]:
    """Entities of ``kind`` named ``name``: those not in ``terminal`` first, then newest first."""
    query = sa.select(*ENTITY_COLUMNS).where(e.c.kind == kind, e.c.name == name)
    ended = e.c.status.in_(sorted(terminal))
    return query.order_by(ended, e.c.created_at.desc(), e.c.id.desc())


def spec_of(postgres: bool) -> sa.Select[Any]:
    """Kind, status and spec of the entity ``:b_id``, locked on PostgreSQL (before a patch)."""
    query = sa.select(e.c.kind, e.c.status, e.c.spec).where(e.c.id == sa.bindparam("b_id"))
    return query.with_for_update() if postgres else query


#: ``spec = :b_spec`` of the entity ``:b_id``.
SET_SPEC = (
    sa.update(e)
    .where(e.c.id == sa.bindparam("b_id"))
    .values(spec=sa.bindparam("b_spec", type_=e.c.spec.type))
)

#: The link ``:b_source --:b_name--> :b_target``, if it exists.
RELATION_EXISTS = sa.select(relations.c.name).where(
    relations.c.source_id == sa.bindparam("b_source"),
    relations.c.name == sa.bindparam("b_name"),
    relations.c.target_id == sa.bindparam("b_target"),
)

#: The newest scheduling history row's id.
LATEST_HISTORY_ID = sa.select(sa.func.max(scheduling_history.c.id))
#: The newest status change's id.
LATEST_CHANGE_ID = sa.select(sa.func.max(status_changes.c.id))
#: Every entity's columns a tick can write, in id order (the harness's "settled" test).
FINGERPRINT_ROWS = sa.select(
    e.c.id,
    e.c.status,
    e.c.tries,
    e.c.budgets,
    e.c.requeues,
    e.c.data,
    e.c.spec,
    e.c.result,
    e.c.status_info,
    e.c.exit_code,
).order_by(e.c.id)
