"""Database transactions per generated token: counted, not estimated.

:func:`measure` submits ``jobs`` generation requests, drives the pack's
handlers the way drover's daemon wakes them (its own rules,
:mod:`drover.coordinator.wakes`; then one more round of every handler, as
the daemon's interval would tick them, until a round changes nothing), and
counts every transaction begun on the database's engines (a SQLAlchemy
``begin`` event: reads and writes, the fetch's and the apply's) between
the first submission and the last job's end.

A tick is two transactions when it finds work (fetch, apply) and one when
it finds none; every tick takes *all* the hops waiting in its state, as a
forward pass takes a batch. So a round of the pipe costs about the same
whether one job or a hundred are generating, and transactions per token
fall as 1/jobs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import sqlalchemy as sa

from drover.coordinator.tick import Coordinator
from drover.coordinator.wakes import WakeRules

from .client import JobRequest, submit
from .kinds import JobState

if TYPE_CHECKING:
    from drover.testing import CoordinatorHarness


@attrs.frozen
class Measurement:
    """What one run generated and what it cost."""

    jobs: int
    tokens: int
    transactions: int
    ticks: int

    @property
    def per_token(self) -> float:
        """Transactions per generated token."""
        return self.transactions / self.tokens


@contextlib.contextmanager
def counting_transactions() -> Iterator[list[int]]:
    """Count the transactions begun on any SQLAlchemy engine meanwhile (``[count]``)."""
    count = [0]

    def begun(_conn: Any) -> None:
        count[0] += 1

    sa.event.listen(sa.Engine, "begin", begun)
    try:
        yield count
    finally:
        sa.event.remove(sa.Engine, "begin", begun)


async def drive(coordinator: Coordinator, names: Sequence[str]) -> int:
    """Tick ``names`` as the daemon wakes them until nothing moves; return the ticks run.

    The wake-ups are the daemon's own rules (:class:`drover.coordinator.wakes.WakeRules`):
    a move wakes the handlers its entry wakes (not ``lp-stale``, whose filter
    waits for age), a hop's end wakes ``lp-finish`` (it reads the job's
    children), and a named outcome that keeps its status (``local``) ticks its
    handler again.
    """
    rules = WakeRules.build(coordinator.kinds, [coordinator.handlers[n] for n in names])
    ticks = 0
    due = dict.fromkeys(names)  # every handler ticks once at start-up
    while True:
        changed = False
        while due:
            name = next(iter(due))
            del due[name]
            report = await coordinator.tick(name)
            ticks += 1
            woken: set[str] = set()
            for change in report.changes:
                changed = True
                if change.to_status != change.from_status:
                    woken |= rules.woken(change.kind, str(change.to_status))
            if rules.keeps_status(name, report.changes):
                woken.add(name)
            # In the handlers' order, so that a run is repeatable.
            due.update(dict.fromkeys(n for n in names if n in woken))
        if not changed:
            return ticks
        # The interval's round: handlers nothing woke tick too.
        due = dict.fromkeys(names)


async def measure(h: CoordinatorHarness, jobs: int, max_tokens: int) -> Measurement:
    """Generate ``max_tokens`` tokens for each of ``jobs`` jobs; count the transactions."""
    with counting_transactions() as count:
        ids = [
            await submit(h.repository, JobRequest(f"request number {n} of the run", max_tokens))
            for n in range(jobs)
        ]
        ticks = await drive(h.coordinator, list(h.handlers))
        transactions = count[0]
    ended = [await h.get(job) for job in ids]
    if any(e.status != JobState.COMPLETED for e in ended):
        raise RuntimeError(f"not every job completed: {sorted({e.status for e in ended})}")
    tokens = sum(len((e.data or {}).get("tokens", [])) for e in ended)
    return Measurement(jobs, tokens, transactions, ticks)
