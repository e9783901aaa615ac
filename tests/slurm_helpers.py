"""The real Slurm cluster of scripts/slurm-up.sh, for tests/test_slurm.py.

The tests FAIL, never skip, when the cluster cannot start: ``make test`` starts
it first, and the fixture runs the (idempotent) script itself when it is down.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SLURM_UP = ROOT / "scripts" / "slurm-up.sh"
NODES = ("n1", "n2")
#: What scripts/slurm-up.sh gives each node.
NODE_CPUS = 2
NODE_MEM = 2048
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}


def _nodes_ready() -> bool:
    try:
        done = subprocess.run(
            ["sinfo", "-h", "-N", "-p", "main", "-o", "%N %T"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
    return done.returncode == 0 and all(
        states.get(n) in {"idle", "mixed", "allocated", "completing"} for n in NODES
    )


@pytest.fixture(name="slurm_cluster", scope="session")
def slurm_cluster_fixture() -> None:
    """The two-node cluster, started by scripts/slurm-up.sh if it is not up."""
    if _nodes_ready():
        return
    done = subprocess.run(
        ["bash", str(SLURM_UP)], capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0 or not _nodes_ready():
        pytest.fail(
            f"the Slurm test cluster cannot start (scripts/slurm-up.sh exited "
            f"{done.returncode}):\n{done.stdout}\n{done.stderr}",
            pytrace=False,
        )


@pytest.fixture(name="job_prefix")
def job_prefix_fixture(slurm_cluster: None) -> Iterator[str]:
    """A job name prefix of this test's own; its live jobs are cancelled afterwards."""
    prefix = f"drover-t{uuid.uuid4().hex[:8]}-"
    yield prefix
    done = subprocess.run(["squeue", "--json"], capture_output=True, text=True, check=False)
    jobs = json.loads(done.stdout).get("jobs", []) if done.returncode == 0 else []
    left = [
        str(j["job_id"])
        for j in jobs
        if str(j.get("name", "")).startswith(prefix) and j.get("job_state") not in FINISHED
    ]
    if left:
        subprocess.run(["scancel", *left], check=False)


def slurm_settings(prefix: str, **extra: Any) -> dict[str, Any]:
    """Backend flags for a fast-polling slurm backend using ``prefix``."""
    return {
        "backend.name": "slurm",
        "backend.kill_grace": 3.0,
        "backend.settings": {"poll_interval": 0.2, "job_name_prefix": prefix, **extra},
    }


async def run(*argv: str, stdin: str | None = None) -> str:
    """Run a command without blocking the event loop; return its stdout (fail on non-zero)."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
    assert proc.returncode == 0, f"{argv}: exit {proc.returncode}: {err.decode()}"
    return out.decode()


async def jobs_named(name: str) -> list[dict[str, Any]]:
    """Every job called ``name`` that the controller holds, finished ones included."""
    data = json.loads(await run("squeue", "--json"))
    return [j for j in data["jobs"] if j["name"] == name]


async def live_job_ids(name: str) -> list[str]:
    """Plain ``squeue`` (pending, running, completing): the ids of the jobs called ``name``."""
    return (await run("squeue", "-h", "-n", name, "-o", "%i")).split()
