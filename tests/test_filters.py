"""Candidate filters: compiled to SQL before the fetch's LIMIT, on both databases.

Every filter is exercised through real ticks of a plugin kind defined only in
the tests (:mod:`peers`), with ``batch_size`` small enough that a filter
applied after the LIMIT would starve the entities that match.
"""

from __future__ import annotations

from typing import Any

import pytest
from peers import Job, Scripted, Task, harness, skip

from drover import (
    AllOf,
    AnyOf,
    ChildCount,
    Children,
    DependenciesFailed,
    DependenciesSucceeded,
    Dependents,
    Field,
    HandlerOptions,
    KernelMatchType,
    LatestChild,
    Not,
    Parent,
    StatusAge,
)
from drover.storage import _sql


async def _picked(h: Any, name: str) -> list[str]:
    return [c.entity_id for c in (await h.tick(name)).changes]


# -- bug 5: the fetch's statement cache ---------------------------------------------------


async def test_filter_values_that_change_every_tick_reuse_one_statement(make_harness):
    """A handler whose filter values change every tick must not grow the statement cache."""

    class Moving(Scripted):
        handler = "moving"
        wanted = 0

        @property
        def candidate_filters(self) -> tuple[Any, ...]:
            return (Field("spec", ("n",), "eq", Moving.wanted),)

    async with harness(make_harness, Moving(skip)) as h:
        ids = [await h.create("job", spec={"n": n}) for n in range(12)]
        assert await _picked(h, "moving") == [ids[0]]
        before = _sql.cached_statements()
        for n in range(1, 12):
            Moving.wanted = n
            # Each tick binds its own value: it finds the entity with that value.
            assert await _picked(h, "moving") == [ids[n]]
        assert _sql.cached_statements() == before


async def test_the_cache_of_filtered_fetches_keeps_only_the_most_recent(make_harness, monkeypatch):
    """Filters whose shape changes every tick (a path per tick) are bounded too."""
    monkeypatch.setattr(_sql, "BOUNDED_STATEMENTS", 3)

    class Shifting(Scripted):
        handler = "shifting"
        key = "k0"

        @property
        def candidate_filters(self) -> tuple[Any, ...]:
            return (Field("spec", (Shifting.key,), "exists"),)

    async with harness(make_harness, Shifting(skip)) as h:
        ids = [await h.create("job", spec={f"k{n}": 1}) for n in range(8)]
        await _picked(h, "shifting")
        before = _sql.cached_statements()
        for n in range(8):
            Shifting.key = f"k{n}"
            assert await _picked(h, "shifting") == [ids[n]]
        assert _sql.cached_statements() <= before + 3


# -- the filters -----------------------------------------------------------------------------


def _one_at_a_time(name: str, statuses: set[str], *filters: Any, kind: str = "job") -> Scripted:
    """A handler fetching one entity per tick: a filter applied after the LIMIT would starve."""
    cls = type(
        name.title().replace("-", ""),
        (Scripted,),
        {
            "kind": kind,
            "handler": name,
            "statuses": frozenset(statuses),
            "filters": filters,
            "options": HandlerOptions(batch_size=1),
        },
    )
    return cls(skip)  # type: ignore[no-any-return]


async def test_field_in_matches_one_of_the_values(make_harness):
    picker = _one_at_a_time("pick", {Job.QUEUED}, Field("spec", ("queue",), "in", ["gpu", 7]))
    async with harness(make_harness, picker) as h:
        await h.create("job", spec={"queue": "cpu"})
        await h.create("job", spec={})
        await h.create("job", spec={"queue": ["gpu"]})
        gpu = await h.create("job", spec={"queue": "gpu"})
        seven = await h.create("job", spec={"queue": 7})
        assert await _picked(h, "pick") == [gpu]
        await h.repository.update_spec(gpu, {"queue": "cpu"})
        assert await _picked(h, "pick") == [seven]
    with pytest.raises(ValueError, match="Field op 'in' takes a list of values"):
        Field("spec", ("queue",), "in", "gpu")


