"""Writes to entities found by id cost the same behind a backlog as without one.

SQLite's planner keeps no statistics: given ``id IN (…) AND status = …`` it may
walk the ``(kind, status)`` index and test every entity in that status against
the id list. A compare-and-set of 1,000 sessions then read all 100,000 PENDING
sessions of a backlog. SQLite counts the steps of its virtual machine, so the
cost is measured exactly, not timed.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from drover.kinds.sessions.values import KernelStatus as K
from drover.kinds.sessions.values import SessionStatus as S
from drover.storage.entity_reads import _STATUSES_OF_KIND
from drover.storage.reports import _apply_reports
from drover.storage.statements.apply import move_entities, place_kernels
from drover.testing import CoordinatorHarness


def _steps(path: Path, statement: sa.Executable, params: dict[str, Any]) -> tuple[int, int]:
    """(hundreds of VM steps, rows changed or read) of ``statement``, rolled back afterwards."""
    values: list[Any] = []
    if isinstance(statement, sa.Select):
        # A list bound to an expanding IN: rendered in place.
        bound_select = statement.params(**params)
        sql = str(
            bound_select.compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True})
        )
    else:
        compiled = statement.compile(dialect=sqlite.dialect())
        bound = compiled.construct_params(params)
        values = [bound[name] for name in compiled.positiontup or ()]
        sql = str(compiled)
    conn = sqlite3.connect(path, isolation_level=None)
    count = 0

    def step() -> int:
        nonlocal count
        count += 1
        return 0

    try:
        conn.execute("BEGIN")
        conn.set_progress_handler(step, 100)
        cursor = conn.execute(sql, values)
        returned = cursor.fetchall()  # a RETURNING statement runs as its rows are read
        changed = len(returned) if cursor.description else cursor.rowcount
        conn.set_progress_handler(None, 100)
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    return count, changed


def _writes(
    ids: list[str], kernel_ids: list[str]
) -> list[tuple[str, sa.Executable, dict[str, Any]]]:
    now = 1.0
    return [
        (
            "compare-and-set",
            move_entities(False, False, None),
            {
                "ids": json.dumps(ids),
                "from_status": S.PENDING.value,
                "of_kind": "session",
                "to_status": S.SCHEDULED.value,
                "now": now,
            },
        ),
        (
            "backend report",
            _apply_reports(False),
            {
                "ids": json.dumps(kernel_ids),
                "from_status": K.PENDING.value,
                "to_status": K.SCHEDULED.value,
                "now": now,
                "exit_code": None,
                "info": None,
                "clear_info": False,
                "clear_agent": False,
            },
        ),
        (
            "placement",
            place_kernels(False),
            {"ids": json.dumps(kernel_ids), "agent_id": "agent-0", "placeable": "PENDING"},
        ),
        # What a backend's monitor asks every few seconds of the kernels it tracks.
        ("kernel statuses", _STATUSES_OF_KIND, {"ids": kernel_ids, "kind": "kernel"}),
    ]


async def test_writes_by_id_do_not_read_the_backlog(tmp_path: Path):
    """Ten sessions' compare-and-set, their kernels' report, placement and statuses read: as
    many steps behind 3,000 PENDING sessions as behind none, every row still found."""
    path = tmp_path / "backlog.db"
    async with CoordinatorHarness(database_url=f"sqlite+aiosqlite:///{path}") as h:
        ids = await h.repository.create_sessions([{"kernels": [{"cpu": 1}]}] * 10)
        kernels = [k.id for s in await h.repository.queries.list_sessions() for k in s.kernels]
        alone = {name: _steps(path, st, p) for name, st, p in _writes(ids, kernels)}
        await h.repository.create_sessions([{"kernels": [{"cpu": 1}]}] * 3000)
        behind = {name: _steps(path, st, p) for name, st, p in _writes(ids, kernels)}
    for name, (steps, changed) in behind.items():
        assert changed == 10, (name, changed)
        # A scan of the backlog would take 3,000 rows' steps: hundreds of hundreds.
        assert steps <= alone[name][0] + 2, (name, alone[name], steps)
