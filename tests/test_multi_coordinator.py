"""Several coordinators on one database: claims, fencing, takeover, SQLite's one coordinator."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from conftest import SKIP_PG, Database
from daemon_helpers import process_alive, running_daemon, wait_for
from scripted import Scripted

from drover import HandlerResult, KernelStatus, SchedulingResult, SessionStatus, SessionWithKernels
from drover.app import App
from drover.backends.devices import devices_of
from drover.config import load_config
from drover.coordinator.tick import Coordinator
from drover.kinds.sessions.values import HOLDING_KERNEL_STATUSES
from drover.model.plan import Claim
from drover.model.values import CoordinatorInfo
from drover.testing import CoordinatorHarness

R = SchedulingResult
S = SessionStatus
K = KernelStatus

pg_only = pytest.mark.skipif(SKIP_PG, reason="DROVER_TEST_SKIP_PG=1")


class Gated(Scripted):
    """Succeeds on its targets, but only once the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult:
        self.calls.append([t.id for t in targets])
        self.entered.set()
        await self.gate.wait()
        return HandlerResult(successes=[t.id for t in targets])


def _coordinator(h: CoordinatorHarness, handler: Scripted, owner: str) -> Coordinator:
    handlers = {"scripted": handler}
    return Coordinator(
        h.repository,
        handlers,
        clock=h.clock,
        kinds=h.app.kinds,
        claim_owner=owner,
        claim_ttl=10.0,
    )


@pg_only
async def test_a_tick_whose_claim_was_taken_over_is_fenced(pg: Database):
    """A's claim lapses mid-execute; B takes the session over and moves it; A's apply is
    refused: a SKIPPED `fenced` history row in the current status, no second move."""
    async with CoordinatorHarness(
        include_builtin_handlers=False, database_url=pg.url, database_schema=pg.schema
    ) as h:
        sid = await h.create_session()
        slow = Gated()
        a = _coordinator(h, slow, "coordinator-a")
        fast = Scripted()
        fast.script = lambda targets: HandlerResult(successes=[t.id for t in targets])
        b = _coordinator(h, fast, "coordinator-b")

        tick_a = asyncio.create_task(a.tick("scripted"))
        await asyncio.wait_for(slow.entered.wait(), timeout=10)
        assert (await b.tick("scripted")).fetched == 0, "A's claim holds the session"
        assert (await h.repository.claims_by_owner()) == {"coordinator-a": 1}

        h.clock.advance(11)  # A's claim lapses (A is still inside execute)
        report_b = await b.tick("scripted")
        assert (report_b.fetched, report_b.count(R.SUCCESS)) == (1, 1)

        h.clock.advance(1)
        slow.gate.set()
        report_a = await asyncio.wait_for(tick_a, timeout=10)
        assert [(c.result, c.error_code) for c in report_a.changes] == [(R.SKIPPED, "fenced")]
        session = await h.session(sid)
        assert session.status == S.SCHEDULED
        rows = await h.history(sid)  # oldest first
        assert [(r.handler, r.result, r.from_status, r.to_status, r.error_code) for r in rows] == [
            ("api", "CREATED", S.PENDING, S.PENDING, None),
            ("scripted", R.SUCCESS, S.PENDING, S.SCHEDULED, None),
            ("scripted", R.SKIPPED, S.SCHEDULED, S.SCHEDULED, "fenced"),
        ]
        assert "coordinator-a" in (rows[2].message or "")
        assert await h.repository.claims_by_owner() == {}, "every claim released"


