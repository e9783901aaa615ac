"""Issue 24, point 6: a stale coordinator's history row is never dated before the newer ones.

A coordinator whose claim lapsed (paused, or on a machine whose clock is
behind) applies late: its ``fenced`` row comes after the session's TERMINATED
row in the table, and must not carry an earlier ``created_at``, or the
history read by time and the history read by row disagree. Claims and
fencing exist only on PostgreSQL (one coordinator runs on SQLite), so the
fenced case runs there; the same rule for any row kept in its status is
checked on both databases.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence

import pytest
from conftest import PG_URL, SKIP_PG, Database, pg_schema
from scripted import Scripted

from drover import HandlerResult, SchedulingResult, SessionStatus, SessionWithKernels
from drover.coordinator.tick import Coordinator
from drover.model.clock import ManualClock
from drover.testing import CoordinatorHarness

R, S = SchedulingResult, SessionStatus


@pytest.fixture
async def pg() -> AsyncIterator[Database]:
    """A fresh PostgreSQL schema."""
    if SKIP_PG:
        pytest.fail("claims and fencing need PostgreSQL (DROVER_TEST_SKIP_PG=1 deselects it)")
    async with pg_schema("ho") as schema:
        yield Database("postgresql", PG_URL, schema)


class _Gated(Scripted):
    """Succeeds on its targets once the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult:
        self.entered.set()
        await self.gate.wait()
        return HandlerResult(successes=[t.id for t in targets])


def _ordered(rows) -> bool:
    return [r.created_at for r in rows] == sorted(r.created_at for r in rows)


async def test_a_fenced_row_is_not_dated_before_the_terminated_row(pg: Database):
    """A (clock 100 s behind) holds the claim and is slow; B takes over and the session is
    terminated; A's late apply is fenced, and its row is dated no earlier than TERMINATED."""
    async with CoordinatorHarness(
        include_builtin_handlers=False, database_url=pg.url, database_schema=pg.schema
    ) as h:
        sid = await h.create_session(kernels=[])
        slow = _Gated()
        behind = ManualClock(h.clock.time())
        a = Coordinator(
            h.repository, {"scripted": slow}, clock=behind, kinds=h.app.kinds,
            claim_owner="coordinator-a", claim_ttl=10.0,
        )  # fmt: skip
        fast = Scripted()
        fast.script = lambda targets: HandlerResult(successes=[t.id for t in targets])
        b = Coordinator(
            h.repository, {"scripted": fast}, clock=h.clock, kinds=h.app.kinds,
            claim_owner="coordinator-b", claim_ttl=10.0,
        )  # fmt: skip
        tick_a = asyncio.create_task(a.tick("scripted"))
        await asyncio.wait_for(slow.entered.wait(), timeout=10)
        h.clock.advance(100)  # A's claim lapses: B's clock is 100 s ahead of A's
        assert (await b.tick("scripted")).count(R.SUCCESS) == 1
        await h.request_termination(sid)
        assert (await h.session(sid)).status == S.TERMINATED
        slow.gate.set()
        report_a = await asyncio.wait_for(tick_a, timeout=10)
        assert [c.error_code for c in report_a.changes] == ["fenced"]
        rows = await h.history(sid)
        assert [(r.to_status, r.error_code) for r in rows][-2:] == [
            (S.TERMINATED, None),
            (S.TERMINATED, "fenced"),
        ]
        assert _ordered(rows), [(r.handler, r.result, r.created_at) for r in rows]


async def test_a_row_kept_in_its_status_is_not_dated_before_the_latest(make_harness):
    """On both databases: a late SKIPPED row (the clock that wrote it behind) is dated at the
    entity's latest row, so time order and row order agree."""
    async with make_harness(include_builtin_handlers=False, plugins=[]) as h:
        sid = await h.create_session()
        handler = Scripted()
        handler.script = lambda targets: HandlerResult(skipped=[t.id for t in targets])
        behind = ManualClock(h.clock.time() - 50)
        late = Coordinator(h.repository, {"scripted": handler}, clock=behind, kinds=h.app.kinds)
        await late.tick("scripted")
        rows = await h.history(sid)
        assert [(r.handler, r.result) for r in rows] == [
            ("api", "CREATED"),
            ("scripted", "SKIPPED"),
        ]
        assert _ordered(rows), [(r.handler, r.result, r.created_at) for r in rows]


# -- issue 35: one history order (ids), and times that never go backwards -------------------


async def _all_rows(h: CoordinatorHarness):
    return await h.repository.search_history(limit=1000, newest_first=False)


