"""Promotion ticks: ALL / ANY / NOT_ANY evaluated in SQL, including sessions with no kernels."""

from __future__ import annotations

import sqlite3
import time

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from drover import (
    KernelMatchType,
    KernelStatus,
    SchedulingResult,
    SessionPromotionHandler,
    SessionStatus,
    SimulatedBackend,
    hookimpl,
)
from drover.kinds.sessions.promotions import BUILTIN_PROMOTIONS
from drover.kinds.sessions.values import KernelReport
from drover.storage import watermarks
from drover.storage.statements.promote import (
    WATERMARKS,
    promotion_probe,
    recent_promotion_probe,
)
from drover.testing import CoordinatorHarness

K = KernelStatus
S = SessionStatus


def promotion(match: KernelMatchType) -> object:
    class Promote(SessionPromotionHandler):
        @classmethod
        def name(cls) -> str:
            return "promote-test"

        @property
        def target_session_statuses(self) -> frozenset[SessionStatus]:
            return frozenset({S.RUNNING})

        @property
        def check_kernel_statuses(self) -> frozenset[KernelStatus]:
            return frozenset({K.TERMINATED, K.CANCELLED})

        @property
        def match_type(self) -> KernelMatchType:
            return match

        @classmethod
        def success_session_status(cls) -> SessionStatus:
            return S.TERMINATING

    class Plugin:
        @hookimpl
        def drover_register_handlers(self, register):
            register(Promote())

    return Plugin()


CASES = {
    "all-in": ["TERMINATED", "CANCELLED"],
    "some-in": ["TERMINATED", "RUNNING"],
    "none-in": ["RUNNING", "ERROR"],
    "no-kernels": [],
}
EXPECTED = {
    KernelMatchType.ALL: {"all-in"},
    KernelMatchType.ANY: {"all-in", "some-in"},
    KernelMatchType.NOT_ANY: {"none-in"},
}


@pytest.mark.parametrize("match", list(KernelMatchType))
async def test_match_types(make_harness, match):
    """Each match type promotes exactly the right sessions; no kernels never matches."""
    async with make_harness(plugins=[promotion(match)], include_builtin_handlers=False) as h:
        ids = {}
        for name, statuses in CASES.items():
            ids[name] = await h.create_session(
                name=name, status=S.RUNNING, kernels=[{"status": st} for st in statuses]
            )
        other = await h.create_session(status=S.CREATING, kernels=[{"status": "TERMINATED"}])
        report = await h.tick("promote-test")
        promoted = {c.session_id for c in report.changes}
        assert promoted == {ids[n] for n in EXPECTED[match]}
        for name, sid in ids.items():
            s = await h.session(sid)
            rows = await h.history(sid)
            if name in EXPECTED[match]:
                assert s.status == S.TERMINATING
                assert [(r.handler, r.result, r.from_status, r.to_status) for r in rows] == [
                    ("api", "CREATED", S.RUNNING, S.RUNNING),
                    ("promote-test", SchedulingResult.SUCCESS, S.RUNNING, S.TERMINATING),
                ]
                # promotion never touches kernels
                assert [k.status for k in s.kernels] == [K(st) for st in CASES[name]]
            else:
                assert s.status == S.RUNNING
                # non-matching sessions get no history row: only their CREATED one
                assert [(r.handler, r.result, r.from_status, r.to_status) for r in rows] == [
                    ("api", "CREATED", S.RUNNING, S.RUNNING)
                ]
        assert (await h.session(other)).status == S.CREATING


async def test_a_promotion_selects_and_moves_in_one_transaction(make_harness):
    """Candidates are selected and moved in one transaction: all of it, or nothing.

    A session the API moved first is not selected, and a failure in the middle
    of the apply leaves no change and no row behind.
    """
    async with make_harness(
        plugins=[promotion(KernelMatchType.ANY)], include_builtin_handlers=False
    ) as h:
        sid = await h.create_session(status=S.RUNNING, kernels=[{"status": "TERMINATED"}])
        other = await h.create_session(status=S.RUNNING, kernels=[{"status": "TERMINATED"}])
        await h.request_termination(other)  # RUNNING -> TERMINATING before the tick

        def explode(step: str) -> None:
            if step == "after-entities":
                raise RuntimeError("injected")

        h.coordinator.inject_apply_failure = explode
        with pytest.raises(RuntimeError, match="injected"):
            await h.tick("promote-test")
        assert (await h.session(sid)).status == S.RUNNING
        assert [(r.handler, r.result) for r in await h.history(sid)] == [("api", "CREATED")]
        h.coordinator.inject_apply_failure = None
        report = await h.tick("promote-test")
        assert [c.session_id for c in report.changes] == [sid]
        assert (await h.session(sid)).status == S.TERMINATING
        rows = await h.history(other)
        assert [(r.handler, r.result, r.to_status) for r in rows] == [
            ("api", "CREATED", S.RUNNING),
            ("api", SchedulingResult.SUCCESS, S.TERMINATING),
        ]


