"""A property test over random handler outcomes (issue 2), on SQLite and on PostgreSQL.

Hypothesis drives a sequence of steps against a fresh database per example:
ticks of the four lifecycle handlers (the built-in classes with ``execute``
replaced by random per-target outcomes, so their real targets, kernel filters,
transitions and timeouts apply), ticks of the built-in promotion handlers,
clock advances, compare-and-set kernel reports such as a backend makes, new
sessions and termination requests. While a handler executes, other writers may
commit (a termination request, a kernel report, another coordinator's
promotion tick), as they can while a real handler does slow I/O.

After every step (so after every prefix of the sequence) it checks that:

* every status change of a session (and of a kernel) has exactly one matching
  history row: replaying the rows from the creation status reaches the current
  status, and ``status_changed_at`` is the time of the last change;
* no session is in a status its kernels contradict;
* ``result`` and ``try_count`` agree with the status.

The test is synchronous: each example runs its scenario with ``asyncio.run``
and draws from hypothesis interactively (``st.data()``) as it goes.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import BACKENDS, PG_URL, pg_schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drover import (
    TERMINAL_KERNEL_STATUSES,
    TERMINAL_SESSION_STATUSES,
    HandlerResult,
    KernelReport,
    KernelStatus,
    SchedulingResult,
    SessionStatus,
    SessionWithKernels,
    hookimpl,
)
from drover.kinds.sessions import (
    DetectStartFailure,
    DetectTermination,
    PrepareSessions,
    PromoteToPrepared,
    PromoteToRunning,
    PromoteToTerminated,
    ScheduleSessions,
    StartSessions,
    TerminateSessions,
)
from drover.plugins import HandlerRegistry
from drover.testing import CoordinatorHarness

S = SessionStatus
K = KernelStatus

# The same database selection as tests/conftest.py.

LIFECYCLE = ["schedule-sessions", "prepare-sessions", "start-sessions", "terminate-sessions"]
PROMOTIONS = [
    "promote-to-prepared",
    "promote-to-running",
    "promote-to-terminated",
    "detect-termination",
    "detect-start-failure",
]
#: Which lifecycle handler owns (retries, times out) a session status.
OWNER = {
    S.PENDING: "schedule-sessions",
    S.SCHEDULED: "prepare-sessions",
    S.PREPARING: "prepare-sessions",
    S.PREPARED: "start-sessions",
    S.CREATING: "start-sessions",
    S.TERMINATING: "terminate-sessions",
}
#: Reports a backend makes: (new status, statuses it is expected from, exit code).
REPORTS: list[tuple[KernelStatus, frozenset[KernelStatus], int | None]] = [
    (K.PULLING, frozenset({K.SCHEDULED, K.PREPARING}), None),
    (K.PREPARED, frozenset({K.PREPARING, K.PULLING}), None),
    (K.ERROR, frozenset({K.PREPARING, K.PULLING}), None),
    (K.RUNNING, frozenset({K.PREPARED, K.CREATING}), None),
    (K.TERMINATED, frozenset({K.RUNNING}), 0),
    (K.ERROR, frozenset({K.RUNNING}), 1),
]
#: Step kinds; repeats weight the draw (and hypothesis shrinks towards the first).
STEPS = [
    "round",
    "backend",
    "round",
    "advance",
    "tick",
    "backend",
    "report",
    "advance",
    "terminate",
    "create",
]
#: One round ticks every handler once, in lifecycle order.
ROUND = [
    "schedule-sessions",
    "prepare-sessions",
    "promote-to-prepared",
    "start-sessions",
    "promote-to-running",
    "detect-termination",
    "detect-start-failure",
    "terminate-sessions",
    "promote-to-terminated",
]
#: (session status, kernel status) a session may be created in: PENDING, or further on.
CREATABLE = [
    (S.PENDING, K.PENDING),
    (S.PENDING, K.PENDING),
    (S.SCHEDULED, K.SCHEDULED),
    (S.PREPARING, K.PULLING),
    (S.PREPARED, K.PREPARED),
    (S.CREATING, K.CREATING),
    (S.RUNNING, K.RUNNING),
    (S.TERMINATING, K.RUNNING),
]
ADVANCES = [1.0, 61.0, 121.0, 301.0, 601.0, 901.0, 1801.0]
MAX_STEPS = 30


@dataclass
class World:
    """What the scenario created: each session's and kernel's creation status."""

    max_retries: dict[str, int | None]
    sessions: dict[str, SessionStatus] = field(default_factory=dict)
    kernels: dict[str, KernelStatus] = field(default_factory=dict)


class Script:
    """Decides, through hypothesis, what a randomized handler says about its targets."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data
        self.harness: CoordinatorHarness | None = None
        self.errors: list[Exception] = []

    async def execute(self, name: str, targets: Sequence[SessionWithKernels]) -> HandlerResult:
        draw = self.data.draw
        mode = draw(st.sampled_from(["normal"] * 6 + ["raise", "invalid"]))
        if mode == "raise":
            raise RuntimeError(f"{name} blew up")
        if mode == "invalid":
            return HandlerResult(successes=[targets[0].id], failures=[targets[0].id])
        result: dict[str, list[str]] = {"success": [], "failure": [], "skip": [], "none": []}
        for target in targets:
            outcome = draw(st.sampled_from(["success", "success", "failure", "skip", "none"]))
            result[outcome].append(target.id)
        assert self.harness is not None
        if name == "schedule-sessions":
            # Like the real scheduler: placed sessions' PENDING kernels get an agent.
            placed = {t.id for t in targets if t.id in result["success"]}
            await self.harness.repository.assign_agents(
                {
                    k.id: "agent-1"
                    for t in targets
                    if t.id in placed
                    for k in t.kernels
                    if k.status == K.PENDING
                }
            )
        # Other writers commit while the handler is busy. The coordinator would turn
        # an exception here into a handler error, so keep it for the test to raise.
        interference = draw(st.sampled_from([None, None, None, "terminate", "report", "promote"]))
        try:
            if interference == "promote":  # as another coordinator would
                await self.harness.coordinator.tick(draw(st.sampled_from(PROMOTIONS)))
            elif interference == "terminate":
                victim = draw(st.sampled_from(list(targets)))
                await self.harness.request_termination(victim.id)
            elif interference == "report":
                await report_step(self.harness, self.data, [t.id for t in targets])
        except Exception as error:
            self.errors.append(error)
        return HandlerResult(
            successes=result["success"],
            failures=result["failure"],
            skipped=result["skip"],
            messages={sid: f"{name} failed on it" for sid in result["failure"]},
            error_codes=dict.fromkeys(result["failure"], "random-failure"),
        )


