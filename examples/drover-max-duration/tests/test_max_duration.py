"""Tests for enforce-max-duration, on drover's ``drover_harness`` fixture.

Every test lists the plugin module explicitly and turns entry points off, so
the tests mean the same whether or not this package is installed (if it were
loaded both ways, the handler would be registered twice).
"""

from __future__ import annotations

import importlib
import tomllib
from importlib import metadata
from pathlib import Path

import drover_max_duration
import pytest

from drover import KernelStatus, SchedulingResult, SessionStatus, SimulatedBackend
from drover.testing import CoordinatorHarness

HANDLER = "enforce-max-duration"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

only_this_plugin = pytest.mark.drover(
    plugins=[drover_max_duration], builtins=False, entrypoints=False
)


def _moves(rows):
    """(handler, from, to) of the rows that changed the session's status."""
    return [(r.handler, r.from_status, r.to_status) for r in rows if r.from_status != r.to_status]


@only_this_plugin
async def test_a_session_is_stopped_once_its_max_duration_has_passed(
    drover_harness: CoordinatorHarness,
) -> None:
    h = drover_harness
    sid = await h.create_session(status=SessionStatus.RUNNING, spec={"max_duration": 60})

    # +59 s: within its limit, the fetch's filter leaves it out. +60 s: StatusAge
    # is inclusive (drover 0.2), so the fetch hands it over at the limit itself,
    # but the handler stops only sessions *past* it and leaves it unmentioned.
    for step, fetched in ((59, 0), (1, 1)):
        h.clock.advance(step)
        report = await h.tick(HANDLER)
        assert (report.fetched, report.changes) == (fetched, ())
        assert (await h.session(sid)).status == SessionStatus.RUNNING
    # Only the CREATED row, written when the test created the session.
    (created,) = await h.history(sid)
    assert (created.handler, created.result) == ("api", "CREATED")

    h.clock.advance(1)  # +61 s
    report = await h.tick(HANDLER)
    assert report.count(SchedulingResult.SUCCESS) == 1
    s = await h.session(sid)
    assert (s.status, s.status_info) == (SessionStatus.TERMINATING, "MAX_DURATION_EXCEEDED")
    assert s.kernels[0].status == KernelStatus.RUNNING  # no kernel transition: kernels kept
    created, row = await h.history(sid)
    assert (created.handler, created.result) == ("api", "CREATED")
    assert (row.handler, row.result, row.from_status, row.to_status) == (
        HANDLER,
        SchedulingResult.SUCCESS,
        SessionStatus.RUNNING,
        SessionStatus.TERMINATING,
    )
    assert row.message == "RUNNING for 61.00s, longer than max_duration=60s"


@only_this_plugin
async def test_a_session_without_max_duration_is_never_touched(
    drover_harness: CoordinatorHarness,
) -> None:
    h = drover_harness
    sid = await h.create_session(status=SessionStatus.RUNNING, spec={"other": 1})
    for _ in range(3):
        h.clock.advance(365 * 24 * 3600)
        report = await h.tick(HANDLER)
        assert (report.fetched, report.changes) == (0, ())  # never even fetched
    s = await h.session(sid)
    assert (s.status, s.status_info, s.try_count) == (SessionStatus.RUNNING, None, 0)
    (created,) = await h.history(sid)  # only the CREATED row
    assert (created.handler, created.result) == ("api", "CREATED")


@only_this_plugin
async def test_only_the_sessions_past_their_own_limit_are_stopped(
    drover_harness: CoordinatorHarness,
) -> None:
    h = drover_harness
    short = await h.create_session(status=SessionStatus.RUNNING, spec={"max_duration": 10})
    long = await h.create_session(status=SessionStatus.RUNNING, spec={"max_duration": 100.5})
    h.clock.advance(50)
    report = await h.tick(HANDLER)
    assert report.moved_to == {SessionStatus.TERMINATING: 1}
    assert (await h.session(short)).status == SessionStatus.TERMINATING
    assert (await h.session(long)).status == SessionStatus.RUNNING


@only_this_plugin
# (An infinite max_duration cannot even be stored: JSON has no infinity, so
# drover refuses the session at creation, on SQLite as on PostgreSQL.)
@pytest.mark.parametrize("bad", ["1h", True, 0, -5, [60]])
async def test_an_invalid_max_duration_is_reported_once(
    drover_harness: CoordinatorHarness, bad: object
) -> None:
    h = drover_harness
    sid = await h.create_session(status=SessionStatus.RUNNING, spec={"max_duration": bad})
    for _ in range(3):
        h.clock.advance(3600)
        await h.tick(HANDLER)
    created, row = await h.history(sid)  # one handler row, not one per tick
    assert (created.handler, created.result) == ("api", "CREATED")
    assert (row.result, row.error_code, row.attempts) == (
        SchedulingResult.NEED_RETRY,
        "invalid-max-duration",
        1,
    )
    assert "max_duration must be" in (row.message or "")
    assert (await h.session(sid)).status == SessionStatus.RUNNING


