"""``drover-xpm-demo``: submit a small experiment for ``drover run`` to carry out.

Example::

    drover-xpm-demo --database sqlite+aiosqlite:///./xpm.db
    drover run --database sqlite+aiosqlite:///./xpm.db --backend simulated
    drover entities xpm-job --database sqlite+aiosqlite:///./xpm.db
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

from drover import App, load_config

from .submit import JobRequest, submit


async def _submit_experiment(database_url: str) -> list[tuple[str, str]]:
    app = App(load_config(flags={"database_url": database_url}))
    try:
        await app.check_schema(auto_upgrade=True)
        repo, queries = app.repository, app.queries

        async def job(label: str, request: JobRequest) -> tuple[str, str]:
            return (label, await submit(repo, queries, request))

        prepare = await job("prepare", JobRequest("prepare", {"corpus": "demo"}))
        train = await job(
            "train (resumable: times out twice, then done)",
            JobRequest(
                "train",
                {"lr": 0.1},
                depends_on=[prepare[1]],
                resumable=True,
                script=["timeout", "timeout", "done"],
                duration=2,
            ),
        )
        broken = await job("broken (out of memory)", JobRequest("broken", {}, script=["memory"]))
        evaluate = await job(
            "evaluate (after train)", JobRequest("evaluate", {}, depends_on=[train[1]])
        )
        doomed = await job(
            "report (after broken: ERROR DEPENDENCY)",
            JobRequest("report", {}, depends_on=[broken[1]]),
        )
        gpus = [
            await job(
                f"sweep {n} (token job)",
                JobRequest("sweep", {"n": n}, tokens={"xpm-token": 1}, duration=3),
            )
            for n in range(4)
        ]
        wide = await job(
            "wide (takes both tokens)",
            JobRequest("wide", {}, tokens={"xpm-token": 2}, duration=3),
        )
        cache = await job("cache (transient, needed)", JobRequest("cache", {}, transient=True))
        unused = await job(
            "unused (transient, needed by nobody: never runs)",
            JobRequest("unused", {}, transient=True),
        )
        plot = await job("plot (after cache)", JobRequest("plot", {}, depends_on=[cache[1]]))
        return [prepare, train, broken, evaluate, doomed, *gpus, wide, cache, unused, plot]
    finally:
        await app.close()


def main(argv: Sequence[str] | None = None) -> None:
    """Submit the demo experiment and print each job's id."""
    parser = argparse.ArgumentParser(
        prog="drover-xpm-demo",
        description="Submit a small experimaestro experiment to drover's database.",
        epilog="Example: drover-xpm-demo --database sqlite+aiosqlite:///./xpm.db",
    )
    parser.add_argument("--database", required=True, help="SQLAlchemy async URL")
    args = parser.parse_args(argv)
    for label, job_id in asyncio.run(_submit_experiment(args.database)):
        print(f"{job_id}  {label}")
