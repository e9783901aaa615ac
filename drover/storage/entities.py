"""Entities of any kind: creating them (from the API or in an apply), reading, linking, specs.

Sessions have their own faster module (:mod:`drover.storage.sessions`); this
one serves every kind the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import sqlalchemy as sa

from drover.model.checks import MAX_NAME_LENGTH, text_problem
from drover.model.creation import check_limits, check_new_entities, check_spec_patch
from drover.model.errors import InvalidSpecError, UnknownEntityError
from drover.model.ids import new_id
from drover.model.kinds import Kinds
from drover.model.values import Entity, NewEntity
from drover.storage._db import Database
from drover.storage._sql import ids_value, statement
from drover.storage.fetch import read_children_of, read_links_of
from drover.storage.journal import history_row, write_history
from drover.storage.notify import notify
from drover.storage.rows import entities_with_children
from drover.storage.schema import entities
from drover.storage.statements.apply import set_result
from drover.storage.statements.entities import (
    CHILDREN_OF_ENTITY,
    ENTITY_BY_ID,
    EXISTING_IDS,
    FINGERPRINT_ROWS,
    INSERT_ENTITIES,
    INSERT_RELATIONS,
    KINDS_OF,
    LATEST_CHANGE_ID,
    LATEST_HISTORY_ID,
    RELATION_EXISTS,
    SET_SPEC,
    entities_named,
    entities_of_kind,
    spec_of,
)

__all__ = [
    "API_SOURCE",
    "CREATED",
    "create_entities",
    "find_by_name",
    "get_entity",
    "insert_new_entities",
    "link",
    "list_entities",
    "merge_patch",
    "state_fingerprint",
    "update_spec",
]

#: ``handler`` of history rows written for requests made through the API or CLI.
API_SOURCE = "api"
#: ``result`` of the history row an entity's creation writes.
CREATED = "CREATED"

_ROW_KEYS = [col.name for col in entities.c]


def _with_children(conn: sa.Connection, query: sa.Select[Any], kinds: Kinds) -> list[Entity]:
    """The entities ``query`` selects (:data:`ENTITY_COLUMNS`), each with its children."""
    rows = conn.execute(query).all()
    ids = [r[0] for r in rows]
    children = read_children_of(conn, ids)
    return entities_with_children(rows, children, kinds, links=read_links_of(conn, ids))


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON merge-patch of ``target`` by ``patch`` (a new value; inputs untouched)."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _row(**values: Any) -> dict[str, Any]:
    # executemany needs every row to name the same columns.
    row = dict.fromkeys(_ROW_KEYS)
    row["requeues"] = 0
    row.update(values)
    return row


def insert_new_entities(
    conn: sa.Connection, news: Sequence[NewEntity], now: float, source: str, kinds: Kinds
) -> None:
    """Insert checked ``news`` (with children and links) and their CREATED history rows.

    ``news`` come from :func:`drover.model.creation.check_new_entities`: every
    status, name and spec is already as it will be stored.
    """
    rows: list[dict[str, Any]] = []
    child_rows: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    for new in news:
        kind = kinds[new.kind]
        status = new.status or kind.first_status
        rows.append(
            _row(
                id=new.id,
                kind=kind.name,
                parent_id=new.parent_id,
                name=new.name,
                status=status,
                status_changed_at=now,
                priority=new.priority,
                created_at=now,
                spec=new.spec,
            )
        )
        by = f" for {new.creator}" if new.creator else ""
        history.append(
            history_row(
                new.id, kind.name, source, CREATED, status, status, None,
                f"created by {source}{by}", now,
            )
        )  # fmt: skip
        child = kinds.child_of(kind.name)
        for spec in new.children:
            assert child is not None
            child_id, child_status = new_id(), spec.get("status") or child.first_status
            child_rows.append(
                _row(
                    id=child_id,
                    kind=child.name,
                    parent_id=new.id,
                    name=spec.get("name"),
                    status=child_status,
                    status_changed_at=now,
                    priority=spec.get("priority", 0),
                    created_at=now,
                    spec=spec.get("spec") or {},
                    agent_id=spec.get("agent_id"),
                )
            )
            history.append(
                history_row(
                    child_id, child.name, source, CREATED, child_status, child_status, None,
                    f"created by {source} with its {kind.name} {new.id}", now,
                )
            )  # fmt: skip
        links.extend({"source_id": new.id, "name": r, "target_id": t} for r, t in new.links)
    if rows:
        # Parents first: the children's foreign key is checked row by row.
        conn.execute(INSERT_ENTITIES, rows + child_rows)
        _results_of_ended(conn, child_rows + rows, kinds)
    if links:
        conn.execute(INSERT_RELATIONS, links)
    write_history(conn, history)


def _results_of_ended(conn: sa.Connection, rows: Sequence[dict[str, Any]], kinds: Kinds) -> None:
    """Set ``result`` of the entities created in a terminal status, by their kinds' rule.

    Children first, so that a parent's result is judged on its children as created.
    """
    ended: dict[str, list[str]] = {}
    for row in rows:
        if row["status"] in kinds[row["kind"]].terminal:
            ended.setdefault(row["kind"], []).append(row["id"])
    pg = conn.dialect.name == "postgresql"
    for name, ids in ended.items():
        kind, child = kinds[name], kinds.child_of(name)
        query = statement(("result", pg, kind, child), partial(set_result, pg, kind, child))
        conn.execute(query, {"ids": ids_value(ids, pg)})


async def create_entities(
    db: Database, news: Sequence[NewEntity], *, seeding: bool = False
) -> list[str]:
    """Check and create entities of any kind in one transaction (handler ``api``).

    One refused entity raises InvalidSpecError and nothing is written; a
    parent or link target that does not exist raises UnknownEntityError.
    """
    news = check_new_entities(news, db.kinds, seeding=seeding)
    if not news:
        return []
    now = db.clock.time()
    parents = {n.parent_id for n in news if n.parent_id is not None}
    targets = {t for n in news for _, t in n.links}
    created = {n.id for n in news}

    def work(conn: sa.Connection) -> list[str]:
        wanted = sorted((parents | targets) - created)
        if wanted:
            found = {r[0]: r[1] for r in conn.execute(KINDS_OF, {"ids": wanted})}
            for new in news:
                if new.parent_id is not None and new.parent_id not in created:
                    parent_kind = found.get(new.parent_id)
                    if parent_kind is None:
                        raise UnknownEntityError(new.parent_id)
                    if parent_kind != db.kinds[new.kind].parent:
                        raise InvalidSpecError(
                            f"parent {new.parent_id} is a {parent_kind}, not a "
                            f"{db.kinds[new.kind].parent}"
                        )
                for _, target in new.links:
                    if target not in created and target not in found:
                        raise UnknownEntityError(target)
        insert_new_entities(conn, news, now, API_SOURCE, db.kinds)
        # Coordinators listening (PostgreSQL) wake their handlers on commit.
        notify(conn, {"new": 1})
        return [n.id for n in news]

    return await db.write(work)


async def get_entity(db: Database, entity_id: str) -> Entity:
    """One entity of any kind with its children, or UnknownEntityError."""
    params = {"b_id": entity_id}

    def work(conn: sa.Connection) -> list[Entity]:
        rows = conn.execute(ENTITY_BY_ID, params).all()
        if not rows:
            return []
        children = conn.execute(CHILDREN_OF_ENTITY, params).all()
        links = read_links_of(conn, [entity_id])
        return entities_with_children(rows, children, db.kinds, links=links)

    found = await db.read(work)
    if not found:
        raise UnknownEntityError(entity_id)
    return found[0]


async def list_entities(
    db: Database, kind: str, *, statuses: Iterable[str] | None = None, limit: int | None = 100
) -> list[Entity]:
    """Entities of ``kind`` (with children), newest first."""
    wanted = None if statuses is None else [str(s) for s in statuses]
    query = entities_of_kind(kind, wanted, limit)

    return await db.read(lambda conn: _with_children(conn, query, db.kinds))


async def update_spec(db: Database, entity_id: str, patch: Mapping[str, Any]) -> Entity:
    """Merge-patch an entity's spec (desired state), recorded in history as handler ``api``."""
    patch = check_spec_patch(patch)
    now = db.clock.time()

    def work(conn: sa.Connection) -> None:
        query = statement(("spec-of", db.postgres), lambda: spec_of(db.postgres))
        row = conn.execute(query, {"b_id": entity_id}).first()
        if row is None:
            raise UnknownEntityError(entity_id)
        kind, status, spec = row
        merged = merge_patch(spec, patch)
        if kind in db.kinds:
            # The limits hold for a changed spec as for a new one (drover scale).
            check_limits(db.kinds[kind], merged)
        conn.execute(SET_SPEC, {"b_id": entity_id, "b_spec": merged})
        message = f"spec changed: {', '.join(sorted(patch))}"
        result = "SUCCESS"
        entry = history_row(entity_id, kind, API_SOURCE, result, status, status, None, message, now)
        write_history(conn, [entry])

    await db.write(work)
    return await get_entity(db, entity_id)