@pg_only
async def test_a_claim_taken_over_before_the_other_applies_fences_without_moving(pg: Database):
    """Fenced while the taker still works: the status stays, the taker then applies."""
    async with CoordinatorHarness(
        include_builtin_handlers=False, database_url=pg.url, database_schema=pg.schema
    ) as h:
        sid = await h.create_session()
        first, second = Gated(), Gated()
        a = _coordinator(h, first, "coordinator-a")
        b = _coordinator(h, second, "coordinator-b")
        tick_a = asyncio.create_task(a.tick("scripted"))
        await asyncio.wait_for(first.entered.wait(), timeout=10)
        h.clock.advance(11)
        tick_b = asyncio.create_task(b.tick("scripted"))
        await asyncio.wait_for(second.entered.wait(), timeout=10)
        h.clock.advance(1)
        first.gate.set()
        report_a = await asyncio.wait_for(tick_a, timeout=10)
        assert report_a.changes[0].error_code == "fenced"
        assert (await h.session(sid)).status == S.PENDING
        assert await h.repository.claims_by_owner() == {"coordinator-b": 1}
        h.clock.advance(1)
        second.gate.set()
        report_b = await asyncio.wait_for(tick_b, timeout=10)
        assert report_b.count(R.SUCCESS) == 1
        rows = await h.history(sid)
        assert [(r.result, r.from_status, r.to_status, r.error_code) for r in rows] == [
            ("CREATED", S.PENDING, S.PENDING, None),
            (R.SKIPPED, S.PENDING, S.PENDING, "fenced"),
            (R.SUCCESS, S.PENDING, S.SCHEDULED, None),
        ]


# -- two real daemons on PostgreSQL, local backend ----------------------------------------

BIG_AGENT = [{"id": "shared-agent", "cpu": 10_000, "mem": 10_000_000}]


def _command(spawns: Path, code: int, sleep: float = 0.0) -> list[str]:
    # Each kernel appends "kernel-id pid" when its command starts: a kernel spawned
    # twice shows up twice.
    body = f'echo "$DROVER_KERNEL_ID $$" >> {spawns}; sleep {sleep}; exit {code}'
    return ["/bin/sh", "-c", body]


@pg_only
async def test_two_coordinators_on_postgresql_never_spawn_twice_nor_kill_a_live_kernel(
    pg: Database, tmp_path: Path
):
    """200 sessions, two daemons on one database and one data directory: every kernel
    is spawned once, only terminated sessions are killed, results match exit codes."""
    spawns = tmp_path / "spawns.log"
    data = tmp_path / "data"
    extra = {"backend.agents": BIG_AGENT, "backend.kill_grace": 1.0, "claim_ttl": 20.0}
    async with (
        running_daemon(pg, data, **extra) as (app, _one),
        running_daemon(pg, data, **extra) as (_app2, _two),
    ):
        repo = app.repository
        requests = []
        expected: dict[int, str] = {}
        for i in range(200):
            codes = [0, 0] if i % 5 else [0, 3]  # every fifth session has a failing kernel
            sleep = 20.0 if i % 20 == 7 else 0.0  # these get terminated
            kernels = [{"command": _command(spawns, c, sleep), "cpu": 1, "mem": 1} for c in codes]
            requests.append({"name": f"s{i}", "kernels": kernels})
            expected[i] = "SUCCESS" if codes == [0, 0] else "FAILURE"
        ids = await repo.create_sessions(requests)
        doomed = [sid for i, sid in enumerate(ids) if i % 20 == 7]

        async def doomed_running() -> bool:
            found = [await repo.get_session(s) for s in doomed]
            return all(s.status == S.RUNNING for s in found)

        await wait_for(doomed_running, timeout=120, what="the long sessions RUNNING")
        await repo.request_termination(doomed)

        async def all_ended() -> bool:
            counts = await repo.count_by_status()
            return sum(counts.get(s, 0) for s in (S.TERMINATED, S.CANCELLED, S.ERROR)) == 200

        await wait_for(all_ended, timeout=180, what="all 200 sessions ended")
        coordinators = await repo.coordinators(alive_within=30)
        assert len(coordinators) == 2

    lines = spawns.read_text().split("\n")
    started = Counter(line.split()[0] for line in lines if line)
    twice = {k: n for k, n in started.items() if n > 1}
    assert twice == {}, f"kernels spawned more than once: {twice}"
    assert len(started) == 400
    for pid in (int(line.split()[1]) for line in lines if line):
        assert not process_alive(pid), "no kernel process is left behind"
    async with CoordinatorHarness(
        include_builtin_handlers=False, database_url=pg.url, database_schema=pg.schema
    ) as h:
        for i, sid in enumerate(ids):
            session = await h.session(sid)
            assert session.status == S.TERMINATED, (i, session.status, session.status_info)
            if sid in doomed:
                assert session.status_info == "USER_REQUESTED"
                continue
            assert session.result == expected[i], (i, session.kernels)
            assert sorted(k.exit_code for k in session.kernels) == sorted(
                [0, 0] if expected[i] == "SUCCESS" else [0, 3]
            )
            assert all(k.status_info != "destroyed" for k in session.kernels), session.kernels


