"""Pools of counter tokens: the apply refuses a move that would take a pool past its capacity.

A kind defined only in the tests holds the pool; every test runs on SQLite and
PostgreSQL, and two coordinators race for one pool on PostgreSQL.
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
    InvalidHandlerError,
    InvalidSpecError,
    KernelMatchType,
    NewEntity,
    Pool,
    PoolHasRoom,
    PromotionRule,
    SchedulingResult,
    StatusTransitions,
    Transition,
)
from drover.coordinator.tick import Coordinator
from drover.inspection.why import diagnose_entity
from drover.model.kinds import EntityKind, Kinds
from drover.model.pools import POOL_FULL
from drover.testing import CoordinatorHarness

GPU = Pool("gpu-slots", 2, held_in={Job.RUNNING, Job.CANCELLING})
POOLED_JOB = attrs.evolve(JOB, pools=(GPU,))
KINDS = (POOLED_JOB, TASK)


class StartJobs(Scripted):
    handler = "start-jobs"
    statuses = frozenset({Job.QUEUED})
    transitions = StatusTransitions(success=Transition(Job.RUNNING))
    options = HandlerOptions(max_retries=None)


class FinishJobs(Scripted):
    handler = "finish-jobs"
    statuses = frozenset({Job.RUNNING})
    transitions = StatusTransitions(success=Transition(Job.DONE))


def _pooled(make_harness: Any, *handlers: object, **kwargs: Any) -> Any:
    return harness(make_harness, *handlers, kinds=KINDS, **kwargs)


async def _statuses(h: Any, ids: list[str]) -> list[str]:
    return [str((await h.get(i)).status) for i in ids]


async def test_the_apply_admits_only_as_many_as_the_pool_has_tokens(make_harness):
    async with _pooled(make_harness, StartJobs(succeed), FinishJobs(succeed)) as h:
        jobs = [await h.create("job", priority=p) for p in (0, 5, 0, 9, 0)]
        report = await h.tick("start-jobs")
        # The two highest priorities get the tokens; the others are refused, and stay.
        assert await _statuses(h, jobs) == ["QUEUED", "RUNNING", "QUEUED", "RUNNING", "QUEUED"]
        refused = [c for c in report.changes if c.error_code == POOL_FULL]
        assert sorted(c.entity_id for c in refused) == sorted([jobs[0], jobs[2], jobs[4]])
        assert all(c.result == SchedulingResult.SKIPPED for c in refused)
        last = (await h.history(jobs[0]))[-1]
        assert (str(last.result), last.error_code) == ("SKIPPED", POOL_FULL)
        assert "pool 'gpu-slots' is full (2/2 held)" in (last.message or "")
        # drover why says so.
        entity = await h.get(jobs[0])
        why = diagnose_entity(
            entity, await h.history(jobs[0]), h.coordinator.handlers, POOLED_JOB, h.clock.time()
        )
        assert any("pool 'gpu-slots' is full (2/2 held)" in line for line in why.lines)
        # Still full: refused again (one merged row), nothing moves.
        await h.tick("start-jobs")
        assert (await _statuses(h, jobs)).count("RUNNING") == 2
        assert (await h.history(jobs[0]))[-1].attempts == 2
        # A holder ends: its token goes to the oldest waiting job.
        await h.tick("finish-jobs")
        await h.tick("start-jobs")
        assert await _statuses(h, jobs) == ["RUNNING", "DONE", "RUNNING", "DONE", "QUEUED"]


async def test_a_pool_counts_every_holding_status_and_kinds_share_it_by_name(make_harness):
    class Step(Scripted):
        kind = "task"
        handler = "start-tasks"
        statuses = frozenset({Task.PENDING})
        transitions = StatusTransitions(success=Transition(Task.WORKING))

    shared = attrs.evolve(TASK, pools=(Pool("gpu-slots", 2, held_in={Task.WORKING}),))
    start = StartJobs(succeed)
    async with harness(make_harness, start, Step(succeed), kinds=(POOLED_JOB, shared)) as h:
        await h.create("job", status=Job.CANCELLING)
        job = await h.create("job", status=Job.QUEUED, children=[{}, {}])
        report = await h.tick("start-tasks")
        # One token is held by the CANCELLING job: one task of the two gets the other.
        assert [str(c.result) for c in report.changes].count("SUCCESS") == 1
        assert [str(c.status) for c in (await h.get(job)).children].count("WORKING") == 1
        # The job itself finds the pool full.
        report = await h.tick("start-jobs")
        assert [c.error_code for c in report.changes] == [POOL_FULL]


async def test_a_promotion_into_a_pool_moves_only_as_many_as_there_are_tokens(make_harness):
    ready = PromotionRule(
        "start-ready-jobs",
        {Job.QUEUED},
        {Task.DONE},
        KernelMatchType.ALL,
        Job.RUNNING,
        kind="job",
    )
    async with _pooled(make_harness, ready) as h:
        jobs = [await h.create("job", children=[{"status": Task.DONE}]) for _ in range(3)]
        report = await h.tick("start-ready-jobs")
        assert len(report.changes) == 2
        assert await _statuses(h, jobs) == ["RUNNING", "RUNNING", "QUEUED"]
        assert (await h.tick("start-ready-jobs")).changes == ()


async def test_configuration_sets_a_pools_capacity(database, tmp_path):
    from peers import plugin

    from drover import make_plugin_manager
    from drover.app import App
    from drover.config import load_config
    from drover.model.clock import ManualClock

    path = tmp_path / "drover.toml"
    path.write_text("[pools]\ngpu-slots = 3\n")
    config = load_config(path, environ={}).config
    assert config.pools == {"gpu-slots": 3}
    with pytest.raises(InvalidHandlerError, match=r"unknown pool\(s\) \['cpu-slots'\]"):
        Kinds(KINDS).configured(pools={"cpu-slots": 1})
    config = attrs.evolve(config, database_url=database.url, database_schema=database.schema or "")
    start = StartJobs(succeed)
    pm = make_plugin_manager(plugins=[plugin(start, kinds=KINDS)], include_builtins=False)
    app = App(config, clock=ManualClock(), plugin_manager=pm)
    await app.start(auto_upgrade=True)
    try:
        assert app.kinds.pools["gpu-slots"].capacity == 3
        ids = await app.repository.seed_entities([NewEntity("job") for _ in range(4)])
        assert app.coordinator is not None
        await app.coordinator.tick("start-jobs")
        statuses = [str((await app.repository.get_entity(i)).status) for i in ids]
        assert statuses.count("RUNNING") == 3
    finally:
        await app.close()


def test_a_pool_is_declared_soundly():
    with pytest.raises(InvalidHandlerError, match="held in terminal status"):
        attrs.evolve(JOB, pools=(Pool("gpu-slots", 1, held_in={Job.DONE}),))
    with pytest.raises(InvalidHandlerError, match="unknown status"):
        attrs.evolve(JOB, pools=(Pool("gpu-slots", 1, held_in={"LOST"}),))
    with pytest.raises(InvalidHandlerError, match="capacity must be >= 0"):
        Pool("gpu-slots", -1, held_in={Job.RUNNING})
    other = attrs.evolve(TASK, pools=(Pool("gpu-slots", 5, held_in={Task.WORKING}),))
    with pytest.raises(InvalidHandlerError, match="different capacities"):
        Kinds((POOLED_JOB, other))
    assert isinstance(POOLED_JOB, EntityKind)


# -- two coordinators on PostgreSQL ------------------------------------------------------------

pg_only = pytest.mark.skipif(SKIP_PG, reason="DROVER_TEST_SKIP_PG=1")


class _Start(StartJobs):
    options = HandlerOptions(max_retries=None, batch_size=2)


@pg_only
async def test_two_coordinators_racing_for_one_pool_never_exceed_it(pg: Database):
    """A moves two jobs into the pool and, before it commits, B applies two others: B must
    wait for A's pool lock and then find the pool full (without it, B would count 0 held)."""
    from peers import plugin

    async with CoordinatorHarness(
        plugins=[plugin(_Start(succeed), kinds=KINDS)],
        include_builtin_handlers=False,
        database_url=pg.url,
        database_schema=pg.schema,
    ) as h:
        jobs = [await h.create("job") for _ in range(4)]
        handlers = {"start-jobs": _Start(succeed)}
        a = Coordinator(h.repository, handlers, clock=h.clock, kinds=h.app.kinds, claim_owner="a")
        b = Coordinator(h.repository, handlers, clock=h.clock, kinds=h.app.kinds, claim_owner="b")
        report_a, report_b = await tick_b_inside_a_apply(a, b, "start-jobs")
        assert sorted(c.entity_id for c in report_a.changes) == sorted(jobs[:2])
        assert sorted(c.entity_id for c in report_b.changes) == sorted(jobs[2:])
        assert [c.to_status for c in report_a.changes] == ["RUNNING", "RUNNING"]
        assert [c.error_code for c in report_b.changes] == [POOL_FULL, POOL_FULL]
        assert [str((await h.get(j)).status) for j in jobs].count("RUNNING") == 2


