"""The daemon's wake-ups (drover.coordinator.wakes), with the real daemon on both databases.

Every interval and the safety cycle are an hour, so whatever ticks within a
test was *woken*: the ticks are counted with the daemon's ``on_tick`` (what
feeds ``/metrics``), never timed.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from enum import StrEnum
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import SKIP_PG
from daemon_helpers import wait_for
from tree import Scripted, ids, plugin

import drover.coordinator.daemon as daemon_module
from drover import (
    AnyOf,
    ChildCount,
    Children,
    Entity,
    EntityKind,
    Field,
    HandlerResult,
    KernelMatchType,
    StatusAge,
    StatusTransitions,
    Transition,
    make_plugin_manager,
)
from drover.app import App
from drover.config import BackendConfig, Config
from drover.coordinator.daemon import Daemon
from drover.coordinator.wakes import (
    WakeRules,
    child_statuses_read,
    promotion_child_statuses,
    waits_for_age,
)
from drover.kinds.sessions.promotions import BUILTIN_PROMOTIONS
from drover.kinds.sessions.values import KernelReport
from drover.kinds.sessions.values import KernelStatus as K
from drover.model.clock import SystemClock
from drover.model.kinds import Kinds
from drover.model.promotion import PromotionRule

HOUR = 3600.0


class WJob(StrEnum):
    QUEUED = "QUEUED"  # unused: jobs are created RUNNING, so creations wake no job handler
    RUNNING = "RUNNING"
    DONE = "DONE"


class WTask(StrEnum):
    READY = "READY"
    WORK = "WORK"
    DONE = "DONE"


KINDS = (
    EntityKind("wk-job", WJob, terminal={WJob.DONE}),
    EntityKind("wk-task", WTask, terminal={WTask.DONE}, parent="wk-job"),
)


class Finish(Scripted):
    """Ends a RUNNING job once all its tasks are DONE (the filter in the fetch's SQL)."""

    kind = "wk-job"
    handler = "wk-finish"
    statuses = frozenset({WJob.RUNNING})
    filters = (Children({WTask.DONE}, KernelMatchType.ALL),)
    transitions = StatusTransitions(success=Transition(WJob.DONE))


class Step(Scripted):
    """Moves tasks between READY and WORK, or ends them, as its script says."""

    kind = "wk-task"
    handler = "wk-step"
    statuses = frozenset({WTask.READY, WTask.WORK})
    transitions = StatusTransitions(
        outcomes={
            "work": Transition(WTask.WORK),
            "ready": Transition(WTask.READY),
            "end": Transition(WTask.DONE),
        }
    )


class Stale(Scripted):
    """Fetches tasks an hour in their status: nothing that just entered one can match."""

    kind = "wk-task"
    handler = "wk-stale"
    statuses = frozenset({WTask.READY, WTask.WORK})
    filters = (StatusAge(seconds=HOUR),)
    transitions = StatusTransitions(outcomes={"stale": Transition(WTask.DONE)})


class Watch(Scripted):
    """Targets the same statuses with a filter that never holds: woken by every entry."""

    kind = "wk-task"
    handler = "wk-watch"
    statuses = frozenset({WTask.READY, WTask.WORK})
    filters = (Field("spec", ("never",), "exists"),)
    transitions = StatusTransitions(outcomes={"stale": Transition(WTask.DONE)})


class Segment(Scripted):
    """WORK stays WORK (``again``, a counter saved in data) until the script says ``end``."""

    kind = "wk-task"
    handler = "wk-segment"
    statuses = frozenset({WTask.WORK})
    transitions = StatusTransitions(
        outcomes={"again": Transition(WTask.WORK), "end": Transition(WTask.DONE)}
    )


@asynccontextmanager
async def ticking(
    app: App, seed: Any = None, **options: Any
) -> AsyncIterator[tuple[Any, Daemon, Counter[str]]]:
    """``app`` started (then ``seed(repository)``, if given), with a daemon whose every
    interval is an hour unless ``options`` say otherwise (only wake-ups tick); yields its
    coordinator, the daemon and the ticks per handler. The app is closed after."""
    ticks: Counter[str] = Counter()
    try:
        coordinator = await app.start()
        if seed is not None:
            await seed(app.repository)
        daemon = Daemon(
            coordinator,
            app.repository,
            default_interval=HOUR,
            safety_interval=HOUR,
            on_tick=lambda report: ticks.update([report.handler]),
            **options,
        )
        task = asyncio.create_task(daemon.run())
        try:
            yield coordinator, daemon, ticks
        finally:
            daemon.stop()
            await asyncio.wait_for(task, timeout=20)
    finally:
        await app.close()


@asynccontextmanager
async def running(
    database: Any, *handlers: Scripted, seed: Any, intervals: dict[str, float] | None = None
) -> AsyncIterator[tuple[App, Daemon, Counter[str]]]:
    """``seed(repository)`` runs first; then the daemon, every interval an hour unless
    ``intervals`` says otherwise; yields the app, the daemon and its ticks per handler."""
    app = App(
        Config(database_url=database.url, database_schema=database.schema or ""),
        plugin_manager=make_plugin_manager(
            plugins=[plugin(*handlers, kinds=KINDS)], include_builtins=False
        ),
        clock=SystemClock(),
        claims=True,
    )
    async with ticking(app, seed=seed, intervals=intervals, submission_poll=0.02) as (
        _coordinator,
        daemon,
        ticks,
    ):
        yield app, daemon, ticks


async def _job_with_tasks(repository: Any, tasks: int, status: str = WTask.READY) -> str:
    return str(
        await repository.create_entity(
            "wk-job",
            status=WJob.RUNNING,
            children=[{"status": status, "spec": {}} for _ in range(tasks)],
        )
    )


async def test_a_parent_handler_runs_when_its_last_child_ends(database):
    """wk-finish (interval: an hour) ends the job right after its tasks end: woken by them."""
    gate = asyncio.Event()

    def end_once_open(targets: Sequence[Entity]) -> HandlerResult:
        if not gate.is_set():
            return HandlerResult()
        return HandlerResult(outcomes=dict.fromkeys(ids(targets), "end"))

    step = Step(end_once_open)
    finish = Finish(lambda targets: HandlerResult(successes=ids(targets)))
    job: list[str] = []

    async def seed(repository: Any) -> None:
        job.append(await _job_with_tasks(repository, 2))

    async with running(database, finish, step, seed=seed, intervals={"wk-step": 0.05}) as (
        app,
        _d,
        ticks,
    ):
        # wk-finish's start-up tick found nothing: the tasks were READY.
        await wait_for(lambda: _true(ticks["wk-finish"] >= 1 and ticks["wk-step"] >= 1))
        assert finish.seen == []
        gate.set()
        ended = await wait_for(lambda: _in(app, job[0], WJob.DONE), what="the job DONE")
        assert ended.result == "SUCCESS"
        # The start-up tick, then one or two wakes (the tasks may end in one tick or two).
        assert 2 <= ticks["wk-finish"] <= 3, ticks
        assert [len(batch) for batch in finish.seen] == [1]
        rows = await app.repository.history(job[0])
        assert [(r.handler, r.to_status) for r in rows if r.from_status != r.to_status] == [
            ("wk-finish", WJob.DONE)
        ]


async def test_a_status_age_handler_is_not_woken_by_entries(database):
    """A task enters READY/WORK 20 times: wk-watch is woken by each entry, wk-stale (its
    filter an hour's StatusAge) ticks only at start-up: not on entry, not when it ends."""
    moves: Counter[str] = Counter()

    def cycle(targets: Sequence[Entity]) -> HandlerResult:
        outcomes = {}
        for t in targets:
            moves[t.id] += 1
            if moves[t.id] > 20:
                outcomes[t.id] = "end"
            else:
                outcomes[t.id] = "work" if t.status == WTask.READY else "ready"
        return HandlerResult(outcomes=outcomes)

    task: list[str] = []

    async def seed(repository: Any) -> None:
        job = await _job_with_tasks(repository, 1)
        (child,) = (await repository.get_entity(job)).children
        task.append(child.id)

    stale, watch = Stale(), Watch()
    async with running(database, Step(cycle), stale, watch, seed=seed) as (app, _d, ticks):
        await wait_for(lambda: _in(app, task[0], WTask.DONE), what="the task DONE")
        rows = await app.repository.history(task[0])
        assert sum(1 for r in rows if r.handler == "wk-step") == 21
        # Its start-up tick only: neither the entries nor the task's end woke it.
        assert ticks["wk-stale"] == 1, ticks
        assert ticks["wk-watch"] >= 5, ticks
        assert stale.seen == []
        assert watch.seen == []


async def test_an_outcome_that_keeps_the_status_ticks_its_handler_again(database):
    """wk-segment answers ``again`` (WORK kept, data written) four times, then ``end``:
    five ticks in a row, none waiting for its hour's interval."""

    def segment(targets: Sequence[Entity]) -> HandlerResult:
        result = HandlerResult()
        for t in targets:
            n = int((t.data or {}).get("n", 0))
            result.outcomes[t.id] = "end" if n == 4 else "again"
            result.data[t.id] = {"n": n + 1}
        return result

    task: list[str] = []

    async def seed(repository: Any) -> None:
        job = await _job_with_tasks(repository, 1, status=WTask.WORK)
        (child,) = (await repository.get_entity(job)).children
        task.append(child.id)

    async with running(database, Segment(segment), seed=seed) as (app, _d, ticks):
        ended = await wait_for(lambda: _in(app, task[0], WTask.DONE), what="the task DONE")
        assert ended.data == {"n": 5}
        assert ticks["wk-segment"] == 5, ticks
        rows = await app.repository.history(task[0])
        # (History keeps one row for a repeated outcome.)
        assert [r.result for r in rows if r.handler == "wk-segment"][-2:] == ["again", "end"]


async def test_a_handler_that_always_keeps_the_status_falls_back_to_its_interval(
    database, monkeypatch
):
    """Re-wakes by a kept status are bounded: after MAX_KEPT_REWAKES the handler waits."""
    monkeypatch.setattr(daemon_module, "MAX_KEPT_REWAKES", 3)

    def again(targets: Sequence[Entity]) -> HandlerResult:
        return HandlerResult(
            outcomes=dict.fromkeys(ids(targets), "again"),
            data={t.id: {"n": int((t.data or {}).get("n", 0)) + 1} for t in targets},
        )

    async def seed(repository: Any) -> None:
        await _job_with_tasks(repository, 1, status=WTask.WORK)

    # wk-finish ticks every 20 ms (it finds nothing: the task never ends): the test's clock.
    # (Not a handler of the task: on PostgreSQL its fetch would claim the task.)
    async with running(
        database, Segment(again), Finish(), seed=seed, intervals={"wk-finish": 0.02}
    ) as (_app, _d, ticks):
        await wait_for(lambda: _true(ticks["wk-segment"] >= 4), what="four ticks")
        seen = ticks["wk-finish"]
        await wait_for(lambda: _true(ticks["wk-finish"] >= seen + 25), what="25 more ticks")
        # The start-up tick, then three re-wakes.
        assert ticks["wk-segment"] == 4, ticks


def test_the_rules_are_derived_from_kinds_and_filters():
    """Which handlers each entry wakes, from the kinds' parents and the handlers' filters."""
    kinds = Kinds(KINDS)
    rules = WakeRules.build(kinds, [Finish(), Step(), Stale(), Watch(), Segment()])
    assert rules.woken("wk-task", WTask.WORK) == {"wk-step", "wk-watch", "wk-segment"}
    # A task ending: its parent's handler reading children, its first status's handlers.
    assert rules.woken("wk-task", WTask.DONE) == {"wk-finish", "wk-step", "wk-watch"}
    assert rules.woken("wk-job", WJob.DONE) == set()
    assert rules.newcomers() == {"wk-step", "wk-watch"}
    assert waits_for_age([StatusAge(seconds=60)])
    assert not waits_for_age([StatusAge(data_key="retry_after")])
    assert not waits_for_age([AnyOf(StatusAge(seconds=60), Field("spec", ("x",), "exists"))])
    assert child_statuses_read([Children({WTask.DONE}, KernelMatchType.ALL)]) == {WTask.DONE}
    assert child_statuses_read([ChildCount("lt", 2)]) == {"*"}
    assert child_statuses_read([Children({WTask.DONE}, KernelMatchType.NOT_ANY)]) == {"*"}


def test_a_promotion_is_woken_by_the_child_statuses_that_can_make_it_match():
    """ANY and ALL of S: a child entering S; NOT_ANY of S: a child entering any other status."""
    statuses = [str(s) for s in WTask]

    def rule(match: KernelMatchType) -> PromotionRule:
        return PromotionRule("r", {WJob.RUNNING}, {WTask.DONE}, match, WJob.DONE, kind="wk-job")

    assert promotion_child_statuses(rule(KernelMatchType.ANY), statuses) == {WTask.DONE}
    assert promotion_child_statuses(rule(KernelMatchType.ALL), statuses) == {WTask.DONE}
    assert promotion_child_statuses(rule(KernelMatchType.NOT_ANY), statuses) == {
        WTask.READY,
        WTask.WORK,
    }
    rules = WakeRules.build(Kinds(KINDS), [rule(KernelMatchType.ANY)])
    assert rules.woken("wk-task", WTask.DONE) == {"r"}
    assert rules.woken("wk-task", WTask.WORK) == set()


async def _true(value: bool) -> bool:
    return value


async def _in(app: App, entity_id: str, status: str) -> Entity | None:
    entity = await app.repository.get_entity(entity_id)
    return entity if entity.status == status else None


async def test_a_kernel_report_wakes_the_promotions_over_kernels_only(database):
    """Promotions are woken per child kind: the backend's kernel reports wake the session
    promotions, not an installed kind's promotion over its own children, and the other
    way round."""
    over_tasks = PromotionRule(
        "wk-all-done", {WJob.RUNNING}, {WTask.DONE}, KernelMatchType.ALL, WJob.DONE, kind="wk-job"
    )
    app = App(
        Config(database_url=database.url, database_schema=database.schema or ""),
        plugin_manager=make_plugin_manager(plugins=[plugin(over_tasks, kinds=KINDS)]),
        clock=SystemClock(),
    )
    async with ticking(app) as (_coordinator, daemon, ticks):
        await wait_for(
            lambda: _true(ticks["wk-all-done"] >= 1 and ticks["detect-termination"] >= 1)
        )
        await asyncio.sleep(0.2)
        before = ticks.copy()
        daemon.wake_promotions("kernel")
        await wait_for(lambda: _true(ticks["detect-termination"] > before["detect-termination"]))
        await asyncio.sleep(0.2)
        assert ticks["wk-all-done"] == before["wk-all-done"], ticks
        assert ticks["promote-to-running"] == before["promote-to-running"] + 1
        daemon.wake_promotions("wk-task")
        await wait_for(lambda: _true(ticks["wk-all-done"] > before["wk-all-done"]))
        assert ticks["detect-termination"] == before["detect-termination"] + 1


async def test_a_backend_report_wakes_the_promotions_its_statuses_can_make_match(database):
    """Which session promotions a kernel's new status wakes; and through the backend's
    reporter, a kernel reported ERROR wakes detect-start-failure, which ends the session
    (every interval is an hour: only wake-ups tick)."""
    app = App(
        Config(
            database_url=database.url,
            database_schema=database.schema or "",
            backend=BackendConfig(name="simulated"),
        ),
        clock=SystemClock(),
    )
    async with ticking(app) as (coordinator, daemon, _ticks):
        # The wiring run_daemon does (its daemon ticks every handler on an interval here).
        app._daemon = daemon
        # Its kernel's preparation never ends: it stays PREPARING until reported.
        kernel_spec = {"cpu": 1, "sim": {"prepare": "hang"}}
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel_spec]}])
        await wait_for(lambda: _status(app, sid, "PREPARING"), what="the session PREPARING")
        kernel = (await app.repository.get_session(sid)).kernels[0].id
        promotions = {r.name for r in BUILTIN_PROMOTIONS}
        rules = WakeRules.build(coordinator.kinds, coordinator.handlers.values())
        # Entering PULLING can make no session promotion match; RUNNING, only those
        # waiting for no kernel to be in an earlier status; ERROR, the ANY-ended ones.
        assert rules.woken("kernel", K.PULLING) & promotions == set()
        assert rules.woken("kernel", K.RUNNING) & promotions == {
            "promote-to-prepared",
            "promote-to-running",
        }
        assert "detect-start-failure" in rules.woken("kernel", K.ERROR)
        # A session moving between two of a rule's statuses does not wake it; one
        # entering them from outside does.
        assert "detect-start-failure" in rules.woken("session", "SCHEDULED")
        assert "detect-start-failure" not in rules.woken_by_move("session", "PENDING", "SCHEDULED")
        assert "prepare-sessions" in rules.woken_by_move("session", "PENDING", "SCHEDULED")
        assert "promote-to-running" in rules.woken_by_move("session", "PREPARED", "CREATING")
        # A watched status (fetched only past the timeout) wakes its handler on no entry.
        assert "prepare-sessions" not in rules.woken("session", "PREPARING")
        assert "start-sessions" not in rules.woken("session", "CREATING")
        # What the backend reports through (the repository), and the wake-up it calls after.
        reporter = app.repository
        assert await reporter.report_kernel_statuses([KernelReport(kernel, K.ERROR)]) == [True]
        app._backend_reported()
        await wait_for(lambda: _status(app, sid, "TERMINATED"), what="the session TERMINATED")
        rows = await app.repository.history(sid)
        assert ("detect-start-failure", "TERMINATING") in [
            (r.handler, str(r.to_status)) for r in rows
        ]


