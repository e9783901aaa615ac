"""Acceptance tests of the experimaestro pack, from the seed's semantics, on SQLite and PostgreSQL.

Every test builds its own plugin (a fresh simulated launcher) and gives it to
drover's ``CoordinatorHarness``; entry points stay off, so the tests mean the
same whether or not the pack is installed.
"""

from __future__ import annotations

import asyncio
import importlib
import tomllib
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import asyncpg
import attrs
import pytest
from click.testing import CliRunner
from drover_experimaestro import (
    DEPENDS_ON,
    JOB_KIND,
    ExperimaestroPlugin,
    FailureReason,
    JobRequest,
    JobState,
    submit,
)
from drover_experimaestro.kinds import RETRIES
from drover_experimaestro.launcher import Start, job_directory
from sqlalchemy.util import await_only

from drover import InvalidSpecError, NewEntity
from drover.coordinator.tick import Coordinator
from drover.model.pools import POOL_FULL
from drover.testing import (
    CoordinatorHarness,
    TestDatabase,
    asyncpg_dsn,
    pg_schema,
    pg_skipped,
    pg_url,
)

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
LIVE = {JobState.SCHEDULED, JobState.RUNNING}


Harness = Callable[..., CoordinatorHarness]


@pytest.fixture
def xpm(drover_database: TestDatabase) -> Harness:
    """A harness with only this pack loaded (its plugin is ``h.xpm``)."""

    def make(
        *, tokens: int = 2, counters: dict[str, int] | None = None, **options: Any
    ) -> CoordinatorHarness:
        plugin = ExperimaestroPlugin(tokens=tokens, counters=counters)
        h = CoordinatorHarness(
            plugins=[plugin],
            include_builtin_handlers=False,
            handler_options=options,
            database_url=drover_database.url,
            database_schema=drover_database.schema,
        )
        h.xpm = plugin  # type: ignore[attr-defined]
        return h

    return make


async def _submit(h: CoordinatorHarness, request: JobRequest) -> str:
    return await submit(h.repository, h.app.queries, request)


def _starts(h: CoordinatorHarness, job: str) -> list[Start]:
    return [s for s in h.xpm.launcher.starts if s.job_id == job]  # type: ignore[attr-defined]


async def _state(h: CoordinatorHarness, job: str) -> tuple[str, str | None, str | None]:
    e = await h.get(job)
    return (str(e.status), e.status_info, e.result)


async def test_a_job_walks_every_state_in_order(xpm: Harness) -> None:
    async with xpm() as h:
        job = await _submit(h, JobRequest("train", {"lr": 0.1}))
        assert await _state(h, job) == ("UNSCHEDULED", None, None)
        await h.run_until_settled()
        assert await _state(h, job) == ("DONE", None, "SUCCESS")
        moves = [(r.handler, r.from_status, r.to_status) for r in await h.history(job)]
        assert moves == [
            ("api", "UNSCHEDULED", "UNSCHEDULED"),
            ("xpm-register", "UNSCHEDULED", "WAITING"),
            ("xpm-resolve", "WAITING", "READY"),
            ("xpm-schedule", "READY", "SCHEDULED"),
            ("xpm-start", "SCHEDULED", "RUNNING"),
            ("xpm-finish", "RUNNING", "DONE"),
        ]
        e = await h.get(job)
        assert e.data == {"directory": job_directory(e.spec, e.name or "")}
        assert [s.run for s in _starts(h, job)] == [0]


