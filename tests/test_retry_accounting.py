"""Retry accounting: tries per handler, the requeue budget, no live kernels in ended sessions.

Every test runs on SQLite and PostgreSQL, through real ticks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scripted import fail

from drover import (
    HandlerOptions,
    HandlerResult,
    KernelStatus,
    LifecycleHandler,
    SchedulingResult,
    SessionStatus,
    SessionWithKernels,
    SimulatedBackend,
    StatusTransitions,
    TransitionStatus,
    hookimpl,
)

R = SchedulingResult
S = SessionStatus
K = KernelStatus


class _Watcher(LifecycleHandler):
    """A handler on RUNNING sessions whose outcomes the test scripts; success keeps the status."""

    handler_name = "watch"
    give_up = TransitionStatus(S.TERMINATING)

    def __init__(self) -> None:
        self.script: Callable[[Sequence[SessionWithKernels]], HandlerResult] = lambda t: (
            HandlerResult()
        )
        self.seen_tries: list[int] = []

    @classmethod
    def name(cls) -> str:
        return cls.handler_name

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        return frozenset({S.RUNNING})

    @property
    def target_kernel_statuses(self) -> list[KernelStatus] | None:
        return None

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        return StatusTransitions(success=None, need_retry=None, give_up=cls.give_up)

    @classmethod
    def default_options(cls) -> HandlerOptions:
        return HandlerOptions(max_retries=2, timeout=None)

    async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult:
        self.seen_tries.extend(t.try_count for t in targets)
        return self.script(targets)


def Watcher(name: str, *, give_up: TransitionStatus | None = None) -> _Watcher:
    """A new watcher handler class named ``name``, instantiated."""
    body = {"handler_name": name, "give_up": give_up or _Watcher.give_up}
    return type(f"Watcher_{name}", (_Watcher,), body)()


class Plugin:
    def __init__(self, *handlers: LifecycleHandler) -> None:
        self.handlers = handlers

    @hookimpl
    def drover_register_handlers(self, register: Callable[..., None]) -> None:
        register(*self.handlers)


async def test_tries_are_counted_per_handler(make_harness):
    """Another handler's failures do not spend my budget, and its success does not reset it."""
    a, b = Watcher("watch-a"), Watcher("watch-b")
    async with make_harness(plugins=[Plugin(a, b)], include_builtin_handlers=False) as h:
        sid = await h.create_session(status=S.RUNNING, kernels=[{"status": "RUNNING"}])
        a.script = lambda t: fail(sid, message="a failed")
        b.script = lambda t: fail(sid, message="b failed")
        for _ in range(2):
            assert (await h.tick("watch-a")).changes[0].result == R.NEED_RETRY
            assert (await h.tick("watch-b")).changes[0].result == R.NEED_RETRY
        s = await h.session(sid)
        assert s.tries == {"watch-a": 2, "watch-b": 2}
        # b succeeds (status kept): only b's count resets.
        b.script = lambda t: HandlerResult(successes=[sid])
        await h.tick("watch-b")
        assert (await h.session(sid)).tries == {"watch-a": 2}
        # Each handler saw only its own count.
        assert a.seen_tries == [0, 1]
        assert b.seen_tries == [0, 1, 2]
        # a's third failure is past its max_retries=2 whatever b did.
        report = await h.tick("watch-a")
        assert report.changes[0].result == R.GIVE_UP
        assert "failed 3 times (max_retries=2)" in (report.changes[0].message or "")
        s = await h.session(sid)
        assert (s.status, s.tries) == (S.TERMINATING, {})


async def test_a_status_change_resets_every_handlers_tries(make_harness):
    """Tries count failures in the current status: a move starts everyone from zero."""
    a = Watcher("watch-a")
    async with make_harness(plugins=[Plugin(a)], include_builtin_handlers=False) as h:
        sid = await h.create_session(status=S.RUNNING, kernels=[{"status": "RUNNING"}])
        a.script = lambda t: fail(sid)
        await h.tick("watch-a")
        assert (await h.session(sid)).tries == {"watch-a": 1}
        await h.request_termination(sid)
        s = await h.session(sid)
        assert (s.status, s.tries, s.try_count) == (S.TERMINATING, {}, 0)


async def test_tries_show_per_handler_in_show_and_why(make_harness):
    """`drover why` reports each owning handler's own tries."""
    from drover.inspection.why import diagnose_session

    a, b = Watcher("watch-a"), Watcher("watch-b")
    async with make_harness(plugins=[Plugin(a, b)], include_builtin_handlers=False) as h:
        sid = await h.create_session(status=S.RUNNING, kernels=[{"status": "RUNNING"}])
        a.script = lambda t: fail(sid)
        await h.tick("watch-a")
        await h.tick("watch-a")
        diagnosis = await diagnose_session(h.repository, h.coordinator, sid, h.clock.time())
        text = "\n".join(diagnosis.lines)
        assert "watch-a owns RUNNING (no timeout); tries 2 (max_retries 2)" in text
        assert "watch-b owns RUNNING (no timeout); tries 0 (max_retries 2)" in text


def _always_hanging() -> SimulatedBackend:
    return SimulatedBackend(run_for=None)


