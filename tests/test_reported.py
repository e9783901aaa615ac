"""Report-driven edges: statuses only pushed reports enter or leave, declared by the kind
(``EntityKind(reported=…)``), so ``drover plugins check --strict`` does not call them
untargeted, dead ends or unreachable."""

from __future__ import annotations

import json

import attrs
import pytest
from click.testing import CliRunner
from peers import JOB, TASK, Job, Scripted, harness

from drover import InvalidHandlerError, InvalidSpecError, StatusTransitions, Transition
from drover.cli.group import main
from drover.plugins.graph import check_graph, edges_of, render_text

#: What a backend reports about a running job: it ended, or is being cancelled outside.
REPORTED = {
    (Job.RUNNING, Job.DONE),
    (Job.RUNNING, Job.FAILED),
    (Job.RUNNING, Job.CANCELLING),
    (Job.CANCELLING, Job.CANCELLED),
}


class StartJobs(Scripted):
    handler = "start-jobs"
    statuses = frozenset({Job.QUEUED})
    transitions = StatusTransitions(success=Transition(Job.RUNNING))


def _warnings(kind: object) -> set[tuple[str, str]]:
    return {(w.kind, w.status) for w in check_graph({"start-jobs": StartJobs()}, kind)}  # type: ignore[arg-type]


def test_statuses_only_reports_move_are_warned_about_until_declared():
    plain = attrs.evolve(JOB, ends_on_request=False)
    assert _warnings(plain) >= {
        ("untargeted", "RUNNING"),
        ("no-exit", "RUNNING"),
        ("unreachable", "CANCELLING"),
    }
    declared = attrs.evolve(plain, reported=REPORTED)
    assert _warnings(declared) == set()
    edges = edges_of({"start-jobs": StartJobs()}, kind=declared, include_api=False)
    assert ("RUNNING", "DONE", "report", "reported") in {
        (e.source, e.target, e.handler, e.outcome) for e in edges
    }
    assert "report: reported" in render_text(edges, declared)


def test_reported_edges_are_checked_when_the_kind_is_declared():
    with pytest.raises(
        InvalidHandlerError, match=r"reported names unknown status\(es\) \['LOST'\]"
    ):
        attrs.evolve(JOB, reported={(Job.RUNNING, "LOST")})
    with pytest.raises(InvalidHandlerError, match="does not change the status"):
        attrs.evolve(JOB, reported={(Job.RUNNING, Job.RUNNING)})


_MODULE = """
import attrs
from drover import hookimpl
from peers import JOB
from test_reported import REPORTED, StartJobs

KIND = attrs.evolve(JOB, reported=REPORTED) if {declared} else JOB

@hookimpl
def drover_register_kinds(register):
    register(KIND)

@hookimpl
def drover_register_handlers(register):
    register(StartJobs())
"""


@pytest.mark.parametrize("declared", [False, True])
def test_plugins_check_strict_passes_once_the_reports_are_declared(tmp_path, declared):
    module = tmp_path / "reporting.py"
    module.write_text(_MODULE.format(declared=declared))
    env = {"DROVER_LOAD_PLUGINS": ""}
    args = ["plugins", "check", "--strict", "--json", str(module)]
    checked = CliRunner().invoke(main, args, env=env)
    warned = {
        (w["kind"], w["status"])
        for w in json.loads(checked.output)["warnings"]
        if w["entity_kind"] == "job"
    }
    if declared:
        assert (checked.exit_code, warned) == (0, set()), checked.output
    else:
        assert checked.exit_code == 1
        assert ("unreachable", "CANCELLING") in warned


async def test_a_strict_kind_takes_from_reports_only_its_declared_moves(make_harness):
    """Declared pairs into a live status, compare-and-set on their sources; ends always;
    a kind that is not strict takes any status (on both databases)."""
    strict = attrs.evolve(JOB, reported=REPORTED, strict_reports=True)
    async with harness(make_harness, kinds=(strict, TASK)) as h:
        queued, running = [await h.create("job", status=s) for s in (Job.QUEUED, Job.RUNNING)]
        with pytest.raises(InvalidSpecError, match="may not move it to RUNNING"):
            await h.repository.report(queued, Job.RUNNING)
        # CANCELLING is entered only from RUNNING: from QUEUED the report does not apply.
        assert not await h.repository.report(queued, Job.CANCELLING)
        assert await h.repository.report(running, Job.CANCELLING)
        # An end is always taken.
        assert await h.repository.report(queued, Job.FAILED, message="lost")
        assert [str((await h.get(j)).status) for j in (queued, running)] == ["FAILED", "CANCELLING"]
    async with harness(make_harness) as h:
        queued = await h.create("job", status=Job.QUEUED)
        assert await h.repository.report(queued, Job.RUNNING)
