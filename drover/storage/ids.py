"""Time-ordered (UUIDv7-layout) ids, so new rows land at the right edge of every index."""

from __future__ import annotations

import os
import time
import uuid

__all__ = ["new_id"]


def new_id() -> str:
    """Return a new UUIDv7-style id as a string: 48-bit ms timestamp, then randomness."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | rand
    # Set the version (7) and the RFC 4122 variant bits.
    value = (value & ~(0xF << 76)) | (0x7 << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    return str(uuid.UUID(int=value))
