"""Every cell of the built-in lifecycle's two tables (issue 2), driven through the coordinator.

The tables are transcribed below (``LIFECYCLE`` and ``PROMOTION``) and every
test checks real outcomes: session and kernel statuses, and history rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from drover import (
    TERMINAL_KERNEL_STATUSES,
    HandlerOptions,
    HandlerResult,
    HistoryRecord,
    KernelMatchType,
    KernelStatus,
    PromotionRule,
    SchedulingResult,
    SessionStatus,
    SessionWithKernels,
    SimulatedBackend,
    TransitionStatus,
    hookimpl,
)
from drover.backends import simulated
from drover.kinds import BUILTIN_PLUGINS
from drover.kinds.sessions import ScheduleSessions
from drover.plugins import HandlerRegistry
from drover.testing import CoordinatorHarness

S = SessionStatus
K = KernelStatus
R = SchedulingResult

NON_TERMINAL_KERNEL = frozenset(K) - TERMINAL_KERNEL_STATUSES


@dataclass(frozen=True)
class LifecycleRow:
    """One row of the lifecycle table, plus how a test drives the handler."""

    targets: frozenset[SessionStatus]
    kernel_filter: frozenset[KernelStatus]
    success: TransitionStatus
    expired: TransitionStatus
    give_up: TransitionStatus
    default_timeout: float | None
    #: The session status the handler acts on, and its kernels' status then.
    acting: SessionStatus
    acting_kernel: KernelStatus
    #: Kernels (of a session in ``acting``) that all fall outside the kernel filter.
    unfetched_kernels: tuple[KernelStatus, ...]
    #: The backend operation the handler calls (None: the scheduler calls none).
    operation: str | None


def _t(session: SessionStatus, kernel: KernelStatus) -> TransitionStatus:
    return TransitionStatus(session, kernel)


LIFECYCLE: dict[str, LifecycleRow] = {
    "schedule-sessions": LifecycleRow(
        targets=frozenset({S.PENDING}),
        kernel_filter=frozenset({K.PENDING}),
        success=_t(S.SCHEDULED, K.SCHEDULED),
        expired=_t(S.CANCELLED, K.CANCELLED),
        give_up=_t(S.CANCELLED, K.CANCELLED),
        default_timeout=None,
        acting=S.PENDING,
        acting_kernel=K.PENDING,
        unfetched_kernels=(K.CANCELLED, K.ERROR),
        operation=None,
    ),
    "prepare-sessions": LifecycleRow(
        targets=frozenset({S.SCHEDULED, S.PREPARING}),
        kernel_filter=frozenset({K.SCHEDULED, K.PREPARING, K.PULLING}),
        success=_t(S.PREPARING, K.PREPARING),
        expired=_t(S.PENDING, K.PENDING),
        give_up=_t(S.PENDING, K.PENDING),
        default_timeout=900.0,
        acting=S.SCHEDULED,
        acting_kernel=K.SCHEDULED,
        unfetched_kernels=(K.PREPARED, K.PREPARED),
        operation="prepare",
    ),
    "start-sessions": LifecycleRow(
        targets=frozenset({S.PREPARED, S.CREATING}),
        kernel_filter=frozenset({K.PREPARED, K.CREATING}),
        success=_t(S.CREATING, K.CREATING),
        expired=_t(S.PENDING, K.PENDING),
        give_up=_t(S.PENDING, K.PENDING),
        default_timeout=600.0,
        acting=S.PREPARED,
        acting_kernel=K.PREPARED,
        unfetched_kernels=(K.RUNNING, K.RUNNING),
        operation="create",
    ),
    "terminate-sessions": LifecycleRow(
        targets=frozenset({S.TERMINATING}),
        kernel_filter=NON_TERMINAL_KERNEL,
        success=_t(S.TERMINATED, K.TERMINATED),
        expired=_t(S.TERMINATED, K.TERMINATED),
        give_up=_t(S.TERMINATED, K.TERMINATED),
        default_timeout=300.0,
        acting=S.TERMINATING,
        acting_kernel=K.RUNNING,
        unfetched_kernels=(K.TERMINATED, K.ERROR),
        operation="destroy",
    ),
}


@dataclass(frozen=True)
class PromotionRow:
    """One row of the promotion table."""

    targets: frozenset[SessionStatus]
    check: frozenset[KernelStatus]
    match: KernelMatchType
    success: SessionStatus


PROMOTION: dict[str, PromotionRow] = {
    "promote-to-prepared": PromotionRow(
        targets=frozenset({S.SCHEDULED, S.PREPARING}),
        # An ended kernel holds the session back too: detect-start-failure ends it.
        check=frozenset({K.PENDING, K.SCHEDULED, K.PREPARING, K.PULLING})
        | TERMINAL_KERNEL_STATUSES,
        match=KernelMatchType.NOT_ANY,
        success=S.PREPARED,
    ),
    "promote-to-running": PromotionRow(
        targets=frozenset({S.CREATING}),
        check=frozenset({K.PENDING, K.SCHEDULED, K.PREPARING, K.PULLING, K.PREPARED, K.CREATING}),
        match=KernelMatchType.NOT_ANY,
        success=S.RUNNING,
    ),
    "promote-to-terminated": PromotionRow(
        targets=frozenset({S.TERMINATING}),
        check=NON_TERMINAL_KERNEL,
        match=KernelMatchType.NOT_ANY,
        success=S.TERMINATED,
    ),
    "detect-termination": PromotionRow(
        targets=frozenset({S.RUNNING}),
        check=frozenset({K.TERMINATED, K.CANCELLED, K.ERROR}),
        match=KernelMatchType.ANY,
        success=S.TERMINATING,
    ),
}

LIFECYCLE_NAMES = list(LIFECYCLE)
PROMOTION_NAMES = list(PROMOTION)


# -- a scheduler that can be made to fail -------------------------------------------------


class FlakySchedule(ScheduleSessions):
    """The built-in scheduler (same name, targets and transitions) with injectable failures.

    The real scheduler only ever succeeds or skips; ``failures_left`` makes the
    next that many targets fail, the way ``SimulatedBackend.fail_next`` does
    for the other handlers.
    """

    failures_left = 0

    async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult:
        failing = [t.id for t in targets[: self.failures_left]]
        self.failures_left -= len(failing)
        result = await super().execute([t for t in targets if t.id not in failing])
        return HandlerResult(
            successes=result.successes,
            failures=failing,
            skipped=result.skipped,
            messages={**result.messages, **dict.fromkeys(failing, "simulated failure")},
            error_codes={**result.error_codes, **dict.fromkeys(failing, "backend-error")},
            placements=result.placements,
        )


class FlakySchedulePlugin:
    """Registers :class:`FlakySchedule` in place of the built-in scheduler."""

    @hookimpl
    def drover_register_handlers(self, register: HandlerRegistry) -> None:
        register(FlakySchedule(register.context.backend, register.context.queries))


_OTHER_BUILTINS = [
    p for name, p in BUILTIN_PLUGINS if name != "drover.kinds.sessions.schedule-sessions"
]


def lifecycle_harness(make_harness: Any, **kwargs: Any) -> CoordinatorHarness:
    """The eight built-in handlers, with schedule-sessions able to fail on demand."""
    return make_harness(
        plugins=[FlakySchedulePlugin(), *_OTHER_BUILTINS],
        include_builtin_handlers=False,
        **kwargs,
    )


def fail_next(h: CoordinatorHarness, name: str, times: int = 1) -> None:
    """Make handler ``name`` fail its next ``times`` targets."""
    operation = LIFECYCLE[name].operation
    if operation is None:
        handler = h.handlers[name]
        assert isinstance(handler, FlakySchedule)
        handler.failures_left += times
    else:
        h.backend.fail_next(operation, times=times)


# -- helpers --------------------------------------------------------------------------------


async def make_session(
    h: CoordinatorHarness, status: SessionStatus, kernel_statuses: Sequence[KernelStatus]
) -> str:
    """A session in ``status``; kernels past PENDING are placed on agent ``sim-1``."""
    kernels = [
        {"cpu": 1, "mem": 512, "status": k, **({} if k == K.PENDING else {"agent_id": "sim-1"})}
        for k in kernel_statuses
    ]
    return await h.create_session(kernels=kernels, status=status)


def assert_created(record: HistoryRecord, status: SessionStatus) -> None:
    """``record`` is the CREATED row ``api`` writes for a session created in ``status``."""
    assert (record.handler, record.result, record.from_status, record.to_status) == (
        "api",
        "CREATED",
        status,
        status,
    )
    assert record.message == "created by api"


async def rows(h: CoordinatorHarness, sid: str) -> list[tuple[str, R, S, S]]:
    """The session's history rows written by handlers: every row after its CREATED row.

    Every session's history starts with the CREATED row ``api`` wrote when the
    test created it; this asserts that row (in the status the next row starts
    from, or the session's status now when no handler has written one) and
    returns the rows after it.
    """
    created, *after = await h.history(sid)
    status = after[0].from_status if after else (await h.session(sid)).status
    assert_created(created, status)
    return [(r.handler, r.result, r.from_status, r.to_status) for r in after]


def kernel_statuses(session: SessionWithKernels) -> list[KernelStatus]:
    return [k.status for k in session.kernels]


def expected_result(status: SessionStatus) -> str | None:
    """Sessions ended by a lifecycle handler here never have exit codes: FAILURE."""
    return "FAILURE" if status in {S.TERMINATED, S.CANCELLED, S.ERROR} else None


# -- the lifecycle table -----------------------------------------------------------------------


@pytest.mark.parametrize("name", LIFECYCLE_NAMES)
async def test_lifecycle_handler_declares_its_table_row(make_harness, name):
    """The registered handler's targets, kernel filter, transitions and timeout are the table's."""
    row = LIFECYCLE[name]
    async with make_harness() as h:
        handler = h.handlers[name]
        assert handler.target_session_statuses == row.targets
        assert handler.target_kernel_statuses is not None
        assert frozenset(handler.target_kernel_statuses) == row.kernel_filter
        transitions = type(handler).status_transitions()
        assert transitions.success == row.success
        assert transitions.need_retry is None
        assert transitions.expired == row.expired
        assert transitions.give_up == row.give_up
        assert h.coordinator.options(name).timeout == row.default_timeout


async def test_default_timeouts(make_harness):
    """prepare 900 s, start 600 s, terminate 300 s, schedule none."""
    async with make_harness() as h:
        assert h.coordinator.options("prepare-sessions").timeout == 900
        assert h.coordinator.options("start-sessions").timeout == 600
        assert h.coordinator.options("terminate-sessions").timeout == 300
        assert h.coordinator.options("schedule-sessions").timeout is None


@pytest.mark.parametrize("name", LIFECYCLE_NAMES)
async def test_kernel_filter(make_harness, name):
    """A session with no kernel in the filter is not fetched, even long past the timeout."""
    row = LIFECYCLE[name]
    async with lifecycle_harness(make_harness) as h:
        outside = await make_session(h, row.acting, row.unfetched_kernels)
        # One kernel in the filter is enough; the terminal one is left alone.
        mixed = await make_session(h, row.acting, [row.acting_kernel, K.ERROR])

        report = await h.tick(name)

        assert report.fetched == 1
        assert await rows(h, outside) == []
        assert (await h.session(outside)).status == row.acting
        assert kernel_statuses(await h.session(outside)) == list(row.unfetched_kernels)
        assert await rows(h, mixed) == [(name, R.SUCCESS, row.acting, row.success.session)]
        assert kernel_statuses(await h.session(mixed)) == [row.success.kernel, K.ERROR]
        if row.operation is not None:
            assert h.backend.calls == [(row.operation, mixed)]

        h.clock.advance((row.default_timeout or 0) + 10_000)
        report = await h.tick(name)
        assert outside not in [c.session_id for c in report.changes]
        assert await rows(h, outside) == []
        assert (await h.session(outside)).status == row.acting


@pytest.mark.parametrize("name", LIFECYCLE_NAMES)
async def test_success(make_harness, name):
    """Success applies the table's success cell to the session and its live kernels."""
    row = LIFECYCLE[name]
    async with lifecycle_harness(make_harness) as h:
        sid = await make_session(h, row.acting, [row.acting_kernel, row.acting_kernel])

        report = await h.tick(name)

        assert report.count(R.SUCCESS) == 1
        assert await rows(h, sid) == [(name, R.SUCCESS, row.acting, row.success.session)]
        session = await h.session(sid)
        assert session.status == row.success.session
        assert kernel_statuses(session) == [row.success.kernel] * 2
        assert session.try_count == 0
        assert session.result == expected_result(row.success.session)
        # Every kernel that moved has a kernel_history row from this handler.
        for kernel in session.kernels:
            krows = await h.kernel_history(kernel.id)
            assert [(k.source, k.from_status, k.to_status) for k in krows] == [
                (name, row.acting_kernel, row.success.kernel)
            ]
        if name == "schedule-sessions":
            assert all(k.agent_id is not None for k in session.kernels)
        else:
            assert h.backend.calls == [(row.operation, sid)]


@pytest.mark.parametrize("name", LIFECYCLE_NAMES)
async def test_need_retry_keeps_both_statuses_and_counts_the_try(make_harness, name):
    """A failure within limits keeps session and kernel statuses; try_count goes up."""
    row = LIFECYCLE[name]
    async with lifecycle_harness(make_harness) as h:
        sid = await make_session(h, row.acting, [row.acting_kernel, row.acting_kernel])
        fail_next(h, name, times=2)

        await h.tick(name)
        session = await h.session(sid)
        assert session.status == row.acting
        assert kernel_statuses(session) == [row.acting_kernel] * 2
        assert session.try_count == 1

        await h.tick(name)
        session = await h.session(sid)
        assert session.status == row.acting
        assert kernel_statuses(session) == [row.acting_kernel] * 2
        assert session.try_count == 2
        assert session.result is None

        created, hrow = await h.history(sid)
        assert_created(created, row.acting)
        assert (hrow.handler, hrow.result, hrow.from_status, hrow.to_status) == (
            name,
            R.NEED_RETRY,
            row.acting,
            row.acting,
        )
        assert hrow.attempts == 2
        assert hrow.error_code == "backend-error"
        assert hrow.message == "simulated failure"
        assert await h.repository.kernel_history(session_id=sid) == []


@pytest.mark.parametrize("name", LIFECYCLE_NAMES)
async def test_expired(make_harness, name):
    """A failure past the timeout applies the expired cell; just before it, it is a retry."""
    row = LIFECYCLE[name]
    timeout = row.default_timeout
    options = {}
    if timeout is None:  # schedule-sessions has none by default: configure one
        timeout = 60.0
        options = {name: {"timeout": timeout}}
    async with lifecycle_harness(make_harness, handler_options=options) as h:
        sid = await make_session(h, row.acting, [row.acting_kernel, row.acting_kernel])
        fail_next(h, name, times=2)

        h.clock.advance(timeout - 1)
        await h.tick(name)
        assert (await h.session(sid)).status == row.acting

        h.clock.advance(2)
        report = await h.tick(name)

        assert report.count(R.EXPIRED) == 1
        assert await rows(h, sid) == [
            (name, R.NEED_RETRY, row.acting, row.acting),
            (name, R.EXPIRED, row.acting, row.expired.session),
        ]
        session = await h.session(sid)
        assert session.status == row.expired.session
        assert kernel_statuses(session) == [row.expired.kernel] * 2
        assert session.try_count == 0
        assert session.result == expected_result(row.expired.session)
        if row.expired.kernel == K.PENDING:
            assert all(k.agent_id is None for k in session.kernels)


@pytest.mark.parametrize("name", LIFECYCLE_NAMES)
async def test_give_up(make_harness, name):
    """The (max_retries+1)-th consecutive failure applies the give_up cell."""
    row = LIFECYCLE[name]
    async with lifecycle_harness(
        make_harness, handler_options={name: HandlerOptions(max_retries=1)}
    ) as h:
        # Configuring max_retries leaves the handler's own default timeout in place.
        assert h.coordinator.options(name).timeout == row.default_timeout
        sid = await make_session(h, row.acting, [row.acting_kernel, row.acting_kernel])
        fail_next(h, name, times=2)

        await h.tick(name)
        assert (await h.session(sid)).status == row.acting
        report = await h.tick(name)

        assert report.count(R.GIVE_UP) == 1
        assert await rows(h, sid) == [
            (name, R.NEED_RETRY, row.acting, row.acting),
            (name, R.GIVE_UP, row.acting, row.give_up.session),
        ]
        session = await h.session(sid)
        assert session.status == row.give_up.session
        assert kernel_statuses(session) == [row.give_up.kernel] * 2
        assert session.try_count == 0
        assert session.result == expected_result(row.give_up.session)
        if row.give_up.kernel == K.PENDING:
            assert all(k.agent_id is None for k in session.kernels)


@pytest.mark.parametrize("name", LIFECYCLE_NAMES)
async def test_give_up_at_max_retries_zero(make_harness, name):
    """With max_retries=0 (given as a mapping) the first failure gives up."""
    row = LIFECYCLE[name]
    async with lifecycle_harness(make_harness, handler_options={name: {"max_retries": 0}}) as h:
        sid = await make_session(h, row.acting, [row.acting_kernel])
        fail_next(h, name)

        await h.tick(name)

        assert await rows(h, sid) == [(name, R.GIVE_UP, row.acting, row.give_up.session)]
        session = await h.session(sid)
        assert session.status == row.give_up.session
        assert kernel_statuses(session) == [row.give_up.kernel]


@pytest.mark.parametrize("name", LIFECYCLE_NAMES)
@pytest.mark.parametrize("outcome", ["success", "give_up"])
async def test_terminal_kernels_are_never_moved(make_harness, name, outcome):
    """Kernel transitions only apply to the session's non-terminal kernels."""
    row = LIFECYCLE[name]
    async with lifecycle_harness(make_harness, handler_options={name: {"max_retries": 0}}) as h:
        sid = await make_session(h, row.acting, [row.acting_kernel, K.ERROR, K.CANCELLED])
        if outcome == "give_up":
            fail_next(h, name)
        transition = row.success if outcome == "success" else row.give_up

        await h.tick(name)

        session = await h.session(sid)
        assert session.status == transition.session
        assert kernel_statuses(session) == [transition.kernel, K.ERROR, K.CANCELLED]
        assert await h.kernel_history(session.kernels[1].id) == []
        assert await h.kernel_history(session.kernels[2].id) == []


# -- the sessions a handler owns but leaves unmentioned -----------------------------------------


@pytest.mark.parametrize(
    ("name", "status", "kernel", "limit"),
    [
        ("prepare-sessions", S.PREPARING, K.PULLING, 900),
        ("prepare-sessions", S.PREPARING, K.PREPARING, 900),
        ("start-sessions", S.CREATING, K.CREATING, 600),
    ],
)
async def test_in_flight_sessions_are_unmentioned_and_only_expire(
    make_harness, name, status, kernel, limit
):
    """PREPARING (prepare) and CREATING (start) are watched: not even fetched until their
    timeout has passed, never acted on, then expired."""
    async with make_harness() as h:
        sid = await make_session(h, status, [kernel, kernel])
        assert all(k.agent_id == "sim-1" for k in (await h.session(sid)).kernels)

        report = await h.tick(name)
        assert (report.fetched, report.changes) == (0, ())
        h.clock.advance(limit - 1)
        report = await h.tick(name)
        assert (report.fetched, report.changes) == (0, ())
        assert await rows(h, sid) == []
        assert h.backend.calls == []

        h.clock.advance(2)
        report = await h.tick(name)
        assert report.fetched == 1

        created, hrow = await h.history(sid)
        assert_created(created, status)
        assert (hrow.handler, hrow.result, hrow.from_status, hrow.to_status) == (
            name,
            R.EXPIRED,
            status,
            S.PENDING,
        )
        assert hrow.error_code == "timeout"
        session = await h.session(sid)
        assert session.status == S.PENDING
        assert kernel_statuses(session) == [K.PENDING, K.PENDING]
        assert all(k.agent_id is None for k in session.kernels)
        assert h.backend.calls == []


async def test_a_session_s_own_timeout_decides_when_a_watched_status_is_fetched(make_harness):
    """``spec["options"]["prepare-sessions"]["timeout"]`` shortens the wait for one session
    (its fetch, not only its expiry); the others keep the handler's 900 s."""
    async with make_harness() as h:
        kernels = [{"cpu": 1, "mem": 512, "status": K.PULLING, "agent_id": "sim-1"}]
        short = await h.create_session(
            kernels=kernels,
            status=S.PREPARING,
            spec={"options": {"prepare-sessions": {"timeout": 30}}},
        )
        other = await make_session(h, S.PREPARING, [K.PULLING])
        h.clock.advance(29)
        assert (await h.tick("prepare-sessions")).fetched == 0
        h.clock.advance(2)
        report = await h.tick("prepare-sessions")
        assert [(c.session_id, c.result) for c in report.changes] == [(short, R.EXPIRED)]
        assert (await h.session(short)).status == S.PENDING
        assert (await h.session(other)).status == S.PREPARING


async def test_prepare_acts_on_scheduled_but_not_preparing_in_the_same_tick(make_harness):
    """Of SCHEDULED and PREPARING targets, only the SCHEDULED one is prepared."""
    async with make_harness() as h:
        scheduled = await make_session(h, S.SCHEDULED, [K.SCHEDULED])
        preparing = await make_session(h, S.PREPARING, [K.PULLING])

        report = await h.tick("prepare-sessions")

        assert report.fetched == 1
        assert h.backend.calls == [("prepare", scheduled)]
        assert await rows(h, scheduled) == [
            ("prepare-sessions", R.SUCCESS, S.SCHEDULED, S.PREPARING)
        ]
        assert await rows(h, preparing) == []
        assert (await h.session(preparing)).status == S.PREPARING


async def test_start_acts_on_prepared_but_not_creating_in_the_same_tick(make_harness):
    """Of PREPARED and CREATING targets, only the PREPARED one is started."""
    async with make_harness() as h:
        prepared = await make_session(h, S.PREPARED, [K.PREPARED])
        creating = await make_session(h, S.CREATING, [K.CREATING])

        report = await h.tick("start-sessions")

        assert report.fetched == 1
        assert h.backend.calls == [("create", prepared)]
        assert await rows(h, prepared) == [("start-sessions", R.SUCCESS, S.PREPARED, S.CREATING)]
        assert await rows(h, creating) == []
        assert (await h.session(creating)).status == S.CREATING


async def test_schedule_skips_never_expire_by_default(make_harness):
    """With no timeout a session that does not fit is SKIPPED forever, never CANCELLED."""
    async with make_harness() as h:
        sid = await make_session(h, S.PENDING, [K.PENDING])
        h.backend.set_agents([])

        await h.tick("schedule-sessions")
        h.clock.advance(30 * 24 * 3600)
        await h.tick("schedule-sessions")

        created, hrow = await h.history(sid)
        assert_created(created, S.PENDING)
        assert (hrow.handler, hrow.result, hrow.from_status, hrow.to_status) == (
            "schedule-sessions",
            R.SKIPPED,
            S.PENDING,
            S.PENDING,
        )
        assert hrow.attempts == 2
        assert hrow.error_code == "insufficient-resources"
        session = await h.session(sid)
        assert session.status == S.PENDING
        assert kernel_statuses(session) == [K.PENDING]
        assert session.try_count == 0


async def test_schedule_skip_expires_with_a_configured_timeout(make_harness):
    """A configured timeout cancels a session that has waited too long for capacity."""
    async with make_harness(handler_options={"schedule-sessions": {"timeout": 60}}) as h:
        sid = await make_session(h, S.PENDING, [K.PENDING, K.PENDING])
        h.backend.set_agents([])

        await h.tick("schedule-sessions")
        h.clock.advance(61)
        await h.tick("schedule-sessions")

        assert await rows(h, sid) == [
            ("schedule-sessions", R.SKIPPED, S.PENDING, S.PENDING),
            ("schedule-sessions", R.EXPIRED, S.PENDING, S.CANCELLED),
        ]
        session = await h.session(sid)
        assert session.status == S.CANCELLED
        assert kernel_statuses(session) == [K.CANCELLED, K.CANCELLED]
        assert session.result == "FAILURE"


# -- the promotion table ------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROMOTION_NAMES)
async def test_promotion_handler_declares_its_table_row(make_harness, name):
    """The registered promotion rule's targets, check statuses, match and success."""
    row = PROMOTION[name]
    async with make_harness() as h:
        rule = h.handlers[name]
        assert isinstance(rule, PromotionRule)
        assert rule.from_statuses == row.targets
        assert rule.kernel_statuses == row.check
        assert rule.match is row.match
        assert rule.to_status == row.success


#: Per promotion handler: (session status, kernel statuses, whether it is promoted).
PROMOTION_CASES: dict[str, list[tuple[SessionStatus, list[KernelStatus], bool]]] = {
    "promote-to-prepared": [
        (S.PREPARING, [K.PREPARED, K.PREPARED], True),
        (S.SCHEDULED, [K.PREPARED], True),
        # A kernel that failed before PREPARED: never PREPARED (issue 35).
        (S.PREPARING, [K.PREPARED, K.ERROR], False),
        (S.SCHEDULED, [K.ERROR], False),
        (S.PREPARING, [K.PREPARED, K.CANCELLED], False),
        (S.PREPARING, [K.PREPARED, K.PULLING], False),
        (S.PREPARING, [K.PREPARING, K.PREPARED], False),
        (S.SCHEDULED, [K.SCHEDULED, K.PREPARED], False),
        (S.PREPARING, [K.PENDING, K.PREPARED], False),
        (S.CREATING, [K.PREPARED], False),
        (S.PREPARING, [], False),
    ],
    "promote-to-running": [
        (S.CREATING, [K.RUNNING, K.RUNNING], True),
        (S.CREATING, [K.RUNNING, K.TERMINATED], True),
        (S.CREATING, [K.RUNNING, K.CREATING], False),
        (S.CREATING, [K.PREPARED, K.RUNNING], False),
        (S.CREATING, [K.PULLING], False),
        (S.PREPARED, [K.RUNNING], False),
        (S.CREATING, [], False),
    ],
    "promote-to-terminated": [
        (S.TERMINATING, [K.TERMINATED, K.TERMINATED], True),
        (S.TERMINATING, [K.TERMINATED, K.CANCELLED, K.ERROR], True),
        (S.TERMINATING, [K.TERMINATED, K.TERMINATING], False),
        (S.TERMINATING, [K.RUNNING], False),
        (S.RUNNING, [K.TERMINATED], False),
        (S.TERMINATING, [], False),
    ],
    "detect-termination": [
        (S.RUNNING, [K.RUNNING, K.TERMINATED], True),
        (S.RUNNING, [K.RUNNING, K.ERROR], True),
        (S.RUNNING, [K.CANCELLED], True),
        (S.RUNNING, [K.TERMINATED, K.ERROR], True),
        (S.RUNNING, [K.RUNNING, K.RUNNING], False),
        (S.RUNNING, [K.RUNNING, K.TERMINATING], False),
        (S.CREATING, [K.TERMINATED], False),
        (S.RUNNING, [], False),
    ],
}


@pytest.mark.parametrize("name", PROMOTION_NAMES)
async def test_promotion_cells(make_harness, name):
    """Matching sessions move to the success status with a SUCCESS row; kernels never change."""
    row = PROMOTION[name]
    async with make_harness() as h:
        created = [
            (await make_session(h, status, kstatuses), status, kstatuses, promoted)
            for status, kstatuses, promoted in PROMOTION_CASES[name]
        ]

        report = await h.tick(name)

        assert report.fetched == sum(1 for *_, promoted in created if promoted)
        for sid, status, kstatuses, promoted in created:
            session = await h.session(sid)
            case = (status, kstatuses)
            assert kernel_statuses(session) == kstatuses, case
            assert await h.repository.kernel_history(session_id=sid) == [], case
            if promoted:
                assert session.status == row.success, case
                assert await rows(h, sid) == [(name, R.SUCCESS, status, row.success)], case
                assert session.try_count == 0
            else:
                assert session.status == status, case
                assert await rows(h, sid) == [], case
            if name == "detect-termination" and promoted:
                expected = "ABNORMAL_TERMINATION" if K.ERROR in kstatuses else "KERNEL_EXITED"
                assert session.status_info == expected, case
            else:
                assert session.status_info is None, case


@pytest.mark.parametrize(
    ("endings", "status_info", "result"),
    [
        ([(K.TERMINATED, 0), (K.TERMINATED, 0)], "KERNEL_EXITED", "SUCCESS"),
        ([(K.TERMINATED, 0), (K.TERMINATED, 2)], "KERNEL_EXITED", "FAILURE"),
        ([(K.TERMINATED, 0), (K.ERROR, 1)], "ABNORMAL_TERMINATION", "FAILURE"),
        ([(K.ERROR, 0), (K.TERMINATED, 0)], "ABNORMAL_TERMINATION", "FAILURE"),
        ([(K.TERMINATED, 0), (K.CANCELLED, None)], "KERNEL_EXITED", "FAILURE"),
        ([(K.TERMINATED, None)], "KERNEL_EXITED", "FAILURE"),
    ],
)
async def test_session_result_after_kernels_end(make_harness, endings, status_info, result):
    """RUNNING -> TERMINATING -> TERMINATED; result is SUCCESS iff all kernels exited 0."""
    async with make_harness() as h:
        sid = await make_session(h, S.RUNNING, [K.RUNNING] * len(endings))
        kernels = (await h.session(sid)).kernels
        for kernel, (status, code) in zip(kernels, endings, strict=True):
            applied = await h.set_kernel_status(
                kernel.id, status, expected=[K.RUNNING], exit_code=code
            )
            assert applied

        await h.tick("detect-termination")
        session = await h.session(sid)
        assert session.status == S.TERMINATING
        assert session.status_info == status_info
        assert session.result is None

        await h.tick("promote-to-terminated")
        session = await h.session(sid)
        assert session.status == S.TERMINATED
        assert session.result == result
        assert session.status_info == status_info
        assert [(k.status, k.exit_code) for k in session.kernels] == endings
        assert await rows(h, sid) == [
            ("detect-termination", R.SUCCESS, S.RUNNING, S.TERMINATING),
            ("promote-to-terminated", R.SUCCESS, S.TERMINATING, S.TERMINATED),
        ]


# -- the whole lifecycle ----------------------------------------------------------------------


async def test_happy_path_through_the_whole_lifecycle(make_harness):
    """Instant kernels that exit 0 go PENDING -> ... -> TERMINATED, one history row per step."""
    async with make_harness(backend=SimulatedBackend(run_for=0)) as h:
        sid = await h.create_session(kernels=[{"cpu": 1, "mem": 512}, {"cpu": 2, "mem": 1024}])

        await h.run_until_settled()

        assert await rows(h, sid) == [
            ("schedule-sessions", R.SUCCESS, S.PENDING, S.SCHEDULED),
            ("prepare-sessions", R.SUCCESS, S.SCHEDULED, S.PREPARING),
            ("promote-to-prepared", R.SUCCESS, S.PREPARING, S.PREPARED),
            ("start-sessions", R.SUCCESS, S.PREPARED, S.CREATING),
            ("promote-to-running", R.SUCCESS, S.CREATING, S.RUNNING),
            ("detect-termination", R.SUCCESS, S.RUNNING, S.TERMINATING),
            ("promote-to-terminated", R.SUCCESS, S.TERMINATING, S.TERMINATED),
        ]
        assert all(r.attempts == 1 for r in await h.history(sid))
        session = await h.session(sid)
        assert session.status == S.TERMINATED
        assert session.result == "SUCCESS"
        assert session.status_info == "KERNEL_EXITED"
        assert [(k.status, k.exit_code) for k in session.kernels] == [(K.TERMINATED, 0)] * 2
        for kernel in session.kernels:
            assert kernel.agent_id is not None
            krows = await h.kernel_history(kernel.id)
            assert [(k.source, k.from_status, k.to_status) for k in krows] == [
                ("schedule-sessions", K.PENDING, K.SCHEDULED),
                ("prepare-sessions", K.SCHEDULED, K.PREPARING),
                ("backend", K.PREPARING, K.PULLING),
                ("backend", K.PULLING, K.PREPARED),
                ("start-sessions", K.PREPARED, K.CREATING),
                ("backend", K.CREATING, K.RUNNING),
                ("backend", K.RUNNING, K.TERMINATED),
            ]
        assert h.backend.calls == [("prepare", sid), ("create", sid)]


async def test_the_simulated_backends_call_log_keeps_only_the_latest(make_harness, monkeypatch):
    """A daemon's simulated backend runs for millions of calls: its log keeps the latest
    CALLS_KEPT (at most twice as many), in order."""
    monkeypatch.setattr(simulated, "CALLS_KEPT", 4)
    async with make_harness() as h:
        ids = [await h.create_session() for _ in range(12)]
        await h.run_until_settled()
        assert [(await h.session(sid)).status for sid in ids] == [S.RUNNING] * 12
        calls = h.backend.calls
        assert 4 <= len(calls) <= 8
        # The newest calls survive: the last session's start is among them.
        assert calls[-1][0] == "create"
