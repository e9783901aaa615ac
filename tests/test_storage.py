"""Storage: migrations, indexes, session creation and validation, termination requests."""

from __future__ import annotations

import re
from typing import Any

import pytest
import sqlalchemy as sa

from drover import (
    InvalidSpecError,
    KernelStatus,
    Kinds,
    Repository,
    SchedulingResult,
    SessionStatus,
    UnknownEntityError,
    UnknownSessionError,
)
from drover.kinds import BUILTIN_KINDS
from drover.storage import create_engine, current_revision, head_revision, upgrade

K = KernelStatus
S = SessionStatus


def test_head_revision_without_alembic_agrees_with_alembic():
    """head_revision() reads the file names (fast CLI start); Alembic's scripts say the same.

    The rule it relies on: revision NNNN lives in NNNN_<what>.py and follows NNNN-1.
    """
    from alembic.script import ScriptDirectory

    from drover.storage.migrate import alembic_config

    scripts = ScriptDirectory.from_config(alembic_config())
    assert head_revision() == scripts.get_current_head()
    for script in scripts.walk_revisions():
        assert script.path.rpartition("/")[2].startswith(f"{script.revision}_")
        if script.down_revision is not None:
            assert int(str(script.down_revision)) == int(script.revision) - 1


async def test_migrations_create_the_schema_and_reach_head(database):
    """An empty database upgrades to head with every table and required index."""
    engine = create_engine(database.url, schema=database.schema)
    try:
        assert await current_revision(engine) is None
        await upgrade(engine)
        assert await current_revision(engine) == head_revision()
        await upgrade(engine)  # idempotent

        def inspect(conn: sa.Connection) -> dict[str, set[tuple[str, ...]]]:
            insp = sa.inspect(conn)
            return {
                table: {tuple(ix["column_names"]) for ix in insp.get_indexes(table)}
                for table in insp.get_table_names()
            }

        async with engine.connect() as conn:
            indexes = await conn.run_sync(inspect)
    finally:
        await engine.dispose()
    assert {"entities", "scheduling_history", "status_changes"} <= set(indexes)
    assert not {"sessions", "kernels", "kernel_history"} & set(indexes)
    # Mandatory for the hot path: candidates by status, children by parent.
    assert ("kind", "status", "priority", "created_at", "id") in indexes["entities"]
    assert ("parent_id",) in indexes["entities"]
    for table in ("scheduling_history", "status_changes"):
        assert ("entity_id", "id") in indexes[table]
        assert ("created_at",) in indexes[table]
    assert ("parent_id", "id") in indexes["status_changes"]
    assert ("handler", "result") in indexes["scheduling_history"]


async def test_upgrading_an_existing_database_carries_its_sessions_over(database):
    """A database at 0003 (sessions and kernels tables) keeps every row through 0004."""
    engine = create_engine(database.url, schema=database.schema)
    try:
        await upgrade(engine, "0003")
        async with engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "INSERT INTO sessions (id, name, status, status_changed_at, try_count, "
                    "priority, created_at, spec, status_info, result) VALUES "
                    "('s1', 'old', 'TERMINATED', 20, 2, 5, 10, '{\"a\": 1}', 'KERNEL_EXITED', "
                    "'SUCCESS'), ('s2', 'live', 'RUNNING', 30, 0, 0, 11, '{}', NULL, NULL)"
                )
            )
            await conn.execute(
                sa.text(
                    "INSERT INTO kernels (id, session_id, status, status_changed_at, agent_id, "
                    "spec, exit_code, status_info, runtime) VALUES "
                    "('k1', 's1', 'TERMINATED', 20, 'a1', '{\"cpu\": 1}', 0, NULL, 'null'), "
                    "('k2', 's2', 'RUNNING', 30, 'a1', '{\"cpu\": 2}', NULL, NULL, "
                    "'{\"pid\": 42}')"
                )
            )
            await conn.execute(
                sa.text(
                    "INSERT INTO scheduling_history (session_id, handler, result, from_status, "
                    "to_status, attempts, created_at, updated_at) VALUES "
                    "('s1', 'promote-to-terminated', 'SUCCESS', 'TERMINATING', 'TERMINATED', "
                    "1, 20, 20)"
                )
            )
            await conn.execute(
                sa.text(
                    "INSERT INTO kernel_history (kernel_id, session_id, source, from_status, "
                    "to_status, created_at) VALUES ('k1', 's1', 'backend', 'RUNNING', "
                    "'TERMINATED', 19)"
                )
            )
        await upgrade(engine)
        repo = Repository(engine, kinds=Kinds(BUILTIN_KINDS))
        old, live = await repo.get_session("s1"), await repo.get_session("s2")
        assert (old.name, old.status, old.priority, old.spec, old.result, old.status_info) == (
            "old",
            S.TERMINATED,
            5,
            {"a": 1},
            "SUCCESS",
            "KERNEL_EXITED",
        )
        assert [(k.id, k.status, k.exit_code, k.runtime) for k in old.kernels] == [
            ("k1", K.TERMINATED, 0, None)
        ]
        assert [(k.id, k.agent_id, k.runtime) for k in live.kernels] == [("k2", "a1", {"pid": 42})]
        rows = await repo.history("s1")
        assert [(r.session_id, r.handler, r.to_status) for r in rows] == [
            ("s1", "promote-to-terminated", S.TERMINATED)
        ]
        changes = await repo.kernel_history(session_id="s1")
        assert [(c.kernel_id, c.source, c.to_status) for c in changes] == [
            ("k1", "backend", K.TERMINATED)
        ]
        # New rows land after the copied ones.
        await repo.report_kernel_status("k2", K.TERMINATED, exit_code=0)
        assert [c.kernel_id for c in await repo.kernel_history()] == ["k1", "k2"]
        assert (await repo.count_by_status()) == {S.TERMINATED: 1, S.RUNNING: 1}
        await repo.close()
    finally:
        await engine.dispose()