async def test_a_session_whose_only_kernel_fails_setup_ends_instead_of_waiting(make_harness):
    """detect-start-failure: a kernel that ends before RUNNING sends the session to TERMINATING,
    without passing through PREPARED."""
    async with make_harness(backend=SimulatedBackend(run_for=None)) as h:
        sid = await h.create_session(kernels=[{"cpu": 1, "sim": {"prepare": "fail"}}])
        await h.run_until_settled()
        s = await h.session(sid)
        assert (s.status, s.result, s.status_info) == (S.TERMINATED, "FAILURE", "START_FAILED")
        assert [k.status for k in s.kernels] == [K.ERROR]
        rows = [(r.handler, r.from_status, r.to_status) for r in await h.history(sid)]
        # Straight from PREPARING: a kernel that failed its preparation never makes its
        # session PREPARED (issue 35; it used to pass through PREPARED first).
        assert ("detect-start-failure", S.PREPARING, S.TERMINATING) in rows
        assert S.PREPARED not in [to for _handler, _from, to in rows]
        assert rows[-1] == ("promote-to-terminated", S.TERMINATING, S.TERMINATED)


@pytest.mark.parametrize("status", [S.PENDING, S.SCHEDULED, S.PREPARING, S.PREPARED])
async def test_detect_start_failure_covers_every_status_before_creating(make_harness, status):
    """Any ended kernel before CREATING is detected; KERNEL_EXITED when none is in ERROR."""
    async with make_harness() as h:
        sid = await h.create_session(
            status=status, kernels=[{"status": "CANCELLED"}, {"status": status.value}]
        )
        quiet = await h.create_session(status=status, kernels=[{"status": status.value}])
        report = await h.tick("detect-start-failure")
        assert [c.session_id for c in report.changes] == [sid]
        s = await h.session(sid)
        assert (s.status, s.status_info) == (S.TERMINATING, "KERNEL_EXITED")
        assert (await h.session(quiet)).status == status


async def test_an_ended_kernel_in_creating_goes_through_running(make_harness):
    """In CREATING a kernel may have run: promote-to-running + detect-termination end it."""
    async with make_harness() as h:
        sid = await h.create_session(
            status=S.CREATING, kernels=[{"status": "ERROR"}, {"status": "RUNNING"}]
        )
        assert (await h.tick("detect-start-failure")).changes == ()
        await h.tick("promote-to-running")
        await h.tick("detect-termination")
        s = await h.session(sid)
        assert (s.status, s.status_info) == (S.TERMINATING, "ABNORMAL_TERMINATION")


async def test_an_empty_promotion_probe_reads_what_changed_and_a_sweep_reads_the_rest(
    make_harness, database, monkeypatch
):
    """After an empty check, a rule's probe reads only the entities touched since (recorded
    changes); what changed unrecorded is found by the next full check (every SWEEP_INTERVAL)."""
    monkeypatch.setattr(watermarks, "PG_LAG", 0.0)
    # The probe after the watermarks is chosen by cost; here always, where it is allowed.
    monkeypatch.setattr(watermarks, "RECENT_BIAS", 0.0)
    async with make_harness(backend=SimulatedBackend(run_for=None)) as h:
        waiting = [await h.create_session() for _ in range(3)]
        assert (await h.tick("detect-start-failure")).changes == ()  # the first check is full
        # A backend report is recorded: the next probe sees it.
        reported = (await h.session(waiting[0])).kernels[0].id
        assert await h.repository.report_kernel_statuses([KernelReport(reported, K.ERROR)])
        report = await h.tick("detect-start-failure")
        assert [c.session_id for c in report.changes] == [waiting[0]]
        assert (await h.tick("detect-start-failure")).changes == ()
        # A change written behind drover's back leaves no record: probes miss it ...
        hidden = (await h.session(waiting[1])).kernels[0].id
        async with h.repository.engine.begin() as conn:
            await conn.execute(
                sa.text("UPDATE entities SET status = 'ERROR' WHERE id = :kid"), {"kid": hidden}
            )
        assert (await h.tick("detect-start-failure")).changes == ()
        # ... until the rule's next full check.
        monkeypatch.setattr(watermarks, "SWEEP_INTERVAL", 0.0)
        report = await h.tick("detect-start-failure")
        assert [c.session_id for c in report.changes] == [waiting[1]]
        assert (await h.session(waiting[2])).status == S.PENDING


