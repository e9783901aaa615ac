"""Entities of any kind: creating them (from the API or in an apply), reading, linking, specs.

Sessions have their own faster module (:mod:`drover.storage.sessions`); this
one serves every kind the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from drover.model.errors import InvalidSpecError, UnknownSessionError
from drover.model.ids import new_id
from drover.model.kinds import Kinds
from drover.model.values import Entity, NewEntity
from drover.storage._db import Database
from drover.storage.fetch import read_children_of
from drover.storage.notify import notify
from drover.storage.rows import ENTITY_COLUMNS, entities_with_children
from drover.storage.schema import entities, relations, scheduling_history

__all__ = [
    "API_SOURCE",
    "CREATED",
    "check_new_entities",
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

e = entities
#: ``handler`` of history rows written for requests made through the API or CLI.
API_SOURCE = "api"
#: ``result`` of the history row an entity's creation writes.
CREATED = "CREATED"

_ROW_KEYS = [col.name for col in e.c]


def _with_children(conn: sa.Connection, query: sa.Select[Any]) -> list[Entity]:
    """The entities ``query`` selects (:data:`ENTITY_COLUMNS`), each with its children."""
    rows = conn.execute(query).all()
    return entities_with_children(rows, read_children_of(conn, [r[0] for r in rows]))


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


def _check_json(value: Any, where: str) -> None:
    """Refuse what the two databases would store differently (NaN, NUL bytes, non-str keys)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidSpecError(f"{where}: {value!r} is not a finite number")
    if isinstance(value, str) and "\x00" in value:
        raise InvalidSpecError(f"{where}: text may not contain NUL bytes")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidSpecError(f"{where}: keys must be text, not {key!r}")
            _check_json(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_json(item, f"{where}[{index}]")
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise InvalidSpecError(f"{where}: {type(value).__name__} is not JSON")


def check_new_entities(news: Sequence[NewEntity], kinds: Kinds) -> None:
    """Refuse an impossible creation with one line naming the problem (nothing written)."""
    for new in news:
        try:
            kind = kinds[new.kind]
        except Exception as error:
            raise InvalidSpecError(str(error)) from None
        if new.status is not None and new.status not in kind.status_names:
            raise InvalidSpecError(
                f"status {new.status!r} is not a status of kind {kind.name!r}; "
                f"its statuses are {list(kind.status_names)}"
            )
        if kind.parent is not None and new.parent_id is None:
            raise InvalidSpecError(f"kind {kind.name!r} is a child of {kind.parent!r}: give parent")
        if kind.parent is None and new.parent_id is not None:
            raise InvalidSpecError(f"kind {kind.name!r} has no parent kind; it takes no parent")
        if not isinstance(new.spec, Mapping):
            raise InvalidSpecError(f"spec of a new {kind.name} must be a mapping")
        _check_json(dict(new.spec), "spec")
        if not -(2**31) <= new.priority < 2**31:
            raise InvalidSpecError(f"priority {new.priority} does not fit a 32-bit integer")
        if new.name is not None and (len(new.name) > 255 or "\x00" in new.name):
            raise InvalidSpecError("name must be at most 255 characters, without NUL bytes")
        child = kinds.child_of(kind.name)
        for index, spec in enumerate(new.children):
            child_kind = spec.get("kind", child.name if child is not None else None)
            if child is None or child_kind != child.name:
                raise InvalidSpecError(
                    f"child {index} of a new {kind.name}: kind {child_kind!r} is not "
                    f"{kind.name!r}'s child kind ({child.name if child else 'none'})"
                )
            status = spec.get("status")
            if status is not None and status not in child.status_names:
                raise InvalidSpecError(
                    f"child {index}: status {status!r} is not a status of kind {child.name!r}"
                )
            _check_json(dict(spec.get("spec") or {}), f"child {index} spec")
        for relation, _target in new.links:
            if not relation or len(relation) > 64:
                raise InvalidSpecError(f"relation name {relation!r} must be 1-64 characters")


def _row(**values: Any) -> dict[str, Any]:
    row = dict.fromkeys(_ROW_KEYS)
    row["requeues"] = 0
    row.update(values)
    return row


def _child_status(spec: Mapping[str, Any], parent: str, statuses: Sequence[str]) -> str:
    """A new child's status: its own, else its parent's when the child kind has it, else first."""
    given = spec.get("status")
    if given is not None:
        return str(given)
    return parent if parent in statuses else statuses[0]


def insert_new_entities(
    conn: sa.Connection, news: Sequence[NewEntity], now: float, source: str, kinds: Kinds
) -> None:
    """Insert ``news`` (with children and links) and their CREATED history rows."""
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
                status=str(status),
                status_changed_at=now,
                priority=new.priority,
                created_at=now,
                spec=dict(new.spec),
            )
        )
        child = kinds.child_of(kind.name)
        for spec in new.children:
            assert child is not None
            child_rows.append(
                _row(
                    id=new_id(),
                    kind=child.name,
                    parent_id=new.id,
                    status=str(_child_status(spec, str(status), child.status_names)),
                    status_changed_at=now,
                    priority=0,
                    created_at=now,
                    spec=dict(spec.get("spec") or {}),
                )
            )
        by = f" for {new.creator}" if new.creator else ""
        history.append(
            {
                "entity_id": new.id,
                "kind": kind.name,
                "handler": source,
                "result": CREATED,
                "from_status": str(status),
                "to_status": str(status),
                "error_code": None,
                "message": f"created by {source}{by}",
                "attempts": 1,
                "created_at": now,
                "updated_at": now,
            }
        )
        links.extend({"source_id": new.id, "name": r, "target_id": t} for r, t in new.links)
    if rows:
        conn.execute(sa.insert(e), rows + child_rows)
    if links:
        conn.execute(sa.insert(relations), links)
    if history:
        conn.execute(sa.insert(scheduling_history), history)


