"""The daemon gives freed memory back to the system once a burst of work is over."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import time
import weakref
from pathlib import Path

from daemon_helpers import running_daemon, wait_for

import drover.coordinator.daemon as daemon_module
from drover.coordinator.memory import release_free_memory
from drover.kinds.sessions.values import SessionStatus as S


def _sqlite_memory_used() -> int:
    """SQLite's own count of the bytes it holds, in this process (``sqlite3_status64``)."""
    lib = ctypes.CDLL(ctypes.util.find_library("sqlite3") or "libsqlite3.so.0")
    current, highest = ctypes.c_int64(), ctypes.c_int64()
    assert lib.sqlite3_status64(0, ctypes.byref(current), ctypes.byref(highest), 0) == 0
    return current.value


async def test_release_memory_frees_the_idle_connections_page_caches(make_harness, database):
    """SQLite: pages a read left in the pooled connections' caches are freed, and the
    database still answers. PostgreSQL: nothing is cached here, nothing is done."""
    async with make_harness() as h:
        await h.repository.create_sessions([{"kernels": [{"cpu": 1}] * 4}] * 2000)
        # Reads on two connections at once, so that two idle connections hold pages.
        queries = h.repository.queries
        await asyncio.gather(*(queries.list_sessions(limit=5000) for _ in range(2)))
        if database.kind == "postgresql":
            assert await h.repository.release_memory() == 0
            return
        before = _sqlite_memory_used()
        shrunk = await h.repository.release_memory()
        after = _sqlite_memory_used()
        assert shrunk >= 1
        assert after < before - 2**20, (before, after)
        counts = await queries.count_by_status()
        assert counts == {S.PENDING: 2000}


def test_release_free_memory_collects_the_cycles_left_only_when_asked():
    """Cycles wait for the collector (the daemon's thresholds are high): a release at rest
    frees them; one under steady work (``collect=False``) leaves them to the collector."""

    class Node:
        other: object

    def cycle() -> weakref.ref[Node]:
        a, b = Node(), Node()
        a.other, b.other = b, a
        return weakref.ref(a)

    gc.disable()
    try:
        kept = cycle()
        assert release_free_memory(collect=False) is True
        assert kept() is not None
        assert release_free_memory() is True
        assert kept() is None
    finally:
        gc.enable()


def test_release_free_memory_trims_glibc_and_says_so():
    """On this machine's glibc the trim runs; the answer says whether it could."""
    assert ctypes.util.find_library("c") is not None
    assert release_free_memory() is True


async def test_the_daemon_releases_memory_after_a_burst_not_while_idle(
    database, tmp_path: Path, monkeypatch
):
    """Idle: no release. A burst of sessions, then a quiet second: a release, and no more
    while it stays quiet."""
    releases: list[bool] = []
    monkeypatch.setattr(
        daemon_module, "release_free_memory", lambda collect: releases.append(collect) or True
    )
    flags = {"backend.name": "simulated", "backend.run_for": 0.0}
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        shrunk: list[int] = []
        release_caches = app.repository.release_memory

        async def counted() -> int:
            shrunk.append(await release_caches())
            return shrunk[-1]

        monkeypatch.setattr(app.repository, "release_memory", counted)
        await asyncio.sleep(2.5)
        assert releases == []  # start-up ticks fetched nothing
        assert shrunk == []
        sids = await app.repository.create_sessions([{"kernels": [{"cpu": 1}]}] * 20)

        async def ended() -> bool:
            counts = await app.repository.count_by_status()
            return counts.get(S.TERMINATED, 0) == len(sids)

        await wait_for(ended, what="the sessions TERMINATED")
        await wait_for(lambda: _released(releases), timeout=5, what="a release")
        assert releases[0] is True  # at rest: the cycles are collected too
        # The store's caches go first: on SQLite the idle connections' page caches.
        assert len(shrunk) == len(releases)
        assert (shrunk[0] >= 1) if database.kind == "sqlite" else (shrunk[0] == 0)
        # Quiet again: the releases stop (an idle daemon has nothing to give back).
        deadline = time.monotonic() + 20
        while True:
            seen = len(releases)
            await asyncio.sleep(2.5)
            if len(releases) == seen:
                break
            assert time.monotonic() < deadline, f"still releasing: {len(releases)}"


async def _released(releases: list[bool]) -> bool:
    return bool(releases)