async def test_a_promotion_moves_at_most_its_batch_size(make_harness):
    """PostgreSQL used to move every match: its IN (… LIMIT … SKIP LOCKED) was rescanned."""
    ready = PromotionRule(
        "start-ready-jobs", {Job.QUEUED}, {Task.DONE}, KernelMatchType.ALL, Job.RUNNING, kind="job"
    )
    options = {"start-ready-jobs": {"batch_size": 2}}
    async with harness(make_harness, ready, handler_options=options) as h:
        jobs = [await h.create("job", children=[{"status": Task.DONE}]) for _ in range(3)]
        assert len((await h.tick("start-ready-jobs")).changes) == 2
        assert await _statuses(h, jobs) == ["RUNNING", "RUNNING", "QUEUED"]


async def test_a_targeted_move_into_a_full_pool_is_refused_and_a_report_is_not(make_harness):
    """Moves a handler makes go through the pool's gate; a pushed report is what happened
    outside (it is never refused, and its entity counts as a holder)."""
    picked: list[str] = []

    def move_others(targets: Any) -> Any:
        from drover import HandlerResult

        return HandlerResult(
            successes=[t.id for t in targets],
            moves={other: (Job.QUEUED, Job.RUNNING) for other in picked},
        )

    class StartOne(StartJobs):
        options = HandlerOptions(max_retries=None, batch_size=1)

    async with _pooled(make_harness, StartOne(move_others)) as h:
        holder = await h.create("job")
        others = [await h.create("job", priority=-1) for _ in range(2)]
        # A report puts one job in the pool: the other holder is counted, never refused.
        assert await h.repository.report(others[0], Job.RUNNING, expected=[Job.QUEUED])
        picked.append(others[1])
        report = await h.tick("start-jobs")
        by_id = {c.entity_id: c for c in report.changes}
        assert by_id[holder].to_status == Job.RUNNING
        assert by_id[others[1]].error_code == POOL_FULL
        assert await _statuses(h, [holder, *others]) == ["RUNNING", "RUNNING", "QUEUED"]