def test_a_postgresql_watermark_is_used_only_once_it_has_aged(monkeypatch):
    """On PostgreSQL a transaction may commit after one that took larger ids: a probe starts
    after watermarks at least PG_LAG seconds old, and a check that found work moves nothing."""
    monkeypatch.setattr(watermarks.time, "monotonic", lambda: 100.0)
    monkeypatch.setattr(watermarks, "RECENT_BIAS", 0.0)
    now = (50, 50)
    window = watermarks.Window(postgres=True)
    assert window.start(now) is None
    window.checked(99.0, (10, 20), full=True, found=False)
    assert window.start(now) is None  # swept, but no watermark is old enough yet
    window.checked(99.5, (11, 21), full=False, found=False)
    window.checked(101.0, (12, 22), full=False, found=False)
    assert window.start(now) == (10, 20)
    window.checked(101.6, (13, 23), full=False, found=False)
    assert window.start(now) == (11, 21)
    window.checked(103.0, (14, 24), full=False, found=True)
    assert window.start(now) == (11, 21)
    sqlite_window = watermarks.Window(postgres=False)
    sqlite_window.checked(99.0, (5, 6), full=True, found=False)
    assert sqlite_window.start(now) == (5, 6)
    monkeypatch.setattr(watermarks.time, "monotonic", lambda: 99.0 + watermarks.SWEEP_INTERVAL)
    assert sqlite_window.start(now) is None  # time for a full check


def test_the_cheaper_probe_is_chosen_by_what_each_took():
    """Many rows since the watermarks and a cheap full probe (a steady stream, few waiting):
    the full probe; few rows and a costly full probe (a quiet backlog): the recent one."""
    window = watermarks.Window(postgres=False)
    window.checked(time.monotonic(), (100, 100), full=True, found=False)
    window.timed((100, 100), None, 0.001)  # the full probe took 1 ms
    window.timed((1100, 1100), (100, 100), 0.002)  # 2,000 rows took 2 ms: 1 µs a row
    assert window.start((10_100, 10_100)) is None  # 20,000 rows: ~20 ms > 1 ms
    assert window.start((200, 200)) == (100, 100)  # 200 rows: ~0.2 ms < 1 ms
    window.timed((100, 100), None, 0.1)  # now the full probe takes 100 ms (a backlog)
    assert window.start((10_100, 10_100)) == (100, 100)
    assert window.start((150_100, 150_100)) is None


async def test_a_child_created_on_its_own_is_seen_by_the_recent_probe(
    make_harness, database, monkeypatch
):
    """After an empty check, a kernel added to a waiting session in a status that makes it
    match (ANY: an ended one; NOT_ANY: the first, outside the checked statuses) is found
    by the probe that reads only what changed."""
    monkeypatch.setattr(watermarks, "PG_LAG", 0.0)
    monkeypatch.setattr(watermarks, "RECENT_BIAS", 0.0)
    async with make_harness(backend=SimulatedBackend(run_for=None)) as h:
        waiting = await h.create_session()
        bare = await h.create_session(status=S.PREPARING, kernels=[])
        for rule in ("detect-start-failure", "promote-to-prepared"):
            assert (await h.tick(rule)).changes == ()  # the first check is full
            assert (await h.tick(rule)).changes == ()  # then only what changed
        await h.create("kernel", status=K.PREPARED, parent=bare)
        assert [c.session_id for c in (await h.tick("promote-to-prepared")).changes] == [bare]
        await h.create("kernel", status=K.ERROR, parent=waiting)
        report = await h.tick("detect-start-failure")
        assert [c.session_id for c in report.changes] == [waiting]


