"""Issue 36, point 10: a termination racing a handler's success is never lost.

The scenario of the fault campaign, run a few hundred times on each database: a
user terminates a PREPARED session while ``start-sessions``' ``execute`` runs,
then the handler reports success. Whichever commits first, the session must end
up TERMINATING (the termination is applied to whatever status it finds), its
history must be one continuous chain ending in that status, and the tick's
report must say SUCCESS exactly when its row is in that chain.

The termination is placed at every point of the tick: awaited inside
``execute`` (it commits before the apply), started from inside the apply's
transaction (it must wait for it, then see CREATING), and racing with random
delays (either side may hold the row first); with and without claims.
``bench/lost_update.py`` runs the same scenario thousands of times, and under
the daemon.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

import asyncpg
import sqlalchemy as sa
from conftest import PG_URL, _asyncpg_dsn
from sqlalchemy.util import await_only

from drover import KernelStatus, SchedulingResult, SessionStatus, SessionWithKernels
from drover.storage import _sql
from drover.storage.schema import entities
from drover.testing import CoordinatorHarness

S, K, R = SessionStatus, KernelStatus, SchedulingResult


async def _waiting_writes(count: int) -> None:
    """Return once ``count`` compare-and-sets wait for a row lock (PostgreSQL), or after 20 s."""
    conn = await asyncpg.connect(_asyncpg_dsn(PG_URL))
    try:
        for _ in range(2000):
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE 'UPDATE entities SET status=%'"
            )
            if waiting >= count:
                return
            await asyncio.sleep(0.01)
    finally:
        await conn.close()


ROUNDS = 24
PER_ROUND = 12
PLACES = ("inside", "in-apply", "racing")


async def _round(h: CoordinatorHarness, rng: random.Random, claims: bool) -> int:
    """One tick of start-sessions over PER_ROUND PREPARED sessions, each terminated somewhere
    in it; returns how many sessions were checked."""
    kernels = [{"cpu": 1, "status": K.PREPARED, "agent_id": "i-0"}]
    sids = await h.repository.seed_sessions(
        [{"kernels": kernels, "status": S.PREPARED} for _ in range(PER_ROUND)]
    )
    place = {sid: rng.choice(PLACES) for sid in sids}
    delay = {sid: rng.random() * 0.006 for sid in sids}
    loop = asyncio.get_running_loop()
    pending: list[asyncio.Future[Any]] = []
    in_apply = [sid for sid in sids if place[sid] == "in-apply"]
    started = asyncio.Event()
    expected = sum(1 for sid in sids if place[sid] != "inside")

    def terminate(sid: str, after: float = 0.0) -> None:
        async def go() -> Any:
            await asyncio.sleep(after)
            return await h.request_termination(sid)

        pending.append(asyncio.ensure_future(go()))
        if len(pending) == expected:
            started.set()

    def hook(step: str) -> None:
        # Inside the apply's transaction (a worker thread on SQLite): the termination
        # starts now and must wait for the apply to commit, then find CREATING.
        if step == "after-entities":
            for sid in in_apply:
                loop.call_soon_threadsafe(terminate, sid)
            in_apply.clear()

    original = h.backend.create

    async def create(session: SessionWithKernels) -> None:
        where = place[session.id]
        if where == "inside":
            await h.request_termination(session.id)
        elif where == "racing":
            terminate(session.id, delay[session.id])
        await original(session)

    h.backend.create = create
    h.coordinator.claim_owner = "campaign" if claims else None
    h.coordinator.inject_apply_failure = hook
    try:
        report = await h.tick("start-sessions")
        if expected:
            # The hook's terminations are scheduled from the apply: let them start.
            await started.wait()
        await asyncio.gather(*pending)
    finally:
        h.backend.create = original
        h.coordinator.inject_apply_failure = None
    said = {c.session_id: c.result for c in report.changes}
    for sid in sids:
        await _check(h, sid, said[sid], place[sid])
    return len(sids)


async def _check(h: CoordinatorHarness, sid: str, said: Any, where: str) -> None:
    session = await h.session(sid)
    rows = await h.history(sid)
    chain = [(r.handler, r.result, r.from_status, r.to_status) for r in rows]
    context = f"{sid} terminated {where}: {session.status}, history {chain}"
    assert session.status == S.TERMINATING, context
    for before, after in itertools.pairwise(rows):
        assert before.to_status == after.from_status, context
    assert rows[-1].to_status == S.TERMINATING, context
    started = [r for r in rows if r.handler == "start-sessions"]
    ended = [r for r in rows if r.handler == "api" and r.to_status == S.TERMINATING]
    assert len(ended) == 1, context
    if said == R.SUCCESS:
        assert [(r.from_status, r.to_status) for r in started] == [(S.PREPARED, S.CREATING)]
        assert ended[0].from_status == S.CREATING, context
    else:
        assert said == R.SKIPPED, context
        assert not started, context
        assert ended[0].from_status == S.PREPARED, context
    if where == "inside":
        # Committed before the apply began: the handler's success must lose.
        assert said == R.SKIPPED, context
    if where == "in-apply":
        # Started inside the apply's transaction: it waited, then found CREATING.
        assert said == R.SUCCESS, context


async def test_a_termination_racing_a_handlers_success_is_never_lost(make_harness):
    """Hundreds of terminations at every point of a start-sessions tick: none is lost."""
    rng = random.Random(36)
    checked = 0
    async with make_harness() as h:
        for n in range(ROUNDS):
            checked += await _round(h, rng, claims=n % 2 == 1)
    assert checked == ROUNDS * PER_ROUND


async def test_a_termination_whose_read_went_stale_is_applied_from_the_current_status(
    make_harness, monkeypatch
):
    """The termination starts inside the handler's apply and reads PREPARED; the apply
    commits CREATING before the termination's compare-and-set, which loses: the
    termination is read again and applied from CREATING.

    The termination's read is made unlocked here (it is ``FOR UPDATE`` on
    PostgreSQL; on SQLite the write lock is taken before it) to open the window a
    lost termination needs: without the retry, on PostgreSQL, the session stays
    CREATING while the caller is told it is TERMINATING.
    """
    e = entities
    unlocked = sa.select(e.c.id, e.c.kind, e.c.status).where(
        e.c.id.in_(sa.bindparam("ids", expanding=True))
    )
    async with make_harness() as h:
        pg = h.repository._db.postgres
        monkeypatch.setitem(_sql._STATEMENTS, ("entity-states", pg), unlocked)
        kernels = [{"cpu": 1, "status": K.PREPARED, "agent_id": "i-0"}]
        # Fewer than the pool's connections: every termination runs while the apply does.
        sids = await h.repository.seed_sessions(
            [{"kernels": kernels, "status": S.PREPARED} for _ in range(6)]
        )
        loop = asyncio.get_running_loop()
        pending: list[asyncio.Future[Any]] = []
        started = asyncio.Event()

        def start() -> None:
            pending.extend(asyncio.ensure_future(h.request_termination(s)) for s in sids)
            started.set()

        async def start_and_wait() -> None:
            start()
            # Until each termination has read PREPARED and its write waits for our rows.
            await _waiting_writes(len(sids))

        def hook(step: str) -> None:
            if step != "after-entities" or pending:
                return
            if pg:
                await_only(start_and_wait())
            else:  # a worker thread: the terminations wait for SQLite's write lock
                loop.call_soon_threadsafe(start)

        h.coordinator.inject_apply_failure = hook
        report = await h.tick("start-sessions")
        await started.wait()
        outcomes = await asyncio.gather(*pending)
        assert {c.result for c in report.changes} == {R.SUCCESS}
        for sid, outcome in zip(sids, outcomes, strict=True):
            assert (await h.session(sid)).status == S.TERMINATING
            assert outcome.changed
            assert (outcome.from_status, outcome.to_status) == (S.CREATING, S.TERMINATING)