# -- per-entity claims (Pool(claimed=True), spec["pools"]) -------------------------------------

TOKENS = Pool("tokens", 4, held_in={Job.RUNNING}, claimed=True)
CORES = Pool("cores", 3, held_in={Job.RUNNING, Job.CANCELLING}, claimed=True)
CLAIMING_JOB = attrs.evolve(JOB, pools=(TOKENS, CORES))
CLAIMING_KINDS = (CLAIMING_JOB, TASK)


def _claiming(make_harness: Any, *handlers: object, **kwargs: Any) -> Any:
    return harness(make_harness, *handlers, kinds=CLAIMING_KINDS, **kwargs)


def _claim(**units: int) -> dict[str, Any]:
    return {"pools": units}


async def test_an_entity_holds_the_units_it_claims_and_one_claiming_none_holds_none(
    make_harness,
):
    async with _claiming(make_harness, StartJobs(succeed), FinishJobs(succeed)) as h:
        # In fetch order (priority): 3 tokens, 2 tokens (does not fit: 1 left),
        # 1 token (fits, first-fit), nothing claimed (always admitted).
        jobs = [
            await h.create("job", priority=9, spec=_claim(tokens=3)),
            await h.create("job", priority=8, spec=_claim(tokens=2)),
            await h.create("job", priority=7, spec=_claim(tokens=1)),
            await h.create("job", priority=6),
        ]
        report = await h.tick("start-jobs")
        assert await _statuses(h, jobs) == ["RUNNING", "QUEUED", "RUNNING", "RUNNING"]
        (refused,) = [c for c in report.changes if c.error_code == POOL_FULL]
        assert refused.entity_id == jobs[1]
        assert refused.result == SchedulingResult.SKIPPED
        last = (await h.history(jobs[1]))[-1]
        assert (str(last.result), last.error_code) == ("SKIPPED", POOL_FULL)
        assert "pool 'tokens' is full (3/4 held, 2 claimed)" in (last.message or "")
        why = diagnose_entity(
            await h.get(jobs[1]),
            await h.history(jobs[1]),
            h.coordinator.handlers,
            CLAIMING_JOB,
            h.clock.time(),
        )
        assert any("pool 'tokens' is full (3/4 held, 2 claimed)" in line for line in why.lines)
        # Still 4/4: refused again.
        await h.tick("start-jobs")
        assert await _statuses(h, jobs[1:2]) == ["QUEUED"]
        # The holders end: their units come back, and the 2-token job runs.
        await h.tick("finish-jobs")
        await h.tick("start-jobs")
        assert await _statuses(h, jobs) == ["DONE", "RUNNING", "DONE", "DONE"]


