"""``drover-iris-demo``: submit a small Iris workload, and play the cluster's workers.

Example (the README has it step by step)::

    drover-iris-demo submit --database sqlite+aiosqlite:///./iris.db
    drover run --database sqlite+aiosqlite:///./iris.db --backend simulated &
    drover-iris-demo workers --database sqlite+aiosqlite:///./iris.db --rounds 40 &
    sleep 5; drover-iris-demo urgent --database sqlite+aiosqlite:///./iris.db
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence

from drover import App, load_config

from .kinds import Band
from .submit import JobRequest, submit_job
from .workers import step

#: The demo's jobs: (label, request).
DEMO_JOBS: tuple[tuple[str, JobRequest], ...] = (
    (
        "train (4 tasks, batch, 15 s each: the cluster is full)",
        JobRequest("train", replicas=4, duration=15),
    ),
    (
        "flaky (fails once, max_retries_failure=1: retried, succeeds)",
        JobRequest("flaky", max_retries_failure=1, script=("fail", "ok")),
    ),
    ("broken (fails, no retry: FAILED)", JobRequest("broken", script=("fail",))),
    (
        "gang (coscheduled, 2 tasks, one fails: the other COSCHED_FAILED)",
        JobRequest("gang", replicas=2, coscheduled=True, duration=10, task_scripts={1: ("fail",)}),
    ),
    (
        "late (batch, scheduling_timeout=2 s: UNSCHEDULABLE)",
        JobRequest("late", scheduling_timeout=2),
    ),
)

#: Submitted while the batch jobs fill the cluster (``drover-iris-demo urgent``).
URGENT_JOB = (
    "serve (production: preempts the newest batch task)",
    JobRequest("serve", band=Band.PRODUCTION),
)


async def _with_app(database_url: str, what: str, rounds: int, interval: float) -> list[str]:
    app = App(load_config(flags={"database_url": database_url}))
    try:
        await app.check_schema(auto_upgrade=True)
        if what != "workers":
            now = time.time()
            jobs = DEMO_JOBS if what == "submit" else (URGENT_JOB,)
            return [
                f"{await submit_job(app.repository, request, now=now)}  {label}"
                for label, request in jobs
            ]
        lines = []
        for n in range(rounds):
            moved = await step(app.repository, app.queries, time.time())
            lines.append(f"round {n + 1}: {moved} attempt(s) moved")
            await asyncio.sleep(interval)
        return lines
    finally:
        await app.close()


def main(argv: Sequence[str] | None = None) -> None:
    """``submit`` the demo's batch jobs, ``urgent`` its production job, or play the
    ``workers`` for a number of rounds."""
    parser = argparse.ArgumentParser(
        prog="drover-iris-demo",
        description="Submit a small Iris workload to drover's database, or play its workers.",
        epilog="Example: drover-iris-demo submit --database sqlite+aiosqlite:///./iris.db",
    )
    parser.add_argument("what", choices=["submit", "urgent", "workers"], help="what to do")
    parser.add_argument("--database", required=True, help="SQLAlchemy async URL")
    parser.add_argument("--rounds", type=int, default=30, help="workers: rounds to play")
    parser.add_argument("--interval", type=float, default=1.0, help="workers: seconds a round")
    args = parser.parse_args(argv)
    for line in asyncio.run(_with_app(args.database, args.what, args.rounds, args.interval)):
        print(line)