@pytest.mark.drover(
    plugins=[drover_max_duration],
    entrypoints=False,
    # Kernels that never exit on their own: only the max duration can end them.
    backend=SimulatedBackend(run_for=None),
)
async def test_with_the_built_ins_a_session_ends_terminated_after_its_max_duration(
    drover_harness: CoordinatorHarness,
) -> None:
    h = drover_harness
    sid = await h.create_session(kernels=[{"cpu": 1}, {"cpu": 1}], spec={"max_duration": 60})
    await h.run_until_settled()
    assert (await h.session(sid)).status == SessionStatus.RUNNING

    h.clock.advance(59)
    await h.run_until_settled()
    assert (await h.session(sid)).status == SessionStatus.RUNNING

    h.clock.advance(2)
    await h.run_until_settled()
    s = await h.session(sid)
    assert (s.status, s.status_info) == (SessionStatus.TERMINATED, "MAX_DURATION_EXCEEDED")
    assert [k.status for k in s.kernels] == [KernelStatus.TERMINATED] * 2
    moves = _moves(await h.history(sid))
    assert moves[-2:] == [
        (HANDLER, SessionStatus.RUNNING, SessionStatus.TERMINATING),
        ("terminate-sessions", SessionStatus.TERMINATING, SessionStatus.TERMINATED),
    ]


def test_the_entry_point_names_this_module() -> None:
    """pyproject declares ``max-duration = "drover_max_duration"`` in the group ``drover``."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    declared = project["entry-points"]["drover"]
    assert declared == {"max-duration": "drover_max_duration"}
    assert importlib.import_module(declared["max-duration"]) is drover_max_duration
    # The hook drover calls, marked for drover's plugin manager.
    assert hasattr(drover_max_duration.drover_register_handlers, "drover_impl")

    # When the distribution is installed, its metadata must say the same.
    try:
        dist = metadata.distribution(project["name"])
    except metadata.PackageNotFoundError:
        return
    installed = {ep.name: ep for ep in dist.entry_points if ep.group == "drover"}
    assert {name: ep.value for name, ep in installed.items()} == declared
    assert installed["max-duration"].load() is drover_max_duration


@pytest.mark.drover(
    plugins=[drover_max_duration],
    builtins=False,
    entrypoints=False,
    handler_settings={HANDLER: {"grace": 30}},
)
async def test_the_grace_setting_adds_to_every_limit(drover_harness: CoordinatorHarness) -> None:
    """``[handlers.enforce-max-duration.settings] grace = 30``: stopped 30 s later."""
    h = drover_harness
    sid = await h.create_session(status=SessionStatus.RUNNING, spec={"max_duration": 60})
    h.clock.advance(61)
    await h.tick(HANDLER)
    assert (await h.session(sid)).status == SessionStatus.RUNNING
    h.clock.advance(30)  # 91 s: past 60 + 30
    await h.tick(HANDLER)
    assert (await h.session(sid)).status == SessionStatus.TERMINATING


async def test_a_bad_grace_setting_stops_the_start_with_its_reason() -> None:
    """The plugin checks its own settings when it registers: a bad one is one clear error."""
    harness = CoordinatorHarness(
        plugins=[drover_max_duration],
        include_builtin_handlers=False,
        handler_settings={HANDLER: {"grace": "soon"}},
    )
    with pytest.raises(ValueError, match="setting grace must be a number of seconds, not 'soon'"):
        async with harness:
            pass


@pytest.mark.drover(
    plugins=[drover_max_duration], entrypoints=False, backend=SimulatedBackend(run_for=None)
)
async def test_drover_why_explains_the_status_info_it_writes(
    drover_harness: CoordinatorHarness,
) -> None:
    """``status_info_meanings``: `drover why` says what MAX_DURATION_EXCEEDED means."""
    from drover.inspection.why import diagnose_session

    h = drover_harness
    sid = await h.create_session(kernels=[{"cpu": 1}], spec={"max_duration": 60})
    await h.run_until_settled()
    h.clock.advance(61)
    await h.run_until_settled()
    diagnosis = await diagnose_session(h.repository, h.coordinator, sid, h.clock.time())
    assert (
        "status_info MAX_DURATION_EXCEEDED (it ran longer than its spec's max_duration)"
        in "\n".join(diagnosis.lines)
    )