async def _status(app: App, session_id: str, status: str) -> bool:
    return str((await app.repository.get_entity(session_id)).status) == status


@pytest.mark.skipif(SKIP_PG, reason="DROVER_TEST_SKIP_PG=1")
async def test_news_of_moves_wakes_the_handlers_of_the_moved_kind_only(pg):
    """Another coordinator moving sessions into RUNNING wakes this daemon's handlers of
    RUNNING sessions, not those of another kind's RUNNING (news names the kind)."""

    def make_app() -> App:
        return App(
            Config(database_url=pg.url, database_schema=pg.schema),
            plugin_manager=make_plugin_manager(plugins=[plugin(Finish(), kinds=KINDS)]),
            clock=SystemClock(),
        )

    other = make_app()
    try:
        async with ticking(make_app(), submission_poll=HOUR) as (_c, _daemon, ticks):
            await wait_for(
                lambda: _true(ticks["wk-finish"] >= 1 and ticks["detect-termination"] >= 1)
            )
            sid = await other.repository.create_entity("session", children=[{}])
            await asyncio.sleep(0.5)
            before = ticks.copy()
            elsewhere = await other.start()
            kernel = (await other.repository.get_session(sid)).kernels[0].id
            async with other.repository.engine.begin() as conn:
                await conn.execute(
                    sa.text("UPDATE entities SET status = 'CREATING' WHERE id = :id"), {"id": sid}
                )
                await conn.execute(
                    sa.text("UPDATE entities SET status = 'RUNNING' WHERE id = :id"), {"id": kernel}
                )
            moved = await elsewhere.tick("promote-to-running")
            assert [c.entity_id for c in moved.changes] == [sid]
            await wait_for(
                lambda: _true(ticks["detect-termination"] > before["detect-termination"]),
                what="detect-termination woken by the news",
            )
            await asyncio.sleep(0.5)
            assert ticks["wk-finish"] == before["wk-finish"], ticks
    finally:
        await other.close()