async def test_an_entity_claiming_several_pools_needs_room_in_every_one(make_harness):
    async with _claiming(make_harness, StartJobs(succeed)) as h:
        # Already held: 2 of 3 cores, 1 of 4 tokens (a report is what happened outside:
        # never refused, and its entity holds what it claims).
        holder = await h.create("job", spec=_claim(cores=2, tokens=1))
        assert await h.repository.report(holder, Job.RUNNING, expected=[Job.QUEUED])
        wide = await h.create("job", priority=5, spec=_claim(tokens=1, cores=2))
        narrow = await h.create("job", priority=4, spec=_claim(tokens=3, cores=1))
        after = await h.create("job", priority=3, spec=_claim(tokens=1))
        report = await h.tick("start-jobs")
        # wide: tokens fit (1+1), cores do not (2+2 > 3); narrow takes 3 tokens and the
        # last core; after finds no token left.
        assert await _statuses(h, [wide, narrow, after]) == ["QUEUED", "RUNNING", "QUEUED"]
        by_id = {c.entity_id: c for c in report.changes}
        assert by_id[wide].error_code == POOL_FULL
        assert "pool 'cores' is full (2/3 held, 2 claimed)" in (by_id[wide].message or "")
        assert "pool 'tokens' is full (4/4 held, 1 claimed)" in (by_id[after].message or "")


async def test_a_plain_and_a_claimed_declaration_share_a_pool(make_harness):
    class StartTasks(Scripted):
        kind = "task"
        handler = "start-tasks"
        statuses = frozenset({Task.PENDING})
        transitions = StatusTransitions(success=Transition(Task.WORKING))

    plain = attrs.evolve(TASK, pools=(Pool("tokens", 4, held_in={Task.WORKING}),))
    kinds = (CLAIMING_JOB, plain)
    async with harness(make_harness, StartJobs(succeed), StartTasks(succeed), kinds=kinds) as h:
        await h.create("job", spec=_claim(tokens=3))
        await h.tick("start-jobs")
        parent = await h.create("job", status=Job.CANCELLING, children=[{}, {}])
        # 3 units held by the job: one task (one unit each) of the two gets the last.
        report = await h.tick("start-tasks")
        assert [str(c.result) for c in report.changes].count("SUCCESS") == 1
        assert [str(c.status) for c in (await h.get(parent)).children].count("WORKING") == 1