async def test_each_failure_ends_in_error_with_its_reason(xpm: Harness) -> None:
    async with xpm() as h:
        failed = await _submit(h, JobRequest("a", script=["failed"]))
        oom = await _submit(h, JobRequest("b", script=["memory"]))
        walltime = await _submit(h, JobRequest("c", script=["timeout"]))  # not resumable
        slow = await _submit(h, JobRequest("d", duration=60))
        await h.run_until_settled()
        assert await _state(h, failed) == ("ERROR", FailureReason.FAILED, "FAILURE")
        assert await _state(h, oom) == ("ERROR", FailureReason.MEMORY, "FAILURE")
        assert await _state(h, walltime) == ("ERROR", FailureReason.TIMEOUT, "FAILURE")
        assert len(_starts(h, walltime)) == 1  # a task that is not resumable is never retried
        assert await _state(h, slow) == ("RUNNING", None, None)
        (await h.request_termination(slow))
        assert await _state(h, slow) == ("ERROR", FailureReason.CANCELLED, "CANCELLED")


async def test_a_job_runs_only_once_all_its_dependencies_are_done(xpm: Harness) -> None:
    async with xpm() as h:
        quick = await _submit(h, JobRequest("quick"))
        slow = await _submit(h, JobRequest("slow", duration=100))
        last = await _submit(h, JobRequest("last", depends_on=[quick, slow]))
        await h.run_until_settled()
        assert (await _state(h, quick))[0] == "DONE"
        assert (await _state(h, slow))[0] == "RUNNING"
        assert await _state(h, last) == ("WAITING", None, None)
        assert _starts(h, last) == []
        h.clock.advance(101)
        await h.run_until_settled()
        assert await _state(h, last) == ("DONE", None, "SUCCESS")


async def test_a_failed_dependency_fails_its_dependents_transitively_past_a_full_batch(
    xpm: Harness,
) -> None:
    """1,000 older jobs wait on a job that never ends; batch size 10. The filter is in SQL,
    before the LIMIT, so each tick fetches exactly the doomed job of that level."""
    async with xpm(**{"xpm-fail-dependents": {"batch_size": 10}}) as h:
        blocker = await h.create(JOB_KIND, JobState.RUNNING, spec={"duration": 10**9})
        await h.repository.seed_entities(
            [
                NewEntity(JOB_KIND, {}, status=JobState.WAITING, links=[(DEPENDS_ON, blocker)])
                for _ in range(1000)
            ]
        )
        root = await h.create(JOB_KIND, JobState.RUNNING, spec={"script": ["failed"]})
        chain = [root]
        for _ in range(3):
            chain.append(await _submit(h, JobRequest(f"level{len(chain)}", depends_on=[chain[-1]])))
        for name in ("xpm-register", "xpm-finish"):
            await h.tick(name)
        assert await _state(h, root) == ("ERROR", FailureReason.FAILED, "FAILURE")
        for level in chain[1:]:
            report = await h.tick("xpm-fail-dependents")
            assert (report.fetched, [c.entity_id for c in report.changes]) == (1, [level])
            assert await _state(h, level) == ("ERROR", FailureReason.DEPENDENCY, "FAILURE")
        assert (await h.tick("xpm-fail-dependents")).fetched == 0
        assert (await _state(h, blocker))[0] == "RUNNING"


async def test_a_cancelled_job_fails_its_dependents(xpm: Harness) -> None:
    async with xpm() as h:
        first = await _submit(h, JobRequest("first", duration=50))
        second = await _submit(h, JobRequest("second", depends_on=[first]))
        await h.run_until_settled()
        await h.request_termination(first)
        await h.run_until_settled()
        assert await _state(h, second) == ("ERROR", FailureReason.DEPENDENCY, "FAILURE")