async def test_sqlite_uses_wal(tmp_path):
    """The embedded default runs in WAL mode with synchronous=NORMAL."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/x.db")
    try:
        async with engine.connect() as conn:
            mode = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
            sync = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar()
    finally:
        await engine.dispose()
    assert (mode, sync) == ("wal", 1)


async def test_sqlite_wal_stays_bounded_under_a_writer_that_never_pauses(tmp_path):
    """SQLite starts its WAL over only when a write begins with every frame copied back:
    its checkpoints in the commit (drover's default) let that happen between writes, so a
    daemon that writes without pause keeps a WAL of about its 1,000-page threshold. (A
    checkpointing thread of drover's own never caught up: 262 MB in bench/lifecycle.py.)"""
    from drover.testing import CoordinatorHarness

    db = tmp_path / "busy.db"
    async with CoordinatorHarness(database_url=f"sqlite+aiosqlite:///{db}") as h:
        for batch in range(120):
            await h.repository.create_sessions(
                [{"name": f"s{batch}-{n}", "kernels": [{"cpu": 1}] * 4} for n in range(50)]
            )
        wal = db.with_name(db.name + "-wal").stat().st_size
        assert (await h.repository.count_by_status()) == {S.PENDING: 6000}
    # 6,000 sessions of 4 kernels and their history rows: over 30 MB written to the WAL.
    assert wal < 12 * 2**20, f"the WAL grew to {wal / 2**20:.1f} MiB"


async def test_create_session_defaults(make_harness):
    """Kernels start in the session's status unless they say otherwise."""
    async with make_harness() as h:
        sid = await h.create_session(
            kernels=[{"cpu": 1, "mem": 256}, {"cpu": 2, "status": "RUNNING"}],
            status=S.PREPARED,
            priority=3,
            name="train",
            spec={"image": "python:3.11"},
        )
        s = await h.session(sid)
        assert (s.name, s.status, s.priority, s.try_count, s.spec) == (
            "train",
            S.PREPARED,
            3,
            0,
            {"image": "python:3.11"},
        )
        assert [(k.status, k.spec) for k in s.kernels] == [
            (K.PREPARED, {"cpu": 1, "mem": 256}),
            (K.RUNNING, {"cpu": 2}),
        ]
        assert s.created_at == s.status_changed_at
        assert await h.create_session(kernels=[]) != sid  # kernels=[] is allowed


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kernels": [{"status": "FLYING"}]}, "kernel 1: 'status' is set by drover"),
        ({"kernels": [{"cmd": object()}]}, "kernel 1 spec is not JSON-serializable"),
        ({"kernels": "abc"}, "kernels must be a list"),
        ({"status": "LOST"}, "unknown session status 'LOST'"),
        ({"priority": "high"}, "priority must be an integer"),
        ({"spec": {"options": {"prepare-sessions": {"retries": 1}}}}, "unknown option 'retries'"),
        ({"spec": {"options": {"x": {"timeout": -5}}}}, "'timeout'] must be a finite number"),
        ({"spec": {"options": {"x": {"max_retries": 1.5}}}}, "must be a whole number"),
        # What the engine owns: a kernel may not start RUNNING on an agent, nor a session.
        (
            {"kernels": [{"cpu": 1, "status": "RUNNING", "agent_id": "sim-1"}]},
            "kernel 1: 'agent_id', 'status' are set by drover, not by a kernel spec",
        ),
        ({"kernels": [{"cpu": 1, "exit_code": 0}]}, "'exit_code' is set by drover"),
        ({"status": "RUNNING"}, "a new session is PENDING; its status (RUNNING) is set by drover"),
        # Every slot, not only cpu and mem, is a finite amount >= 0.
        ({"kernels": [{"cpu": 1, "gpu": -1000}]}, "resource 'gpu' must be a finite number >= 0"),
        ({"kernels": [{"cpu": float("nan")}]}, "resource 'cpu' must be a finite number >= 0"),
        ({"kernels": [{"mem": float("inf")}]}, "resource 'mem' must be a finite number >= 0"),
        ({"kernels": [{"gpu": 10**400}]}, "resource 'gpu' must be a finite number >= 0"),
        ({"kernels": [{"cpu": "two"}]}, "'cpu' must be a number >= 0"),
        # PostgreSQL's limits, enforced for SQLite too.
        ({"priority": 2**31}, "priority 2147483648 is out of range"),
        ({"priority": -(2**31) - 1}, "priority -2147483649 is out of range"),
        ({"name": "n" * 256}, "name is 256 characters long; at most 255"),
        ({"name": "a\x00b"}, "contains a NUL character"),
        ({"name": "caf\udce9"}, "is not valid UTF-8 text"),
        ({"name": 7}, "name must be text"),
        ({"spec": {"note": "a\x00b"}}, "session spec: the text 'a\\x00b' contains a NUL"),
        ({"spec": {"x\x00": 1}}, "the key 'x\\x00' contains a NUL"),
        ({"kernels": [{"env": {"A": "\x00"}}]}, "kernel 1 spec: the text '\\x00' contains a NUL"),
        ({"spec": {"ratio": float("nan")}}, "session spec: nan is not a finite number"),
        ({"spec": {"options": {"x": {"timeout": float("inf")}}}}, "'timeout'] must be a finite"),
        ({"spec": {"deep": _nested(100)}}, "nested more than 64 levels deep"),
    ],
)
async def test_bad_session_input_is_refused_and_nothing_is_written(make_harness, kwargs, message):
    """A clear error naming the problem, and no half-written session: the same on both databases."""
    async with make_harness() as h:
        call = {"kernels": [{"cpu": 1}], **kwargs}
        with pytest.raises(InvalidSpecError, match=re.escape(message)):
            await h.repository.create_session(**call)
        with pytest.raises(InvalidSpecError, match=re.escape(message)):
            await h.repository.create_sessions([call])
        assert await h.repository.list_sessions() == []


