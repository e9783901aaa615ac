"""Pool families (issue 34, gap 7): pools that appear while drover runs.

``Pool("gpu-node-*", 2, held_in=..., claimed=True)`` declares every pool
``gpu-node-<suffix>``: an entity claiming ``gpu-node-n7`` (never declared) is
admitted up to that member's capacity, each member is counted on its own, and
a member's capacity can be set at run time. Every test runs on SQLite and
PostgreSQL; two coordinators race for one member on PostgreSQL.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from conftest import SKIP_PG, Database
from peers import JOB, TASK, Job, Scripted, Task, harness, succeed
from pool_race import tick_b_inside_a_apply

from drover import (
    HandlerOptions,
    HandlerResult,
    InvalidHandlerError,
    InvalidSpecError,
    NewEntity,
    Pool,
    PoolHasRoom,
    StatusTransitions,
    Transition,
)
from drover.coordinator.tick import Coordinator
from drover.model.kinds import Kinds
from drover.model.pools import POOL_FULL
from drover.testing import CoordinatorHarness

NODES = Pool("gpu-node-*", 2, held_in={Job.RUNNING}, claimed=True)
KINDS = (attrs.evolve(JOB, pools=(NODES,)), TASK)


class StartJobs(Scripted):
    handler = "start-jobs"
    statuses = frozenset({Job.QUEUED})
    transitions = StatusTransitions(success=Transition(Job.RUNNING))
    options = HandlerOptions(max_retries=None, batch_size=20)


class FinishJobs(Scripted):
    handler = "finish-jobs"
    statuses = frozenset({Job.RUNNING})
    transitions = StatusTransitions(success=Transition(Job.DONE))


def _on(node: str, units: int = 1) -> dict[str, Any]:
    return {"pools": {node: units}}


async def _statuses(h: Any, ids: list[str]) -> list[str]:
    return [str((await h.get(i)).status) for i in ids]


async def test_a_member_never_declared_is_admitted_up_to_its_capacity(make_harness):
    async with harness(make_harness, StartJobs(succeed), FinishJobs(succeed), kinds=KINDS) as h:
        n7 = [await h.create("job", priority=9 - i, spec=_on("gpu-node-n7")) for i in range(3)]
        report = await h.tick("start-jobs")
        assert await _statuses(h, n7) == ["RUNNING", "RUNNING", "QUEUED"]
        (refused,) = [c for c in report.changes if c.error_code == POOL_FULL]
        assert refused.entity_id == n7[2]
        last = (await h.history(n7[2]))[-1]
        assert (str(last.result), last.error_code) == ("SKIPPED", POOL_FULL)
        assert "pool 'gpu-node-n7' is full (2/2 held, 1 claimed)" in (last.message or "")
        usage = await h.app.queries.pool_usage("gpu-node-n7")
        assert (usage.capacity, usage.held, usage.free) == (2, 2, 0)
        assert sorted(x.entity_id for x in usage.holders) == sorted(n7[:2])
        # Still full: it stays put.
        await h.tick("start-jobs")
        assert await _statuses(h, n7) == ["RUNNING", "RUNNING", "QUEUED"]
        # A worker grows while drover runs: the member's run-time capacity admits one more.
        await h.repository.set_pool_capacities({"gpu-node-n7": 3})
        assert (await h.app.queries.pool_usage("gpu-node-n7")).capacity == 3
        await h.tick("start-jobs")
        assert await _statuses(h, n7) == ["RUNNING", "RUNNING", "RUNNING"]
        # Holders end: their units come back.
        await h.tick("finish-jobs")
        assert (await h.app.queries.pool_usage("gpu-node-n7")).held == 0


async def test_two_members_are_counted_separately(make_harness):
    async with harness(make_harness, StartJobs(succeed), kinds=KINDS) as h:
        n7 = [await h.create("job", priority=9, spec=_on("gpu-node-n7", 2)) for _ in range(2)]
        n8 = [await h.create("job", spec=_on("gpu-node-n8")) for _ in range(3)]
        both = await h.create(
            "job", priority=-1, spec={"pools": {"gpu-node-n9": 1, "gpu-node-n8": 1}}
        )
        await h.tick("start-jobs")
        # n7: the first takes both units; n8: two of three; the last needs n8 too (full).
        assert await _statuses(h, n7) == ["RUNNING", "QUEUED"]
        assert await _statuses(h, n8) == ["RUNNING", "RUNNING", "QUEUED"]
        assert await _statuses(h, [both]) == ["QUEUED"]
        last = (await h.history(both))[-1]
        assert "pool 'gpu-node-n8' is full (2/2 held, 1 claimed)" in (last.message or "")
        assert (await h.app.queries.pool_usage("gpu-node-n9")).held == 0
        # Known members: those held (n9 is only claimed by a job that waits).
        assert await h.app.queries.pool_members("gpu-node-*") == ["gpu-node-n7", "gpu-node-n8"]
        # The family's own run-time capacity is every member's default; a member's own wins.
        await h.repository.set_pool_capacities({"gpu-node-*": 4, "gpu-node-n8": 2})
        await h.tick("start-jobs")
        assert await _statuses(h, n7) == ["RUNNING", "RUNNING"]
        assert await _statuses(h, n8) == ["RUNNING", "RUNNING", "QUEUED"]
        uses = {u.name: (u.capacity, u.held) for u in await h.app.queries.pool_use()}
        assert uses == {"gpu-node-n7": (4, 4), "gpu-node-n8": (2, 2)}


class _Place(StartJobs):
    """Starts every target on the worker ``_Place.worker`` (the handler's claims)."""

    handler = "place-jobs"
    worker = "gpu-node-a"


def _place(targets: Any) -> Any:
    ids = [t.id for t in targets]
    return HandlerResult(successes=ids, claims={i: {_Place.worker: 1} for i in ids})


async def test_a_handler_places_entities_on_a_member_that_joined_at_run_time(make_harness):
    _Place.worker = "gpu-node-joined"
    async with harness(make_harness, _Place(_place), kinds=KINDS) as h:
        jobs = [await h.create("job", priority=9 - i) for i in range(3)]
        report = await h.tick("place-jobs")
        codes = {c.entity_id: c.error_code for c in report.changes}
        assert [codes[j] for j in jobs] == [None, None, POOL_FULL]
        assert (await h.get(jobs[0])).spec == {"pools": {"gpu-node-joined": 1}}
        assert (await h.get(jobs[2])).spec == {}
        assert (await h.app.queries.pool_usage("gpu-node-joined")).held == 2
        # A claim outside the family is an invalid result: nothing moves.
        _Place.worker = "tpu-node-a"
        report = await h.tick("place-jobs")
        assert await _statuses(h, jobs) == ["RUNNING", "RUNNING", "QUEUED"]
        assert "claim on pool 'tpu-node-a'" in (report.changes[0].message or "")


async def test_a_name_outside_every_family_is_refused_and_nothing_is_written(make_harness):
    async with harness(make_harness, StartJobs(succeed), kinds=KINDS) as h:
        for name in ("tpu-node-1", "gpu-node-", "gpu-node-N7", "gpu-nodes"):
            with pytest.raises(InvalidSpecError, match=f"no pool named '{name}'; pools: gpu-node-"):
                await h.repository.set_pool_capacities({"gpu-node-n7": 5, name: 1})
            with pytest.raises(InvalidSpecError, match=f"names pool '{name}', which kind 'job'"):
                await h.repository.create_entities([NewEntity("job", spec=_on(name))])
        assert await h.app.queries.list_entities("job") == []
        assert (await h.app.queries.pool_usage("gpu-node-n7")).capacity == 2
        with pytest.raises(InvalidSpecError, match="no pool named 'tpu-node-1'"):
            await h.app.queries.pool_usage("tpu-node-1")
        # A member's claim is checked like any claim.
        with pytest.raises(InvalidSpecError, match="must be a whole number from 1"):
            await h.repository.create_entities([NewEntity("job", spec=_on("gpu-node-n7", 0))])


def test_a_pool_family_is_declared_soundly():
    with pytest.raises(InvalidHandlerError, match="pool family 'x-\\*' must be claimed=True"):
        Pool("x-*", 1, held_in={Job.RUNNING}, claimed=False)
    for name in ("x*", "*", "a-*-*", "A-*", "a-*b"):
        with pytest.raises(InvalidHandlerError, match="must be kebab-case"):
            Pool(name, 1, held_in={Job.RUNNING}, claimed=True)
    wide = Pool("gpu-*", 2, held_in={Task.WORKING}, claimed=True)
    with pytest.raises(InvalidHandlerError, match="overlaps the pool family 'gpu-\\*'"):
        Kinds((attrs.evolve(JOB, pools=(NODES,)), attrs.evolve(TASK, pools=(wide,))))
    plain = Pool("gpu-node-a", 2, held_in={Task.WORKING})
    with pytest.raises(InvalidHandlerError, match="'gpu-node-a' overlaps the pool family"):
        Kinds((attrs.evolve(JOB, pools=(NODES,)), attrs.evolve(TASK, pools=(plain,))))
    kinds = Kinds(KINDS)
    # Configuration ([pools]) may name a member; a name outside every family is refused.
    member = kinds.configured(pools={"gpu-node-n7": 4}).pool("gpu-node-n7")
    assert member is not None
    assert (member.capacity, member.family) == (4, "gpu-node-*")
    assert kinds.pool("gpu-node-n8").capacity == 2  # type: ignore[union-attr]
    assert kinds.pool("tpu-node-1") is None
    with pytest.raises(InvalidHandlerError, match="unknown pool\\(s\\) \\['tpu-node-1'\\]"):
        kinds.configured(pools={"tpu-node-1": 4})


async def test_a_room_filter_naming_a_family_is_refused_at_registration(make_harness):
    for name in ("gpu-node-*", "gpu-node-n7"):

        class Start(StartJobs):
            filters = (PoolHasRoom({name}),)

        with pytest.raises(InvalidHandlerError, match=r"names '.*' of the pool family 'gpu-node"):
            async with harness(make_harness, Start(succeed), kinds=KINDS):
                pass

    # PoolHasRoom() (every pool) leaves families to the apply.
    class Every(StartJobs):
        filters = (PoolHasRoom(),)

    async with harness(make_harness, Every(succeed), kinds=KINDS) as h:
        jobs = [await h.create("job", spec=_on("gpu-node-n1")) for _ in range(3)]
        await h.tick("start-jobs")
        assert sorted(await _statuses(h, jobs)) == ["QUEUED", "RUNNING", "RUNNING"]


pg_only = pytest.mark.skipif(SKIP_PG, reason="DROVER_TEST_SKIP_PG=1")


@pg_only
async def test_two_coordinators_racing_for_one_member_never_exceed_it(pg: Database):
    """A moves two jobs onto gpu-node-n7 and, before it commits, B applies two others
    claiming it: B waits for the member's lock, then finds it full."""
    from peers import plugin

    class Two(StartJobs):
        options = HandlerOptions(max_retries=None, batch_size=2)

    async with CoordinatorHarness(
        plugins=[plugin(Two(succeed), kinds=KINDS)],
        include_builtin_handlers=False,
        database_url=pg.url,
        database_schema=pg.schema,
    ) as h:
        jobs = [await h.create("job", spec=_on("gpu-node-n7")) for _ in range(4)]
        handlers = {"start-jobs": Two(succeed)}
        a = Coordinator(h.repository, handlers, clock=h.clock, kinds=h.app.kinds, claim_owner="a")
        b = Coordinator(h.repository, handlers, clock=h.clock, kinds=h.app.kinds, claim_owner="b")
        report_a, report_b = await tick_b_inside_a_apply(a, b, "start-jobs")
        assert [c.to_status for c in report_a.changes] == ["RUNNING", "RUNNING"]
        assert [c.error_code for c in report_b.changes] == [POOL_FULL, POOL_FULL]
        assert (await _statuses(h, jobs)).count("RUNNING") == 2


def test_drover_pools_lists_and_sets_a_family_member(database, monkeypatch, tmp_path):
    import asyncio

    from click.testing import CliRunner
    from peers import plugin

    import drover.app
    from drover.cli.group import main

    the_plugin = plugin(kinds=KINDS)
    real = drover.app.make_plugin_manager
    monkeypatch.setattr(
        drover.app, "make_plugin_manager", lambda **kw: real(**kw, plugins=[the_plugin])
    )

    async def setup() -> None:
        async with CoordinatorHarness(
            plugins=[the_plugin],
            include_builtin_handlers=False,
            database_url=database.url,
            database_schema=database.schema,
        ) as h:
            await h.create("job", status=Job.RUNNING, spec=_on("gpu-node-n7"))

    asyncio.run(setup())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DROVER_DATABASE_URL", database.url)
    monkeypatch.setenv("DROVER_LOAD_PLUGINS", "")
    if database.schema:
        monkeypatch.setenv("DROVER_DATABASE_SCHEMA", database.schema)
    runner = CliRunner()
    listed = json.loads(runner.invoke(main, ["pools", "--json"]).output)
    assert [(p["name"], p["family"], p["capacity"], p["held"]) for p in listed] == [
        ("gpu-node-*", True, 2, None),
        ("gpu-node-n7", False, 2, 1),
    ]
    done = runner.invoke(main, ["pools", "set", "gpu-node-n9", "5"])
    assert (done.exit_code, done.output.strip()) == (0, "pool gpu-node-n9: capacity 5 (0 held)")
    refused = runner.invoke(main, ["pools", "set", "tpu-node-1", "1"])
    assert refused.exit_code != 0
    (line,) = refused.output.strip().splitlines()
    assert "no pool named 'tpu-node-1'; pools: gpu-node-*" in line
    table = [row.split() for row in runner.invoke(main, ["pools"]).output.splitlines()[1:]]
    assert table == [
        ["gpu-node-*", "2", "-", "-"],
        ["gpu-node-n7", "2", "1", "1"],
        ["gpu-node-n9", "5", "0", "5"],
    ]
