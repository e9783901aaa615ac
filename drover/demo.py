"""``python -m drover.demo``: the built-in lifecycle on the simulated backend, start to end.

Creates a handful of sessions that exercise the main paths (success, a
non-zero exit, a failed preparation, one too large to fit, one terminated by
the user), drives every handler on simulated time until they settle, and
prints each session's final status and history.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from drover.backends.base import AgentInfo
from drover.backends.simulated import SimulatedBackend
from drover.coordinator.status import TERMINAL_SESSION_STATUSES, SessionStatus
from drover.testing.harness import CoordinatorHarness

__all__ = ["main", "run_demo"]

_SESSIONS: list[tuple[str, list[dict[str, Any]]]] = [
    ("hello", [{"cpu": 1, "mem": 1024, "sim": {"run_for": 5}}]),
    ("two-kernels", [{"cpu": 2, "mem": 2048, "sim": {"run_for": 8}}] * 2),
    ("exits-non-zero", [{"cpu": 1, "mem": 512, "sim": {"run_for": 3, "exit_code": 2}}]),
    ("setup-fails", [{"cpu": 1, "mem": 512, "sim": {"prepare": "fail"}}]),
    ("too-large", [{"cpu": 64, "mem": 1024}]),
    ("stopped-by-user", [{"cpu": 1, "mem": 512}]),
]


async def run_demo(
    database_url: str,
    console: Console,
    *,
    max_seconds: int = 120,
    database_schema: str | None = None,
) -> dict[str, str]:
    """Run the demo on ``database_url``; return each session's final status by name."""
    backend = SimulatedBackend(
        [
            AgentInfo("agent-1", {"cpu": 4, "mem": 8192}),
            AgentInfo("agent-2", {"cpu": 4, "mem": 8192}),
        ],
        pull_delay=2.0,
        create_delay=1.0,
    )
    async with CoordinatorHarness(
        database_url=database_url, backend=backend, database_schema=database_schema
    ) as h:
        ids = {
            name: await h.create_session(name=name, kernels=kernels) for name, kernels in _SESSIONS
        }
        console.print(f"created {len(ids)} sessions on {database_url}")
        stop_at = None
        for second in range(max_seconds):
            await h.run_until_settled()
            user = await h.session(ids["stopped-by-user"])
            if user.status == SessionStatus.RUNNING and stop_at is None:
                stop_at = second + 5
            if stop_at == second:
                console.print(f"t={second}s: the user asks to terminate 'stopped-by-user'")
                await h.request_termination(ids["stopped-by-user"])
            sessions = [await h.session(sid) for sid in ids.values()]
            unsettled = [
                s
                for s in sessions
                if s.status not in TERMINAL_SESSION_STATUSES and s.name != "too-large"
            ]
            if not unsettled:
                console.print(f"all sessions settled after {second}s of simulated time")
                break
            h.clock.advance(1.0)
        finals: dict[str, str] = {}
        for name, sid in ids.items():
            s = await h.session(sid)
            finals[name] = s.status.value
            console.rule(f"{name}  [{s.status}]  result={s.result}  status_info={s.status_info}")
            console.print(
                "kernels: "
                + ", ".join(
                    f"{k.status}(agent={k.agent_id}, exit={k.exit_code})" for k in s.kernels
                )
            )
            table = Table("handler", "result", "from → to", "attempts", "error code", "message")
            for row in await h.history(sid):
                table.add_row(
                    row.handler,
                    row.result.value,
                    f"{row.from_status} → {row.to_status}",
                    str(row.attempts),
                    row.error_code or "",
                    row.message or "",
                )
            console.print(table)
        return finals


@click.command()
@click.option(
    "--database",
    default="sqlite+aiosqlite:///./demo.db",
    show_default=True,
    help="Database URL; an SQLite file is recreated on each run.",
)
def main(database: str) -> None:
    """Run the built-in lifecycle on the simulated backend and print the outcome.

    Example: python -m drover.demo --database sqlite+aiosqlite:///./demo.db
    """
    prefix = "sqlite+aiosqlite:///"
    if database.startswith(prefix):
        path = Path(database[len(prefix) :])
        for suffix in ("", "-wal", "-shm"):
            candidate = Path(f"{path}{suffix}")
            if candidate.exists():
                os.remove(candidate)
    console = Console(width=max(120, Console().width))
    asyncio.run(run_demo(database, console))


if __name__ == "__main__":
    sys.exit(main())