async def test_the_limits_are_the_widest_both_databases_take(make_harness):
    """Right at each limit, a session is written and read back unchanged on either database."""
    async with make_harness() as h:
        name = "\u00e9" * 255
        spec = {"note": "caf\u00e9 \u2603", "big": 10**30, "options": {"x": {"timeout": 1e-9}}}
        ids = await h.repository.create_sessions(
            [
                {"kernels": [{"cpu": 0, "gpu": 2.5}], "priority": 2**31 - 1, "name": name},
                {"kernels": [], "priority": -(2**31), "spec": spec},
            ]
        )
        top = await h.session(ids[0])
        assert (top.name, top.priority, top.kernels[0].spec) == (
            name,
            2**31 - 1,
            {"cpu": 0, "gpu": 2.5},
        )
        low = await h.session(ids[1])
        assert (low.priority, low.spec) == (-(2**31), spec)


async def test_seeding_sets_initial_statuses_for_tests(make_harness):
    """seed_sessions (what the harness uses) may start kernels anywhere; statuses are checked."""
    async with make_harness() as h:
        (sid,) = await h.repository.seed_sessions(
            [
                {
                    "kernels": [{"cpu": 1, "status": "RUNNING", "agent_id": "sim-1"}],
                    "status": "RUNNING",
                }
            ]
        )
        s = await h.session(sid)
        assert (s.status, s.kernels[0].status, s.kernels[0].agent_id) == (
            S.RUNNING,
            K.RUNNING,
            "sim-1",
        )
        with pytest.raises(InvalidSpecError, match="unknown kernel status 'FLYING'"):
            await h.repository.seed_sessions([{"kernels": [{"status": "FLYING"}]}])