async def test_a_resumable_task_is_retried_on_timeout_up_to_max_retries_in_its_directory(
    xpm: Harness,
) -> None:
    async with xpm() as h:
        never = await _submit(h, JobRequest("never", resumable=True, script=["timeout"]))
        third = await _submit(
            h, JobRequest("third", resumable=True, script=["timeout", "timeout", "done"])
        )
        failing = await _submit(h, JobRequest("failing", resumable=True, script=["failed"]))
        await h.run_until_settled()
        # max_retries=3 (experimaestro's default): the first run and 3 retries, then ERROR.
        assert await _state(h, never) == ("ERROR", FailureReason.TIMEOUT, "FAILURE")
        assert [s.run for s in _starts(h, never)] == [0, 1, 2, 3]
        assert len({s.directory for s in _starts(h, never)}) == 1  # one directory, every run
        assert await _state(h, third) == ("DONE", None, "SUCCESS")
        assert [s.run for s in _starts(h, third)] == [0, 1, 2]
        # Only a timeout is retried.
        assert await _state(h, failing) == ("ERROR", FailureReason.FAILED, "FAILURE")
        assert len(_starts(h, failing)) == 1
        results = [r.result for r in await h.history(never) if r.handler == "xpm-finish"]
        assert results == ["retry-timeout"] * 3 + ["GIVE_UP"]


async def test_resubmitting_with_a_higher_max_retries_revives_an_exhausted_job(
    xpm: Harness,
) -> None:
    async with xpm() as h:
        script = ["timeout", "timeout", "timeout", "done"]
        train = JobRequest("train", resumable=True, max_retries=1, script=script)
        job = await _submit(h, train)
        evaluate = JobRequest("evaluate", depends_on=[job])
        dependent = await _submit(h, evaluate)
        await h.run_until_settled()
        assert await _state(h, job) == ("ERROR", FailureReason.TIMEOUT, "FAILURE")
        assert await _state(h, dependent) == ("ERROR", FailureReason.DEPENDENCY, "FAILURE")

        # The same max_retries: still exhausted, nothing moves.
        assert await _submit(h, train) == job
        assert (await _state(h, job))[0] == "ERROR"

        # A higher one: the job runs again, in its directory, and its dependent waits for it.
        assert await _submit(h, attrs.evolve(train, max_retries=3)) == job
        assert await _submit(h, evaluate) == dependent
        assert await _state(h, job) == ("WAITING", None, None)  # result and reason cleared
        assert (await _state(h, dependent))[0] == "WAITING"
        for name in ("xpm-resolve", "xpm-fail-dependents"):
            await h.tick(name)
        assert (await _state(h, job))[0] == "READY"
        assert (await _state(h, dependent))[0] == "WAITING"
        await h.run_until_settled()
        assert await _state(h, job) == ("DONE", None, "SUCCESS")
        assert await _state(h, dependent) == ("DONE", None, "SUCCESS")
        assert [s.run for s in _starts(h, job)] == [0, 1, 2, 3]
        assert len({s.directory for s in _starts(h, job)}) == 1
        assert "REOPENED" in [r.result for r in await h.history(job)]


async def _live_token_jobs(h: CoordinatorHarness, jobs: list[str]) -> int:
    return sum([(await h.get(j)).status in LIVE for j in jobs])


async def test_at_most_k_token_jobs_run_at_once(xpm: Harness) -> None:
    async with xpm(tokens=2) as h:
        tokens = [
            await _submit(h, JobRequest("gpu", {"n": n}, tokens=1, duration=10)) for n in range(5)
        ]
        plain = [await _submit(h, JobRequest("cpu", {"n": n}, duration=10)) for n in range(3)]
        await h.run_until_settled()
        assert await _live_token_jobs(h, tokens) == 2
        assert [(await h.get(j)).status for j in plain] == ["RUNNING"] * 3  # no token: no limit
        waiting = [j for j in tokens if (await h.get(j)).status == JobState.READY]
        assert len(waiting) == 3
        (refused,) = [r for r in await h.history(waiting[0]) if r.error_code == POOL_FULL]
        assert refused.handler == "xpm-schedule"
        done_before = 0
        for _ in range(3):  # two, two, then the last one
            h.clock.advance(11)  # past their duration of 10 s
            await h.run_until_settled()
            assert await _live_token_jobs(h, tokens) <= 2
            done = sum([(await h.get(j)).status == JobState.DONE for j in tokens])
            assert done > done_before
            done_before = done
        assert done_before == 5


