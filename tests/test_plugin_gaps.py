"""The gaps plugin authors hit porting real lifecycles (issue 34), each on both databases.

Each test fails on the engine before its fix; the kinds are the tests' own
(:mod:`peers`), so nothing here leans on a built-in lifecycle.
"""

from __future__ import annotations

import json
import textwrap
from enum import StrEnum
from typing import Any

import attrs
import pytest
import tree
from peers import JOB, TASK, Job, Scripted, harness, skip

from drover import (
    Budget,
    EntityKind,
    HandlerOptions,
    HandlerResult,
    InvalidSpecError,
    LatestChild,
    StatusAge,
    StatusTransitions,
    TerminationRule,
    Transition,
)


async def _picked(h: Any, name: str) -> list[str]:
    return [c.entity_id for c in (await h.tick(name)).changes]


def _picker(name: str, *filters: Any) -> Scripted:
    cls = type(
        name.title().replace("-", ""),
        (Scripted,),
        {"handler": name, "filters": filters, "options": HandlerOptions(batch_size=5)},
    )
    return cls(skip)  # type: ignore[no-any-return]


# -- gap 1: StatusAge is inclusive -------------------------------------------------------------


async def test_status_age_matches_an_entity_exactly_that_old(make_harness):
    """dstack resubmits once the back-off has passed: at n seconds, not one tick later."""
    seconds = _picker("aged", StatusAge(seconds=10))
    from_spec = _picker("backed-off", StatusAge(spec_key="retry_after"))
    async with harness(make_harness, seconds, from_spec) as h:
        job = await h.create("job", spec={"retry_after": 10})
        h.clock.advance(9.5)
        assert await _picked(h, "aged") == []
        assert await _picked(h, "backed-off") == []
        h.clock.advance(0.5)
        assert await _picked(h, "aged") == [job]
        assert await _picked(h, "backed-off") == [job]


# -- gap 2: a termination rule gives the children it ends a reason -----------------------------


async def test_a_termination_rule_sets_the_status_info_of_the_children_it_ends(make_harness):
    rule = TerminationRule(tree.Job.CANCELLED, children_info="JOB_CANCELLED")
    cancelling = attrs.evolve(tree.JOB, termination=(rule,))
    async with tree.harness(make_harness, kinds=(cancelling, tree.TASK, tree.ATTEMPT)) as h:
        job, tasks, attempts = await tree.tree(h)
        await h.repository.request_termination([job])
        assert (await h.get(job)).status_info == "USER_REQUESTED"
        for child in [*tasks, *attempts]:
            ended = await h.get(child)
            assert ended.status in {tree.Task.CANCELLED, tree.Attempt.FAILED}, ended.status
            assert ended.status_info == "JOB_CANCELLED"


# -- gap 3: a transition sets the entity's own status_info -------------------------------------


class _Timing(Scripted):
    handler = "timing"
    transitions = StatusTransitions(
        success=Transition(Job.RUNNING, status_info="STARTED"),
        give_up=Transition(Job.FAILED),
    )
    options = HandlerOptions(max_retries=5)


async def test_a_transition_and_a_budgets_give_up_set_the_entitys_status_info(make_harness):
    """experimaestro's TIMEOUT comes from the budget's give_up, not from reading BudgetUse."""
    timeout = Transition(Job.FAILED, status_info="TIMEOUT")
    kind = attrs.evolve(JOB, budgets=(Budget("submissions", 1, give_up=timeout),))

    def script(targets: Any) -> HandlerResult:
        role = {t.spec["role"]: t.id for t in targets}
        spent, told = role.get("spent"), role.get("told")
        return HandlerResult(
            successes=[role[r] for r in ("started", "told") if r in role],
            failures=[spent] if spent else [],
            budgets={spent: "submissions"} if spent else {},
            status_infos={told: "STARTED_BY_HAND"} if told else {},
        )

    handler = _Timing(script)
    async with harness(make_harness, handler, kinds=(kind, TASK)) as h:
        started, spent, told = [
            await h.create("job", spec={"role": role}) for role in ("started", "spent", "told")
        ]
        await h.tick("timing")
        assert (await h.get(spent)).status == Job.QUEUED
        await h.tick("timing")
        assert (await h.get(started)).status_info == "STARTED"
        assert (await h.get(told)).status_info == "STARTED_BY_HAND"
        ended = await h.get(spent)
        assert (ended.status, ended.status_info) == (Job.FAILED, "TIMEOUT")


