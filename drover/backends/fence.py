"""Fencing a backend's side effects with the claim of the tick that asked for them.

On PostgreSQL several coordinators share the work: a tick claims its targets
for ``claim_ttl`` seconds, and its apply writes nothing once the claim lapsed
or another coordinator took it over. Writes are not the only danger: a
coordinator paused (SIGSTOP, a VM freeze, a long GC) past its claim and then
resumed would go on spawning, killing or cancelling kernels that another
coordinator owns by now. So every backend call made for a tick checks the
tick's claim **right before each side effect**:

* each target a lifecycle handler gets carries the claim it was fetched under
  (``session.claim``; ``None`` on SQLite, which has one coordinator);
* ``fence = Fence.of(session, reporter)`` makes the check;
* ``await fence.check()`` asks the database whether the claim still holds the
  entity (its token is still on the row: nobody took it over, it was not
  released) and, if so, renews it for ``claim_ttl`` from now, as a lease is
  renewed: a call still at work keeps its claim however long it takes. Call
  it before each step of side effects (a kernel's preparation, a batch of
  spawns, the signals of a destroy, an ``sbatch`` or ``scancel``), and again
  after any wait;
* ``fence.check_clock()`` is the cheap half, for worker threads: no I/O,
  only whether the claim expired since its last renewal. Call it right
  before each syscall that touches a process (``kill``, ``spawn``, removing
  a record). A coordinator paused past its claim could not renew it: when it
  resumes, the next check fails, whichever comes first.

Both raise :class:`FencedError` (a :class:`~drover.backends.base.BackendError`):
the backend stops at once, having done nothing more; the built-in handlers
report the session SKIPPED with error code ``fenced`` (no try is counted),
and the tick's apply is fenced as before. Outside a tick (start-up adoption,
the backend's own monitor) there is no claim, and the fence always passes.

What is left: a pause between the last check and the syscall itself (a few
microseconds) is not caught; no operating system call takes a fencing token.
Claims compare clocks across hosts: keep them in NTP sync, well within
``claim_ttl``.
"""

from __future__ import annotations

import math
from typing import Protocol

from drover.backends.base import BackendError, KernelReporter
from drover.model.values import Claim

__all__ = ["FENCED", "Fence", "FencedError"]

#: Error code of the sessions a handler skipped because its backend call was fenced.
FENCED = "fenced"


class FencedError(BackendError):
    """The claim a backend call was made under no longer holds its entity; stop, do nothing."""


class _Claimed(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def claim(self) -> Claim | None: ...


class Fence:
    """The claim one backend call acts under, checked before each of its side effects.

    ``claim`` ``None`` (SQLite, no claims, or no tick at all) always passes. Each
    :meth:`check` that finds the claim still held renews it (a call still at work
    keeps its claim however long it takes, as a lease is renewed); a coordinator
    paused past it cannot renew, and finds it expired when it resumes.
    """

    def __init__(
        self,
        entity_id: str,
        claim: Claim | None = None,
        reporter: KernelReporter | None = None,
    ) -> None:
        self.entity_id = entity_id
        self.claim = claim
        self.reporter = reporter
        #: Until when the claim holds, as last renewed.
        self.expires = claim.expires if claim is not None else math.inf

    @classmethod
    def of(cls, target: _Claimed, reporter: KernelReporter | None) -> Fence:
        """The fence of a call on ``target`` (a session, or any entity a handler got)."""
        return cls(target.id, target.claim, reporter)

    def _error(self, why: str) -> FencedError:
        assert self.claim is not None
        return FencedError(
            f"fenced: the claim of coordinator {self.claim.owner} on {self.entity_id} {why}; "
            "nothing was done (another coordinator may own it now)"
        )

    def check_clock(self) -> None:
        """(any thread) Raise :class:`FencedError` if the claim expired by this process's clock.

        No I/O: call it right before each syscall that spawns, signals or removes.
        """
        if self.claim is None or self.reporter is None:
            return
        if self.reporter.clock.time() >= self.expires:
            raise self._error("expired")

    async def check(self) -> None:
        """Raise :class:`FencedError` unless the database says the claim still holds (it was
        not taken over or released); if it holds, renew it for the claim's ``ttl``."""
        if self.claim is None or self.reporter is None:
            return
        renewed = await self.reporter.hold_claim(self.claim, self.entity_id)
        if renewed is None:
            raise self._error("lapsed and was taken over, or was released")
        self.expires = renewed
