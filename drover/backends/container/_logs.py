"""A container's stdout and stderr, copied to its kernel's log files.

Private to the container backend. While the container runs, each stream is
followed into ``<kernel dir>/<stream>.log`` as it comes (``drover logs -f``);
once it ended, the whole of each stream is copied over the followed one, so
the files hold everything even if a follower missed a part. Every file is
opened without following links (:mod:`drover.backends.logfiles`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_fixed

from drover.backends.container._engine import Engine, EngineError
from drover.backends.logfiles import create_log

__all__ = ["end_followers", "follow", "keep_logs", "open_log", "write_whole"]

log = logging.getLogger("drover.backends.container")

#: Seconds an ended container's log followers get to finish before they are cancelled.
_FOLLOWERS_GRACE = 2.0


async def keep_logs(engine: Engine, workdir: Path, kernel_id: str, container_id: str) -> None:
    """Copy the container's whole stdout and stderr to the kernel's log files in ``workdir``."""
    for stream in ("stdout", "stderr"):
        try:
            text = await _logs_of(engine, container_id, stream)
        except EngineError as error:
            log.warning("kernel %s: %s not kept: %s", kernel_id, stream, error)
            continue
        try:
            await asyncio.to_thread(write_whole, workdir / f"{stream}.log", text)
        except OSError as error:  # UnsafeLogError too: a link where the log goes
            log.warning("kernel %s: %s not kept: %s", kernel_id, stream, error)


async def _logs_of(engine: Engine, container_id: str, stream: str) -> str:
    # A busy engine can miss api_timeout once; the container is still there (it is
    # removed only after this), so asking again loses nothing. Not for a 4xx.
    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(3),
        wait=wait_fixed(0.5),
        retry=retry_if_exception(_transient),
        reraise=True,
    ):
        with attempt:
            return await engine.logs(container_id, stream)
    raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover


async def follow(engine: Engine, container_id: str, stream: str, path: Path) -> None:
    """Copy a running container's ``stream`` to ``path`` as it comes (``drover logs -f``)."""
    try:
        # Opened here, not in a worker thread: a cancelled to_thread still runs, and an
        # open that truncates after keep_logs wrote the whole log would empty it.
        handle = open_log(path)
        try:
            async for chunk in engine.follow(container_id, stream):
                await asyncio.to_thread(_append, handle, chunk)
        finally:
            handle.close()
    except asyncio.CancelledError:
        raise
    except Exception as error:  # the whole log is copied at the end anyway
        log.debug("following %s of %s stopped: %s", stream, container_id[:12], error)


async def end_followers(
    followers: Sequence[asyncio.Task[None]], grace: float = _FOLLOWERS_GRACE
) -> None:
    """Let log followers of an ended container finish on their own, cancel stragglers.

    A follower ends when the engine closes its stream; one cancelled in the
    middle of the stream leaves its connection to the garbage collector
    (aiodocker does not release it), so cancelling is the last resort.
    """
    if not followers:
        return
    _done, pending = (
        await asyncio.wait(followers, timeout=grace) if grace > 0 else (set(), set(followers))
    )
    for task in pending:
        task.cancel()
    await asyncio.gather(*followers, return_exceptions=True)


def _transient(error: BaseException) -> bool:
    """An engine error worth asking again: no answer, or the engine's own failure."""
    return isinstance(error, EngineError) and (error.status == 0 or error.status >= 500)


def open_log(path: Path) -> Any:
    """A text handle that appends to the log at ``path`` (emptied first), never through
    a link (:mod:`drover.backends.logfiles`); the caller closes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = create_log(path)
    os.ftruncate(fd, 0)
    return os.fdopen(fd, "w", encoding="utf-8")


def _append(handle: Any, chunk: str) -> None:
    handle.write(chunk)
    handle.flush()


def write_whole(path: Path, text: str) -> None:
    """(worker thread) Replace the log at ``path`` with ``text``, never through a link."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    # Never through a link (drover.backends.logfiles); the rename replaces a link itself.
    fd = create_log(partial)
    os.ftruncate(fd, 0)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    partial.replace(path)
