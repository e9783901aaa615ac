"""Helpers shared by the built-in lifecycle handlers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from drover.backends.base import BackendError
from drover.backends.fence import FENCED, FencedError
from drover.kinds.sessions.values import SessionWithKernels
from drover.model.values import HandlerResult

__all__ = ["CONCURRENCY", "run_per_session"]

#: Backend calls in flight at once within one tick.
CONCURRENCY = 64


async def run_per_session(
    targets: Sequence[SessionWithKernels],
    operation: Callable[[SessionWithKernels], Awaitable[None]],
    *,
    skip: Callable[[SessionWithKernels], bool] = lambda _s: False,
) -> HandlerResult:
    """Call ``operation`` for each target (bounded concurrency) and report per session.

    Targets for which ``skip`` is true are left unmentioned, so the coordinator
    only judges their timeout. A :class:`BackendError` (or any exception) from
    one session fails that session only. A :class:`FencedError` (the tick's
    claim on the session lapsed or was taken over before a side effect) skips
    it with error code ``fenced``: it says nothing about the session.
    """
    successes: list[str] = []
    failures: list[str] = []
    skipped: list[str] = []
    messages: dict[str, str] = {}
    codes: dict[str, str] = {}

    async def one(session: SessionWithKernels) -> None:
        try:
            await operation(session)
        except FencedError as error:
            skipped.append(session.id)
            messages[session.id] = str(error)
            codes[session.id] = FENCED
        except BackendError as error:
            failures.append(session.id)
            messages[session.id] = str(error)
            codes[session.id] = "backend-error"
        except Exception as error:
            failures.append(session.id)
            messages[session.id] = f"{type(error).__name__}: {error}"
            codes[session.id] = "backend-exception"
        else:
            successes.append(session.id)

    # A fixed pool of workers, not a task per session: a thousand targets cost
    # CONCURRENCY tasks, with at most CONCURRENCY backend calls in flight.
    todo = iter([s for s in targets if not skip(s)])

    async def worker() -> None:
        for session in todo:
            await one(session)

    await asyncio.gather(*(worker() for _ in range(min(CONCURRENCY, len(targets)))))
    return HandlerResult(
        successes=successes,
        failures=failures,
        skipped=skipped,
        messages=messages,
        error_codes=codes,
    )
