"""``drover-lpipes-demo``: submit a few generation requests for ``drover run`` to carry out.

Example::

    drover-lpipes-demo --database sqlite+aiosqlite:///./lpipes.db
    drover run --database sqlite+aiosqlite:///./lpipes.db --backend simulated
    drover entities lp-job --database sqlite+aiosqlite:///./lpipes.db
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

from drover import App, load_config

from .client import JobRequest, submit

#: What the demo submits: a label (its first word names it in the README) and the request.
REQUESTS = (
    ("short: 8 tokens, a → b → c → a per token", JobRequest("tell me about pipes", max_tokens=8)),
    (
        "chunked: a 9-word prompt prefilled 3 words a pass",
        JobRequest("a long prompt that is prefilled in three chunks", max_tokens=4, chunk=3),
    ),
    ("eos: the model stops after 5 tokens", JobRequest("say little", max_tokens=64, stop_after=5)),
    (
        "headless: origin b has no end model (FAILED NO_END_MODEL)",
        JobRequest("nobody can answer", origin="b"),
    ),
    ("long: 3000 tokens, to cancel with drover terminate", JobRequest("go on", max_tokens=3000)),
)


async def _submit_requests(database_url: str) -> list[tuple[str, str]]:
    app = App(load_config(flags={"database_url": database_url}))
    try:
        await app.check_schema(auto_upgrade=True)
        return [(label, await submit(app.repository, request)) for label, request in REQUESTS]
    finally:
        await app.close()


def main(argv: Sequence[str] | None = None) -> None:
    """Submit the demo's requests and print each job's id."""
    parser = argparse.ArgumentParser(
        prog="drover-lpipes-demo",
        description="Submit a few Language Pipes generation requests to drover's database.",
        epilog="Example: drover-lpipes-demo --database sqlite+aiosqlite:///./lpipes.db",
    )
    parser.add_argument("--database", required=True, help="SQLAlchemy async URL")
    args = parser.parse_args(argv)
    for label, job_id in asyncio.run(_submit_requests(args.database)):
        print(f"{job_id}  {label}")
