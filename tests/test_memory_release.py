"""The daemon gives freed memory back to the system once a burst of work is over."""

from __future__ import annotations

import asyncio
import ctypes.util
import time
from pathlib import Path

from daemon_helpers import running_daemon, wait_for

import drover.coordinator.daemon as daemon_module
from drover.coordinator.memory import release_free_memory
from drover.model.status import SessionStatus as S


def test_release_free_memory_trims_glibc_and_says_so():
    """On this machine's glibc the trim runs; the answer says whether it could."""
    assert ctypes.util.find_library("c") is not None
    assert release_free_memory() is True


async def test_the_daemon_releases_memory_after_a_burst_not_while_idle(
    database, tmp_path: Path, monkeypatch
):
    """Idle: no release. A burst of sessions, then a quiet second: a release, and no more
    while it stays quiet."""
    releases: list[int] = []
    monkeypatch.setattr(daemon_module, "release_free_memory", lambda: releases.append(1) or True)
    flags = {"backend.name": "simulated", "backend.run_for": 0.0}
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        await asyncio.sleep(2.5)
        assert releases == []  # start-up ticks fetched nothing
        sids = await app.repository.create_sessions([{"kernels": [{"cpu": 1}]}] * 20)

        async def ended() -> bool:
            counts = await app.repository.count_by_status()
            return counts.get(S.TERMINATED, 0) == len(sids)

        await wait_for(ended, what="the sessions TERMINATED")
        await wait_for(lambda: _released(releases), timeout=5, what="a release")
        # Quiet again: the releases stop (an idle daemon has nothing to give back).
        deadline = time.monotonic() + 20
        while True:
            seen = len(releases)
            await asyncio.sleep(2.5)
            if len(releases) == seen:
                break
            assert time.monotonic() < deadline, f"still releasing: {len(releases)}"


async def _released(releases: list[int]) -> bool:
    return bool(releases)