async def link(db: Database, source_id: str, relation: str, target_id: str) -> None:
    """Record ``source --relation--> target`` (idempotent)."""
    if not relation or len(relation) > 64:
        raise InvalidSpecError(f"relation name {relation!r} must be 1-64 characters")

    def work(conn: sa.Connection) -> None:
        found = {r[0] for r in conn.execute(EXISTING_IDS, {"ids": [source_id, target_id]})}
        for entity_id in (source_id, target_id):
            if entity_id not in found:
                raise UnknownEntityError(entity_id)
        wanted = {"b_source": source_id, "b_name": relation, "b_target": target_id}
        if conn.execute(RELATION_EXISTS, wanted).first() is None:
            conn.execute(
                INSERT_RELATIONS, {"source_id": source_id, "name": relation, "target_id": target_id}
            )

    await db.write(work)


async def state_fingerprint(db: Database) -> tuple[Any, ...]:
    """A value that changes whenever anything a tick can write has changed.

    New history rows, status changes, and any entity's status, tries,
    budgets, requeues, data, spec, result or status_info (the harness's
    "settled" test). Merges into an existing history row (a repeated
    SKIPPED) do not count: nothing new was learnt.
    """

    def work(conn: sa.Connection) -> tuple[Any, ...]:
        newest = conn.execute(LATEST_HISTORY_ID).scalar()
        changes = conn.execute(LATEST_CHANGE_ID).scalar()
        rows = conn.execute(FINGERPRINT_ROWS).all()
        digest = hash(tuple(repr(tuple(r)) for r in rows))
        return (newest, changes, len(rows), digest)

    return await db.read(work)


async def find_by_name(db: Database, kind: str, name: str) -> list[Entity]:
    """Entities of ``kind`` named ``name``, live ones first, then newest first."""
    if len(name) > MAX_NAME_LENGTH or text_problem(name):
        return []  # no entity has such a name; PostgreSQL would refuse the NUL
    query = entities_named(kind, name, db.kinds[kind].terminal)

    return await db.read(lambda conn: _with_children(conn, query, db.kinds))