# A real `drover run` that dies (SIGKILL) the moment it is about to report how a kernel
# ended: the exit is on disk, in its supervisor's record, and nowhere else.
_CRASH_BEFORE_AN_END_COMMITS = """
import os, signal, sys
from drover.kinds.sessions.store import SessionRepository as Repository

original = Repository.report_kernel_statuses

async def crash_before_an_end_commits(self, reports):
    if any(r.status in ("TERMINATED", "ERROR") for r in reports):
        os.kill(os.getpid(), signal.SIGKILL)
    return await original(self, reports)

Repository.report_kernel_statuses = crash_before_an_end_commits
sys.argv = ["drover", "--config", sys.argv[1], "run"]
from drover.cli.group import main
main()
"""


@pg_only
async def test_a_kernel_whose_watcher_died_keeps_its_exit_code_when_another_destroys_it(
    pg: Database, tmp_path: Path
):
    """Coordinator A runs a kernel and dies as it exits 3, before reporting it. The user
    terminates the session; coordinator B, which never watched the kernel, destroys it:
    the exit code from the supervisor's record is committed, not lost to the session's
    transition to TERMINATED."""
    data = tmp_path / "data"
    go = tmp_path / "go"
    config = tmp_path / "a.toml"
    config.write_text(
        f'database_url = "{pg.url}"\n'
        f'database_schema = "{pg.schema}"\n'
        f'data_dir = "{data}"\n'
        "heartbeat_interval = 0.5\nsafety_interval = 2.0\nclaim_ttl = 3.0\n"
        '[backend]\nname = "local"\nkill_grace = 1.0\n'
        '[[backend.agents]]\nid = "shared-agent"\ncpu = 10000\nmem = 10000000\n'
    )
    script = tmp_path / "crashing_daemon.py"
    script.write_text(_CRASH_BEFORE_AN_END_COMMITS)
    # B starts no kernel (so A is the one that runs it) and starts before it exists (so
    # it does not adopt it at start-up either).
    extra = {
        "backend.agents": BIG_AGENT,
        "backend.kill_grace": 1.0,
        "claim_ttl": 3.0,
        "handlers.start-sessions.enabled": False,
    }
    async with running_daemon(pg, data, **extra) as (app, _b):
        repo = app.repository
        with open(tmp_path / "a.log", "ab") as handle:
            a = await asyncio.create_subprocess_exec(
                sys.executable, str(script), str(config), stdout=handle, stderr=handle,
                env={k: v for k, v in os.environ.items() if not k.startswith("DROVER_")},
            )  # fmt: skip
        try:
            command = ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 3"]
            (sid,) = await repo.create_sessions(
                [{"kernels": [{"command": command, "cpu": 1, "mem": 1}]}]
            )

            async def running():
                s = await repo.get_session(sid)
                return s if s.status == S.RUNNING else None

            await wait_for(running, timeout=60, what="RUNNING under coordinator A")
            go.touch()
            assert await asyncio.wait_for(a.wait(), timeout=30) == -signal.SIGKILL
        finally:
            if a.returncode is None:
                a.kill()
                await a.wait()
        s = await repo.get_session(sid)
        assert (s.status, s.kernels[0].status) == (S.RUNNING, K.RUNNING), "nothing reported"
        await repo.request_termination([sid])

        async def ended():
            s = await repo.get_session(sid)
            return s if s.status == S.TERMINATED else None

        s = await wait_for(ended, timeout=60, what="TERMINATED by coordinator B")
    (k,) = s.kernels
    assert (k.status, k.exit_code, k.status_info) == (
        K.TERMINATED,
        3,
        "destroyed; exited with code 3",
    )
    assert (s.status_info, s.result) == ("USER_REQUESTED", "CANCELLED")


