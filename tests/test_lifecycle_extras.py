"""The smaller additions of issue 19: termination reasons, promotions copying a child's
status_info, run_until_settled(until=…), plugins check PATH, and why for any kind.

Kinds from ``tests/tree.py`` (job -> task -> attempt), on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import textwrap

import attrs
import pytest
from tree import (
    ATTEMPT,
    JOB,
    TASK,
    Attempt,
    Job,
    RunJobs,
    Task,
    harness,
    ids,
    sound_handlers,
    tree,
    tree_cli,
)

from drover import HandlerResult, KernelMatchType, PromotionRule, TerminationRule

ABORTING_JOB = attrs.evolve(
    JOB, termination=(TerminationRule(Job.CANCELLED, status_info="ABORTED"),)
)


async def test_a_termination_rule_sets_its_own_status_info_and_a_reason_is_recorded(
    make_harness,
):
    async with harness(make_harness, kinds=(ABORTING_JOB, TASK, ATTEMPT)) as h:
        job, _, attempts = await tree(h)
        await h.repository.request_termination([job], reason="bad input data")
        assert {(await h.get(a)).status for a in attempts} == {Attempt.FAILED}
        found = await h.get(job)
        assert (found.status, found.status_info) == (Job.CANCELLED, "ABORTED")
        last = (await h.history(job))[-1]
        assert last.message == "termination requested: bad input data"
    # Without a status_info of its own, a rule records who asked.
    async with harness(make_harness) as h:
        plain = await h.create("job", status=Job.RUNNING)
        await h.repository.request_termination([plain])
        assert (await h.get(plain)).status_info == "USER_REQUESTED"
        assert (await h.history(plain))[-1].message == "termination requested"


def test_drover_terminate_takes_a_reason(database, monkeypatch, tmp_path):
    job, _task, cli = tree_cli(database, monkeypatch, tmp_path)
    assert "--reason" in cli("terminate", "--help").output
    done = cli("terminate", job, "--reason", "wrong dataset", "--json")
    assert json.loads(done.output)[0]["to_status"] == "CANCELLED"
    shown = json.loads(cli("show", job, "--json").output)
    assert shown["history"][-1]["message"] == "termination requested: wrong dataset"


FAIL_JOBS = PromotionRule(
    "fail-jobs",
    {Job.RUNNING},
    {Task.FAILED},
    KernelMatchType.ANY,
    Job.FAILED,
    kind="job",
    copy_child_info=True,
)


async def test_a_promotion_copies_the_matching_childs_status_info(make_harness):
    async with harness(make_harness, FAIL_JOBS) as h:
        job = await h.create(
            "job", status=Job.RUNNING, children=[{"status": Task.DONE}, {"status": Task.RUNNING}]
        )
        (_, running) = (await h.get(job)).children
        await h.repository.report(running.id, Task.FAILED, status_info="OOM_KILLED")
        await h.tick("fail-jobs")
        found = await h.get(job)
        assert (found.status, found.status_info, found.result) == (
            Job.FAILED,
            "OOM_KILLED",
            "FAILURE",
        )


async def test_run_until_settled_stops_when_until_holds(make_harness):
    """A handler that patches data every tick never settles; until= stops it."""
    run = RunJobs(
        lambda ts: HandlerResult(
            skipped=ids(ts), data={t.id: {"n": (t.data or {}).get("n", 0) + 1} for t in ts}
        )
    )
    async with harness(make_harness, run) as h:
        job = await h.create("job", status=Job.RUNNING)

        async def counted(hh):
            return ((await hh.get(job)).data or {}).get("n", 0) >= 3

        assert await h.run_until_settled(until=counted) == 3
        assert (await h.get(job)).data == {"n": 3}
        with pytest.raises(RuntimeError, match="entities still changing after 2 rounds"):
            await h.run_until_settled(max_rounds=2)

    async with harness(make_harness) as h:
        await h.create("job", status=Job.RUNNING)
        with pytest.raises(RuntimeError, match="never held"):
            await h.run_until_settled(until=lambda hh: False)
        assert await h.run_until_settled(until=lambda hh: True) == 0


def test_plugins_check_path_checks_a_module_not_yet_installed(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from drover.cli.group import main

    monkeypatch.chdir(tmp_path)
    sound = tmp_path / "sound_plugin.py"
    sound.write_text(
        textwrap.dedent(
            """
            from drover import hookimpl
            from tree import KINDS, sound_handlers

            @hookimpl
            def drover_register_kinds(register):
                register(*KINDS)

            @hookimpl
            def drover_register_handlers(register):
                register(*sound_handlers())
            """
        )
    )
    reviving = tmp_path / "reviving"
    reviving.mkdir()
    (reviving / "__init__.py").write_text(
        textwrap.dedent(
            """
            from drover import StatusTransitions, Transition, hookimpl
            from tree import KINDS, Job, RunJobs

            class Revive(RunJobs):
                handler = "revive-jobs"
                statuses = frozenset({Job.DONE})
                transitions = StatusTransitions(success=Transition(Job.QUEUED))

            @hookimpl
            def drover_register_kinds(register):
                register(*KINDS)

            @hookimpl
            def drover_register_handlers(register):
                register(Revive())
            """
        )
    )
    env = {"DROVER_LOAD_PLUGINS": ""}
    runner = CliRunner()
    assert (
        "PATH (optional) is a plugin module"
        in runner.invoke(main, ["plugins", "check", "--help"], env=env).output
    )
    ok = runner.invoke(main, ["plugins", "check", "--strict", "--json", str(sound)], env=env)
    assert (ok.exit_code, json.loads(ok.output)["errors"]) == (0, []), ok.output
    alone = runner.invoke(main, ["plugins", "check", "--json"], env=env)
    assert json.loads(ok.output)["handlers"] == (
        json.loads(alone.output)["handlers"] + len(sound_handlers())
    )
    bad = runner.invoke(main, ["plugins", "check", str(reviving)], env=env)
    assert bad.exit_code == 1
    assert "cannot leave a terminal status" in bad.output
    missing = runner.invoke(main, ["plugins", "check", str(tmp_path / "nope.py")], env=env)
    assert missing.exit_code == 1
    assert "not a Python file or a package directory" in missing.output
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_anywhere\n")
    failed = runner.invoke(main, ["plugins", "check", str(broken)], env=env)
    assert failed.exit_code == 1
    assert "cannot import" in failed.output
    assert "ModuleNotFoundError" in failed.output


def test_drover_why_says_how_a_child_ended(database, monkeypatch, tmp_path):
    job, task, cli = tree_cli(database, monkeypatch, tmp_path)
    cli("terminate", job)
    why = cli("why", task).output
    assert "it ended by api (MOVED) from RUNNING" in why
    assert "it has ended (result FAILURE)" in why
