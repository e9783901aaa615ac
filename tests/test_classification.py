"""The coordinator's classification rules, through real ticks on both databases."""

from __future__ import annotations

import attrs
from scripted import Scripted, ScriptedPlugin, fail

from drover import HandlerResult, HistoryRecord, KernelStatus, SchedulingResult, SessionStatus

R = SchedulingResult
S = SessionStatus


def assert_created(row: HistoryRecord) -> None:
    """``row`` is the CREATED row ``api`` wrote when the test created the (PENDING) session."""
    assert (row.handler, row.result, row.from_status, row.to_status, row.message) == (
        "api",
        "CREATED",
        S.PENDING,
        S.PENDING,
        "created by api",
    )


async def test_success_moves_session_and_kernels_and_writes_history(make_harness):
    """SUCCESS applies the success transition to the session and its kernels."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        sid = await h.create_session(kernels=[{"cpu": 1}, {"cpu": 1}])
        plugin.handler.script = lambda t: HandlerResult(successes=[sid])
        report = await h.tick("scripted")
        s = await h.session(sid)
        assert s.status == S.SCHEDULED
        assert [k.status for k in s.kernels] == [KernelStatus.SCHEDULED] * 2
        assert report.counts == {R.SUCCESS: 1}
        created, row = await h.history(sid)
        assert_created(created)
        assert (row.handler, row.result, row.from_status, row.to_status, row.attempts) == (
            "scripted",
            R.SUCCESS,
            S.PENDING,
            S.SCHEDULED,
            1,
        )
        krows = await h.kernel_history(s.kernels[0].id)
        assert [(k.source, k.from_status, k.to_status) for k in krows] == [
            ("scripted", KernelStatus.PENDING, KernelStatus.SCHEDULED)
        ]


async def test_give_up_on_the_max_retries_plus_first_consecutive_failure(make_harness):
    """With max_retries=2, failures 1 and 2 are NEED_RETRY and failure 3 is GIVE_UP."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        sid = await h.create_session()
        plugin.handler.script = lambda t: fail(sid, message="agent unreachable")
        results = []
        for expected_tries in (1, 2):
            report = await h.tick("scripted")
            results.append(report.changes[0].result)
            s = await h.session(sid)
            assert s.status == S.PENDING
            assert s.try_count == expected_tries
        report = await h.tick("scripted")
        results.append(report.changes[0].result)
        assert results == [R.NEED_RETRY, R.NEED_RETRY, R.GIVE_UP]
        s = await h.session(sid)
        assert s.status == S.ERROR
        assert s.try_count == 0  # a status change resets the count
        assert [k.status for k in s.kernels] == [KernelStatus.ERROR]
        rows = await h.history(sid)
        assert [(r.result, r.attempts, r.to_status) for r in rows] == [
            ("CREATED", 1, S.PENDING),
            (R.NEED_RETRY, 2, S.PENDING),
            (R.GIVE_UP, 1, S.ERROR),
        ]
        assert_created(rows[0])
        assert "agent unreachable" in (rows[2].message or "")
        assert "failed 3 times (max_retries=2)" in (rows[2].message or "")


async def test_success_resets_the_try_count(make_harness):
    """A success between failures restarts the count: the give-up needs 3 new failures."""
    # success=None keeps the status, so the session stays a target
    plugin = ScriptedPlugin(transitions=attrs.evolve(Scripted.transitions, success=None))
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        sid = await h.create_session()
        plugin.handler.script = lambda t: fail(sid)
        await h.tick("scripted")
        await h.tick("scripted")
        assert (await h.session(sid)).try_count == 2
        plugin.handler.script = lambda t: HandlerResult(successes=[sid])
        await h.tick("scripted")
        s = await h.session(sid)
        assert (s.status, s.try_count) == (S.PENDING, 0)
        plugin.handler.script = lambda t: fail(sid)
        await h.tick("scripted")
        await h.tick("scripted")
        assert (await h.session(sid)).status == S.PENDING
        await h.tick("scripted")
        assert (await h.session(sid)).status == S.ERROR