async def _tokens_held(h: CoordinatorHarness, jobs: list[str], counter: str) -> int:
    held = 0
    for job in jobs:
        e = await h.get(job)
        if e.status in LIVE:
            held += int(e.spec.get("pools", {}).get(counter, 0))
    return held


async def test_a_job_takes_count_tokens_and_never_more_than_k_are_held(xpm: Harness) -> None:
    """experimaestro's ``count``: a job takes several tokens of a counter at once."""
    async with xpm(tokens=3) as h:
        wide = await _submit(h, JobRequest("wide", tokens=2, duration=10))
        also_wide = await _submit(h, JobRequest("wide2", tokens=2, duration=10))
        narrow = await _submit(h, JobRequest("narrow", tokens=1, duration=10))
        jobs = [wide, also_wide, narrow]
        await h.run_until_settled()
        # 2 + 1 of 3 tokens; the second wide job (2) does not fit, the narrow one does.
        assert [(await h.get(j)).status for j in jobs] == ["RUNNING", "READY", "RUNNING"]
        assert await _tokens_held(h, jobs, "xpm-token") == 3
        (refused,) = [r for r in await h.history(also_wide) if r.error_code == POOL_FULL]
        assert "pool 'xpm-token' is full (3/3 held, 2 claimed)" in (refused.message or "")
        h.clock.advance(11)
        await h.run_until_settled()
        assert [(await h.get(j)).status for j in jobs] == ["DONE", "RUNNING", "DONE"]
        h.clock.advance(11)
        await h.run_until_settled()
        assert [(await h.get(j)).status for j in jobs] == ["DONE"] * 3


async def test_a_job_takes_tokens_of_several_counters(xpm: Harness) -> None:
    async with xpm(counters={"gpu": 2, "licence": 1}) as h:
        both = await _submit(h, JobRequest("both", tokens={"gpu": 1, "licence": 1}, duration=10))
        gpu = await _submit(h, JobRequest("gpu", tokens={"gpu": 1}, duration=10))
        more = await _submit(h, JobRequest("more", tokens={"gpu": 1}, duration=10))
        licence = await _submit(h, JobRequest("licence", tokens={"licence": 1}, duration=10))
        free = await _submit(h, JobRequest("free", duration=10))
        jobs = [both, gpu, more, licence, free]
        await h.run_until_settled()
        # gpu: both + gpu = 2/2; licence: both = 1/1; the job claiming nothing runs.
        states = [(await h.get(j)).status for j in jobs]
        assert states == ["RUNNING", "RUNNING", "READY", "READY", "RUNNING"]
        why = {
            j: [r.message for r in await h.history(j) if r.error_code == POOL_FULL][-1]
            for j in (more, licence)
        }
        assert "pool 'gpu' is full (2/2 held, 1 claimed)" in (why[more] or "")
        assert "pool 'licence' is full (1/1 held, 1 claimed)" in (why[licence] or "")
        h.clock.advance(11)
        await h.run_until_settled()
        assert [(await h.get(j)).status for j in (more, licence)] == ["RUNNING", "RUNNING"]
        h.clock.advance(11)
        await h.run_until_settled()
        assert [(await h.get(j)).status for j in jobs] == ["DONE"] * 5


async def test_a_token_request_is_checked_when_the_job_is_submitted(xpm: Harness) -> None:
    async with xpm() as h:
        with pytest.raises(InvalidSpecError, match="names pool 'gpu', which kind 'xpm-job'"):
            await _submit(h, JobRequest("a", tokens={"gpu": 1}))
        with pytest.raises(InvalidSpecError, match="must be a whole number from 1"):
            await _submit(h, JobRequest("b", tokens={"xpm-token": 0}))
        assert await h.app.queries.list_entities(JOB_KIND) == []


