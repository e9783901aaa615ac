"""Simulated workers: each round, every attempt on a worker takes one step, as heartbeats.

An attempt goes ASSIGNED → BUILDING → RUNNING → its end, one step per round;
its end is its task's ``spec["script"]`` entry for that attempt (``ok``: exit
0, ``fail``: exit 1; the last entry repeats), so a task whose script is
``["fail", "ok"]`` fails once, is retried (if its failure budget allows) and
succeeds. A failing attempt crashes as soon as it runs; a succeeding one
runs its task's ``spec["duration"]`` seconds first (default 0). Every step
is a pushed report (:func:`.cluster.heartbeat`), never a write of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .cluster import heartbeat
from .kinds import ATTEMPT_KIND, LIVE_ATTEMPT, AttemptState

if TYPE_CHECKING:
    from drover import Entity, Queries, Repository

SCRIPT_OUTCOMES = {"ok": 0, "fail": 1}
_NEXT: dict[str, AttemptState] = {
    AttemptState.ASSIGNED: AttemptState.BUILDING,
    AttemptState.BUILDING: AttemptState.RUNNING,
}


def check_script(script: object) -> Sequence[str]:
    """The script's outcomes, or ValueError naming the bad one."""
    if not isinstance(script, list | tuple) or not script:
        raise ValueError("script must be a non-empty list of ok/fail")
    for outcome in script:
        if outcome not in SCRIPT_OUTCOMES:
            raise ValueError(f"script outcome {outcome!r} is not one of ok/fail")
    return list(script)


def exit_code_of(task: Entity, attempt: Entity) -> int:
    """How the task's script says this attempt (its ``n``) ends."""
    script = check_script(task.spec.get("script", ["ok"]))
    n = int(attempt.spec.get("n", 1))
    return SCRIPT_OUTCOMES[script[min(n, len(script)) - 1]]


async def step(repository: Repository, queries: Queries, now: float) -> int:
    """One round at time ``now``: every live attempt reports its next state (a succeeding
    one once it has run its task's duration); returns how many moved."""
    moved = 0
    for attempt in await queries.list_entities(ATTEMPT_KIND, statuses=LIVE_ATTEMPT, limit=None):
        worker = str(attempt.spec.get("worker"))
        if attempt.status in _NEXT:
            ok = await heartbeat(repository, attempt.id, _NEXT[attempt.status], worker=worker)
        else:
            assert attempt.parent_id is not None
            task = await queries.get_entity(attempt.parent_id)
            code = exit_code_of(task, attempt)
            ran = now - attempt.status_changed_at.timestamp()
            if code == 0 and ran < float(task.spec.get("duration", 0)):
                continue
            end = AttemptState.SUCCEEDED if code == 0 else AttemptState.FAILED
            ok = await heartbeat(repository, attempt.id, end, exit_code=code, worker=worker)
        moved += ok
    return moved