async def test_claims_are_checked_at_creation_and_nothing_is_written(make_harness):
    from drover import InvalidSpecError

    async with _claiming(make_harness, StartJobs(succeed)) as h:
        bad = [
            ({"pools": {"gpus": 1}}, "names pool 'gpus', which kind 'job' does not declare"),
            ({"pools": {"tokens": 0}}, r"spec\['pools'\]\['tokens'\] must be a whole number"),
            ({"pools": {"tokens": -2}}, "from 1 to"),
            ({"pools": {"tokens": 1.5}}, "got 1.5"),
            ({"pools": {"tokens": True}}, "got True"),
            ({"pools": ["tokens"]}, "must map pool names to units"),
        ]
        for spec, message in bad:
            with pytest.raises(InvalidSpecError, match=message):
                await h.repository.create_entities([NewEntity("job", spec=spec)])
        assert await h.app.queries.list_entities("job") == []
        # A changed spec is checked too (update_spec), and left as it was.
        job = await h.create("job", spec=_claim(tokens=1))
        with pytest.raises(InvalidSpecError, match="must be a whole number from 1"):
            await h.repository.update_spec(job, {"pools": {"tokens": 0}})
        assert (await h.get(job)).spec == {"pools": {"tokens": 1}}
    # A plain pool takes no claims; nor does a child whose kind declares none.
    async with _pooled(make_harness, StartJobs(succeed)) as h:
        before = await h.app.queries.list_entities("job")
        with pytest.raises(InvalidSpecError, match="its claimed pools are \\[\\]"):
            await h.repository.create_entities([NewEntity("job", spec=_claim(**{"gpu-slots": 1}))])
        child = {"spec": _claim(tokens=1)}
        with pytest.raises(InvalidSpecError, match="which kind 'task' does not declare claimed"):
            await h.repository.create_entities([NewEntity("job", children=[child])])
        assert await h.app.queries.list_entities("job") == before


async def test_a_promotion_into_a_claimed_pool_is_refused_at_load(make_harness):
    ready = PromotionRule(
        "start-ready-jobs", {Job.QUEUED}, {Task.DONE}, KernelMatchType.ALL, Job.RUNNING, kind="job"
    )
    with pytest.raises(InvalidHandlerError, match="a promotion cannot weigh claims"):
        async with _claiming(make_harness, ready):
            pass


@pg_only
async def test_two_coordinators_racing_for_claimed_units_never_exceed_the_pool(pg: Database):
    """A moves jobs claiming 3 of 4 tokens and, before it commits, B applies two others
    claiming 2 each: B waits for A's pool lock, then counts A's 3 units and refuses both."""
    from peers import plugin

    async with CoordinatorHarness(
        plugins=[plugin(_Start(succeed), kinds=CLAIMING_KINDS)],
        include_builtin_handlers=False,
        database_url=pg.url,
        database_schema=pg.schema,
    ) as h:
        jobs = [
            await h.create("job", priority=9, spec=_claim(tokens=2)),
            await h.create("job", priority=8, spec=_claim(tokens=1)),
            await h.create("job", spec=_claim(tokens=2)),
            await h.create("job", spec=_claim(tokens=2)),
        ]
        handlers = {"start-jobs": _Start(succeed)}
        a = Coordinator(h.repository, handlers, clock=h.clock, kinds=h.app.kinds, claim_owner="a")
        b = Coordinator(h.repository, handlers, clock=h.clock, kinds=h.app.kinds, claim_owner="b")
        report_a, report_b = await tick_b_inside_a_apply(a, b, "start-jobs")
        assert sorted(c.entity_id for c in report_a.changes) == sorted(jobs[:2])
        assert [c.to_status for c in report_a.changes] == ["RUNNING", "RUNNING"]
        assert sorted(c.entity_id for c in report_b.changes) == sorted(jobs[2:])
        assert [c.error_code for c in report_b.changes] == [POOL_FULL, POOL_FULL]
        assert all("(3/4 held, 2 claimed)" in (c.message or "") for c in report_b.changes)
        assert [str((await h.get(j)).status) for j in jobs].count("RUNNING") == 2


# -- claims carried by the handler's result (HandlerResult.claims) ------------------------------

#: One claimed pool per worker: which worker a job lands on is the handler's decision.
WORKER_A = Pool("worker-a", 1, held_in={Job.RUNNING}, claimed=True)
WORKER_B = Pool("worker-b", 1, held_in={Job.RUNNING}, claimed=True)
PLACED_KINDS = (attrs.evolve(JOB, pools=(WORKER_A, WORKER_B)), TASK)


class _Place(StartJobs):
    """Starts every target on the worker the test names (``_Place.worker``)."""

    handler = "place-jobs"
    worker = "worker-a"
    options = HandlerOptions(max_retries=None, batch_size=10)