async def test_parent_statuses_and_all_of_inside_any_of(make_harness):
    """Tasks that may run: their job RUNNING and the task ready, or their job CANCELLING."""
    ready = AllOf(Parent({Job.RUNNING}), Field("spec", ("ready",), "eq", True))
    picker = _one_at_a_time(
        "pick-tasks", {Task.PENDING}, AnyOf(ready, Parent({Job.CANCELLING})), kind="task"
    )
    async with harness(make_harness, picker) as h:
        await h.create("job", children=[{"spec": {"ready": True}}])
        children = [{}, {"spec": {"ready": True}}]
        running = await h.create("job", status=Job.RUNNING, children=children)
        cancelling = await h.create("job", status=Job.CANCELLING, children=[{}])
        _not_ready, ready_task = (await h.get(running)).children
        (cancelled_task,) = (await h.get(cancelling)).children
        assert await _picked(h, "pick-tasks") == [ready_task.id]
        await h.repository.update_spec(ready_task.id, {"ready": False})
        assert await _picked(h, "pick-tasks") == [cancelled_task.id]
    with pytest.raises(ValueError, match="AllOf takes at least one filter"):
        AllOf()


async def test_status_age_from_data_that_a_handler_wrote(make_harness):
    """A retry deadline kept in data: the entity is fetched once it has waited that long."""
    picker = _one_at_a_time("retry", {Job.QUEUED}, StatusAge(data_key="retry_after"))
    async with harness(make_harness, picker) as h:
        await h.create("job")
        await h.create("job", spec={"retry_after": 1})
        later = await h.create("job")
        sooner = await h.create("job")
        await h.repository.apply(
            "test",
            [
                _keep(later, {"retry_after": 30}),
                _keep(sooner, {"retry_after": 10}),
            ],
            now=h.clock.time(),
        )
        assert await _picked(h, "retry") == []
        h.clock.advance(11)
        assert await _picked(h, "retry") == [sooner]
        h.clock.advance(20)
        # Both have waited long enough now; the older goes first.
        assert await _picked(h, "retry") == [later]
    with pytest.raises(ValueError, match="exactly one of seconds=, spec_key= and data_key="):
        StatusAge(seconds=1, data_key="x")


def _keep(entity_id: str, data: dict[str, Any]) -> Any:
    from drover.model.plan import Change
    from drover.model.status import SchedulingResult

    return Change(
        entity_id=entity_id,
        from_status=Job.QUEUED,
        result=SchedulingResult.SKIPPED,
        kind="job",
        data=data,
    )


async def test_child_count_against_a_number_in_the_spec(make_harness):
    """Jobs that may start another task: fewer WORKING tasks than their own max_parallel."""
    picker = _one_at_a_time(
        "room",
        {Job.RUNNING},
        ChildCount("lt", statuses={Task.WORKING}, spec_key="max_parallel"),
    )
    async with harness(make_harness, picker) as h:
        await h.create("job", status=Job.RUNNING, spec={"max_parallel": 1}, children=[
            {"status": Task.WORKING}, {}
        ])  # fmt: skip
        await h.create("job", status=Job.RUNNING, spec={"max_parallel": "two"})
        await h.create("job", status=Job.RUNNING)
        room = await h.create("job", status=Job.RUNNING, spec={"max_parallel": 2}, children=[
            {"status": Task.WORKING}, {"status": Task.DONE}, {}
        ])  # fmt: skip
        assert await _picked(h, "room") == [room]
    with pytest.raises(ValueError, match="exactly one of value= and spec_key="):
        ChildCount("lt", 2, spec_key="max_parallel")