async def create_entities(db: Database, news: Sequence[NewEntity]) -> list[str]:
    """Create entities of any kind in one transaction (handler ``api``); return their ids."""
    check_new_entities(news, db.kinds)
    now = db.clock.time()
    parents = {n.parent_id for n in news if n.parent_id is not None}
    targets = {t for n in news for _, t in n.links}
    created = {n.id for n in news}

    def work(conn: sa.Connection) -> list[str]:
        wanted = sorted((parents | targets) - created)
        if wanted:
            found = {
                r[0]: r[1]
                for r in conn.execute(sa.select(e.c.id, e.c.kind).where(e.c.id.in_(wanted)))
            }
            for new in news:
                if new.parent_id is not None and new.parent_id not in created:
                    parent_kind = found.get(new.parent_id)
                    if parent_kind is None:
                        raise UnknownSessionError(new.parent_id)
                    if parent_kind != db.kinds[new.kind].parent:
                        raise InvalidSpecError(
                            f"parent {new.parent_id} is a {parent_kind}, not a "
                            f"{db.kinds[new.kind].parent}"
                        )
                for _, target in new.links:
                    if target not in created and target not in found:
                        raise UnknownSessionError(target)
        insert_new_entities(conn, news, now, API_SOURCE, db.kinds)
        notify(conn, {"new": 1})
        return [n.id for n in news]

    return await db.write(work)


async def get_entity(db: Database, entity_id: str) -> Entity:
    """One entity of any kind with its children, or UnknownSessionError."""
    query = sa.select(*ENTITY_COLUMNS).where(e.c.id == entity_id)

    def work(conn: sa.Connection) -> list[Entity]:
        rows = conn.execute(query).all()
        if not rows:
            return []
        children = conn.execute(sa.select(*ENTITY_COLUMNS).where(e.c.parent_id == entity_id)).all()
        return entities_with_children(rows, children)

    found = await db.read(work)
    if not found:
        raise UnknownSessionError(entity_id)
    return found[0]