# -- SQLite: one coordinator, enforced ------------------------------------------------------


def _write_config(path: Path, url: str, data: Path) -> None:
    path.write_text(
        f'database_url = "{url}"\n'
        f'data_dir = "{data}"\n'
        "heartbeat_interval = 0.5\n"
        "safety_interval = 2.0\n"
        "shutdown_grace = 5.0\n"
        "[backend]\n"
        'name = "local"\n'
    )


async def _drover(config: Path, log: Path, *args: str) -> asyncio.subprocess.Process:
    with open(log, "ab") as handle:  # the child keeps its own copy of the descriptor
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "drover",
            "--config",
            str(config),
            *args,
            stdout=handle,
            stderr=handle,
            env={k: v for k, v in os.environ.items() if not k.startswith("DROVER_")},
        )


async def test_a_second_drover_run_on_one_sqlite_file_is_refused_then_takes_over(
    tmp_path: Path,
):
    """Refused with one line naming the running coordinator; after `kill -9` of the first
    and its heartbeat gone stale, a new one takes over and says so."""
    url = f"sqlite+aiosqlite:///{tmp_path}/drover.db"
    config = tmp_path / "drover.toml"
    _write_config(config, url, tmp_path / "data")
    first_log, second_log, third_log = (tmp_path / f"{n}.log" for n in ("a", "b", "c"))
    app = App(load_config(config, environ={}))
    await app.check_schema(auto_upgrade=True)
    repo = app.repository
    first = await _drover(config, first_log, "run")
    try:

        async def registered() -> bool:
            return bool(await repo.coordinators(alive_within=5))

        await wait_for(registered, timeout=30, what="the first coordinator's heartbeat")
        second = await _drover(config, second_log, "run")
        code = await asyncio.wait_for(second.wait(), timeout=30)
        out = second_log.read_text()
        assert code == 1, out
        assert "Traceback" not in out
        (line,) = [x for x in out.splitlines() if x.startswith("Error:")]
        assert "another coordinator is running on this SQLite database" in line
        assert f"pid {first.pid} on host" in line
        assert "since" in line

        first.send_signal(signal.SIGKILL)
        await first.wait()

        async def stale() -> bool:
            return not await repo.coordinators(alive_within=1.5)

        await wait_for(stale, timeout=30, what="the dead coordinator's heartbeat to go stale")
        third = await _drover(config, third_log, "run")
        try:

            async def took_over() -> bool:
                return "taking over from coordinator" in third_log.read_text()

            await wait_for(took_over, timeout=30, what="the takeover message")
            assert f"pid {first.pid} on host" in third_log.read_text()
            await wait_for(registered, timeout=30, what="the new heartbeat")

            async def running() -> bool:
                return "running handlers" in third_log.read_text()

            await wait_for(running, timeout=30, what="the new coordinator to run")
            assert [c.pid for c in await repo.coordinators(alive_within=5)] == [third.pid]
        finally:
            third.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(third.wait(), timeout=30) == 0
    finally:
        await app.close()
        if first.returncode is None:
            first.kill()
            await first.wait()