async def test_dependencies_failed_finds_dependents_of_a_failure(make_harness):
    """A job whose dependency FAILED is fetched (to fail it); live or successful ones are not."""
    picker = _one_at_a_time("doomed", {Job.QUEUED}, DependenciesFailed())
    ready = _one_at_a_time("ready", {Job.QUEUED}, DependenciesSucceeded())
    async with harness(make_harness, picker, ready) as h:
        live = await h.create("job", status=Job.RUNNING)
        done = await h.create("job", status=Job.RUNNING)
        failed = await h.create("job", status=Job.RUNNING)
        on_live = await h.create("job", links=[("depends_on", live)])
        on_done = await h.create("job", links=[("depends_on", done)])
        await h.create("job", links=[("blocks", failed)])
        on_failed = await h.create("job", links=[("depends_on", failed), ("depends_on", done)])
        await _end(h, done, Job.DONE)
        await _end(h, failed, Job.FAILED)
        assert (await h.get(failed)).result == "FAILURE"
        assert await _picked(h, "doomed") == [on_failed]
        # The other filter's view: only the dependent of a success is ready.
        assert await _picked(h, "ready") == [on_done]
        assert on_live not in await _picked(h, "ready")


async def test_dependents_finds_what_a_waiting_entity_depends_on(make_harness):
    """The reverse relation, in SQL before the LIMIT: 20 older jobs no queued job depends on
    never hide the one that is needed, on both databases."""
    needed = _one_at_a_time("needed", {Job.RUNNING}, Dependents(statuses={Job.QUEUED}))
    anyone = _one_at_a_time("depended-on", {Job.RUNNING}, Dependents("blocks"))
    async with harness(make_harness, needed, anyone) as h:
        older = [await h.create("job", status=Job.RUNNING) for _ in range(20)]
        # Depended on, but by a job that is no longer QUEUED, or by another relation.
        await h.create("job", status=Job.RUNNING, links=[("depends_on", older[0])])
        await h.create("job", links=[("blocks", older[1])])
        wanted = await h.create("job", status=Job.RUNNING)
        # A QUEUED job depends on it: the newest, found past the batch of one.
        await h.create("job", links=[("depends_on", wanted)])
        assert await _picked(h, "needed") == [wanted]
        assert await _picked(h, "needed") == [wanted]  # skipped: fetched again
        # statuses=None: any dependent, whatever its status.
        assert await _picked(h, "depended-on") == [older[1]]


async def test_dependents_follow_the_dependents_status(make_harness):
    needed = _one_at_a_time("needed", {Job.RUNNING}, Dependents(statuses={Job.QUEUED}))
    async with harness(make_harness, needed) as h:
        dependency = await h.create("job", status=Job.RUNNING)
        dependent = await h.create("job", status=Job.RUNNING, links=[("depends_on", dependency)])
        assert await _picked(h, "needed") == []
        # The dependent waits again: its dependency is needed.
        await h.repository.report(dependent, Job.QUEUED)
        assert await _picked(h, "needed") == [dependency]
        await _end(h, dependency, Job.DONE)
        assert await _picked(h, "needed") == []


