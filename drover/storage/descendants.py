"""What an entity's move does to its children and their descendants, inside one apply.

A transition moves the entities' eligible children (only those behind the
target: a kernel a backend already moved further is left alone), recording
each child's status change in SQL (no child row travels to Python); a
scheduler's placements set the children's agents; children that end end
their own live children, down the tree, each kind by its own rule
(:meth:`~drover.model.kinds.EntityKind.end_status_for`), and get their
results. :class:`ChildMoves` is what :class:`drover.storage.apply.Apply`
and a report that ends an entity use.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from drover.model.kinds import EntityKind, Kinds
from drover.storage._sql import driver_execute, ids_value, statement
from drover.storage.statements.apply import (
    move_kernels,
    place_and_move_kernels,
    place_kernels,
    set_moved_results,
    set_result,
)

__all__ = ["ChildMoves"]


class ChildMoves:
    """The children moved in one write transaction, and what they entered."""

    def __init__(
        self, conn: sa.Connection, source: str, now: float, *, postgres: bool, kinds: Kinds
    ) -> None:
        self.conn = conn
        self.source = source
        self.now = now
        self.postgres = postgres
        self.kinds = kinds
        #: Children (and descendants) moved.
        self.kernel_changes = 0
        #: The ``(kind, status)`` pairs they entered.
        self.children_entered: set[tuple[str, str]] = set()

    def ended(
        self, kind: EntityKind, ids: list[str], status: str, *, info: str | None = None
    ) -> None:
        """What follows ``ids`` of ``kind`` ending in ``status`` outside a tick (a report):
        their live children end, down the tree, with ``info`` as their ``status_info``,
        and their result is set."""
        child = self.kinds.child_of(kind.name)
        if child is not None:
            self.move(kind, ids, child.end_status_for(status), info=info)
        pg = self.postgres
        driver_execute(
            self.conn,
            statement(("result", pg, kind, child), lambda: set_result(pg, kind, child)),
            {"ids": ids_value(ids, self.postgres)},
        )

    def place(self, kind: EntityKind, placements: list[tuple[str, str]]) -> None:
        """Set the agents of children (of ``kind``'s entities) still in their first status:
        one statement per agent."""
        child = self.kinds.child_of(kind.name)
        assert child is not None, f"placements for kind {kind.name!r}, which has no children"
        by_agent: dict[str, list[str]] = defaultdict(list)
        for kernel_id, agent_id in placements:
            by_agent[agent_id].append(kernel_id)
        pg = self.postgres
        stmt = statement(("place-kernels", pg), lambda: place_kernels(pg))
        for agent_id, kernel_ids in by_agent.items():
            params = {"ids": ids_value(kernel_ids, self.postgres), "agent_id": agent_id}
            driver_execute(self.conn, stmt, {**params, "placeable": child.first_status})

    def move(
        self,
        kind: EntityKind,
        entity_ids: list[str],
        target: str,
        placements: Sequence[tuple[str, str]] = (),
        info: str | None = None,
    ) -> None:
        """Record and move the entities' eligible children (SQLite: placing them as they move).

        On SQLite the kernels being placed are moved by the statement that sets
        their agent, one per agent: each row is written once, not twice.
        """
        pg = self.postgres
        child = self.kinds.child_of(kind.name)
        if child is None:
            return
        noted = info is not None
        record, *move = statement(
            ("move-kernels", pg, child, target, noted),
            lambda: move_kernels(pg, child, target, info=noted),
        )
        params = {
            "ids": ids_value(entity_ids, self.postgres),
            "to_status": str(target),
            "now": self.now,
            "source": self.source,
        }
        if noted:
            params["children_info"] = info
        recorded = max(driver_execute(self.conn, record, params).rowcount, 0)
        moved = 0
        if placements:
            place = statement(
                ("place-and-move", child, target), lambda: place_and_move_kernels(child, target)
            )
            by_agent: dict[str, list[str]] = defaultdict(list)
            for kernel_id, agent_id in placements:
                by_agent[agent_id].append(kernel_id)
            for agent_id, kernel_ids in by_agent.items():
                values = {"kids": ids_value(kernel_ids, self.postgres), "agent_id": agent_id}
                result = driver_execute(
                    self.conn, place, {**values, "to_status": str(target), "now": self.now}
                )
                moved += max(result.rowcount, 0)
        if move and recorded > moved:
            driver_execute(self.conn, move[0], params)
        self.kernel_changes += recorded
        if recorded:
            self.children_entered.add((child.name, str(target)))
        if recorded and target in child.terminal:
            self._end_descendants(child, target, params, (target,))
            self._set_moved_results(child, params, (), target)

    def _end_descendants(
        self, kind: EntityKind, status: str, params: dict[str, Any], path: tuple[str, ...]
    ) -> None:
        """End the live children of ``kind``'s entities just ended in ``status``, down the tree.

        Each descendant kind applies its own rule (:meth:`EntityKind.end_status_for`):
        a cancelled job's tasks end, and so do their attempts.
        """
        child = self.kinds.child_of(kind.name)
        if child is None:
            return
        pg = self.postgres
        end = child.end_status_for(status)
        noted = "children_info" in params
        statements = statement(
            ("move-descendants", pg, child, end, path, noted),
            lambda: move_kernels(pg, child, end, path, info=noted),
        )
        values = {**params, "to_status": str(end)}
        recorded = max(driver_execute(self.conn, statements[0], values).rowcount, 0)
        for more in statements[1:]:
            driver_execute(self.conn, more, values)
        self.kernel_changes += recorded
        if recorded:
            self.children_entered.add((child.name, str(end)))
        if recorded:
            self._end_descendants(child, end, params, (*path, end))
            self._set_moved_results(child, params, path, end)

    def _set_moved_results(
        self, kind: EntityKind, params: dict[str, Any], path: tuple[str, ...], status: str
    ) -> None:
        """Results of the children (at ``path``) a transition just ended in ``status``."""
        pg = self.postgres
        child = self.kinds.child_of(kind.name)
        query = statement(
            ("moved-results", pg, kind, child, path),
            lambda: set_moved_results(pg, kind, child, path),
        )
        driver_execute(self.conn, query, {"ids": params["ids"], "to_status": str(status)})
