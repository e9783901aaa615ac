"""Apply: history merging, compare-and-set, atomicity, handler faults, kernel rules."""

from __future__ import annotations

import asyncio
import time

import pytest
from scripted import ScriptedPlugin, fail

from drover import HandlerResult, HistoryRecord, KernelStatus, SchedulingResult, SessionStatus

R = SchedulingResult
S = SessionStatus
K = KernelStatus


def assert_created(row: HistoryRecord) -> None:
    """``row`` is the CREATED row ``api`` wrote when the test created the (PENDING) session."""
    assert (row.handler, row.result, row.from_status, row.to_status, row.message) == (
        "api",
        "CREATED",
        S.PENDING,
        S.PENDING,
        "created by api",
    )


async def test_identical_rows_merge_into_attempts_with_the_newest_message(make_harness):
    """Repeats of the latest row bump attempts/updated_at and keep the newest message."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        sid = await h.create_session()
        for n in range(3):
            plugin.handler.script = lambda t, n=n: fail(sid, message=f"try {n}", code="E1")
            await h.tick("scripted")
            h.clock.advance(1)
        created, *rows = await h.history(sid)
        assert_created(created)
        # max_retries=2: two NEED_RETRY rows merge; the third failure is a GIVE_UP row
        assert [(r.result, r.attempts, r.message, r.error_code) for r in rows[:1]] == [
            (R.NEED_RETRY, 2, "try 1", "E1")
        ]
        assert rows[0].updated_at > rows[0].created_at
        assert rows[1].result == R.GIVE_UP


async def test_a_different_error_code_starts_a_new_row(make_harness):
    """Only rows equal in handler, result, from, to and error_code merge."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        sid = await h.create_session()
        codes = ["A", "A", "B"]
        plugin.handler.script = lambda t: HandlerResult(
            skipped=[sid], error_codes={sid: codes.pop(0)}
        )
        for _ in range(3):
            await h.tick("scripted")
        rows = await h.history(sid)
        assert [(r.result, r.error_code, r.attempts) for r in rows] == [
            ("CREATED", None, 1),
            (R.SKIPPED, "A", 2),
            (R.SKIPPED, "B", 1),
        ]
        plugin.handler.script = lambda t: HandlerResult(skipped=[sid], error_codes={sid: "A"})
        await h.tick("scripted")
        rows = await h.history(sid)
        # merging only looks at the latest row: A after B is a new row
        assert [(r.result, r.error_code, r.attempts) for r in rows] == [
            ("CREATED", None, 1),
            (R.SKIPPED, "A", 2),
            (R.SKIPPED, "B", 1),
            (R.SKIPPED, "A", 1),
        ]


async def test_compare_and_set_loses_to_a_concurrent_status_change(make_harness):
    """A session whose status changed during execute keeps it; the race is reported only.

    The lost change is in the tick's report (SKIPPED, stale-status) but never
    written: the session's latest history row is the change that won.
    """
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        raced = await h.create_session(name="raced")
        calm = await h.create_session(name="calm")

        async def execute(targets):
            # Another writer (the API) commits while the handler is executing.
            await h.request_termination(raced)
            return HandlerResult(successes=[raced, calm])

        plugin.handler.execute = execute  # type: ignore[method-assign]
        report = await h.tick("scripted")
        by_id = {c.session_id: (c.result, c.error_code) for c in report.changes}
        assert by_id == {raced: (R.SKIPPED, "stale-status"), calm: (R.SUCCESS, None)}
        r = await h.session(raced)
        assert r.status == S.CANCELLED  # the API's change stands
        assert [k.status for k in r.kernels] == [K.CANCELLED]
        rows = await h.history(raced)
        assert [(x.handler, x.result, x.from_status, x.to_status, x.error_code) for x in rows] == [
            ("api", "CREATED", S.PENDING, S.PENDING, None),
            ("api", R.SUCCESS, S.PENDING, S.CANCELLED, None),
        ]
        assert rows[-1].to_status == r.status  # the latest row tells the truth
        assert (await h.session(calm)).status == S.SCHEDULED