async def test_not_negates_a_filter_before_the_limit(make_harness):
    """``Not`` in SQL: 10 older jobs the inner filter holds for never hide the one it does not;
    a missing field (unknown in SQL) counts as "does not hold", and ``Not`` composes with
    ``AllOf``/``AnyOf`` both ways."""
    not_gpu = _one_at_a_time("not-gpu", {Job.QUEUED}, Not(Field("spec", ("queue",), "eq", "gpu")))
    neither = _one_at_a_time(
        "neither",
        {Job.QUEUED},
        Not(AnyOf(Field("spec", ("queue",), "eq", "gpu"), Field("spec", ("queue",), "missing"))),
        AllOf(Not(Children({Task.FAILED}, KernelMatchType.ANY)), ChildCount("ge", 1)),
    )
    async with harness(make_harness, not_gpu, neither) as h:
        for _ in range(10):
            await h.create("job", spec={"queue": "gpu"})
        missing = await h.create("job", spec={})
        failed = await h.create("job", spec={"queue": "cpu"}, children=[{"status": Task.FAILED}])
        await h.create("job", spec={"queue": "cpu"})  # no children: ChildCount fails
        cpu = await h.create("job", spec={"queue": "cpu"}, children=[{"status": Task.DONE}])
        assert await _picked(h, "not-gpu") == [missing]
        assert await _picked(h, "neither") == [cpu]
        await h.repository.update_spec(missing, {"queue": "gpu"})
        # Now every gpu job, the formerly missing one too, is passed over for the next.
        assert await _picked(h, "not-gpu") == [failed]
    # Validation walks into Not: a typo inside it is refused at load.
    typo = _one_at_a_time("typo", {Job.QUEUED}, Not(LatestChild({"WORKNG"})))
    from drover import InvalidHandlerError

    with pytest.raises(InvalidHandlerError, match=r"LatestChild names status\(es\) \['WORKNG'\]"):
        async with harness(make_harness, typo):
            pass


async def test_latest_child_reads_only_the_most_recent_child(make_harness):
    """Jobs whose latest task FAILED, not those with an older FAILED task retried since:
    decoys ahead of it at batch size 1, on both databases."""
    retry = _one_at_a_time("retry", {Job.RUNNING}, LatestChild({Task.FAILED}))
    async with harness(make_harness, retry) as h:
        for _ in range(5):
            # An earlier try failed, the latest is working: not this filter's.
            await h.create(
                "job",
                status=Job.RUNNING,
                children=[{"status": Task.FAILED}, {"status": Task.WORKING}],
            )
        await h.create("job", status=Job.RUNNING)  # no children at all
        wanted = await h.create(
            "job", status=Job.RUNNING, children=[{"status": Task.DONE}, {"status": Task.FAILED}]
        )
        assert await _picked(h, "retry") == [wanted]
        # A new try supersedes the failed one.
        await h.create("task", parent=wanted)
        assert await _picked(h, "retry") == []
    with pytest.raises(ValueError, match="at least one status"):
        LatestChild(set())


async def test_latest_child_per_slot(make_harness):
    """With ``slot_key``, each replica's latest try counts: a job one of whose replicas'
    latest try FAILED, while another replica's later try is fine."""
    per_slot = _one_at_a_time("per-slot", {Job.RUNNING}, LatestChild({Task.FAILED}, slot_key="r"))
    whole = _one_at_a_time("whole", {Job.RUNNING}, LatestChild({Task.FAILED}))
    async with harness(make_harness, per_slot, whole) as h:
        for _ in range(3):
            await h.create("job", status=Job.RUNNING, children=[
                {"spec": {"r": 0}, "status": Task.FAILED}, {"spec": {"r": 0}},
                {"spec": {"r": 1}, "status": Task.DONE},
            ])  # fmt: skip
        wanted = await h.create("job", status=Job.RUNNING, children=[
            {"spec": {"r": 0}, "status": Task.FAILED}, {"spec": {"r": 1}, "status": Task.DONE},
        ])  # fmt: skip
        assert await _picked(h, "per-slot") == [wanted]
        # The job's single latest child is replica 1's DONE: not for the whole-job filter.
        assert await _picked(h, "whole") == []


async def _end(h: Any, entity_id: str, status: str) -> None:
    from drover.model.plan import Change
    from drover.model.status import SchedulingResult

    change = Change(
        entity_id=entity_id,
        from_status=Job.RUNNING,
        result=SchedulingResult.SUCCESS,
        to_status=status,
        kind="job",
    )
    await h.repository.apply("test", [change], now=h.clock.time())


