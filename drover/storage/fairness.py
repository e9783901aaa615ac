"""Fair fetches: when a handler with ``HandlerOptions(order="oldest-seen")`` saw each entity.

Such a handler's fetch sorts its candidates by the time it last fetched them
(never fetched first) and then marks the batch it took, in the same
transaction. Only these handlers pay for it: one outer join and a sort of
their candidates, and one upsert per fetched entity. The marks go with their
entity (``ON DELETE CASCADE``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from drover.storage._sql import statement
from drover.storage.statements.fairness import mark_fetched

__all__ = ["OLDEST_SEEN", "mark"]

#: The fetch order that reads and writes the marks.
OLDEST_SEEN = "oldest-seen"


def mark(conn: sa.Connection, handler: str, ids: Sequence[str], now: float) -> None:
    """Record that ``handler`` fetched ``ids`` at ``now`` (inside the fetch's transaction)."""
    if not ids:
        return
    postgres = conn.dialect.name == "postgresql"
    stmt = statement(("mark-fetched", postgres), lambda: mark_fetched(postgres))
    conn.execute(stmt, [{"handler": handler, "entity_id": i, "seen_at": now} for i in ids])
