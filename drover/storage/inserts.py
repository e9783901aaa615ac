"""What the apply and the API write into ``entities``: new entities (with their children,
links and CREATED history rows), and JSON merge-patches.

Used by the entity writes (:mod:`drover.storage.entity_writes`), by the apply for
a handler's creations (:mod:`drover.storage.apply`) and by reports' data patches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import sqlalchemy as sa

from drover.model.ids import new_id
from drover.model.kinds import Kinds
from drover.model.values import NewEntity
from drover.storage._sql import ids_value, statement
from drover.storage.journal import history_row, write_history
from drover.storage.schema import entities, relations
from drover.storage.statements.apply import set_result

__all__ = ["API_SOURCE", "CREATED", "INSERT_RELATIONS", "insert_new_entities", "merge_patch"]

#: ``handler`` of history rows written for requests made through the API or CLI.
API_SOURCE = "api"
#: ``result`` of the history row an entity's creation writes.
CREATED = "CREATED"

#: Entity rows (executed with many rows, every row naming the same columns).
_INSERT_ENTITIES = sa.insert(entities)
#: Links ``source_id --name--> target_id`` (executed with one row or many).
INSERT_RELATIONS = sa.insert(relations)
_ROW_KEYS = [col.name for col in entities.c]


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
        conn.execute(_INSERT_ENTITIES, rows + child_rows)
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