def _place(targets: Any) -> Any:
    from drover import HandlerResult

    ids = [t.id for t in targets]
    return HandlerResult(successes=ids, claims={i: {_Place.worker: 1} for i in ids})


class _Requeue(Scripted):
    handler = "requeue-jobs"
    statuses = frozenset({Job.RUNNING})
    transitions = StatusTransitions(success=Transition(Job.QUEUED))


async def test_a_claim_decided_by_the_handler_is_counted_and_written_to_the_spec(make_harness):
    """Three jobs placed on worker-a (one slot): one is admitted and its spec now claims
    worker-a; the others are refused. Placed on worker-b, one more runs. A job placed
    again elsewhere claims only its new worker (the claims replace the spec's)."""
    _Place.worker = "worker-a"
    async with harness(make_harness, _Place(_place), _Requeue(succeed), kinds=PLACED_KINDS) as h:
        jobs = [await h.create("job", priority=9 - n) for n in range(3)]
        report = await h.tick("place-jobs")
        codes = {c.entity_id: c.error_code for c in report.changes}
        assert [codes[j] for j in jobs] == [None, POOL_FULL, POOL_FULL]
        assert await _statuses(h, jobs) == ["RUNNING", "QUEUED", "QUEUED"]
        assert (await h.get(jobs[0])).spec == {"pools": {"worker-a": 1}}
        assert (await h.get(jobs[1])).spec == {}  # refused: nothing written
        last = (await h.history(jobs[1]))[-1]
        assert "pool 'worker-a' is full (1/1 held, 1 claimed)" in (last.message or "")
        _Place.worker = "worker-b"
        await h.tick("place-jobs")
        assert await _statuses(h, jobs) == ["RUNNING", "RUNNING", "QUEUED"]
        # Both back in the queue; the first is placed on worker-b this time: its new claim
        # replaces the old one, so worker-a is free for the next.
        await h.tick("requeue-jobs")
        await h.tick("place-jobs")
        assert await _statuses(h, jobs) == ["RUNNING", "QUEUED", "QUEUED"]
        assert (await h.get(jobs[0])).spec == {"pools": {"worker-b": 1}}
        _Place.worker = "worker-a"
        await h.tick("place-jobs")
        assert await _statuses(h, jobs) == ["RUNNING", "RUNNING", "QUEUED"]
        assert (await h.get(jobs[1])).spec == {"pools": {"worker-a": 1}}


async def test_a_claim_on_a_pool_the_kind_does_not_claim_is_an_invalid_result(make_harness):
    from drover import HandlerResult

    def bad(targets: Any) -> Any:
        ids = [t.id for t in targets]
        return HandlerResult(successes=ids, claims={i: {"gpu-slots": 1} for i in ids})

    async with harness(make_harness, _Place(bad), kinds=PLACED_KINDS) as h:
        job = await h.create("job")
        await h.tick("place-jobs")
        found = await h.get(job)
        assert (str(found.status), found.spec) == ("QUEUED", {})
        last = (await h.history(job))[-1]
        assert last.error_code == "invalid-result"
        assert "claim on pool 'gpu-slots'" in (last.message or "")
        assert "not one of its kind's claimed pools: ['worker-a', 'worker-b']" in (
            last.message or ""
        )


@pg_only
async def test_two_coordinators_placing_on_one_workers_last_slot_never_both_win(pg: Database):
    """A places a job on worker-a's only slot and, before it commits, B places another there:
    B waits for A's pool lock, then counts A's claim (written in A's transaction) and is
    refused, though B's job's spec never named a worker."""
    from peers import plugin

    _Place.worker = "worker-a"
    async with CoordinatorHarness(
        plugins=[plugin(_Place(_place), kinds=PLACED_KINDS)],
        include_builtin_handlers=False,
        database_url=pg.url,
        database_schema=pg.schema,
    ) as h:
        first = await h.create("job", priority=9)
        second = await h.create("job")

        class _One(_Place):
            options = HandlerOptions(max_retries=None, batch_size=1)

        a = Coordinator(
            h.repository, {"place-jobs": _One(_place)}, clock=h.clock, kinds=h.app.kinds,
            claim_owner="a",
        )  # fmt: skip
        b = Coordinator(
            h.repository, {"place-jobs": _One(_place)}, clock=h.clock, kinds=h.app.kinds,
            claim_owner="b",
        )  # fmt: skip
        report_a, report_b = await tick_b_inside_a_apply(a, b, "place-jobs")
        assert [(c.entity_id, c.to_status) for c in report_a.changes] == [(first, "RUNNING")]
        assert [(c.entity_id, c.error_code) for c in report_b.changes] == [(second, POOL_FULL)]
        assert "pool 'worker-a' is full (1/1 held, 1 claimed)" in (
            report_b.changes[0].message or ""
        )
        assert await _statuses(h, [first, second]) == ["RUNNING", "QUEUED"]
        assert (await h.get(first)).spec == {"pools": {"worker-a": 1}}


