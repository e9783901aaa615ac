"""Rows to values for every read of entities: a kind's own reader, or :class:`Entity`.

The fetch of a tick and every read of :class:`~drover.storage.queries.Queries`
come here once they have the rows of their entities
(:data:`~drover.storage.rows.ENTITY_COLUMNS`): a kind that declares its own
reader (:attr:`~drover.model.kinds.EntityKind.reader`: sessions, kernels) gets
its children's narrow rows (:data:`~drover.storage.rows.CHILD_COLUMNS`) and
builds its values; any other is read into
:class:`~drover.model.values.Entity`, with its children and links.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from drover.model.kinds import Kinds
from drover.model.values import Claim
from drover.storage._sql import driver_rows, ids_value, statement
from drover.storage.rows import CHILD_COLUMNS, ENTITY_COLUMNS, entities_with_children
from drover.storage.schema import entities, relations
from drover.storage.statements.ids import ids_param

__all__ = ["links_of", "values_of"]

e = entities


def _children_of(postgres: bool, narrow: bool) -> sa.Select[Any]:
    """The children of the entities ``:ids`` (narrow: :data:`CHILD_COLUMNS`)."""
    columns = CHILD_COLUMNS if narrow else ENTITY_COLUMNS
    return sa.select(*columns).where(ids_param(e.c.parent_id, "ids", postgres))


def _links_of(postgres: bool) -> sa.Select[Any]:
    """``source_id, name, target_id`` of the links from the entities ``:ids``, sorted."""
    r = relations
    return (
        sa.select(r.c.source_id, r.c.name, r.c.target_id)
        .where(ids_param(r.c.source_id, "ids", postgres))
        .order_by(r.c.source_id, r.c.name, r.c.target_id)
    )


def _child_rows(conn: sa.Connection, ids: Sequence[str], narrow: bool) -> Sequence[Any]:
    pg = conn.dialect.name == "postgresql"
    query = statement(("children-of", pg, narrow), lambda: _children_of(pg, narrow))
    return driver_rows(conn, query, {"ids": ids_value(ids, pg)})


def links_of(conn: sa.Connection, ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
    """``{source id: [(relation, target id), …]}`` of the links from ``ids``."""
    if not ids:
        return {}
    pg = conn.dialect.name == "postgresql"
    query = statement(("links-of", pg), lambda: _links_of(pg))
    found: dict[str, list[tuple[str, str]]] = {}
    for source, name, target in conn.execute(query, {"ids": ids_value(ids, pg)}):
        found.setdefault(source, []).append((name, target))
    return found


def values_of(
    conn: sa.Connection,
    rows: Sequence[Sequence[Any]],
    kinds: Kinds,
    kind: str | None,
    handler: str | None = None,
    claim: Claim | None = None,
) -> list[Any]:
    """The values of ``rows`` (entities of ``kind``; ``None``: of any kind, as ``Entity``),
    in their order, each with its children, ``handler``'s try count and ``claim``."""
    if not rows:
        return []
    ids = [r[0] for r in rows]
    reader = kinds[kind].reader if kind is not None else None
    if reader is not None:
        children = _child_rows(conn, ids, True) if kinds.child_of(kind or "") else ()
        return reader(rows, children, handler, claim)
    children = _child_rows(conn, ids, False)
    return entities_with_children(rows, children, kinds, handler, links_of(conn, ids), claim)
