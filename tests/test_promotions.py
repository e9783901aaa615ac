"""Promotion ticks: ALL / ANY / NOT_ANY evaluated in SQL, including sessions with no kernels."""

from __future__ import annotations

import pytest

from drover import (
    KernelMatchType,
    KernelStatus,
    SchedulingResult,
    SessionPromotionHandler,
    SessionStatus,
    SimulatedBackend,
    hookimpl,
)

K = KernelStatus
S = SessionStatus


def promotion(match: KernelMatchType) -> object:
    class Promote(SessionPromotionHandler):
        @classmethod
        def name(cls) -> str:
            return "promote-test"

        @property
        def target_session_statuses(self) -> frozenset[SessionStatus]:
            return frozenset({S.RUNNING})

        @property
        def check_kernel_statuses(self) -> frozenset[KernelStatus]:
            return frozenset({K.TERMINATED, K.CANCELLED})

        @property
        def match_type(self) -> KernelMatchType:
            return match

        @classmethod
        def success_session_status(cls) -> SessionStatus:
            return S.TERMINATING

    class Plugin:
        @hookimpl
        def drover_register_handlers(self, register):
            register(Promote())

    return Plugin()


CASES = {
    "all-in": ["TERMINATED", "CANCELLED"],
    "some-in": ["TERMINATED", "RUNNING"],
    "none-in": ["RUNNING", "ERROR"],
    "no-kernels": [],
}
EXPECTED = {
    KernelMatchType.ALL: {"all-in"},
    KernelMatchType.ANY: {"all-in", "some-in"},
    KernelMatchType.NOT_ANY: {"none-in"},
}


@pytest.mark.parametrize("match", list(KernelMatchType))
async def test_match_types(make_harness, match):
    """Each match type promotes exactly the right sessions; no kernels never matches."""
    async with make_harness(plugins=[promotion(match)], include_builtin_handlers=False) as h:
        ids = {}
        for name, statuses in CASES.items():
            ids[name] = await h.create_session(
                name=name, status=S.RUNNING, kernels=[{"status": st} for st in statuses]
            )
        other = await h.create_session(status=S.CREATING, kernels=[{"status": "TERMINATED"}])
        report = await h.tick("promote-test")
        promoted = {c.session_id for c in report.changes}
        assert promoted == {ids[n] for n in EXPECTED[match]}
        for name, sid in ids.items():
            s = await h.session(sid)
            rows = await h.history(sid)
            if name in EXPECTED[match]:
                assert s.status == S.TERMINATING
                assert [(r.handler, r.result, r.from_status, r.to_status) for r in rows] == [
                    ("api", "CREATED", S.RUNNING, S.RUNNING),
                    ("promote-test", SchedulingResult.SUCCESS, S.RUNNING, S.TERMINATING),
                ]
                # promotion never touches kernels
                assert [k.status for k in s.kernels] == [K(st) for st in CASES[name]]
            else:
                assert s.status == S.RUNNING
                # non-matching sessions get no history row: only their CREATED one
                assert [(r.handler, r.result, r.from_status, r.to_status) for r in rows] == [
                    ("api", "CREATED", S.RUNNING, S.RUNNING)
                ]
        assert (await h.session(other)).status == S.CREATING


async def test_a_promotion_selects_and_moves_in_one_transaction(make_harness):
    """Candidates are selected and moved in one transaction: all of it, or nothing.

    A session the API moved first is not selected, and a failure in the middle
    of the apply leaves no change and no row behind.
    """
    async with make_harness(
        plugins=[promotion(KernelMatchType.ANY)], include_builtin_handlers=False
    ) as h:
        sid = await h.create_session(status=S.RUNNING, kernels=[{"status": "TERMINATED"}])
        other = await h.create_session(status=S.RUNNING, kernels=[{"status": "TERMINATED"}])
        await h.request_termination(other)  # RUNNING -> TERMINATING before the tick

        def explode(step: str) -> None:
            if step == "after-entities":
                raise RuntimeError("injected")

        h.coordinator.inject_apply_failure = explode
        with pytest.raises(RuntimeError, match="injected"):
            await h.tick("promote-test")
        assert (await h.session(sid)).status == S.RUNNING
        assert [(r.handler, r.result) for r in await h.history(sid)] == [("api", "CREATED")]
        h.coordinator.inject_apply_failure = None
        report = await h.tick("promote-test")
        assert [c.session_id for c in report.changes] == [sid]
        assert (await h.session(sid)).status == S.TERMINATING
        rows = await h.history(other)
        assert [(r.handler, r.result, r.to_status) for r in rows] == [
            ("api", "CREATED", S.RUNNING),
            ("api", SchedulingResult.SUCCESS, S.TERMINATING),
        ]


async def test_a_session_whose_only_kernel_fails_setup_ends_instead_of_waiting(make_harness):
    """detect-start-failure: a kernel that ends before RUNNING sends the session to TERMINATING."""
    async with make_harness(backend=SimulatedBackend(run_for=None)) as h:
        sid = await h.create_session(kernels=[{"cpu": 1, "sim": {"prepare": "fail"}}])
        await h.run_until_settled()
        s = await h.session(sid)
        assert (s.status, s.result, s.status_info) == (S.TERMINATED, "FAILURE", "START_FAILED")
        assert [k.status for k in s.kernels] == [K.ERROR]
        rows = [(r.handler, r.from_status, r.to_status) for r in await h.history(sid)]
        assert ("detect-start-failure", S.PREPARED, S.TERMINATING) in rows
        assert rows[-1] == ("promote-to-terminated", S.TERMINATING, S.TERMINATED)


@pytest.mark.parametrize("status", [S.PENDING, S.SCHEDULED, S.PREPARING, S.PREPARED])
async def test_detect_start_failure_covers_every_status_before_creating(make_harness, status):
    """Any ended kernel before CREATING is detected; KERNEL_EXITED when none is in ERROR."""
    async with make_harness() as h:
        sid = await h.create_session(
            status=status, kernels=[{"status": "CANCELLED"}, {"status": status.value}]
        )
        quiet = await h.create_session(status=status, kernels=[{"status": status.value}])
        report = await h.tick("detect-start-failure")
        assert [c.session_id for c in report.changes] == [sid]
        s = await h.session(sid)
        assert (s.status, s.status_info) == (S.TERMINATING, "KERNEL_EXITED")
        assert (await h.session(quiet)).status == status


async def test_an_ended_kernel_in_creating_goes_through_running(make_harness):
    """In CREATING a kernel may have run: promote-to-running + detect-termination end it."""
    async with make_harness() as h:
        sid = await h.create_session(
            status=S.CREATING, kernels=[{"status": "ERROR"}, {"status": "RUNNING"}]
        )
        assert (await h.tick("detect-start-failure")).changes == ()
        await h.tick("promote-to-running")
        await h.tick("detect-termination")
        s = await h.session(sid)
        assert (s.status, s.status_info) == (S.TERMINATING, "ABNORMAL_TERMINATION")