# -- issue 34, gap 11: a pool over its capacity never refuses an entity claiming none of it ----


async def test_an_entity_claiming_none_of_an_over_capacity_pool_is_admitted(make_harness):
    pool_a = Pool("pool-a", 2, held_in={Job.RUNNING}, claimed=True)
    kinds = (attrs.evolve(JOB, pools=(pool_a,)), TASK)
    async with harness(make_harness, StartJobs(succeed), kinds=kinds) as h:
        # Created holding it (allowed: what happened outside): 3 of 2 units held.
        for _ in range(3):
            await h.create("job", status=Job.RUNNING, spec=_claim(**{"pool-a": 1}))
        free = await h.create("job", priority=5)
        claiming = await h.create("job", spec=_claim(**{"pool-a": 1}))
        await h.tick("start-jobs")
        assert await _statuses(h, [free, claiming]) == ["RUNNING", "QUEUED"]
        last = (await h.history(claiming))[-1]
        assert "pool 'pool-a' is full (3/2 held, 1 claimed)" in (last.message or "")


# -- issue 34, gap 6: how full a pool is, and candidates whose pool has room ------------------


async def test_queries_read_a_pools_holders_and_a_filter_keeps_candidates_with_room(
    make_harness,
):
    """experimaestro under priority order: jobs waiting for a full token must not starve
    another token's job behind them (batch_size 1: a filter after the LIMIT would)."""
    tokens = Pool("tok-a", 1, held_in={Job.RUNNING}, claimed=True)
    other = Pool("tok-b", 1, held_in={Job.RUNNING}, claimed=True)
    kinds = (attrs.evolve(JOB, pools=(tokens, other)), TASK)

    class Start(StartJobs):
        filters = (PoolHasRoom(),)
        options = HandlerOptions(batch_size=1)

    async with harness(make_harness, Start(succeed), kinds=kinds) as h:
        holder = await h.create("job", status=Job.RUNNING, spec=_claim(**{"tok-a": 1}))
        waiting = [await h.create("job", priority=9, spec=_claim(**{"tok-a": 1})) for _ in range(2)]
        runnable = await h.create("job", priority=1, spec=_claim(**{"tok-b": 1}))
        usage = await h.app.queries.pool_usage("tok-a")
        assert (usage.capacity, usage.held, usage.free) == (1, 1, 0)
        assert [(x.entity_id, x.status, x.units) for x in usage.holders] == [
            (holder, Job.RUNNING, 1)
        ]
        report = await h.tick("start-jobs")
        assert [c.entity_id for c in report.changes] == [runnable]
        assert await _statuses(h, [*waiting, runnable]) == ["QUEUED", "QUEUED", "RUNNING"]
        assert (await h.app.queries.pool_usage("tok-b")).held == 1
        with pytest.raises(InvalidSpecError, match="no pool named 'nope'; pools: tok-a, tok-b"):
            await h.app.queries.pool_usage("nope")


# -- issue 34, gap 7: capacities change while drover runs --------------------------------------


