"""schedule-sessions: resource fitting, placement, and the "why pending" skip messages."""

from __future__ import annotations

import random

from drover import AgentInfo, KernelStatus, SchedulingResult, SessionStatus, SimulatedBackend
from drover.kinds.sessions.schedule import _most_free_fitting

K = KernelStatus
S = SessionStatus


def backend(*agents: tuple[str, float, float]) -> SimulatedBackend:
    return SimulatedBackend([AgentInfo(a, {"cpu": cpu, "mem": mem}) for a, cpu, mem in agents])


async def test_sessions_that_fit_are_placed_and_their_kernels_get_agents(make_harness):
    """Each kernel lands on an agent that has room; the session becomes SCHEDULED."""
    async with make_harness(backend=backend(("a1", 4, 4096), ("a2", 2, 4096))) as h:
        sid = await h.create_session(kernels=[{"cpu": 3, "mem": 1024}, {"cpu": 2, "mem": 1024}])
        report = await h.tick("schedule-sessions")
        assert report.counts == {SchedulingResult.SUCCESS: 1}
        s = await h.session(sid)
        assert s.status == S.SCHEDULED
        assert [(k.status, k.agent_id) for k in s.kernels] == [
            (K.SCHEDULED, "a1"),
            (K.SCHEDULED, "a2"),
        ]


async def test_a_session_that_does_not_fit_is_skipped_with_what_it_needs(make_harness):
    """The skip message names the need and the largest free agent; the session stays PENDING."""
    async with make_harness(backend=backend(("a1", 4, 8192))) as h:
        first = await h.create_session(kernels=[{"cpu": 3, "mem": 1024}], priority=10)
        big = await h.create_session(kernels=[{"cpu": 2, "mem": 1024}])
        for _ in range(3):
            await h.tick("schedule-sessions")
        assert (await h.session(first)).status == S.SCHEDULED
        s = await h.session(big)
        assert (s.status, s.try_count) == (S.PENDING, 0)
        assert [k.agent_id for k in s.kernels] == [None]
        created, row = await h.history(big)
        assert (created.handler, created.result, created.to_status) == ("api", "CREATED", S.PENDING)
        assert (row.result, row.error_code, row.attempts) == (
            SchedulingResult.SKIPPED,
            "insufficient-resources",
            3,
        )
        assert row.message == (
            "insufficient resources: kernel 1/1 needs cpu=2 mem=1024, "
            "the largest free agent a1 has cpu=1 mem=7168"
        )


async def test_a_session_larger_than_any_agent_says_so(make_harness):
    """A request no idle agent could hold is flagged in the message."""
    async with make_harness(backend=backend(("a1", 4, 8192))) as h:
        sid = await h.create_session(kernels=[{"cpu": 1, "mem": 512}, {"cpu": 8, "mem": 512}])
        await h.tick("schedule-sessions")
        created, row = await h.history(sid)
        assert (created.handler, created.result, created.to_status) == ("api", "CREATED", S.PENDING)
        assert row.message == (
            "insufficient resources: the session needs cpu=9 mem=1024 for its 2 kernels; "
            "free now: cpu=4 mem=8192 in all, the largest free agent a1 has cpu=4 mem=8192; "
            "kernel 2/2 (cpu=8 mem=512) is the first that does not fit "
            "(no agent is that large even when idle)"
        )
        # the partial placement of kernel 1 was not kept
        assert [k.agent_id for k in (await h.session(sid)).kernels] == [None, None]


async def test_a_multi_kernel_sessions_reason_compares_it_with_what_is_free(make_harness):
    """Issue 22: 3 kernels of half a core on a free core: the reason counts nothing for the
    session's own kernels (it used to say "largest free agent has cpu=0")."""
    async with make_harness(backend=backend(("a1", 1, 4096))) as h:
        sid = await h.create_session(kernels=[{"cpu": 0.5, "mem": 64}] * 3)
        await h.tick("schedule-sessions")
        row = (await h.history(sid))[-1]
        assert row.message == (
            "insufficient resources: the session needs cpu=1.5 mem=192 for its 3 kernels; "
            "free now: cpu=1 mem=4096 in all, the largest free agent a1 has cpu=1 mem=4096; "
            "kernel 3/3 (cpu=0.5 mem=64) is the first that does not fit"
        )


async def test_priority_order_and_backfilling(make_harness):
    """Higher priority first; a smaller session behind a blocked one is still placed."""
    async with make_harness(backend=backend(("a1", 4, 8192))) as h:
        low = await h.create_session(name="low", kernels=[{"cpu": 1}], priority=0)
        huge = await h.create_session(name="huge", kernels=[{"cpu": 4}], priority=5)
        high = await h.create_session(name="high", kernels=[{"cpu": 2}], priority=9)
        report = await h.tick("schedule-sessions")
        by_id = {c.session_id: c.result for c in report.changes}
        assert by_id == {
            high: SchedulingResult.SUCCESS,
            huge: SchedulingResult.SKIPPED,
            low: SchedulingResult.SUCCESS,
        }