async def test_a_transient_job_runs_only_if_a_waiting_job_needs_it(xpm: Harness) -> None:
    """experimaestro's TransientMode: a transient job runs only when a job that depends on
    it waits for it; one needed by nobody stays UNSCHEDULED, never started."""
    async with xpm(**{"xpm-register": {"batch_size": 1}}) as h:
        # Older than the ones that matter, so a filter after the LIMIT would starve them.
        unused = [
            await _submit(h, JobRequest("unused", {"n": n}, transient=True)) for n in range(3)
        ]
        base = await _submit(h, JobRequest("base", transient=True))
        cache = await _submit(h, JobRequest("cache", transient=True, depends_on=[base]))
        later = await _submit(h, JobRequest("later", transient=True))
        final = await _submit(h, JobRequest("final", depends_on=[cache]))
        await h.run_until_settled()
        for job in (final, cache, base):
            assert await _state(h, job) == ("DONE", None, "SUCCESS")
        for job in (*unused, later):
            assert await _state(h, job) == ("UNSCHEDULED", None, None)
            assert _starts(h, job) == []
        # The transient chain ran in dependency order: base, cache, then final.
        started = [s.job_id for s in h.xpm.launcher.starts]  # type: ignore[attr-defined]
        assert started == [base, cache, final]
        # A job submitted later that needs `later` makes it run.
        after = await _submit(h, JobRequest("after", depends_on=[later]))
        await h.run_until_settled()
        assert await _state(h, later) == ("DONE", None, "SUCCESS")
        assert await _state(h, after) == ("DONE", None, "SUCCESS")


async def test_a_failed_transient_job_fails_the_job_that_needed_it(xpm: Harness) -> None:
    async with xpm() as h:
        broken = await _submit(h, JobRequest("broken", transient=True, script=["failed"]))
        needing = await _submit(h, JobRequest("needing", depends_on=[broken]))
        await h.run_until_settled()
        assert await _state(h, broken) == ("ERROR", FailureReason.FAILED, "FAILURE")
        assert await _state(h, needing) == ("ERROR", FailureReason.DEPENDENCY, "FAILURE")


async def _blocked_or_done(task: asyncio.Task[Any]) -> None:
    """Wait until ``task`` has finished, or some apply waits for a pool's lock."""
    conn = await asyncpg.connect(asyncpg_dsn(pg_url()))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120  # generous: the machine may be loaded
    try:
        while loop.time() < deadline:
            if task.done():
                return
            if await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND query LIKE '%pg_advisory_xact_lock%'"
            ):
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the second apply neither finished nor waited for the pool")
    finally:
        await conn.close()


async def test_two_coordinators_on_postgresql_never_take_more_than_k_tokens() -> None:
    """Coordinator A schedules jobs taking 1 and 2 of 3 tokens and, before it commits, B
    schedules two more taking 1 each: B waits for A's pool lock and then finds no token."""
    if pg_skipped():
        pytest.fail("this test needs PostgreSQL (DROVER_TEST_SKIP_PG=1 deselects it)")
    async with pg_schema("xpm") as schema:
        plugin = ExperimaestroPlugin(tokens=3)
        options = {"xpm-schedule": {"batch_size": 2}}
        async with CoordinatorHarness(
            plugins=[plugin],
            include_builtin_handlers=False,
            handler_options=options,
            database_url=pg_url(),
            database_schema=schema,
        ) as h:
            jobs = [
                await h.create(
                    JOB_KIND, JobState.READY, spec={"n": n, "pools": {"xpm-token": units}}
                )
                for n, units in enumerate((1, 2, 1, 1))
            ]
            handler = h.handlers["xpm-schedule"]
            coordinators = [
                Coordinator(
                    h.repository,
                    {"xpm-schedule": handler},
                    clock=h.clock,
                    kinds=h.app.kinds,
                    claim_owner=owner,
                    options=options,
                )
                for owner in ("a", "b")
            ]
            a, b = coordinators
            b_tick: list[asyncio.Task[Any]] = []

            async def run_b_meanwhile() -> None:
                b_tick.append(asyncio.create_task(b.tick("xpm-schedule")))
                await _blocked_or_done(b_tick[0])

            def hold_before_commit(step: str) -> None:
                if step == "before-history" and not b_tick:
                    await_only(run_b_meanwhile())

            a.inject_apply_failure = hold_before_commit
            report_a = await a.tick("xpm-schedule")
            report_b = await b_tick[0]
            assert sorted(c.entity_id for c in report_a.changes) == sorted(jobs[:2])
            assert [c.to_status for c in report_a.changes] == ["SCHEDULED", "SCHEDULED"]
            assert [c.error_code for c in report_b.changes] == [POOL_FULL, POOL_FULL]
            assert all("(3/3 held, 1 claimed)" in (c.message or "") for c in report_b.changes)
            assert await _live_token_jobs(h, jobs) == 2


