"""Kernel logs as the dashboard shows them: the end of each stdout/stderr file.

A kernel's ``runtime`` names its log files; they are read in a worker thread,
so a slow disk never stalls the event loop, and never through a link
(:mod:`drover.backends.logfiles`): a refused log has ``"refused"``, the reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from drover.backends.logfiles import UnsafeLogError, tail_log

__all__ = ["LOG_TAIL_BYTES", "MAX_LOG_BYTES", "kernel_logs"]

#: How much of the end of each kernel log the session page shows.
LOG_TAIL_BYTES = 16 * 1024
#: The most ``/sessions/{id}/kernels/{n}/stdout?bytes=N`` returns.
MAX_LOG_BYTES = 1024 * 1024


def _tail(path: str, size: int) -> tuple[str, int] | None:
    """The last ``size`` bytes of ``path`` as text, and the file's whole size; None if absent.

    Opened without following links (:mod:`drover.backends.logfiles`): a kernel that
    replaced its log with a link gets :class:`UnsafeLogError`, shown as such.
    """
    found = tail_log(path, size)
    if found is None:
        return None
    data, total = found
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
        try:
            found = await asyncio.to_thread(_tail, path, size)
        except UnsafeLogError as error:
            out[stream] = {
                "path": path,
                "text": None,
                "size": 0,
                "cut": False,
                "refused": str(error),
            }
            continue
        if found is None:
            out[stream] = {"path": path, "text": None, "size": 0, "cut": False}
        else:
            text, total = found
            out[stream] = {"path": path, "text": text, "size": total, "cut": total > size}
    return out
