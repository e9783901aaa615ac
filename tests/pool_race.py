"""Two PostgreSQL coordinators applying into one pool at the same time.

Shared by the pool tests and the plugin-lifecycle acceptance tests: B ticks
while A's moves are written but not committed, which is where a pool's lock
must make B wait.
"""

from __future__ import annotations

import asyncio

import asyncpg
from conftest import PG_URL, _asyncpg_dsn
from sqlalchemy.util import await_only

from drover.coordinator.tick import Coordinator, TickReport


async def blocked_or_done(task: asyncio.Task[TickReport]) -> None:
    """Wait until ``task`` has finished, or some apply waits for a pool's lock."""
    conn = await asyncpg.connect(_asyncpg_dsn(PG_URL))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120  # generous: the machine may be loaded
    try:
        while loop.time() < deadline:
            if task.done():
                return
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND query LIKE '%pg_advisory_xact_lock%'"
            )
            if waiting:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the second apply neither finished nor waited for the pool")
    finally:
        await conn.close()


async def tick_b_inside_a_apply(
    a: Coordinator, b: Coordinator, handler: str
) -> tuple[TickReport, TickReport]:
    """A ticks ``handler``; inside A's apply transaction (its moves written, not committed)
    B starts its own tick of ``handler`` and A goes on once B has finished or waits for a
    pool's lock. A's report and B's."""
    b_tick: list[asyncio.Task[TickReport]] = []

    async def run_b_meanwhile() -> None:
        b_tick.append(asyncio.create_task(b.tick(handler)))
        await blocked_or_done(b_tick[0])

    def hold_before_commit(step: str) -> None:
        if step == "before-history" and not b_tick:
            await_only(run_b_meanwhile())

    a.inject_apply_failure = hold_before_commit
    try:
        report_a = await a.tick(handler)
    finally:
        a.inject_apply_failure = None
    return report_a, await b_tick[0]