@pytest.mark.parametrize(
    "step", ["after-entities", "after-kernels", "before-history", "after-history"]
)
async def test_a_failure_mid_apply_leaves_no_partial_writes(make_harness, step):
    """Whatever step of the apply fails, the tick's writes are all rolled back."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        ok = await h.create_session(kernels=[{"cpu": 1}, {"cpu": 1}])
        bad = await h.create_session()
        plugin.handler.script = lambda t: HandlerResult(successes=[ok], failures=[bad])

        def explode(at: str) -> None:
            if at == step:
                raise RuntimeError(f"injected at {at}")

        h.coordinator.inject_apply_failure = explode
        with pytest.raises(RuntimeError, match="injected"):
            await h.tick("scripted")
        for sid in (ok, bad):
            s = await h.session(sid)
            assert (s.status, s.try_count) == (S.PENDING, 0)
            assert {k.status for k in s.kernels} == {K.PENDING}
            (created,) = await h.history(sid)
            assert_created(created)
            for k in s.kernels:
                assert await h.kernel_history(k.id) == []
        h.coordinator.inject_apply_failure = None
        await h.tick("scripted")
        assert (await h.session(ok)).status == S.SCHEDULED
        assert (await h.session(bad)).try_count == 1


async def test_a_handler_that_raises_skips_every_target_without_counting_a_try(make_harness):
    """An exception is the handler's fault: every target gets a SKIPPED handler-error row.

    No try is counted, so a buggy plugin never makes the coordinator give up
    on healthy sessions; the tick reports the error.
    """
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        a = await h.create_session()
        b = await h.create_session()

        def explode(targets):
            raise ConnectionResetError("registry went away")

        plugin.handler.script = explode
        for _ in range(5):  # max_retries is 2: failures would have given up by now
            report = await h.tick("scripted")
            assert report.counts == {R.SKIPPED: 2}
            assert report.error == "ConnectionResetError: registry went away"
        for sid in (a, b):
            created, row = await h.history(sid)
            assert_created(created)
            assert (row.result, row.error_code, row.attempts) == (R.SKIPPED, "handler-error", 5)
            assert row.message == "ConnectionResetError: registry went away"
            s = await h.session(sid)
            assert (s.status, s.try_count) == (S.PENDING, 0)


async def test_a_handler_that_raises_still_lets_its_targets_expire(make_harness):
    """Expiry is judged for targets of a raising handler: a timeout still ends the wait."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        sid = await h.create_session()

        def explode(targets):
            raise RuntimeError("bug")

        plugin.handler.script = explode
        h.clock.advance(61)  # the scripted handler's timeout is 60 s
        report = await h.tick("scripted")
        assert report.counts == {R.EXPIRED: 1}
        assert (await h.session(sid)).status == S.CANCELLED