@pg_only
async def test_a_claimed_tick_drops_its_claims_in_the_writes_that_move_the_sessions(pg: Database):
    """The compare-and-set of a claimed tick clears the claim in the same row write: only
    the targets it did not write (skipped ones) take a release UPDATE; none are left."""
    async with CoordinatorHarness(
        include_builtin_handlers=False, database_url=pg.url, database_schema=pg.schema
    ) as h:
        sids = [await h.create_session() for _ in range(3)]
        handler = Scripted()
        handler.script = lambda targets: HandlerResult(
            successes=[t.id for t in targets if t.id != sids[0]], skipped=[sids[0]]
        )
        coordinator = _coordinator(h, handler, "coordinator-a")
        releases: list[str] = []

        def seen(conn, cursor, statement, parameters, context, executemany) -> None:
            # The release (not the claim): it sets only the claim, where the token is ours.
            release = statement.startswith("UPDATE entities SET claim_owner=")
            if release and "entities.claim_token = " in statement:
                releases.append(statement)

        engine = h.repository.engine.sync_engine
        sa.event.listen(engine, "before_cursor_execute", seen)
        try:
            report = await coordinator.tick("scripted")
            assert (report.count(R.SUCCESS), report.count(R.SKIPPED)) == (2, 1)
            assert len(releases) == 1, "one release, for the skipped session"
            assert await h.repository.claims_by_owner() == {}
            handler.script = lambda targets: HandlerResult(successes=[t.id for t in targets])
            report = await coordinator.tick("scripted")
            assert report.count(R.SUCCESS) == 1
            assert len(releases) == 1, "every target written: no release UPDATE"
        finally:
            sa.event.remove(engine, "before_cursor_execute", seen)
        assert await h.repository.claims_by_owner() == {}
        assert [(await h.session(s)).status for s in sids] == [S.SCHEDULED] * 3


# -- the solo lease: a lone coordinator claims no rows --------------------------------------


async def _register(h: CoordinatorHarness, cid: str) -> None:
    now = datetime.fromtimestamp(h.clock.time(), UTC)
    info = CoordinatorInfo(cid, "host", os.getpid(), now, now, "test", None)
    await h.repository.register_coordinator(info)


def _lease_of(h: CoordinatorHarness, owner: str, token: str) -> Claim:
    return Claim(owner, token, h.clock.time() + 10.0, 10.0, solo=True)


@pg_only
async def test_a_solo_tick_claims_no_row_and_is_fenced_once_its_lease_is_revoked(pg: Database):
    """Under A's solo lease its tick marks no row and B fetches nothing; A pauses past the
    lease, B revokes it and moves the session; A's apply is fenced, nothing moves twice."""
    async with CoordinatorHarness(
        include_builtin_handlers=False, database_url=pg.url, database_schema=pg.schema
    ) as h:
        sid = await h.create_session()
        repo = h.repository
        await _register(h, "coordinator-a")
        now = h.clock.time()
        took = await repo.take_solo("coordinator-a", "lease-a", until=now + 10, alive_since=now)
        assert took, "alone: A takes the lease"
        slow = Gated()
        a = _coordinator(h, slow, "coordinator-a")
        a.solo_claim = _lease_of(h, "coordinator-a", "lease-a")
        fast = Scripted()
        fast.script = lambda targets: HandlerResult(successes=[t.id for t in targets])
        b = _coordinator(h, fast, "coordinator-b")

        tick_a = asyncio.create_task(a.tick("scripted"))
        await asyncio.wait_for(slow.entered.wait(), timeout=10)
        assert await repo.claims_by_owner() == {}, "a solo tick marks no row"
        assert (await b.tick("scripted")).fetched == 0, "nobody claims beside a solo lease"

        await _register(h, "coordinator-b")
        h.clock.advance(11)  # A's lease lapses (A is paused inside execute)
        later = h.clock.time()
        await repo.take_solo("coordinator-b", "lease-b", until=later + 10, alive_since=later)
        report_b = await b.tick("scripted")
        assert (report_b.fetched, report_b.count(R.SUCCESS)) == (1, 1)

        h.clock.advance(1)
        slow.gate.set()
        report_a = await asyncio.wait_for(tick_a, timeout=10)
        assert [(c.result, c.error_code) for c in report_a.changes] == [(R.SKIPPED, "fenced")]
        assert (await h.session(sid)).status == S.SCHEDULED
        rows = await h.history(sid)
        assert [(r.result, r.from_status, r.to_status, r.error_code) for r in rows] == [
            ("CREATED", S.PENDING, S.PENDING, None),
            (R.SUCCESS, S.PENDING, S.SCHEDULED, None),
            (R.SKIPPED, S.SCHEDULED, S.SCHEDULED, "fenced"),
        ]
        assert not await repo.keep_solo(
            "coordinator-a", "lease-a", until=later + 20, alive_since=later - 100
        ), "a revoked lease is not renewed"