async def test_creating_many_sessions_is_all_or_nothing(make_harness):
    """One bad request in a batch writes none of them."""
    async with make_harness() as h:
        with pytest.raises(InvalidSpecError):
            await h.repository.create_sessions(
                [{"kernels": [{"cpu": 1}]}, {"kernels": [{"status": "NOPE"}]}]
            )
        assert await h.repository.count_by_status() == {}


async def test_termination_requests(make_harness):
    """PENDING -> CANCELLED (kernels too); live -> TERMINATING; terminal untouched; api rows."""
    async with make_harness() as h:
        pending = await h.create_session()
        running = await h.create_session(status=S.RUNNING, kernels=[{"status": "RUNNING"}])
        done = await h.create_session(status=S.TERMINATED, kernels=[{"status": "TERMINATED"}])
        out = await h.repository.request_termination([pending, running, done])
        assert [(o.from_status, o.to_status, o.changed) for o in out] == [
            (S.PENDING, S.CANCELLED, True),
            (S.RUNNING, S.TERMINATING, True),
            (S.TERMINATED, S.TERMINATED, False),
        ]
        p = await h.session(pending)
        assert (p.status, p.status_info, p.result) == (S.CANCELLED, "USER_REQUESTED", "CANCELLED")
        assert [k.status for k in p.kernels] == [K.CANCELLED]
        r = await h.session(running)
        assert (r.status, r.status_info) == (S.TERMINATING, "USER_REQUESTED")
        assert [k.status for k in r.kernels] == [K.RUNNING]  # terminate-sessions stops them
        for sid, to in ((pending, S.CANCELLED), (running, S.TERMINATING)):
            created, row = await h.history(sid)
            assert (created.handler, created.result) == ("api", "CREATED")
            assert (row.handler, row.result, row.to_status) == ("api", SchedulingResult.SUCCESS, to)
        assert [r.result for r in await h.history(done)] == ["CREATED"]


async def test_termination_of_an_unknown_session_writes_nothing(make_harness):
    """An unknown id fails the whole request before anything is written."""
    async with make_harness() as h:
        sid = await h.create_session()
        with pytest.raises(UnknownEntityError, match="no entity with id 'nope'"):
            await h.repository.request_termination([sid, "nope"])
        assert (await h.session(sid)).status == S.PENDING
        assert [r.result for r in await h.history(sid)] == ["CREATED"]


async def test_reading_an_unknown_session(make_harness):
    """get_session raises a clear error."""
    async with make_harness() as h:
        with pytest.raises(UnknownSessionError):
            await h.session("missing")


async def test_repository_on_its_own(database):
    """The repository works without the harness once the database is upgraded."""
    engine = create_engine(database.url, schema=database.schema)
    try:
        await upgrade(engine)
        repo = Repository(engine, kinds=Kinds(BUILTIN_KINDS))
        ids = await repo.create_sessions(
            [{"kernels": [{"cpu": 1}], "priority": p, "name": f"s{p}"} for p in (1, 3, 2)]
        )
        listed = await repo.list_sessions(statuses=[S.PENDING])
        assert [s.name for s in listed] == ["s3", "s2", "s1"]  # priority descending
        assert set(ids) == {s.id for s in listed}
        assert await repo.count_by_status() == {S.PENDING: 3}
        await repo.close()
    finally:
        await engine.dispose()


async def test_terminating_a_session_without_kernels_ends_it(make_harness):
    """No kernels means nothing to stop: a live kernel-less session goes straight to TERMINATED."""
    async with make_harness() as h:
        sid = await h.create_session(kernels=[], status=S.RUNNING)
        out = await h.request_termination(sid)
        assert (out.from_status, out.to_status) == (S.RUNNING, S.TERMINATED)
        s = await h.session(sid)
        assert (s.status, s.status_info) == (S.TERMINATED, "USER_REQUESTED")


