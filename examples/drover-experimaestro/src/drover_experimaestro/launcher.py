"""A simulated launcher: where experimaestro starts a process, this decides its outcome.

A job's ``spec["script"]`` lists the outcome of each run (``done``, ``failed``,
``memory``, ``timeout``), the last one repeating; run *n* is the job's *n*-th
start, counted by its ``retries`` budget (one charge per timeout), so the
launcher keeps no state that decides anything. It only records what it was
asked to do, for tests and the demo.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from drover import Entity

from .kinds import RETRIES

OUTCOMES = ("done", "failed", "memory", "timeout")


@attrs.frozen
class Start:
    """One process start: which job, in which directory, its run number (0 first)."""

    job_id: str
    directory: str
    run: int


def job_directory(spec: Mapping[str, Any], name: str) -> str:
    """experimaestro's ``jobs/{task_id}/{job_hash}``: the same for every run of a job."""
    return f"jobs/{spec.get('task', 'task')}/{name}"


def run_number(job: Entity) -> int:
    """Which run of the job this is: the timeouts charged so far."""
    use = (job.budgets or {}).get(RETRIES)
    return use.used if use is not None else 0


def check_script(script: object) -> Sequence[str]:
    """The script's outcomes, or ValueError naming the bad one."""
    if not isinstance(script, list) or not script:
        raise ValueError(f"script must be a non-empty list of {'/'.join(OUTCOMES)}")
    for outcome in script:
        if outcome not in OUTCOMES:
            raise ValueError(f"script outcome {outcome!r} is not one of {'/'.join(OUTCOMES)}")
    return script


class SimulatedLauncher:
    """Starts no process: records each start and reads each run's outcome from the spec."""

    def __init__(self) -> None:
        self.starts: list[Start] = []

    async def start(self, job: Entity) -> None:
        """Launch the job's process (recorded) in its directory."""
        directory = str(
            (job.data or {}).get("directory") or job_directory(job.spec, job.name or job.id)
        )
        self.starts.append(Start(job.id, directory, run_number(job)))

    async def outcome(self, job: Entity) -> str:
        """How the job's current run ended (``done``/``failed``/``memory``/``timeout``)."""
        script = check_script(job.spec.get("script", ["done"]))
        return script[min(run_number(job), len(script) - 1)]
