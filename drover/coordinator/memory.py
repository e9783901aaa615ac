"""Giving the memory a burst of work freed back to the operating system.

A tick of 1,000 sessions allocates tens of thousands of values and frees
nearly all of them when it ends. glibc's allocator keeps what was freed for
later (in every thread's arena, SQLite's worker threads included): a daemon
that has moved 100,000 sessions holds on to ~100 MiB it no longer uses, and
its resident size keeps the high-water mark of its busiest moment.
``malloc_trim(0)`` hands whole free pages back. The daemon calls it when a
burst of work is over (:meth:`drover.coordinator.daemon.Daemon`), after a
collection of the cycles the burst left (the daemon's collector runs rarely),
and under steady work, without the collection, once per :data:`RELEASE_EVERY`
fetched targets.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import logging
import time

__all__ = ["RELEASE_EVERY", "release_free_memory"]

#: Under work that never pauses, release after this many fetched targets anyway.
RELEASE_EVERY = 100_000

log = logging.getLogger("drover.daemon")


@functools.cache
def _malloc_trim() -> ctypes._NamedFuncPointer | None:
    """glibc's ``malloc_trim``, or ``None`` where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory(collect: bool = True) -> bool:
    """Free the cycles a burst left (``collect``), then return the allocator's free pages
    to the operating system; ``False`` if the C library cannot."""
    started = time.perf_counter()
    if collect:
        # The daemon's collector thresholds are high (drover.app.tune_gc), so cycles from
        # a burst (tens of thousands of blocks) wait for a pass; at rest one costs little.
        gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    elapsed = time.perf_counter() - started
    log.debug("returned free memory to the system in %.1f ms", elapsed * 1e3)
    return True