async def test_the_migrated_schema_matches_the_code(database):
    """Alembic sees no difference between the migrations and drover.storage.schema."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from drover.storage.schema import metadata

    engine = create_engine(database.url, schema=database.schema)
    try:
        await upgrade(engine)
        async with engine.connect() as conn:
            diff = await conn.run_sync(
                lambda c: compare_metadata(MigrationContext.configure(c), metadata)
            )
    finally:
        await engine.dispose()
    assert diff == []


async def test_a_backend_report_records_its_status_changes_in_one_statement(make_harness, database):
    """Reports of many kernels record one status change each (message included) with one
    INSERT execution; on PostgreSQL not an executemany (asyncpg runs those row by row)."""
    from drover import KernelReport

    async with make_harness() as h:
        sids = [
            await h.create_session(kernels=[{"cpu": 1, "status": "RUNNING"}] * 3, status=S.RUNNING)
            for _ in range(4)
        ]
        kernels = [k for sid in sids for k in (await h.session(sid)).kernels]
        inserts: list[bool] = []

        def seen(conn, cursor, statement, parameters, context, executemany) -> None:
            if statement.lstrip().upper().startswith("INSERT INTO STATUS_CHANGES"):
                inserts.append(executemany)

        engine = h.repository.engine.sync_engine
        sa.event.listen(engine, "before_cursor_execute", seen)
        # The threaded SQLite engine of the repository's database runs its own statements.
        threaded = h.repository._db._threaded
        if threaded is not None:
            sa.event.listen(threaded, "before_cursor_execute", seen)
        try:
            reports = [
                KernelReport(
                    k.id,
                    K.ERROR if i % 2 else K.TERMINATED,
                    exit_code=i,
                    message=f"m{i}" if i else None,
                )
                for i, k in enumerate(kernels)
            ]
            assert all(await h.repository.report_kernel_statuses(reports))
        finally:
            sa.event.remove(engine, "before_cursor_execute", seen)
            if threaded is not None:
                sa.event.remove(threaded, "before_cursor_execute", seen)
        assert inserts == ([False] if database.kind == "postgresql" else [True])
        for i, k in enumerate(kernels):
            rows = await h.kernel_history(k.id)
            want = K.ERROR if i % 2 else K.TERMINATED
            assert [(r.source, r.from_status, r.to_status, r.message) for r in rows] == [
                ("backend", K.RUNNING, want, f"m{i}" if i else None)
            ]


def test_hot_reads_on_sqlites_cursor_match_sqlalchemy_and_keep_a_bounded_cache(monkeypatch):
    """driver_rows gives the rows SQLAlchemy gives (constants, expanded lists, parameters),
    inside a transaction, and keeps at most DRIVER_STATEMENTS statements rendered."""
    from drover.storage import _sql

    monkeypatch.setattr(_sql, "DRIVER_STATEMENTS", 2)
    engine = sa.create_engine("sqlite://")
    t = sa.table("t", sa.column("a"), sa.column("b"))
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (a INTEGER, b TEXT)")
        conn.exec_driver_sql("INSERT INTO t VALUES (1, 'x'), (2, 'y'), (3, 'z')")
    queries = [
        sa.select(t.c.a, t.c.b)
        .where(t.c.b.in_(["x", "z"]), t.c.a >= sa.bindparam("low"))
        .order_by(t.c.a)
        .limit(limit)
        for limit in range(1, 6)
    ]
    with engine.connect() as conn:
        for query in queries * 2:
            rows = _sql.driver_rows(conn, query, {"low": 1})
            assert conn.in_transaction()
            assert [tuple(r) for r in rows] == [tuple(r) for r in conn.execute(query, {"low": 1})]
        assert len(_sql._DRIVER_SQL) <= 2
        # A list bound per execution expands differently each time: still right.
        listed = sa.select(t.c.a).where(t.c.b.in_(sa.bindparam("bs", expanding=True)))
        assert [r[0] for r in _sql.driver_rows(conn, listed, {"bs": ["x"]})] == [1]
        assert sorted(r[0] for r in _sql.driver_rows(conn, listed, {"bs": ["y", "z"]})) == [2, 3]
    engine.dispose()