@pytest.mark.parametrize(
    "error",
    [SystemExit(3), KeyboardInterrupt(), asyncio.CancelledError()],
    ids=["system-exit", "keyboard-interrupt", "own-cancelled-error"],
)
async def test_base_exceptions_from_a_handler_are_its_fault_too(make_harness, error):
    """SystemExit, KeyboardInterrupt or a handler's own CancelledError never escape the tick."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        sid = await h.create_session()

        async def execute(targets):
            raise error

        plugin.handler.execute = execute  # type: ignore[method-assign]
        report = await h.tick("scripted")
        assert report.counts == {R.SKIPPED: 1}
        assert report.error is not None
        created, row = await h.history(sid)
        assert_created(created)
        assert row.error_code == "handler-error"


async def test_a_real_cancellation_of_the_tick_propagates(make_harness):
    """Cancelling the tick itself (shutdown) is not swallowed as a handler fault."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        sid = await h.create_session()
        started = asyncio.Event()

        async def execute(targets):
            started.set()
            await asyncio.sleep(30)
            return HandlerResult()

        plugin.handler.execute = execute  # type: ignore[method-assign]
        task = asyncio.create_task(h.tick("scripted"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        (created,) = await h.history(sid)
        assert_created(created)


async def test_a_handler_blocking_the_event_loop_is_named_in_the_log(make_harness, caplog):
    """A handler that holds the event loop for more than a second is logged with its name."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        await h.create_session()

        def block(targets):
            time.sleep(1.2)  # the mistake being detected
            return HandlerResult()

        plugin.handler.script = block
        await h.tick("scripted")
    assert "handler scripted blocked the event loop for 1.2s" in caplog.text


@pytest.mark.parametrize(
    "make_result",
    [
        lambda a, b: HandlerResult(successes=[a], failures=[a]),
        lambda a, b: HandlerResult(successes=[a], skipped=[a, b]),
        lambda a, b: HandlerResult(failures=[b, b]),
    ],
    ids=["success-and-failure", "success-and-skipped", "twice-in-one-list"],
)
async def test_an_id_listed_twice_makes_the_whole_result_invalid(make_harness, make_result):
    """One id in two lists: every target is SKIPPED with invalid-result, no try counted."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        a = await h.create_session()
        b = await h.create_session()
        plugin.handler.script = lambda t: make_result(a, b)
        report = await h.tick("scripted")
        assert report.counts == {R.SKIPPED: 2}
        assert "more than once" in (report.error or "")
        for sid in (a, b):
            created, row = await h.history(sid)
            assert_created(created)
            assert row.error_code == "invalid-result"
            s = await h.session(sid)
            assert (s.status, s.try_count) == (S.PENDING, 0)


@pytest.mark.parametrize(
    "make_result",
    [
        lambda a: HandlerResult(failures=[a], outcomes={a: "stale"}),
        lambda a: HandlerResult(skipped=[a, a]),
    ],
    ids=["failure-and-named-outcome", "twice-in-skipped"],
)
async def test_an_id_listed_twice_is_named_in_the_message(make_harness, make_result):
    """The text names the id listed twice, in the tick's error and every target's row."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        a = await h.create_session()
        b = await h.create_session()
        plugin.handler.script = lambda t: make_result(a)
        report = await h.tick("scripted")
        text = f"invalid result: it lists session(s) {[a]} more than once"
        assert report.error == text
        for sid in (a, b):
            _, row = await h.history(sid)
            assert (row.result, row.error_code, row.message) == (R.SKIPPED, "invalid-result", text)
            assert (await h.session(sid)).try_count == 0


async def test_a_result_of_the_wrong_type_is_invalid(make_harness):
    """execute() returning something else than HandlerResult skips every target."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        a = await h.create_session()
        plugin.handler.script = lambda t: {"successes": [a]}  # type: ignore[return-value,arg-type]
        await h.tick("scripted")
        created, row = await h.history(a)
        assert_created(created)
        assert (row.result, row.error_code) == (R.SKIPPED, "invalid-result")


async def test_ids_that_are_not_targets_are_ignored_with_a_warning(make_harness, caplog):
    """Unknown ids are dropped (and logged); the real targets are still applied."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        a = await h.create_session()
        plugin.handler.script = lambda t: HandlerResult(successes=[a, "no-such-session"])
        report = await h.tick("scripted")
        assert report.ignored_ids == ("no-such-session",)
        assert report.counts == {R.SUCCESS: 1}
        assert "no-such-session" in caplog.text
        assert (await h.session(a)).status == S.SCHEDULED


async def test_kernel_transitions_skip_terminal_kernels(make_harness):
    """Terminal kernels never move, whatever the transition."""
    plugin = ScriptedPlugin()
    async with make_harness(plugins=[plugin], include_builtin_handlers=False) as h:
        sid = await h.create_session(kernels=[{"cpu": 1}, {"cpu": 1, "status": "ERROR"}])
        plugin.handler.script = lambda t: HandlerResult(successes=[sid])
        await h.tick("scripted")
        s = await h.session(sid)
        assert [k.status for k in s.kernels] == [K.SCHEDULED, K.ERROR]
        assert await h.kernel_history(s.kernels[1].id) == []


async def test_a_forward_kernel_transition_does_not_undo_a_backend_report(make_harness):
    """A backend report that lands first (kernel already PREPARED) is not lost to PREPARING."""
    async with make_harness() as h:
        sid = await h.create_session(
            kernels=[{"cpu": 1, "status": "SCHEDULED"}, {"cpu": 1, "status": "SCHEDULED"}],
            status=S.SCHEDULED,
        )
        s = await h.session(sid)
        fast = s.kernels[0].id

        async def prepare(session):
            # The backend reports progress before the coordinator's apply commits.
            await h.set_kernel_status(fast, K.PREPARED)

        h.backend.prepare = prepare
        await h.coordinator.tick("prepare-sessions")
        s = await h.session(sid)
        assert s.status == S.PREPARING
        assert [k.status for k in s.kernels] == [K.PREPARED, K.PREPARING]
        assert [(r.source, r.to_status) for r in await h.kernel_history(fast)] == [
            ("backend", K.PREPARED)
        ]


async def test_rescheduling_to_pending_moves_every_live_kernel_and_clears_agents(make_harness):
    """Expiry back to PENDING moves kernels at any non-terminal status and drops agent_id."""
    async with make_harness() as h:
        sid = await h.create_session(
            kernels=[
                {"cpu": 1, "status": "PREPARING", "agent_id": "sim-1"},
                {"cpu": 1, "status": "PREPARED", "agent_id": "sim-2"},
                {"cpu": 1, "status": "ERROR", "agent_id": "sim-2"},
            ],
            status=S.PREPARING,
        )
        h.clock.advance(901)
        report = await h.coordinator.tick("prepare-sessions")
        assert report.counts == {R.EXPIRED: 1}
        s = await h.session(sid)
        assert s.status == S.PENDING
        assert [(k.status, k.agent_id) for k in s.kernels] == [
            (K.PENDING, None),
            (K.PENDING, None),
            (K.ERROR, "sim-2"),
        ]


async def test_backend_reports_are_compare_and_set(make_harness):
    """A report applies only from an expected, non-terminal status, and writes kernel history."""
    async with make_harness() as h:
        sid = await h.create_session(kernels=[{"cpu": 1, "status": "RUNNING"}], status=S.RUNNING)
        (kernel,) = (await h.session(sid)).kernels
        assert not await h.set_kernel_status(kernel.id, K.PREPARED, expected=[K.PULLING])
        assert await h.set_kernel_status(kernel.id, K.ERROR, exit_code=3, message="oom")
        assert not await h.set_kernel_status(kernel.id, K.RUNNING)  # terminal stays terminal
        (k,) = (await h.session(sid)).kernels
        assert (k.status, k.exit_code, k.status_info) == (K.ERROR, 3, "oom")
        rows = await h.kernel_history(kernel.id)
        assert [(r.source, r.from_status, r.to_status, r.message) for r in rows] == [
            ("backend", K.RUNNING, K.ERROR, "oom")
        ]


async def test_backend_reports_record_runtime_bookkeeping(make_harness):
    """A report's runtime is stored; reports without one leave it alone."""
    from drover import KernelReport

    async with make_harness() as h:
        sid = await h.create_session(kernels=[{"cpu": 1, "status": "CREATING"}], status=S.CREATING)
        (kernel,) = (await h.session(sid)).kernels
        assert kernel.runtime is None
        await h.repository.report_kernel_statuses(
            [KernelReport(kernel.id, K.RUNNING, runtime={"pid": 42, "stdout": "/tmp/o"})]
        )
        await h.set_kernel_status(kernel.id, K.TERMINATED, exit_code=0)
        (kernel,) = (await h.session(sid)).kernels
        assert (kernel.status, kernel.exit_code) == (K.TERMINATED, 0)
        assert kernel.runtime == {"pid": 42, "stdout": "/tmp/o"}