# -- gap 5: a termination no rule serves is refused ----------------------------------------------

#: Only a QUEUED job may be cancelled: a RUNNING one has no rule.
QUEUED_ONLY = attrs.evolve(JOB, termination=(TerminationRule(Job.CANCELLED, {Job.QUEUED}),))


async def test_a_termination_no_rule_serves_is_refused_in_one_line(make_harness):
    async with harness(make_harness, kinds=(QUEUED_ONLY, TASK)) as h:
        queued = await h.create("job")
        running = await h.create("job", status=Job.RUNNING)
        with pytest.raises(InvalidSpecError) as refused:
            await h.repository.request_termination([queued, running])
        text = str(refused.value)
        assert "\n" not in text
        assert f"{running} is a job in RUNNING: no termination rule applies" in text
        assert "its rules: QUEUED -> CANCELLED" in text
        # Nothing was written, not even for the job a rule serves.
        for job in (queued, running):
            assert [r.result for r in await h.history(job)] == ["CREATED"]
        assert (await h.get(queued)).status == Job.QUEUED
        # An ended job is still "nothing to do", not an error.
        (done,) = await h.repository.request_termination([queued])
        (again,) = await h.repository.request_termination([queued])
        assert (done.changed, again.changed) == (True, False)


def test_drover_terminate_refuses_a_status_without_a_rule(database, monkeypatch, tmp_path):
    rule = TerminationRule(tree.Job.CANCELLED, {tree.Job.QUEUED})
    kinds = (attrs.evolve(tree.JOB, termination=(rule,)), tree.TASK, tree.ATTEMPT)
    job, _task, cli = tree.tree_cli(database, monkeypatch, tmp_path, kinds=kinds)
    refused = cli("terminate", job)
    assert refused.exit_code != 0
    assert "is a job in RUNNING: no termination rule applies" in refused.output
    assert "its rules: QUEUED -> CANCELLED" in refused.output
    shown = json.loads(cli("show", job, "--json").output)
    assert shown["status"] == "RUNNING"
    assert [r["result"] for r in shown["history"]] == ["CREATED"]


# -- gap 9: drover plugins check PATH sees a plugin object's hooks -------------------------------


def test_plugins_check_path_sees_the_hooks_of_a_plugin_object(tmp_path, monkeypatch):
    """A kind with a status no handler targets: warned of whether the hooks are module
    functions or methods of ``plugin = MyPlugin()``."""
    from click.testing import CliRunner

    from drover.cli.group import main

    monkeypatch.chdir(tmp_path)
    source = """
        from enum import StrEnum

        from drover import EntityKind, hookimpl

        class Lonely(StrEnum):
            WAITING = "WAITING"
            DONE = "DONE"

        LONELY = EntityKind("lonely", Lonely, terminal={Lonely.DONE})

        class MyPlugin:
            @hookimpl
            def drover_register_kinds(self, register):
                register(LONELY)

        plugin = MyPlugin()
        """
    path = tmp_path / "object_plugin.py"
    path.write_text(textwrap.dedent(source))
    env = {"DROVER_LOAD_PLUGINS": ""}
    checked = CliRunner().invoke(main, ["plugins", "check", "--json", str(path)], env=env)
    assert checked.exit_code == 0, checked.output
    warned = json.loads(checked.output)["warnings"]
    assert {"lonely"} <= {w["entity_kind"] for w in warned}, warned
    assert any(w["entity_kind"] == "lonely" and w["status"] == "WAITING" for w in warned)


# -- gap 10: check_graph finds the parent; no expired edge without a timeout ---------------------


async def test_check_graph_finds_a_childs_parent_among_the_loaded_kinds(make_harness):
    """Task.STOPPING is reached only by the job's ``stop-tasks`` outcome."""
    from drover.plugins.graph import check_graph

    async with tree.harness(make_harness, *tree.sound_handlers()) as h:
        found = {(w.kind, w.status) for w in check_graph(h.handlers, tree.TASK)}
        assert ("unreachable", tree.Task.STOPPING) not in found
        # Handlers of no coordinator: the kinds are given.
        plain = dict(h.handlers)
        given = check_graph(plain, tree.TASK, kinds={"job": tree.JOB})
        assert ("unreachable", tree.Task.STOPPING) not in {(w.kind, w.status) for w in given}


