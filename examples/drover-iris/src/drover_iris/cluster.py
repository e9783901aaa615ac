"""A simulated Iris cluster: workers with slots, and their heartbeats as drover reports.

Where Iris's controller talks to machines, the pack has a
:class:`SimulatedCluster`: named workers with a number of slots each, some of
which may have died. It decides nothing about tasks: the scheduler handler
reads which attempts hold which worker from drover's database, and a worker's
news about an attempt (BUILDING, RUNNING, exit code) is pushed with
``Repository.report``, a compare-and-set on the attempt's status, so a
report from an attempt that has already ended (a stale one) changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from .kinds import ATTEMPT_KIND, LIVE_ATTEMPT, WORKERS_POOL, AttemptState, worker_pool_name

if TYPE_CHECKING:
    from drover import Queries, Repository

#: History's source for a worker's heartbeat.
HEARTBEAT = "iris-worker"

#: What a heartbeat may say about an attempt, and the states it may come from.
_FROM: Mapping[str, frozenset[str]] = {
    AttemptState.BUILDING: frozenset({AttemptState.ASSIGNED}),
    AttemptState.RUNNING: frozenset({AttemptState.ASSIGNED, AttemptState.BUILDING}),
    AttemptState.SUCCEEDED: LIVE_ATTEMPT,
    AttemptState.FAILED: LIVE_ATTEMPT,
}


class SimulatedCluster:
    """Workers (name → slots) and the ones that died. One slot runs one task."""

    def __init__(self, workers: Mapping[str, int] | None = None) -> None:
        self.workers = dict(workers or {"w1": 2, "w2": 2})
        self.dead: set[str] = set()

    @property
    def capacity(self) -> int:
        """Every worker's slots: the declared capacity of the pool ``iris-workers``."""
        return sum(self.workers.values())

    def alive(self) -> dict[str, int]:
        """The workers still answering, with their slots."""
        return {w: n for w, n in self.workers.items() if w not in self.dead}

    async def worker_joined(self, repository: Repository, worker: str, slots: int) -> None:
        """A worker joins while drover runs (Iris's worker registration): its pool, a member
        of the family ``iris-worker-*`` that nobody declared, gets its slots, and the
        cluster's pool ``iris-workers`` the new total, for every coordinator at once."""
        self.workers[worker] = slots
        self.dead.discard(worker)
        await repository.set_pool_capacities(
            {worker_pool_name(worker): slots, WORKERS_POOL: self.capacity}
        )

    async def worker_died(self, repository: Repository, queries: Queries, worker: str) -> list[str]:
        """The worker stopped answering (Iris's ``_on_worker_failed``): it takes no more
        attempts, and each attempt on it is reported WORKER_FAILED. Returns those attempts."""
        if worker not in self.workers:
            raise KeyError(f"unknown worker {worker!r}")
        self.dead.add(worker)
        live = await queries.list_entities(ATTEMPT_KIND, statuses=LIVE_ATTEMPT, limit=None)
        lost = [a.id for a in live if a.spec.get("worker") == worker]
        for attempt in lost:
            await repository.report(
                attempt,
                AttemptState.WORKER_FAILED,
                expected=LIVE_ATTEMPT,
                status_info="WORKER_DIED",
                message=f"worker {worker} died",
                source=HEARTBEAT,
            )
        return lost

    def place(self, held: Mapping[str, int]) -> str | None:
        """A live worker with a free slot, given the slots ``held`` per worker; the freest first."""
        free = {w: n - held.get(w, 0) for w, n in self.alive().items()}
        room = [w for w, n in sorted(free.items()) if n > 0]
        return max(room, key=lambda w: free[w]) if room else None


async def heartbeat(
    repository: Repository,
    attempt_id: str,
    state: AttemptState,
    *,
    exit_code: int | None = None,
    worker: str | None = None,
) -> bool:
    """A worker's report about one attempt; whether it applied (False: stale or regressing).

    ``exit_code`` (for SUCCEEDED/FAILED) is kept in the attempt's data and
    status_info (``EXIT_<code>``), as Iris records ``exit_code`` on the attempt.
    """
    data: dict[str, object] = {}
    if exit_code is not None:
        data["exit_code"] = exit_code
    who = f"worker {worker}" if worker else "worker"
    return await repository.report(
        attempt_id,
        state,
        expected=_FROM[state],
        status_info=None if exit_code is None else f"EXIT_{exit_code}",
        data=data or None,
        message=f"{who}: {state.lower()}" + ("" if exit_code is None else f", exit {exit_code}"),
        source=HEARTBEAT,
    )