async def test_skips_never_count_as_tries(make_harness):
    """SKIPPED gets a history row but leaves try_count alone, however often."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        sid = await h.create_session()
        plugin.handler.script = lambda t: HandlerResult(
            skipped=[sid], messages={sid: "queued behind others"}, error_codes={sid: "busy"}
        )
        for _ in range(5):
            report = await h.tick("scripted")
            assert report.counts == {R.SKIPPED: 1}
        s = await h.session(sid)
        assert (s.status, s.try_count) == (S.PENDING, 0)
        created, row = await h.history(sid)
        assert_created(created)
        assert (row.result, row.attempts, row.error_code, row.message) == (
            R.SKIPPED,
            5,
            "busy",
            "queued behind others",
        )


async def test_unmentioned_targets_get_no_history_row(make_harness):
    """A target the handler does not mention gets nothing before its timeout.

    Its history stays the one CREATED row written when it was created.
    """
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        sid = await h.create_session()
        report = await h.tick("scripted")
        assert report.fetched == 1
        assert report.changes == ()
        (created,) = await h.history(sid)
        assert_created(created)


async def test_unmentioned_and_skipped_targets_expire_after_the_timeout(make_harness):
    """Expiry is judged for every target that did not succeed (timeout 60 s)."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        quiet = await h.create_session(name="quiet")
        skipped = await h.create_session(name="skipped")
        plugin.handler.script = lambda t: HandlerResult(
            skipped=[skipped], messages={skipped: "no room"}
        )
        h.clock.advance(60)  # exactly the timeout: not yet past it
        await h.tick("scripted")
        assert (await h.session(quiet)).status == S.PENDING
        assert (await h.session(skipped)).status == S.PENDING
        h.clock.advance(1)
        report = await h.tick("scripted")
        assert report.counts == {R.EXPIRED: 2}
        for sid in (quiet, skipped):
            s = await h.session(sid)
            assert s.status == S.CANCELLED
            assert [k.status for k in s.kernels] == [KernelStatus.CANCELLED]
            assert s.try_count == 0
        created, *quiet_rows = await h.history(quiet)
        assert_created(created)
        assert [(r.result, r.error_code) for r in quiet_rows] == [(R.EXPIRED, "timeout")]
        assert "timeout=60s" in (quiet_rows[0].message or "")
        created, *skipped_rows = await h.history(skipped)
        assert_created(created)
        assert [r.result for r in skipped_rows] == [R.SKIPPED, R.EXPIRED]
        assert (skipped_rows[1].message or "").startswith("no room; in PENDING for 61s")


async def test_failure_past_timeout_expires_unless_retries_are_exhausted(make_harness):
    """A failure past the timeout is EXPIRED; GIVE_UP wins when retries are also used up."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        young = await h.create_session(name="young")
        h.clock.advance(61)
        fresh = await h.create_session(name="fresh")
        plugin.handler.script = lambda t: fail(*[s.id for s in t])
        report = await h.tick("scripted")
        by_id = {c.session_id: c.result for c in report.changes}
        assert by_id == {young: R.EXPIRED, fresh: R.NEED_RETRY}
        assert (await h.session(young)).status == S.CANCELLED
        # fresh: 2 more failures exhaust max_retries=2 even once it is also past its timeout
        await h.tick("scripted")
        h.clock.advance(61)
        report = await h.tick("scripted")
        assert [c.result for c in report.changes] == [R.GIVE_UP]
        assert (await h.session(fresh)).status == S.ERROR


async def test_session_spec_options_override_handler_and_configuration(make_harness):
    """Options resolve field by field: default_options < configuration < spec['options']."""
    plugin = ScriptedPlugin()
    options = {"scripted": {"max_retries": 0}}
    async with make_harness(
        plugins=[plugin], include_builtin_handlers=False, handler_options=options
    ) as h:
        assert h.coordinator.options("scripted").max_retries == 0
        assert h.coordinator.options("scripted").timeout == 60.0  # kept from default_options
        patient = await h.create_session(spec={"options": {"scripted": {"max_retries": 3}}})
        strict = await h.create_session()
        plugin.handler.script = lambda t: fail(*[s.id for s in t])
        report = await h.tick("scripted")
        by_id = {c.session_id: c.result for c in report.changes}
        assert by_id == {patient: R.NEED_RETRY, strict: R.GIVE_UP}


async def test_no_timeout_and_no_retry_limit_mean_never(make_harness):
    """max_retries=None and timeout=None: failures retry forever, nothing expires."""
    plugin = ScriptedPlugin()
    opts = {"scripted": {"max_retries": None, "timeout": None}}
    async with make_harness(
        plugins=[plugin], include_builtin_handlers=False, handler_options=opts
    ) as h:
        sid = await h.create_session()
        plugin.handler.script = lambda t: fail(sid)
        for _ in range(8):
            h.clock.advance(3600)
            await h.tick("scripted")
        s = await h.session(sid)
        assert (s.status, s.try_count) == (S.PENDING, 8)
        created, row = await h.history(sid)
        assert_created(created)
        assert (row.result, row.attempts) == (R.NEED_RETRY, 8)


async def test_status_infos_are_written_only_with_a_status_change(make_harness):
    """HandlerResult.status_infos sets status_info on sessions whose status changes."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        moved = await h.create_session()
        kept = await h.create_session()
        plugin.handler.script = lambda t: HandlerResult(
            successes=[moved],
            failures=[kept],
            status_infos={moved: "LIMIT_REACHED", kept: "NOT_APPLIED"},
        )
        await h.tick("scripted")
        assert (await h.session(moved)).status_info == "LIMIT_REACHED"
        k = await h.session(kept)
        assert (k.status, k.status_info) == (S.PENDING, None)
