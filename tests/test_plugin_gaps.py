"""The gaps plugin authors hit porting real lifecycles (issue 34), each on both databases.

Each test fails on the engine before its fix; the kinds are the tests' own
(:mod:`peers`), so nothing here leans on a built-in lifecycle.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import attrs
import pytest
import tree
from peers import JOB, TASK, Job, Scripted, harness, skip

from drover import (
    Budget,
    HandlerOptions,
    HandlerResult,
    InvalidSpecError,
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