class Randomized:
    """Mixin: the built-in handler's declarations, with random outcomes from a Script."""

    script: Script

    async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult:
        return await self.script.execute(type(self).name(), targets)  # type: ignore[attr-defined]


class RandomSchedule(Randomized, ScheduleSessions):
    pass


class RandomPrepare(Randomized, PrepareSessions):
    pass


class RandomStart(Randomized, StartSessions):
    pass


class RandomTerminate(Randomized, TerminateSessions):
    pass


class RandomLifecyclePlugin:
    """The four randomized lifecycle handlers and the built-in promotion handlers."""

    def __init__(self, script: Script) -> None:
        self.script = script

    @hookimpl
    def drover_register_handlers(self, register: HandlerRegistry) -> None:
        backend, repository = register.context.backend, register.context.queries
        lifecycle: list[Randomized] = [
            RandomSchedule(backend, repository),
            RandomPrepare(backend),
            RandomStart(backend),
            RandomTerminate(backend),
        ]
        for handler in lifecycle:
            handler.script = self.script
        register(
            *lifecycle,
            PromoteToPrepared(),
            PromoteToRunning(),
            PromoteToTerminated(),
            DetectTermination(),
            DetectStartFailure(),
        )


# -- steps ---------------------------------------------------------------------------------------