async def test_the_recent_probe_does_not_grow_with_the_waiting_sessions(tmp_path):
    """An empty probe among thousands of PENDING sessions executes as few SQLite steps as among
    none, where the full probe visits every one of them (SQLite's steps are countable)."""
    rule = next(r for r in BUILTIN_PROMOTIONS if r.name == "detect-start-failure")
    path = str(tmp_path / "steps.db")
    async with CoordinatorHarness(database_url=f"sqlite+aiosqlite:///{path}") as h:
        await h.repository.create_sessions([{"kernels": [{"cpu": 1}]}] * 3)

        def steps(query: sa.Select[object]) -> int:
            sql = str(
                query.compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True})
            )
            conn = sqlite3.connect(path)
            count = 0

            def step() -> int:
                nonlocal count
                count += 1
                return 0

            conn.set_progress_handler(step, 100)
            assert conn.execute(sql).fetchall() == []
            conn.close()
            return count

        async with h.repository.engine.connect() as conn:
            marks = tuple((await conn.execute(WATERMARKS)).one())
        recent = recent_promotion_probe(rule, "kernel").params(
            changes_after=marks[0], history_after=marks[1]
        )
        full = promotion_probe(rule)
        before = (steps(recent), steps(full))
        await h.repository.create_sessions([{"kernels": [{"cpu": 1}]}] * 3000)
        async with h.repository.engine.connect() as conn:
            marks = tuple((await conn.execute(WATERMARKS)).one())
        recent = recent_promotion_probe(rule, "kernel").params(
            changes_after=marks[0], history_after=marks[1]
        )
        after = (steps(recent), steps(full))
        assert after[0] <= before[0] + 1, (before, after)
        assert after[1] > 100 * max(before[1], 1), (before, after)
        # Sessions moving from one of the rule's statuses to another (PENDING ->
        # SCHEDULED), or kept in theirs (SKIPPED: no room), cannot become candidates:
        # the probe does not visit them.
        report = await h.tick("schedule-sessions")
        assert report.fetched == 1000
        assert sum(report.moved_to.values()) > 0, report.counts
        recent = recent_promotion_probe(rule, "kernel").params(
            changes_after=marks[0], history_after=marks[1]
        )
        # The probe reads those rows by primary key (a few steps each) and looks up
        # none of their sessions: looking each up costs over 50 steps a row.
        conn = sqlite3.connect(path)
        (rows,) = conn.execute(
            "SELECT count(*) FROM scheduling_history WHERE id > ?", (marks[1],)
        ).fetchone()
        conn.close()
        assert rows >= 1000
        # steps() counts in hundreds of SQLite's VM steps.
        assert steps(recent) * 100 < 30 * rows, rows


async def test_a_session_created_with_kernels_that_match_is_seen_by_the_recent_probe(
    make_harness, database, monkeypatch
):
    """The recent probe skips a session's own CREATED row where a match needs a child: the
    kernels' CREATED rows name it. A session created with an ERROR kernel (ANY) and one
    created with every kernel PREPARED (ALL) are each found after empty checks."""
    monkeypatch.setattr(watermarks, "PG_LAG", 0.0)
    monkeypatch.setattr(watermarks, "RECENT_BIAS", 0.0)
    async with make_harness(backend=SimulatedBackend(run_for=None)) as h:
        await h.create_session()
        for rule in ("detect-start-failure", "promote-to-prepared"):
            assert (await h.tick(rule)).changes == ()  # the first check is full
            assert (await h.tick(rule)).changes == ()  # then only what changed
        failed = await h.create_session(
            status=S.PREPARING, kernels=[{"cpu": 1, "status": K.ERROR}, {"cpu": 1}]
        )
        ready = await h.create_session(
            status=S.PREPARING, kernels=[{"cpu": 1, "status": K.PREPARED}] * 2
        )
        report = await h.tick("detect-start-failure")
        assert [c.session_id for c in report.changes] == [failed]
        report = await h.tick("promote-to-prepared")
        assert [c.session_id for c in report.changes] == [ready]


async def test_pruning_every_row_never_hides_new_changes_from_the_recent_probe(
    make_harness, database, monkeypatch
):
    """Pruning keeps the newest row of each history table: on SQLite a new row is numbered
    after the largest id left, so deleting the newest would number new rows below the
    watermarks of the last check, and the probe that reads after them would miss them."""
    monkeypatch.setattr(watermarks, "PG_LAG", 0.0)
    monkeypatch.setattr(watermarks, "RECENT_BIAS", 0.0)
    async with make_harness(backend=SimulatedBackend(run_for=0)) as h:
        await h.create_session()
        await h.run_until_settled()
        assert await h.repository.queries.count_by_status() == {S.TERMINATED: 1}
        for _ in range(2):
            assert (await h.tick("detect-start-failure")).changes == ()
        h.clock.advance(100)
        counts = await h.repository.prune_history(older_than=h.clock.time())
        assert counts["scheduling_history"] > 0
        assert counts["status_changes"] > 0
        failed = await h.create_session(
            status=S.PREPARING, kernels=[{"cpu": 1, "status": K.ERROR}, {"cpu": 1}]
        )
        report = await h.tick("detect-start-failure")
        assert [c.session_id for c in report.changes] == [failed]