@pg_only
async def test_a_solo_tick_is_fenced_on_a_session_another_coordinator_claimed(pg: Database):
    """A claim another coordinator holds on a row (it claimed it before the lease was
    taken) wins over the lease: the solo tick neither fetches nor writes it."""
    async with CoordinatorHarness(
        include_builtin_handlers=False, database_url=pg.url, database_schema=pg.schema
    ) as h:
        first, second = await h.create_session(), await h.create_session()
        repo = h.repository
        held = Gated()
        b = _coordinator(h, held, "coordinator-b")
        b_options = b.options("scripted")
        assert b_options.batch_size >= 2
        tick_b = asyncio.create_task(b.tick("scripted"))
        await asyncio.wait_for(held.entered.wait(), timeout=10)
        assert held.calls == [[first, second]]
        await _register(h, "coordinator-a")
        now = h.clock.time()
        assert await repo.take_solo("coordinator-a", "lease-a", until=now + 10, alive_since=now)
        solo = Scripted()
        solo.script = lambda targets: HandlerResult(successes=[t.id for t in targets])
        a = _coordinator(h, solo, "coordinator-a")
        a.solo_claim = _lease_of(h, "coordinator-a", "lease-a")
        assert (await a.tick("scripted")).fetched == 0, "B's live claims are not fetched"
        held.gate.set()
        report_b = await asyncio.wait_for(tick_b, timeout=10)
        assert report_b.count(R.SUCCESS) == 2
        assert await repo.claims_by_owner() == {}


@pg_only
async def test_a_lone_daemon_ticks_solo_and_gives_the_lease_up_when_another_joins(
    pg: Database, tmp_path: Path
):
    """Alone, a daemon takes the solo lease and its sessions run with no claim written;
    a second daemon's registration makes it leave the lease, and sessions submitted
    then run under claims, each moved once."""
    extra = {"backend.agents": BIG_AGENT}
    engine_seen: list[str] = []

    def claims_written(conn, cursor, statement, parameters, context, executemany) -> None:
        # Claims and releases; not the solo fetch's drop of lapsed claims (none here).
        lapsed = "entities.claim_token IS NOT NULL" in statement
        if statement.startswith("UPDATE entities SET claim_owner=") and not lapsed:
            engine_seen.append(statement)

    async with running_daemon(pg, tmp_path / "data", **extra) as (app, one):
        await wait_for(lambda: _true(one.coordinator.solo_claim is not None), what="the solo lease")
        engine = app.repository.engine.sync_engine
        sa.event.listen(engine, "before_cursor_execute", claims_written)
        try:
            ids = await app.repository.create_sessions(
                [{"kernels": [{"command": ["true"], "cpu": 1, "mem": 1}]} for _ in range(5)]
            )
            await wait_for(lambda: _all_ended(app, ids), timeout=60, what="solo sessions")
            assert engine_seen == [], "a solo daemon writes no claim"
        finally:
            sa.event.remove(engine, "before_cursor_execute", claims_written)
        async with running_daemon(pg, tmp_path / "data", **extra) as (_app2, two):
            await wait_for(
                lambda: _true(one.coordinator.solo_claim is None), what="leaving the lease"
            )
            assert two.coordinator.solo_claim is None
            more = await app.repository.create_sessions(
                [{"kernels": [{"command": ["true"], "cpu": 1, "mem": 1}]} for _ in range(10)]
            )
            await wait_for(lambda: _all_ended(app, more), timeout=60, what="claimed sessions")
        for sid in [*ids, *more]:
            rows = await app.repository.history(sid)
            moves = Counter(r.from_status for r in rows if r.from_status != r.to_status)
            assert all(n == 1 for n in moves.values()), (sid, rows)
            assert not [r for r in rows if r.error_code == "fenced"], (sid, rows)


async def _true(value: bool) -> bool:
    return value