async def test_a_pools_capacity_changed_at_run_time_is_enforced_at_once(make_harness):
    """A worker joins (its slots grow): the apply, the filter and the read see the new
    capacity without a restart; bad input is one line and writes nothing."""

    class Start(StartJobs):
        filters = (PoolHasRoom(),)

    async with harness(make_harness, Start(succeed), kinds=KINDS) as h:
        jobs = [await h.create("job") for _ in range(4)]
        await h.tick("start-jobs")
        assert await _statuses(h, jobs) == ["RUNNING", "RUNNING", "QUEUED", "QUEUED"]
        await h.repository.set_pool_capacities({"gpu-slots": 3})
        assert (await h.app.queries.pool_usage("gpu-slots")).capacity == 3
        await h.tick("start-jobs")
        assert await _statuses(h, jobs) == ["RUNNING", "RUNNING", "RUNNING", "QUEUED"]
        with pytest.raises(InvalidSpecError, match="no pool named 'nope'; pools: gpu-slots"):
            await h.repository.set_pool_capacities({"gpu-slots": 9, "nope": 1})
        with pytest.raises(InvalidSpecError, match="capacity must be a whole number >= 0"):
            await h.repository.set_pool_capacities({"gpu-slots": -1})
        assert (await h.app.queries.pool_usage("gpu-slots")).capacity == 3
        # Lowered below what is held: holders keep it, nobody new gets in.
        await h.repository.set_pool_capacities({"gpu-slots": 1})
        await h.tick("start-jobs")
        assert await _statuses(h, jobs) == ["RUNNING", "RUNNING", "RUNNING", "QUEUED"]


def test_drover_pools_lists_and_sets_capacities(database, monkeypatch, tmp_path):
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
            await h.create("job", status=Job.RUNNING)

    asyncio.run(setup())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DROVER_DATABASE_URL", database.url)
    monkeypatch.setenv("DROVER_LOAD_PLUGINS", "")
    if database.schema:
        monkeypatch.setenv("DROVER_DATABASE_SCHEMA", database.schema)
    runner = CliRunner()
    assert "Example: drover pools set" in runner.invoke(main, ["pools", "set", "--help"]).output
    listed = json.loads(runner.invoke(main, ["pools", "--json"]).output)
    assert [(p["name"], p["capacity"], p["held"]) for p in listed] == [("gpu-slots", 2, 1)]
    done = runner.invoke(main, ["pools", "set", "gpu-slots", "5"])
    assert (done.exit_code, done.output.strip()) == (0, "pool gpu-slots: capacity 5 (1 held)")
    refused = runner.invoke(main, ["pools", "set", "tpu", "1"])
    assert refused.exit_code != 0
    (line,) = refused.output.strip().splitlines()
    assert "no pool named 'tpu'; pools: gpu-slots (pools are declared by kinds:" in line
    assert "declare one with capacity 0" in line
    assert json.loads(runner.invoke(main, ["pools", "--json"]).output)[0]["capacity"] == 5
    table = runner.invoke(main, ["pools"]).output.splitlines()
    assert table[1].split() == ["gpu-slots", "5", "1", "4"]


async def test_the_configurations_pools_are_read_again_on_reload(database, tmp_path):
    """``drover run`` on SIGHUP: the file's [pools] again, written for every coordinator."""
    from peers import plugin

    from drover import App, load_config, make_plugin_manager

    the_plugin = plugin(kinds=KINDS)
    async with CoordinatorHarness(
        plugins=[the_plugin],
        include_builtin_handlers=False,
        database_url=database.url,
        database_schema=database.schema,
    ):
        pass
    path = tmp_path / "drover.toml"
    schema = f'database_schema = "{database.schema}"\n' if database.schema else ""
    head = f'database_url = "{database.url}"\n{schema}'
    path.write_text(head + "[pools]\ngpu-slots = 3\n")
    app = App(load_config(path), plugin_manager=make_plugin_manager(plugins=[the_plugin]))
    try:
        assert await app.reload_pools() == {"gpu-slots": 3}
        assert (await app.queries.pool_usage("gpu-slots")).capacity == 3
        path.write_text(head + "[pools]\ngpu-slots = 5\n")
        assert await app.reload_pools() == {"gpu-slots": 5}
        assert (await app.queries.pool_usage("gpu-slots")).capacity == 5
        # A file that no longer loads changes nothing.
        path.write_text(head + "[pools]\ngpu-slots = 'many'\n")
        assert await app.reload_pools() == {}
        assert (await app.queries.pool_usage("gpu-slots")).capacity == 5
    finally:
        await app.close()
