"""Fair fetches: when a handler with ``HandlerOptions(order="oldest-seen")`` saw each entity.

Such a handler's fetch sorts its candidates by the time it last fetched them
(never fetched first) and then marks the batch it took, in the same
transaction. Only these handlers pay for it: one outer join and a sort of
their candidates, one upsert per fetched entity, and a sweep that drops
the marks of entities no longer among the handler's candidates (up to 500 a
fetch), so the marks stay about as many as the candidates.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from drover.storage._sql import bounded_statement, statement
from drover.storage.statements.fairness import forget_gone, mark_fetched

__all__ = ["OLDEST_SEEN", "mark"]

#: The fetch order that reads and writes the marks.
OLDEST_SEEN = "oldest-seen"


def mark(
    conn: sa.Connection,
    handler: str,
    ids: Sequence[str],
    now: float,
    kind: str,
    statuses: frozenset[str],
) -> None:
    """Record that ``handler`` (of ``kind`` in ``statuses``) fetched ``ids`` at ``now``,
    inside the fetch's transaction, and forget marks of entities it can no longer fetch."""
    if not ids:
        return
    postgres = conn.dialect.name == "postgresql"
    stmt = statement(("mark-fetched", postgres), lambda: mark_fetched(postgres))
    conn.execute(stmt, [{"handler": handler, "entity_id": i, "seen_at": now} for i in ids])
    sweep = bounded_statement(("forget-marks", kind, statuses), lambda: forget_gone(kind, statuses))
    conn.execute(sweep, {"handler": handler})