async def test_capacity_is_freed_when_kernels_end(make_harness):
    """Kernels in terminal statuses no longer hold resources."""
    async with make_harness(backend=backend(("a1", 2, 8192))) as h:
        first = await h.create_session(kernels=[{"cpu": 2}])
        second = await h.create_session(kernels=[{"cpu": 2}])
        await h.tick("schedule-sessions")
        assert (await h.session(second)).status == S.PENDING
        (kernel,) = (await h.session(first)).kernels
        await h.set_kernel_status(kernel.id, K.ERROR, exit_code=1)
        await h.tick("schedule-sessions")
        assert (await h.session(second)).status == S.SCHEDULED


async def test_kernels_held_by_running_sessions_count_against_capacity(make_harness):
    """Usage is computed from the database: placed live kernels of any status hold resources."""
    async with make_harness(backend=backend(("a1", 4, 8192))) as h:
        await h.create_session(
            status=S.RUNNING, kernels=[{"cpu": 3, "status": "RUNNING", "agent_id": "a1"}]
        )
        sid = await h.create_session(kernels=[{"cpu": 2}])
        await h.tick("schedule-sessions")
        created, row = await h.history(sid)
        assert (created.handler, created.result, created.to_status) == ("api", "CREATED", S.PENDING)
        assert "the largest free agent a1 has cpu=1" in (row.message or "")


async def test_a_slot_no_agent_offers_cannot_be_placed(make_harness):
    """Asking for gpu=1 where no agent has a gpu keeps the session PENDING, saying so."""
    async with make_harness(backend=backend(("a1", 4, 8192))) as h:
        sid = await h.create_session(kernels=[{"cpu": 1, "mem": 512, "gpu": 1}])
        await h.tick("schedule-sessions")
        assert (await h.session(sid)).status == S.PENDING
        created, row = await h.history(sid)
        assert (created.handler, created.result, created.to_status) == ("api", "CREATED", S.PENDING)
        assert row.message == (
            "insufficient resources: kernel 1/1 needs cpu=1 gpu=1 mem=512, the largest free "
            "agent a1 has cpu=4 gpu=0 mem=8192 (no agent is that large even when idle)"
        )


async def test_a_malformed_request_of_a_placed_kernel_does_not_break_scheduling(make_harness):
    """A non-number in a live kernel's spec counts as 0 instead of failing every tick."""
    agents = SimulatedBackend([AgentInfo("a1", {"cpu": 4, "mem": 8192, "gpu": 2})])
    async with make_harness(backend=agents) as h:
        await h.create_session(
            status=S.RUNNING,
            kernels=[{"cpu": 1, "gpu": "two", "status": "RUNNING", "agent_id": "a1"}],
        )
        sid = await h.create_session(kernels=[{"cpu": 1, "gpu": 2}])
        report = await h.tick("schedule-sessions")
        assert report.counts == {SchedulingResult.SUCCESS: 1}
        assert (await h.session(sid)).status == S.SCHEDULED


async def test_resource_amounts_are_validated_at_creation(make_harness):
    """cpu and mem must be numbers >= 0, and every other slot finite and >= 0."""
    import pytest

    from drover import InvalidSpecError

    async with make_harness() as h:
        for bad in ({"cpu": "two"}, {"mem": -1}, {"cpu": True}, {"gpu": -1000}):
            with pytest.raises(InvalidSpecError, match=r"must be a (finite )?number >= 0"):
                await h.create_session(kernels=[bad])


def _reference_fit(
    free: list[list[float]], taken: dict[int, list[float]], need: list[float], cpu: int
) -> int | None:
    """Every agent checked: the fitting one with the most cpu left, ties to the last."""
    best: int | None = None
    best_cpu = 0.0
    for agent, have in enumerate(free):
        used = taken.get(agent, [0.0] * len(have))
        left = [h - u for h, u in zip(have, used, strict=True)]
        fits = all(lv >= n for lv, n in zip(left, need, strict=True))
        if fits and (best is None or left[cpu] >= best_cpu):
            best, best_cpu = agent, left[cpu]
    return best


def test_the_fit_takes_the_most_free_agent_that_fits_not_the_most_free():
    # Agent 2 has the most cpu but too little memory: agent 1 (then 0) must be chosen.
    free = [[4.0, 100.0], [6.0, 100.0], [9.0, 1.0]]
    assert _most_free_fitting(free, {}, [1.0, 10.0], range(2), 0) == 1
    # What the session already holds on agent 1 leaves agent 0 the most free.
    assert _most_free_fitting(free, {1: [3.0, 10.0]}, [1.0, 10.0], range(2), 0) == 0
    # Ties go to the greatest id (the last agent); nothing fits: None.
    assert _most_free_fitting([[2.0, 5.0], [2.0, 5.0]], {}, [1.0, 1.0], range(2), 0) == 1
    assert _most_free_fitting(free, {}, [1.0, 500.0], range(2), 0) is None


def test_the_fit_agrees_with_checking_every_agent():
    rng = random.Random(23)
    for _ in range(3000):
        agents, slots = rng.randint(1, 6), rng.randint(1, 3)
        free = [[float(rng.randint(-2, 8)) for _ in range(slots)] for _ in range(agents)]
        taken = {
            a: [float(rng.randint(0, 3)) for _ in range(slots)]
            for a in range(agents)
            if rng.random() < 0.3
        }
        need = [float(rng.randint(0, 4)) for _ in range(slots)]
        cpu = rng.randrange(slots)
        expected = _reference_fit(free, taken, need, cpu)
        assert _most_free_fitting(free, taken, need, range(slots), cpu) == expected