async def list_entities(
    db: Database, kind: str, *, statuses: Iterable[str] | None = None, limit: int | None = 100
) -> list[Entity]:
    """Entities of ``kind`` (with children), newest first."""
    query = sa.select(*ENTITY_COLUMNS).where(e.c.kind == kind)
    if statuses is not None:
        query = query.where(e.c.status.in_([str(s) for s in statuses]))
    query = query.order_by(e.c.created_at.desc(), e.c.id.desc())
    if limit is not None:
        query = query.limit(limit)

    return await db.read(lambda conn: _with_children(conn, query))


async def update_spec(db: Database, entity_id: str, patch: Mapping[str, Any]) -> Entity:
    """Merge-patch an entity's spec (desired state), recorded in history as handler ``api``."""
    _check_json(dict(patch), "spec patch")
    now = db.clock.time()

    def work(conn: sa.Connection) -> None:
        query = sa.select(e.c.kind, e.c.status, e.c.spec).where(e.c.id == entity_id)
        if db.postgres:
            query = query.with_for_update()
        row = conn.execute(query).first()
        if row is None:
            raise UnknownSessionError(entity_id)
        kind, status, spec = row
        conn.execute(sa.update(e).where(e.c.id == entity_id).values(spec=merge_patch(spec, patch)))
        keys = ", ".join(sorted(patch))
        conn.execute(
            sa.insert(scheduling_history).values(
                entity_id=entity_id,
                kind=kind,
                handler=API_SOURCE,
                result="SUCCESS",
                from_status=status,
                to_status=status,
                error_code=None,
                message=f"spec changed: {keys}",
                attempts=1,
                created_at=now,
                updated_at=now,
            )
        )

    await db.write(work)
    return await get_entity(db, entity_id)


async def link(db: Database, source_id: str, relation: str, target_id: str) -> None:
    """Record ``source --relation--> target`` (idempotent)."""
    if not relation or len(relation) > 64:
        raise InvalidSpecError(f"relation name {relation!r} must be 1-64 characters")

    def work(conn: sa.Connection) -> None:
        found = {
            r[0] for r in conn.execute(sa.select(e.c.id).where(e.c.id.in_([source_id, target_id])))
        }
        for entity_id in (source_id, target_id):
            if entity_id not in found:
                raise UnknownSessionError(entity_id)
        exists = conn.execute(
            sa.select(relations.c.name).where(
                relations.c.source_id == source_id,
                relations.c.name == relation,
                relations.c.target_id == target_id,
            )
        ).first()
        if exists is None:
            conn.execute(
                sa.insert(relations).values(source_id=source_id, name=relation, target_id=target_id)
            )

    await db.write(work)


async def state_fingerprint(db: Database) -> tuple[Any, ...]:
    """A value that changes whenever anything a tick can write has changed.

    New history rows, status changes, and any entity's status, tries,
    budgets, requeues, data, spec, result or status_info (the harness's
    "settled" test). Merges into an existing history row (a repeated
    SKIPPED) do not count: nothing new was learnt.
    """
    from drover.storage.schema import status_changes

    columns = (
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
    )

    def work(conn: sa.Connection) -> tuple[Any, ...]:
        newest = conn.execute(sa.select(sa.func.max(scheduling_history.c.id))).scalar()
        changes = conn.execute(sa.select(sa.func.max(status_changes.c.id))).scalar()
        rows = conn.execute(sa.select(*columns).order_by(e.c.id)).all()
        digest = hash(tuple(repr(tuple(r)) for r in rows))
        return (newest, changes, len(rows), digest)

    return await db.read(work)


async def find_by_name(db: Database, kind: str, name: str) -> list[Entity]:
    """Entities of ``kind`` named ``name``, live ones first, then newest first."""
    query = sa.select(*ENTITY_COLUMNS).where(e.c.kind == kind, e.c.name == name)
    terminal = sorted(db.kinds[kind].terminal)
    query = query.order_by(e.c.status.in_(terminal), e.c.created_at.desc(), e.c.id.desc())

    return await db.read(lambda conn: _with_children(conn, query))
