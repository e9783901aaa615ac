"""The one writer of ``scheduling_history`` rows, one row at a time.

Creation (``CREATED`` rows), spec changes and the apply's per-entity rows are
all built by :func:`history_row` and written by :func:`write_history`, so
every row has the same columns and meaning whoever writes it. The apply's
set-based statements (one row per entity of a group, a merge into the latest
row) are in :mod:`drover.storage.statements.apply`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from drover.storage.statements.apply import INSERT_HISTORY_ROWS

__all__ = ["history_row", "write_history"]


def history_row(
    entity_id: str,
    kind: str,
    handler: str,
    result: str,
    from_status: str,
    to_status: str,
    error_code: str | None,
    message: str | None,
    now: float,
) -> dict[str, Any]:
    """One new history row (``attempts`` 1, created and updated ``now``)."""
    return {
        "entity_id": entity_id,
        "kind": kind,
        "handler": handler,
        "result": str(result),
        "from_status": str(from_status),
        "to_status": str(to_status),
        "error_code": error_code,
        "message": message,
        "attempts": 1,
        "created_at": now,
        "updated_at": now,
    }


def write_history(conn: sa.Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Insert rows built by :func:`history_row` (one executemany)."""
    if rows:
        conn.execute(INSERT_HISTORY_ROWS, list(rows))
