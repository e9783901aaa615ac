"""Kernel logs as the dashboard shows them: the end of each stdout/stderr file.

A kernel's ``runtime`` names its log files; they are read in a worker thread,
so a slow disk never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["LOG_TAIL_BYTES", "MAX_LOG_BYTES", "kernel_logs"]

#: How much of the end of each kernel log the session page shows.
LOG_TAIL_BYTES = 16 * 1024
#: The most ``/sessions/{id}/kernels/{n}/stdout?bytes=N`` returns.
MAX_LOG_BYTES = 1024 * 1024


def _tail(path: str, size: int) -> tuple[str, int] | None:
    """The last ``size`` bytes of ``path`` as text, and the file's whole size; None if absent."""
    try:
        with open(path, "rb") as handle:
            total = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, total - size))
            data = handle.read(size)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return None
    text = data.decode("utf-8", "replace")
    if total > size:
        # The cut may fall inside a line (or a character): start at the next line.
        text = text.partition("\n")[2] or text
    return text, total


async def kernel_logs(runtime: Mapping[str, Any] | None, size: int) -> dict[str, Any]:
    """``{stream: {"path", "text", "size", "cut"}}`` for the streams a kernel has."""
    out: dict[str, Any] = {}
    for stream in ("stdout", "stderr"):
        path = (runtime or {}).get(stream)
        if not isinstance(path, str):
            continue
        found = await asyncio.to_thread(_tail, path, size)
        if found is None:
            out[stream] = {"path": path, "text": None, "size": 0, "cut": False}
        else:
            text, total = found
            out[stream] = {"path": path, "text": text, "size": total, "cut": total > size}
    return out