async def report_step(h: CoordinatorHarness, data: st.DataObject, among: Sequence[str]) -> None:
    """Report a new status for one kernel of ``among`` the way a backend would."""
    if not among:
        return
    sid = data.draw(st.sampled_from(list(among)))
    kernels = [
        k for k in (await h.session(sid)).kernels if k.status not in TERMINAL_KERNEL_STATUSES
    ]
    if not kernels:
        return
    kernel = data.draw(st.sampled_from(kernels))
    fitting = [r for r in REPORTS if kernel.status in r[1]]
    # Mostly a report that fits the kernel's status; sometimes a late or early one.
    status, expected, exit_code = data.draw(st.sampled_from(fitting * 3 + REPORTS))
    applied = await h.set_kernel_status(
        kernel.id, status, expected=sorted(expected), exit_code=exit_code
    )
    assert applied == (kernel.status in expected and kernel.status != status)


async def backend_step(h: CoordinatorHarness, data: st.DataObject) -> None:
    """Like a backend delivering queued progress: one batch of reports, compare-and-set.

    Each live kernel makes its normal progress, makes none, or fails.
    """
    reports = []
    for session in await h.repository.list_sessions():
        for kernel in session.kernels:
            fitting = [r for r in REPORTS if kernel.status in r[1]]
            if not fitting:
                continue
            # REPORTS lists normal progress before failure for each status.
            choice = data.draw(st.sampled_from([fitting[0], None, *fitting[1:]]))
            if choice is not None:
                status, expected, exit_code = choice
                reports.append(KernelReport(kernel.id, status, expected, exit_code))
    applied = await h.repository.report_kernel_statuses(reports)
    assert all(applied)


async def create_step(h: CoordinatorHarness, data: st.DataObject, world: World) -> None:
    """A new session, mostly PENDING, sometimes further on with kernels to match."""
    status, kernel_status = data.draw(st.sampled_from(CREATABLE))
    count = data.draw(st.integers(0, 2))
    placed = {} if kernel_status == K.PENDING else {"agent_id": "agent-1"}
    sid = await h.create_session(
        kernels=[{"cpu": 1, "mem": 256, "status": kernel_status, **placed}] * count, status=status
    )
    world.sessions[sid] = status
    for kernel in (await h.session(sid)).kernels:
        world.kernels[kernel.id] = kernel_status


async def terminate_step(h: CoordinatorHarness, data: st.DataObject, ids: list[str]) -> None:
    sid = data.draw(st.sampled_from(ids))
    session = await h.session(sid)
    before = session.status
    outcome = await h.request_termination(sid)
    if before == S.PENDING:
        expected = S.CANCELLED
    elif before in TERMINAL_SESSION_STATUSES or before == S.TERMINATING:
        expected = before
    elif not session.kernels:
        expected = S.TERMINATED  # nothing to stop, and nothing would ever promote it
    else:
        expected = S.TERMINATING
    assert (outcome.from_status, outcome.to_status) == (before, expected)
    assert (await h.session(sid)).status == expected


# -- invariants ----------------------------------------------------------------------------------


