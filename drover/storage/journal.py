"""The one writer of ``scheduling_history`` rows, one row at a time.

Creation (``CREATED`` rows), spec changes and the apply's per-entity rows are
all built by :func:`history_row` and written by :func:`write_history`, so
every row has the same columns and meaning whoever writes it. The apply's
set-based statements (one row per entity of a group, a merge into the latest
row) are in :mod:`drover.storage.statements.apply`.

One order: a row's id and its time agree. Every writer dates its rows with
:func:`history_time`, taken in the writing transaction: never before the
latest row already written (a coordinator whose tick started earlier, or
whose clock is behind, writes after it in time too). On PostgreSQL the
history lock is taken first and held until commit, so history is written
one transaction at a time: ids are drawn, and rows become visible, in the
order of their times (a reader following ids, ``drover history --follow``,
misses none). SQLite has one writer at a time already (``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from drover.storage.schema import scheduling_history
from drover.storage.statements.apply import INSERT_HISTORY_ROWS

__all__ = ["history_row", "history_time", "write_history"]

#: The latest time a history row was written at (the ``created_at`` index's last entry).
_LATEST_TIME = sa.select(sa.func.max(scheduling_history.c.created_at))

#: PostgreSQL: the history lock, held until the transaction ends ("drover:h").
_LOCK_HISTORY = sa.select(sa.func.pg_advisory_xact_lock(sa.literal(0x64726F7665723A68)))


def history_time(conn: sa.Connection, now: float) -> float:
    """The time to date the history rows this transaction writes: ``now`` (read from the
    clock when writing), but never before the latest row already written.

    On PostgreSQL the history lock is taken first (until commit): see the module's
    docstring.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(_LOCK_HISTORY)
    latest = conn.execute(_LATEST_TIME).scalar()
    return now if latest is None else max(now, float(latest))


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


def write_history(
    conn: sa.Connection, rows: Sequence[dict[str, Any]], *, at: float | None = None
) -> None:
    """Insert rows built by :func:`history_row` (one executemany), dated no earlier than
    :func:`history_time` (``at``: the caller took it already, in this transaction)."""
    if not rows:
        return
    if at is None:
        at = history_time(conn, max(r["created_at"] for r in rows))
    conn.execute(
        INSERT_HISTORY_ROWS,
        [r if r["created_at"] >= at else {**r, "created_at": at, "updated_at": at} for r in rows],
    )