async def test_a_session_that_keeps_failing_ends_after_its_requeue_budget(make_harness):
    """give_up/expired -> PENDING is a requeue; past max_requeues the session ends in ERROR.

    Preparation never finishes here (its kernels hang), so prepare-sessions'
    timeout sends the session back to PENDING, where it is scheduled again.
    """
    async with make_harness(
        backend=_always_hanging(),
        max_requeues=2,
        handler_options={"prepare-sessions": {"timeout": 10}},
    ) as h:
        sid = await h.create_session(kernels=[{"cpu": 1, "sim": {"prepare": "hang"}}] * 2)
        for _ in range(10):
            await h.run_until_settled()
            h.clock.advance(11)
            if (await h.session(sid)).status == S.ERROR:
                break
        s = await h.session(sid)
        assert (s.status, s.status_info, s.requeues, s.result) == (
            S.ERROR,
            "REQUEUE_LIMIT",
            2,
            "FAILURE",
        )
        # A session never ends with live kernels.
        assert [k.status for k in s.kernels] == [K.ERROR, K.ERROR]
        rows = await h.history(sid)
        expired = [r for r in rows if r.result == R.EXPIRED]
        assert [(r.from_status, r.to_status) for r in expired] == [
            (S.PREPARING, S.PENDING),
            (S.PREPARING, S.PENDING),
            (S.PREPARING, S.ERROR),
        ]
        assert "sent back to PENDING 2 time(s) already (max_requeues=2): ERROR instead" in (
            expired[-1].message or ""
        )
        assert rows[-1].to_status == S.ERROR


async def test_the_requeue_budget_comes_from_the_session_spec_first(make_harness):
    """spec["max_requeues"] overrides the configured budget."""
    async with make_harness(
        backend=_always_hanging(),
        max_requeues=5,
        handler_options={"prepare-sessions": {"timeout": 10}},
    ) as h:
        sid = await h.create_session(
            kernels=[{"cpu": 1, "sim": {"prepare": "hang"}}], spec={"max_requeues": 0}
        )
        for _ in range(4):
            await h.run_until_settled()
            h.clock.advance(11)
        s = await h.session(sid)
        assert (s.status, s.status_info, s.requeues) == (S.ERROR, "REQUEUE_LIMIT", 0)


async def test_no_requeue_budget_means_requeue_forever(make_harness):
    """max_requeues=None keeps sending the session back (the old behaviour, on request)."""
    async with make_harness(
        backend=_always_hanging(),
        max_requeues=None,
        handler_options={"prepare-sessions": {"timeout": 10}},
    ) as h:
        sid = await h.create_session(kernels=[{"cpu": 1, "sim": {"prepare": "hang"}}])
        for _ in range(6):
            await h.run_until_settled()
            h.clock.advance(11)
        s = await h.session(sid)
        assert s.status != S.ERROR
        assert s.requeues >= 5


async def test_a_terminal_transition_without_a_kernel_side_ends_live_kernels(make_harness):
    """A session never ends with live kernels: the apply ends them, freeing their agent."""
    ender = Watcher("ender", give_up=TransitionStatus(session=S.ERROR, kernel=None))
    async with make_harness(plugins=[Plugin(ender)], include_builtin_handlers=False) as h:
        sid = await h.create_session(
            status=S.RUNNING,
            kernels=[
                {"cpu": 2, "status": "RUNNING", "agent_id": "sim-1"},
                {"cpu": 2, "status": "TERMINATED", "agent_id": "sim-1"},
            ],
        )
        assert await h.repository.agent_usage(["cpu"]) == {"sim-1": {"cpu": 2.0}}
        ender.script = lambda t: fail(sid)
        for _ in range(3):
            await h.tick("ender")
        s = await h.session(sid)
        assert s.status == S.ERROR
        # The live kernel ended; the one that had already ended kept its status.
        assert [k.status for k in s.kernels] == [K.ERROR, K.TERMINATED]
        assert await h.repository.agent_usage(["cpu"]) == {}
        krows = await h.kernel_history(s.kernels[0].id)
        assert [(r.source, r.from_status, r.to_status) for r in krows] == [
            ("ender", K.RUNNING, K.ERROR)
        ]


async def test_terminate_sessions_does_not_report_skipped_when_its_destroy_won_a_race(
    make_harness,
):
    """Kernels reported ended during destroy let promote-to-terminated win: no SKIPPED row.

    The local backend reports the kernels' exits from inside ``destroy``, so
    promote-to-terminated may end the session before terminate-sessions'
    own apply. The session's history must end with the change that happened.
    """
    backend = SimulatedBackend(run_for=None)
    async with make_harness(backend=backend) as h:
        sid = await h.create_session(status=S.RUNNING, kernels=[{"status": "RUNNING"}])
        await h.request_termination(sid)
        original = backend.destroy

        async def destroy(session: SessionWithKernels) -> None:
            await original(session)
            for kernel in session.kernels:
                await h.set_kernel_status(kernel.id, K.TERMINATED, exit_code=143)
            await h.coordinator.tick("promote-to-terminated")

        backend.destroy = destroy  # type: ignore[method-assign]
        report = await h.tick("terminate-sessions")
        assert [(c.result, c.error_code) for c in report.changes] == [(R.SKIPPED, "stale-status")]
        rows = await h.history(sid)
        assert [(r.handler, r.result, r.to_status) for r in rows] == [
            ("api", "CREATED", S.RUNNING),
            ("api", R.SUCCESS, S.TERMINATING),
            ("promote-to-terminated", R.SUCCESS, S.TERMINATED),
        ]