async def check_invariants(h: CoordinatorHarness, world: World) -> None:
    sessions = await h.repository.list_sessions()
    assert {s.id for s in sessions} == set(world.sessions)
    history: dict[str, list[Any]] = defaultdict(list)
    for row in await h.repository.history():
        history[row.session_id].append(row)
    kernel_rows: dict[str, list[Any]] = defaultdict(list)
    for krow in await h.repository.kernel_history():
        kernel_rows[krow.kernel_id].append(krow)

    for s in sessions:
        # (a) Replay the session's history: each status change is one row, chained.
        status, changed_at = world.sessions[s.id], s.created_at
        for row in history[s.id]:
            where = (s.id, row)
            if row.from_status != row.to_status:
                assert row.from_status == status, where
                assert row.attempts == 1, where  # the same change twice in a row is impossible
                status, changed_at = row.to_status, row.created_at
            elif row.error_code == "stale-status":
                # A tick lost a compare-and-set: it read a status the session has since left.
                assert row.result == SchedulingResult.SKIPPED, where
            else:
                assert row.from_status == status, where
        assert status == s.status, (s, history[s.id])
        assert s.status_changed_at == changed_at, (s, history[s.id])

        # ... and each kernel status change is one kernel_history row, chained.
        for kernel in s.kernels:
            kstatus, kchanged_at = world.kernels[kernel.id], s.created_at
            for krow in kernel_rows[kernel.id]:
                assert krow.session_id == s.id
                assert krow.from_status == kstatus, (kernel, kernel_rows[kernel.id])
                assert krow.to_status != krow.from_status
                kstatus, kchanged_at = krow.to_status, krow.created_at
            assert kstatus == kernel.status, (kernel, kernel_rows[kernel.id])
            assert kernel.status_changed_at == kchanged_at

        # (b) No session is in a status its kernels contradict.
        kstatuses = [k.status for k in s.kernels]
        if s.status in TERMINAL_SESSION_STATUSES:
            assert all(k in TERMINAL_KERNEL_STATUSES for k in kstatuses), s
        elif s.status == S.PENDING:
            assert all(k == K.PENDING or k in TERMINAL_KERNEL_STATUSES for k in kstatuses), s
            assert all(k.agent_id is None for k in s.kernels if k.status == K.PENDING), s
        elif s.status != S.TERMINATING:
            # Kernels only go back to PENDING together with their session; a PENDING
            # session whose other kernel ended may be sent to TERMINATING as it is.
            assert K.PENDING not in kstatuses, s

        # (c) result is set exactly for ended sessions; try_count stays within max_retries.
        if s.status in TERMINAL_SESSION_STATUSES:
            succeeded = s.status == S.TERMINATED and all(
                k.status == K.TERMINATED and k.exit_code == 0 for k in s.kernels
            )
            # A stop somebody asked for (drover terminate) is CANCELLED, not a failure.
            requested = bool(s.data) and "stop_requested_by" in (s.data or {})
            expected = "SUCCESS" if succeeded else "CANCELLED" if requested else "FAILURE"
            assert s.result == expected, s
        else:
            assert s.result is None, s
        limit = world.max_retries.get(OWNER.get(s.status, ""), 0)
        if limit is not None:
            assert s.try_count <= limit, s


# -- the scenario --------------------------------------------------------------------------------


async def scenario(data: st.DataObject, database_url: str | None, schema: str | None) -> None:
    script = Script(data)
    max_retries = {
        name: data.draw(st.sampled_from([5, 0, 1, 2, None]), label=f"{name} max_retries")
        for name in LIFECYCLE
    }
    options: dict[str, dict[str, Any]] = {
        name: {"max_retries": value} for name, value in max_retries.items()
    }
    options["schedule-sessions"]["timeout"] = data.draw(
        st.sampled_from([None, 120.0]), label="schedule-sessions timeout"
    )
    async with CoordinatorHarness(
        plugins=[RandomLifecyclePlugin(script)],
        include_builtin_handlers=False,
        handler_options=options,
        database_url=database_url,
        database_schema=schema,
    ) as h:
        script.harness = h
        world = World(max_retries=max_retries)

        async def check() -> None:
            if script.errors:
                raise script.errors[0]
            await check_invariants(h, world)

        for _ in range(data.draw(st.integers(1, 4), label="initial sessions")):
            await create_step(h, data, world)
        await check()
        for _ in range(data.draw(st.integers(1, MAX_STEPS), label="steps")):
            step = data.draw(st.sampled_from(STEPS))
            if step == "round":
                for name in ROUND:
                    await h.tick(name)
                    await check()
            elif step == "tick":
                await h.tick(data.draw(st.sampled_from(LIFECYCLE + PROMOTIONS)))
            elif step == "backend":
                await backend_step(h, data)
            elif step == "report":
                await report_step(h, data, list(world.sessions))
            elif step == "advance":
                h.clock.advance(data.draw(st.sampled_from(ADVANCES)))
            elif step == "terminate":
                await terminate_step(h, data, list(world.sessions))
            else:
                await create_step(h, data, world)
            await check()


async def run_on(kind: str, data: st.DataObject) -> None:
    """Run one example on a fresh database: a temporary SQLite file or a new PG schema."""
    if kind == "sqlite":
        await scenario(data, None, None)
        return
    async with pg_schema("p") as schema:
        await scenario(data, PG_URL, schema)


@pytest.mark.parametrize("kind", BACKENDS)
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_history_and_kernels_stay_consistent_under_random_outcomes(kind, data):
    """Any sequence of random outcomes keeps history complete and kernels consistent."""
    asyncio.run(run_on(kind, data))