def _ascending(rows) -> bool:
    ids = [r.id for r in rows]
    times = [r.created_at for r in rows]
    return ids == sorted(ids) and times == sorted(times)


async def test_a_late_move_is_not_dated_before_the_latest_row(make_harness):
    """On both databases: a SUCCESS that moves the session, applied by a coordinator whose
    clock is behind, is dated no earlier than the session's CREATED row (moved rows were
    written with the tick's time, before the rows already there)."""
    async with make_harness(include_builtin_handlers=False, plugins=[]) as h:
        sid = await h.create_session()
        handler = Scripted()
        handler.script = lambda targets: HandlerResult(successes=[t.id for t in targets])
        behind = ManualClock(h.clock.time() - 50)
        late = Coordinator(h.repository, {"scripted": handler}, clock=behind, kinds=h.app.kinds)
        await late.tick("scripted")
        rows = await h.history(sid)
        assert [(r.handler, r.result, r.to_status) for r in rows] == [
            ("api", "CREATED", S.PENDING),
            ("scripted", R.SUCCESS, S.SCHEDULED),
        ]
        assert _ordered(rows), [(r.handler, r.result, r.created_at) for r in rows]


async def test_times_ascend_with_ids_across_entities(make_harness):
    """On both databases: the whole history, read by id, never goes back in time, whichever
    entity a row is about (another session's newer row was written before)."""
    async with make_harness(include_builtin_handlers=False, plugins=[]) as h:
        first = await h.create_session()
        h.clock.advance(10)
        await h.create_session()  # CREATED at +10, written before the late tick's rows
        handler = Scripted()
        handler.script = lambda targets: HandlerResult(
            skipped=[t.id for t in targets if t.id == first]
        )
        behind = ManualClock(h.clock.time() - 5)
        late = Coordinator(h.repository, {"scripted": handler}, clock=behind, kinds=h.app.kinds)
        await late.tick("scripted")
        rows = await _all_rows(h)
        assert [(r.entity_id, r.result) for r in rows][-1] == (first, R.SKIPPED)
        assert _ascending(rows), [(r.id, r.handler, r.created_at) for r in rows]


async def test_a_row_is_dated_when_it_is_written(make_harness):
    """On both databases: time passing between the tick's read of the clock and the write
    of its history (a long apply, a wait for the write lock) dates the row at the write."""
    async with make_harness(include_builtin_handlers=False, plugins=[]) as h:
        sid = await h.create_session()
        handler = Scripted()
        handler.script = lambda targets: HandlerResult(successes=[t.id for t in targets])
        coordinator = Coordinator(
            h.repository, {"scripted": handler}, clock=ManualClock(h.clock.time()),
            kinds=h.app.kinds,
        )  # fmt: skip
        ticked_at = h.clock.time()

        def slow_write(step: str) -> None:
            if step == "after-entities":
                h.clock.advance(7)  # the repository's clock: what the write reads

        coordinator.inject_apply_failure = slow_write
        await coordinator.tick("scripted")
        rows = await h.history(sid)
        assert rows[-1].to_status == S.SCHEDULED
        assert rows[-1].created_at.timestamp() == ticked_at + 7


def test_history_follow_continues_the_list(tmp_path):
    """Issue 35: `drover history --follow` prints the latest rows oldest first, then each
    new row after them as it is written: one order, the file simply grows (it printed its
    first rows newest first, then appended oldest first)."""
    url = f"sqlite+aiosqlite:///{tmp_path}/drover.db"

    async def create(n: int) -> list[str]:
        async with CoordinatorHarness(database_url=url, include_builtin_handlers=False) as h:
            return [await h.create_session(name=f"s{i}") for i in range(n)]

    first = asyncio.run(create(2))
    env = {**os.environ, "DROVER_DATABASE_URL": url, "DROVER_LOAD_PLUGINS": ""}
    out = tmp_path / "follow.txt"
    with out.open("w") as sink:
        follow = subprocess.Popen(
            [sys.executable, "-m", "drover", "history", "--kind", "session", "--follow"],
            stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
        )  # fmt: skip
        try:

            def entities() -> list[str]:
                lines = out.read_text().splitlines()
                return [line.split("\t")[2] for line in lines[1:] if "\t" in line]

            deadline = time.monotonic() + 30
            while len(entities()) < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert entities() == first, out.read_text()
            later = asyncio.run(create(1))
            while len(entities()) < 3 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert entities() == first + later, out.read_text()
        finally:
            follow.terminate()
            follow.wait(timeout=10)