async def test_a_handler_reads_its_targets_links(make_harness):
    picker = Scripted(skip)
    async with harness(make_harness, picker) as h:
        first = await h.create("job", status=Job.RUNNING)
        second = await h.create("job", status=Job.RUNNING)
        job = await h.create("job", links=[("depends_on", second), ("depends_on", first)])
        await h.repository.link(job, "blocks", first)
        alone = await h.create("job")
        await h.tick("scripted")
        seen = {t.id: t for t in picker.seen[0]}
        depends = tuple(("depends_on", t) for t in sorted([first, second]))
        assert seen[job].links == (("blocks", first), *depends)
        assert seen[job].linked("depends_on") == tuple(sorted([first, second]))
        assert seen[alone].links == ()
        assert (await h.get(job)).links == seen[job].links


@pytest.mark.parametrize(
    ("kind", "bad", "message"),
    [
        ("job", Parent({Job.RUNNING}), "kind 'job' has no parent kind"),
        ("task", Parent({"RUNNNING"}), "names status(es) ['RUNNNING'], not statuses of kind 'job'"),
        (
            "job",
            AnyOf(AllOf(ChildCount("gt", 0, statuses={"WORKNG"}))),
            "names status(es) ['WORKNG'], not statuses of kind 'task'",
        ),
        (
            "job",
            Dependents(statuses={"QUEUD"}),
            "Dependents names status(es) ['QUEUD'], not statuses of any registered kind",
        ),
    ],
)
async def test_a_filter_naming_statuses_of_no_such_kind_is_refused_at_load(
    make_harness, kind, bad, message
):
    from drover import InvalidHandlerError

    picker = _one_at_a_time(
        "typo", {Task.PENDING if kind == "task" else Job.QUEUED}, bad, kind=kind
    )
    with pytest.raises(InvalidHandlerError) as raised:
        async with harness(make_harness, picker):
            pass
    assert message in str(raised.value)
    assert "handler 'typo'" in str(raised.value)


async def test_field_compares_json_values_of_the_same_type_alike_on_both_databases(
    make_harness,
):
    """SQLite read JSON true as 1 (so `eq True` matched 1 and `in [1]` matched true), and the
    two databases ordered values of different types differently (PostgreSQL's `lt 7` took
    strings and null, SQLite's took booleans), and SQLite said a field holding null did not
    exist: equality is JSON's, an ordering compares only a field of the value's type
    (numbers with numbers, strings with strings), and a null field exists."""
    values = [7, "7", True, 1, 1.0, 1.5, 0, False, None, "", "true", [7]]
    cases = {
        "eq-true": Field("spec", ("x",), "eq", True),
        "eq-1": Field("spec", ("x",), "eq", 1),
        "in-1": Field("spec", ("x",), "in", [1]),
        "in-true-7": Field("spec", ("x",), "in", [True, "7"]),
        "ne-1": Field("spec", ("x",), "ne", 1),
        "lt-7": Field("spec", ("x",), "lt", 7),
        "gt-5": Field("spec", ("x",), "gt", "5"),
        "eq-null": Field("spec", ("x",), "eq", None),
        "exists": Field("spec", ("x",), "exists"),
    }
    pickers = []
    for name, f in cases.items():
        picker = _one_at_a_time(name, {Job.QUEUED}, f)
        type(picker).options = HandlerOptions(batch_size=50)
        pickers.append(picker)
    async with harness(make_harness, *pickers) as h:
        label = {await h.create("job", spec={"x": v}): repr(v) for v in values}
        label[await h.create("job", spec={})] = "missing"
        found = {n: sorted(label[i] for i in await _picked(h, n)) for n in cases}
    assert found == {
        "eq-true": ["True"],
        "eq-1": ["1", "1.0"],
        "in-1": ["1", "1.0"],
        "in-true-7": ["'7'", "True"],
        "ne-1": sorted([*(repr(v) for v in values if v is True or v != 1), "missing"]),
        "lt-7": ["0", "1", "1.0", "1.5"],
        "gt-5": ["'7'", "'true'"],
        "eq-null": ["None"],
        "exists": sorted(repr(v) for v in values),
    }
