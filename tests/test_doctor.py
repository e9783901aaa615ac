"""Issue 36, point 11: ``drover doctor`` checks a live database's invariants.

Each broken state is built directly in the database (seeding, then raw SQL behind
drover's back) and doctor must name the rule and the entity, pool or coordinator;
a healthy database exits 0. On SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import time

import attrs
import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from tree import JOB, KINDS, TASK, Job, RunTasks, Task, harness, ids

from drover import HandlerResult, Pool
from drover.cli.group import main
from drover.inspection.doctor import RULES, chain_problem, examine
from drover.kinds.sessions.values import KernelStatus as K
from drover.kinds.sessions.values import SessionStatus as S
from drover.storage.queries import RecordedMoves
from drover.testing import CoordinatorHarness


def run(database, fn):
    """``await fn(h)`` on a harness (drover's own kinds) over the test's database."""

    async def go():
        async with CoordinatorHarness(
            database_url=database.url, database_schema=database.schema
        ) as h:
            return await fn(h)

    return asyncio.run(go())


async def sql(h, text: str, **params) -> None:
    """Write behind drover's back."""
    async with h.repository.engine.begin() as conn:
        await conn.execute(sa.text(text), params)


@pytest.fixture
def doctor(database, monkeypatch, tmp_path):
    """``drover doctor --json`` on the test's database: (exit code, its JSON)."""
    monkeypatch.chdir(tmp_path)
    for var in ("DROVER_CONFIG", "DROVER_LOG_FORMAT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DROVER_DATABASE_URL", database.url)
    monkeypatch.setenv("DROVER_DATABASE_SCHEMA", database.schema or "")
    runner = CliRunner()

    def call(*args: str):
        result = runner.invoke(main, ["doctor", *args], catch_exceptions=False)
        return result.exit_code, (json.loads(result.output) if "--json" in args else result.output)

    return call


def named(found) -> list[tuple[str, str, str]]:
    """The problems doctor found, as (rule, kind, subject)."""
    return [(p["rule"], p["kind"], p["subject"]) for p in found["problems"]]


async def _running(h) -> tuple[str, list[str]]:
    spec = {"cpu": 1, "mem": 1, "status": K.RUNNING, "agent_id": "agent-1"}
    sid = await h.create_session(status=S.RUNNING, kernels=[spec, spec])
    return sid, [k.id for k in (await h.session(sid)).kernels]


def test_a_healthy_database_exits_0(database, doctor):
    """A lifecycle run to its end, a termination, a backend's error and a report's end."""

    async def live(h):
        ids = [await h.create_session(kernels=[{"cpu": 1, "mem": 1}] * 2) for _ in range(4)]
        await h.tick("schedule-sessions")
        await h.request_termination(ids[0])
        await h.run_until_settled()
        await h.request_termination(ids[1])
        kernel = (await h.session(ids[2])).kernels[0].id
        await h.set_kernel_status(kernel, K.ERROR, message="exited 3")
        assert await h.repository.report(ids[3], S.ERROR, source="ci")
        await h.run_until_settled()
        return ids

    run(database, live)
    code, found = doctor("--json")
    assert (code, found["ok"], found["problems"]) == (0, True, [])
    assert found["rules"] == sorted(RULES)
    code, text = doctor()
    assert code == 0
    assert text.startswith("ok: all 8 rules hold")
    assert "Example: drover doctor --json" in CliRunner().invoke(main, ["doctor", "--help"]).output


def test_an_ended_entity_with_a_live_child_is_named(database, doctor):
    async def break_it(h):
        sid, kernels = await _running(h)
        await sql(h, "UPDATE entities SET status = 'ERROR' WHERE id = :i", i=sid)
        # Its history says so too: only the live children are wrong.
        await sql(
            h,
            "INSERT INTO scheduling_history (entity_id, kind, handler, result, from_status, "
            "to_status, attempts, created_at, updated_at) VALUES (:i, 'session', 'probe', "
            "'SUCCESS', 'RUNNING', 'ERROR', 1, 1, 1)",
            i=sid,
        )
        return sid, sorted(kernels)

    sid, kernels = run(database, break_it)
    code, found = doctor("--json")
    assert (code, named(found)) == (1, [("ended-with-live-children", "session", sid)])
    k1, k2 = kernels
    assert found["problems"][0]["message"] == (
        f"it is ERROR, but 2 child(ren) are live: kernel {k1} (RUNNING), kernel {k2} (RUNNING)"
    )
    code, text = doctor()
    assert code == 1
    assert text.splitlines()[0].startswith(f"ended-with-live-children: session {sid}: it is ERROR")


def test_a_gap_in_an_entitys_history_is_named(database, doctor):
    async def break_it(h):
        sid = await h.create_session()
        await h.run_until_settled()
        kernel = (await h.session(sid)).kernels[0].id
        # One change of the kernel's chain goes missing ...
        await sql(
            h,
            "DELETE FROM status_changes WHERE entity_id = :k AND from_status = 'PREPARED'",
            k=kernel,
        )
        # ... and another kernel changed status with no record at all.
        _, (moved, _) = await _running(h)
        await sql(
            h, "UPDATE entities SET status = 'TERMINATED', exit_code = 0 WHERE id = :k", k=moved
        )
        return kernel, moved

    kernel, moved = run(database, break_it)
    code, found = doctor("--json")
    assert code == 1
    assert sorted(named(found)) == sorted(
        [("history-chain", "kernel", kernel), ("history-chain", "kernel", moved)]
    )
    messages = {p["subject"]: p["message"] for p in found["problems"]}
    assert messages[kernel] == (
        "created PENDING, now RUNNING: no recorded change into CREATING; "
        "no recorded change out of PREPARED"
    )
    assert messages[moved] == "created RUNNING, now TERMINATED, with no recorded change"


def test_a_kernel_that_ended_without_saying_how_is_named(database, doctor):
    async def break_it(h):
        sid, (kernel, _) = await _running(h)
        await sql(h, "UPDATE entities SET status = 'ERROR' WHERE id = :k", k=kernel)
        await sql(
            h,
            "INSERT INTO status_changes (entity_id, kind, parent_id, source, from_status, "
            "to_status, created_at) VALUES (:k, 'kernel', :s, 'probe', 'RUNNING', 'ERROR', 7)",
            k=kernel,
            s=sid,
        )
        return kernel

    kernel = run(database, break_it)
    code, found = doctor("--json")
    assert (code, named(found)) == (1, [("unexplained-end", "kernel", kernel)])
    assert found["problems"][0]["message"] == (
        "it ended ERROR with no exit code, no status_info, no message, and not with its parent"
    )


def test_claims_and_coordinators_outside_their_limits_are_named(database, doctor):
    now = time.time()

    async def break_it(h):
        half, _ = await _running(h)
        await sql(h, "UPDATE entities SET claim_owner = 'c1' WHERE id = :i", i=half)
        long, _ = await _running(h)
        await sql(
            h,
            "UPDATE entities SET claim_owner = 'c1', claim_token = 't', claim_expires = :t "
            "WHERE id = :i",
            i=long,
            t=now + 10_000,
        )
        await sql(
            h,
            "INSERT INTO coordinators (id, host, pid, started_at, heartbeat_at, version) "
            "VALUES ('c-dead', 'node-1', 4242, :t, :t, '0.1')",
            t=now - 3600,
        )
        return half, long

    half, long = run(database, break_it)
    code, found = doctor("--json")
    assert code == 1
    assert named(found) == [
        ("claim-incomplete", "session", half),
        ("claim-past-ttl", "session", long),
        ("stale-coordinator", "coordinator", "c-dead"),
    ]
    messages = [p["message"] for p in found["problems"]]
    assert messages[0] == "its tick claim has no token and no expiry"
    assert messages[1].startswith("c1's claim expires in ")
    assert messages[1].endswith("s, past claim_ttl")
    assert messages[2].startswith("not marked stopped, but its last heartbeat is ")
    assert messages[2].endswith("old (node-1, pid 4242): it died without stopping")


async def test_moves_recorded_in_both_tables_and_a_reopening_chain(make_harness):
    """A handler of a child kind writes its move in both history tables; a reopened entity
    leaves its terminal status: neither is a gap."""
    done = RunTasks(lambda targets: HandlerResult(successes=ids(targets)))
    async with harness(make_harness, done) as h:
        job = await h.create("job", status=Job.RUNNING)
        task = await h.create("task", status=Task.RUNNING, parent=job)
        await h.tick("run-tasks")
        await h.repository.reopen(task, Task.RUNNING)
        await h.tick("run-tasks")
        assert [r.to_status for r in await h.history(task)] == [
            Task.RUNNING, Task.DONE, Task.RUNNING, Task.DONE
        ]  # fmt: skip
        assert (
            await examine(h.repository.queries, now=time.time(), claim_ttl=60, heartbeat_interval=5)
            == []
        )


SLOTS = Pool("slots", 1, held_in={Job.RUNNING})
UNITS = Pool("units", 2, held_in={Task.RUNNING}, claimed=True)
POOLED = (attrs.evolve(JOB, pools=(SLOTS,)), attrs.evolve(TASK, pools=(UNITS,)), *KINDS[2:])


async def test_pools_held_or_claimed_past_their_capacity_are_named(make_harness):
    """Generic over kinds: a plugin's pools, each by its declared capacity."""
    async with harness(make_harness, kinds=POOLED) as h:

        async def problems():
            found = await examine(
                h.repository.queries, now=time.time(), claim_ttl=60, heartbeat_interval=5
            )
            return [(p.rule, p.kind, p.subject, p.message) for p in found]

        job = await h.create("job", status=Job.RUNNING)
        waiting = await h.create(
            "task", status=Task.PENDING, parent=job, spec={"pools": {"units": 2}}
        )
        assert await problems() == []
        # Behind the apply's back: a second holder, and a claim the pool could never hold.
        other = await h.create("job", status=Job.QUEUED)
        await sql(h, "UPDATE entities SET status = 'RUNNING' WHERE id = :i", i=other)
        await sql(h, "INSERT INTO scheduling_history (entity_id, kind, handler, result, "
                  "from_status, to_status, attempts, created_at, updated_at) VALUES (:i, 'job', "
                  "'probe', 'SUCCESS', 'QUEUED', 'RUNNING', 1, 1, 1)", i=other)  # fmt: skip
        await sql(
            h,
            "UPDATE entities SET spec = :s WHERE id = :i",
            s='{"pools": {"units": 5}}',
            i=waiting,
        )
        assert await problems() == [
            ("pool-over-capacity", "pool", "slots", "2 units are held; its capacity is 1"),
            (
                "claim-over-capacity",
                "task",
                waiting,
                "it claims 5 units of pool units, whose capacity is 2: it could never hold them",
            ),
        ]


#: A loop of changes that joins no other: its statuses are entered as often as left.
CYCLE = [("A", "B", 1), ("B", "A", 1)]


@pytest.mark.parametrize(
    ("created", "status", "moves", "problem"),
    [
        ("PENDING", "SCHEDULED", [("PENDING", "SCHEDULED", 1)], None),
        # A requeue: back to PENDING, then on again.
        (
            "PENDING",
            "SCHEDULED",
            [("PENDING", "SCHEDULED", 2), ("SCHEDULED", "PENDING", 1)],
            None,
        ),
        ("PENDING", "PENDING", [("PENDING", "SCHEDULED", 1), ("SCHEDULED", "PENDING", 1)], None),
        # Pruned from the start: any status may begin the chain.
        (None, "RUNNING", [("CREATING", "RUNNING", 1)], None),
        (None, "RUNNING", [("CREATING", "RUNNING", 1), ("PENDING", "SCHEDULED", 1)],
         "now RUNNING: no recorded change into CREATING; no recorded change into PENDING; "
         "no recorded change out of SCHEDULED"),
        (
            "PENDING",
            "PENDING",
            [("PENDING", "SCHEDULED", 1), ("SCHEDULED", "PENDING", 1), *CYCLE],
            "created PENDING, now PENDING: separate chains: A, B | PENDING, SCHEDULED",
        ),
        ("PENDING", "RUNNING", [], "created PENDING, now RUNNING, with no recorded change"),
    ],
)  # fmt: skip
def test_a_chain_is_judged_without_trusting_the_clocks(created, status, moves, problem):
    recorded = RecordedMoves("e1", "session", status, created, tuple(moves))
    assert chain_problem(recorded) == problem