class _Probe(Scripted):
    handler = "probe"
    transitions = StatusTransitions(success=Transition(Job.RUNNING), expired=Transition(Job.FAILED))
    options = HandlerOptions(max_retries=1)


async def test_the_graph_draws_expired_only_for_a_handler_with_a_timeout(make_harness):
    from drover.plugins.graph import edges_of

    def expired(h: Any) -> list[Any]:
        return [e for e in edges_of(h.handlers, kind=JOB) if e.outcome == "expired"]

    async with harness(make_harness, _Probe()) as h:
        assert expired(h) == []
    configured = {"probe": {"timeout": 30}}
    async with harness(make_harness, _Probe(), handler_options=configured) as h:
        assert [(e.source, e.target) for e in expired(h)] == [(Job.QUEUED, Job.FAILED)]


# -- gap 4: composite slots (replica x job number) ------------------------------------------------


class Run(StrEnum):
    ACTIVE = "ACTIVE"
    DONE = "DONE"
    FAILED = "FAILED"


class Sub(StrEnum):
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"


SLOT = ("replica", "job")
RUN = EntityKind(
    "run", Run, terminal={Run.DONE, Run.FAILED}, result_from="latest-child", result_slot=SLOT
)
SUB = EntityKind("submission", Sub, terminal={Sub.DONE, Sub.FAILED}, parent="run")


def _sub(status: str, replica: int, job: int) -> dict[str, Any]:
    return {"status": status, "spec": {"replica": replica, "job": job}}


async def test_a_composite_slot_counts_the_latest_submission_of_each_replica_and_job(
    make_harness,
):
    """dstack: a run's jobs are (replica, job number); a retry resubmits one of them."""
    # Job 1 of replica 0 failed; a later success of job 0 (same replica) does not hide it.
    hidden = [_sub(Sub.FAILED, 0, 1), _sub(Sub.DONE, 0, 0), _sub(Sub.DONE, 1, 1)]
    # Every (replica, job) pair's latest submission succeeded.
    retried = [_sub(Sub.FAILED, 0, 1), _sub(Sub.DONE, 0, 0), _sub(Sub.DONE, 0, 1)]
    failed_slot = _picker("failed-slot", LatestChild({Sub.FAILED}, slot_key=SLOT))
    running = {"statuses": frozenset({Run.ACTIVE}), "kind": "run"}
    failed_slot = type("FailedSlot", (type(failed_slot),), running)(skip)
    async with harness(make_harness, failed_slot, kinds=(RUN, SUB)) as h:
        bad = await h.create("run", status=Run.DONE, children=hidden)
        good = await h.create("run", status=Run.DONE, children=retried)
        assert ((await h.get(bad)).result, (await h.get(good)).result) == ("FAILURE", "SUCCESS")
        active = await h.create("run", status=Run.ACTIVE, children=hidden)
        await h.create("run", status=Run.ACTIVE, children=retried)
        assert await _picked(h, "failed-slot") == [active]
    # The single-key form keeps working, and reads back as it was given.
    assert LatestChild({Sub.FAILED}, slot_key="replica").slot_key == "replica"
    assert LatestChild({Sub.FAILED}, slot_key=["replica", "job"]).slot_key == SLOT
    assert attrs.evolve(RUN, result_slot="replica").result_slot == "replica"


# -- gap 8: run_until_settled waits until oldest-seen handlers have reached every candidate ------


class _OnlyNewest(Scripted):
    """Moves only entities whose spec says ``movable``; says nothing of the others."""

    handler = "only-newest"
    transitions = StatusTransitions(success=Transition(Job.RUNNING))
    options = HandlerOptions(batch_size=1, order="oldest-seen")


async def test_run_until_settled_reaches_every_candidate_of_an_oldest_seen_handler(
    make_harness,
):
    def script(targets: Any) -> HandlerResult:
        return HandlerResult(successes=[t.id for t in targets if t.spec.get("movable")])

    async with harness(make_harness, _OnlyNewest(script)) as h:
        waiting = [await h.create("job") for _ in range(2)]
        newest = await h.create("job", spec={"movable": True})
        await h.run_until_settled()
        assert (await h.get(newest)).status == Job.RUNNING
        assert [(await h.get(w)).status for w in waiting] == [Job.QUEUED, Job.QUEUED]