async def _all_ended(app: App, ids: Sequence[str]) -> bool:
    sessions = [await app.repository.get_session(sid) for sid in ids]
    return all(s.status in (S.TERMINATED, S.ERROR) for s in sessions)


# -- device ids across coordinators -------------------------------------------------------

GPU_AGENT = [{"id": "gpu-node", "cpu": 64, "mem": 65536, "gpu": ["0", "1", "2", "3"]}]


def _gpu_command(marks: Path) -> list[str]:
    # A device in use is a directory only one process can make (mkdir is atomic): a
    # second live kernel given the same id records a clash.
    body = (
        f'd={marks}/gpu-$CUDA_VISIBLE_DEVICES; mkdir "$d" || echo "$DROVER_KERNEL_ID" >> '
        f'{marks}/clashes; echo "$DROVER_KERNEL_ID $CUDA_VISIBLE_DEVICES" >> {marks}/used; '
        'sleep 0.4; rmdir "$d"'
    )
    return ["/bin/sh", "-c", body]


@pg_only
async def test_two_daemons_never_give_one_device_to_two_live_kernels(pg: Database, tmp_path: Path):
    """Two daemons on one PostgreSQL database, one agent with four fake GPUs, 32 kernels
    asking gpu = 1, prepared one session a tick by either daemon: no device id is ever held
    by two live kernels, as the database says (sampled all along) and as the processes saw
    (CUDA_VISIBLE_DEVICES); both daemons gave devices. Each coordinator's choice used to be
    kept in its own memory until its kernel's report committed: the other gave it again."""
    marks = tmp_path / "marks"
    marks.mkdir()
    extra = {
        "backend.agents": GPU_AGENT,
        "claim_ttl": 20.0,
        # One session a tick: the two daemons prepare side by side.
        "handlers.prepare-sessions.batch_size": 1,
        "handlers.prepare-sessions.interval": 0.05,
    }
    prepared: Counter[str] = Counter()
    samples: list[list[str]] = []

    def counted(app: App, name: str) -> None:
        original = app.backend.prepare

        async def prepare(session: SessionWithKernels) -> None:
            prepared[name] += 1
            await original(session)

        app.backend.prepare = prepare  # type: ignore[method-assign]

    async with (
        running_daemon(pg, tmp_path / "data", **extra) as (one, _one),
        running_daemon(pg, tmp_path / "data", **extra) as (two, _two),
    ):
        counted(one, "one")
        counted(two, "two")
        repo = one.repository
        kernel = {"command": _gpu_command(marks), "cpu": 1, "mem": 1, "gpu": 1}
        ids = await repo.create_sessions([{"kernels": [kernel]} for _ in range(32)])

        async def ended_while_sampling() -> bool:
            live = await repo.kernels_in(HOLDING_KERNEL_STATUSES)
            samples.append([d for k in live for d in devices_of(k.runtime).get("gpu", [])])
            return await _all_ended(one, ids)

        await wait_for(ended_while_sampling, timeout=240, what="32 gpu sessions ended")
        sessions = [await repo.get_session(sid) for sid in ids]

    assert not (marks / "clashes").exists(), (marks / "clashes").read_text()
    assert len(samples) > 10
    for sample in samples:
        assert len(sample) == len(set(sample)), sample
    assert set(prepared) == {"one", "two"}, prepared
    used = dict(line.split() for line in (marks / "used").read_text().splitlines())
    ran = [k for s in sessions for k in s.kernels if k.id in used]
    # Two schedulers may together place a fifth kernel on four ids: it is refused, never
    # given one held.
    for s in sessions:
        (k,) = s.kernels
        if k.id in used:
            assert (k.status, k.exit_code) == (K.TERMINATED, 0), k
            assert devices_of(k.runtime) == {"gpu": [used[k.id]]}, k
        else:
            assert k.status == K.ERROR, k
            assert "device(s) wanted, 0 free on agent gpu-node" in (k.status_info or ""), k
    assert len(ran) >= 28, [(k.status, k.status_info) for s in sessions for k in s.kernels]
