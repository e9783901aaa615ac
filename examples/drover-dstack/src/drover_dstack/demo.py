"""``drover-dstack-demo``: submit a few dstack runs for ``drover run`` to carry out.

Example::

    drover-dstack-demo --database sqlite+aiosqlite:///./dstack.db
    drover run --database sqlite+aiosqlite:///./dstack.db --backend simulated
    drover entities dstack-run --database sqlite+aiosqlite:///./dstack.db
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

from drover import App, load_config

from .submit import RunRequest, submit_run

#: The demo's runs: what each one shows.
DEMO_RUNS = (
    ("train: exits 0 after 3 s", RunRequest("train", sim={"*": [{"run_for": 3}]})),
    (
        "flaky: exits 1, retried on error (15 s back-off), then exits 0",
        RunRequest(
            "flaky",
            retry={"on_events": ["error"], "duration": 600},
            sim={"*": [{"run_for": 2, "exit_code": 1}, {"run_for": 2}]},
        ),
    ),
    (
        "broken: exits 2, no retry",
        RunRequest("broken", sim={"*": [{"run_for": 2, "exit_code": 2}]}),
    ),
    (
        "cluster: 3 nodes, master-done; the workers stop when the master is done",
        RunRequest(
            "cluster",
            nodes=3,
            stop_criteria="master-done",
            sim={"0/0": [{"run_for": 4}], "*": [{"stop_takes": 1}]},
        ),
    ),
    (
        "capped: max_duration 3 s, ignores SIGTERM, killed after stop_duration 2 s",
        RunRequest("capped", max_duration=3, stop_duration=2, sim={"*": [{"stop_takes": None}]}),
    ),
)


async def _submit_runs(database_url: str) -> list[tuple[str, str]]:
    app = App(load_config(flags={"database_url": database_url}))
    try:
        await app.check_schema(auto_upgrade=True)
        return [(label, await submit_run(app.repository, run)) for label, run in DEMO_RUNS]
    finally:
        await app.close()


def main(argv: Sequence[str] | None = None) -> None:
    """Submit the demo runs and print each run's id."""
    parser = argparse.ArgumentParser(
        prog="drover-dstack-demo",
        description="Submit a few dstack runs to drover's database.",
        epilog="Example: drover-dstack-demo --database sqlite+aiosqlite:///./dstack.db",
    )
    parser.add_argument("--database", required=True, help="SQLAlchemy async URL")
    args = parser.parse_args(argv)
    for label, run_id in asyncio.run(_submit_runs(args.database)):
        print(f"{run_id}  {label}")