def test_plugins_check_strict_passes_and_graph_shows_the_kinds() -> None:
    """The installed pack: `drover plugins` lists it, `plugins check --strict` finds nothing,
    `drover graph --kind` draws each kind. Only this pack's entry point is loaded, so what
    other installed packs do cannot hide or cause a warning."""
    from drover.cli.group import main

    runner = CliRunner(env={"DROVER_LOAD_PLUGINS": "experimaestro"})
    listed = runner.invoke(main, ["plugins"])
    assert listed.exit_code == 0, listed.output
    assert "experimaestro" in listed.output
    assert "xpm-finish" in listed.output
    checked = runner.invoke(main, ["plugins", "check", "--strict"])
    assert checked.exit_code == 0, checked.output
    assert "0 warning(s)" in checked.output
    graph = runner.invoke(main, ["graph", "--kind", JOB_KIND])
    assert graph.exit_code == 0, graph.output
    assert "RUNNING     -> WAITING      [" in graph.output  # the resumable retry
    assert "WAITING     -> ERROR        [" in graph.output  # a failed dependency


def test_the_entry_point_names_the_plugin() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    declared = project["entry-points"]["drover"]
    assert declared == {"experimaestro": "drover_experimaestro:plugin"}
    module = importlib.import_module("drover_experimaestro")
    assert isinstance(module.plugin, ExperimaestroPlugin)
    dist = metadata.distribution(project["name"])  # `make venv` installs it
    (ep,) = [ep for ep in dist.entry_points if ep.group == "drover"]
    assert ep.load() is module.plugin


async def test_the_demo_experiment_ends_as_the_readme_says(tmp_path: Path) -> None:
    """`drover-xpm-demo` submits; the pack's handlers (as `drover run` loads them) carry it out."""
    from drover_experimaestro.demo import _submit_experiment

    url = f"sqlite+aiosqlite:///{tmp_path}/xpm.db"
    submitted = dict(await _submit_experiment(url))
    plugin = ExperimaestroPlugin()
    async with CoordinatorHarness(
        plugins=[plugin], include_builtin_handlers=False, database_url=url
    ) as h:
        for _ in range(10):  # the longest chain: prepare, train (3 runs of 2 s), evaluate
            h.clock.advance(3.5)
            await h.run_until_settled()
        ends = {label.split(" ")[0]: await _state(h, job) for label, job in submitted.items()}
        assert ends["train"] == ("DONE", None, "SUCCESS")
        assert ends["evaluate"] == ends["prepare"] == ends["sweep"] == ("DONE", None, "SUCCESS")
        assert ends["broken"] == ("ERROR", FailureReason.MEMORY, "FAILURE")
        assert ends["report"] == ("ERROR", FailureReason.DEPENDENCY, "FAILURE")
        train = submitted["train (resumable: times out twice, then done)"]
        assert str((await h.get(train)).budgets[RETRIES]) == "2/3"
        sweeps = [j for label, j in submitted.items() if label.startswith("sweep")]
        assert all([(await h.get(j)).status == JobState.DONE for j in sweeps])
