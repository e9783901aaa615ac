"""Time-ordered (UUIDv7-layout) ids, so new rows land at the right edge of every index."""

from __future__ import annotations

import os
import threading
import time
import uuid

__all__ = ["ID_LENGTH", "new_id"]

#: Characters in an id (a UUID's text form); no longer text can be an id or its prefix.
ID_LENGTH = 36

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_id() -> str:
    """Return a new UUIDv7-style id string, increasing within this process.

    Layout: 48-bit millisecond timestamp, version 7, a 12-bit counter that
    orders ids made in the same millisecond (RFC 9562 "method 1"), then 62
    random bits. Rows created together (a session's kernels) therefore sort
    in creation order.
    """
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            _counter += 1
            if _counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        else:
            _last_ms = ms
            _counter = 0
        counter = _counter
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | counter << 64 | 0x2 << 62 | rand
    return str(uuid.UUID(int=value))
