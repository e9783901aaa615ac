"""A run configuration as the pack stores it, its check, and each job submission's spec.

A run's ``spec`` is its configuration (what ``dstack apply`` sends): ``type``
(``task``, ``service``, ``dev-environment``), ``nodes`` (jobs per replica: a
multi-node task has one replica of ``nodes`` jobs), ``replicas`` (a service:
``replicas`` replicas of ``nodes`` jobs each, one by default), ``retry``
(``{"on_events": [...], "duration": seconds}``), ``max_duration``,
``stop_duration`` (``null``: off), ``stop_criteria`` (``all-done`` or
``master-done``) and ``sim``: each slot's container behaviour, by submission
(``{"*": [...], "0/1": [...]}``; see :mod:`.cloud`; the last entry repeats).

A job's spec is derived from it (:func:`job_spec`): its ``replica_num``,
``job_num``, ``slot`` (``"replica/job"``), ``submission_num``, and the
numbers the job's handlers filter on (``max_duration``, ``stop_duration``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drover import InvalidSpecError

RUN_TYPES = ("task", "service", "dev-environment")
STOP_CRITERIA = ("all-done", "master-done")
SIM_KEYS = frozenset({"run_for", "exit_code", "stop_takes"})
#: The events ``retry.on_events`` may name (:class:`.kinds.RetryEvent`).
RETRY_EVENTS = ("no-capacity", "interruption", "error")
#: dstack's default ``stop_duration`` (seconds of graceful stop before the kill).
DEFAULT_STOP_DURATION = 300


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def check_run_spec(spec: Mapping[str, Any], where: str) -> None:
    """Refuse a run configuration dstack would refuse, naming the field (InvalidSpecError)."""
    kind = spec.get("type", "task")
    if kind not in RUN_TYPES:
        raise InvalidSpecError(f"{where}: type must be one of {', '.join(RUN_TYPES)}, not {kind!r}")
    for key in ("nodes", "replicas"):
        value = spec.get(key, 1)
        if not _whole(value) or value < 1:
            raise InvalidSpecError(f"{where}: {key} must be a whole number >= 1, not {value!r}")
    if spec.get("replicas", 1) > 1 and kind != "service":
        raise InvalidSpecError(f"{where}: only a service may have replicas > 1")
    if spec.get("stop_criteria", "all-done") not in STOP_CRITERIA:
        raise InvalidSpecError(
            f"{where}: stop_criteria must be all-done or master-done, "
            f"not {spec.get('stop_criteria')!r}"
        )
    for key in ("max_duration", "stop_duration"):
        value = spec.get(key)
        if value is not None and not _seconds(value):
            raise InvalidSpecError(f"{where}: {key} must be seconds >= 0 or null, not {value!r}")
    retry = spec.get("retry")
    if retry is not None:
        if not isinstance(retry, Mapping):
            raise InvalidSpecError(f"{where}: retry must be a table, not {retry!r}")
        events = retry.get("on_events", list(RETRY_EVENTS))
        known = list(RETRY_EVENTS)
        if not isinstance(events, list) or any(e not in known for e in events):
            raise InvalidSpecError(
                f"{where}: retry.on_events must list events of {', '.join(known)}, not {events!r}"
            )
        if not _seconds(retry.get("duration")):
            raise InvalidSpecError(
                f"{where}: retry.duration must be seconds >= 0, not {retry.get('duration')!r}"
            )
    sim = spec.get("sim", {})
    if not isinstance(sim, Mapping):
        raise InvalidSpecError(f"{where}: sim must be a table of slot -> behaviours")
    for slot, behaviours in sim.items():
        if not isinstance(behaviours, list) or not behaviours:
            raise InvalidSpecError(f"{where}: sim[{slot!r}] must be a non-empty list")
        for b in behaviours:
            if not isinstance(b, Mapping) or set(b) - SIM_KEYS:
                raise InvalidSpecError(
                    f"{where}: sim[{slot!r}] entries take only {', '.join(sorted(SIM_KEYS))}"
                )


def replicas(spec: Mapping[str, Any]) -> int:
    """How many replicas the run has."""
    return int(spec.get("replicas", 1))


def jobs_per_replica(spec: Mapping[str, Any]) -> int:
    """How many jobs (nodes) each replica has."""
    return int(spec.get("nodes", 1))


def slot(replica_num: int, job_num: int) -> str:
    """A slot's name: ``"replica/job"``."""
    return f"{replica_num}/{job_num}"


def job_name(run_name: str | None, replica_num: int, job_num: int) -> str:
    """dstack's job name, the same for every submission of a slot: ``<run>-<job>-<replica>``."""
    return f"{run_name or 'run'}-{job_num}-{replica_num}"


def job_spec(
    run_spec: Mapping[str, Any], replica_num: int, job_num: int, submission_num: int
) -> dict[str, Any]:
    """The spec of submission ``submission_num`` of one slot of a run."""
    name = slot(replica_num, job_num)
    sims = run_spec.get("sim", {})
    behaviours = sims.get(name) or sims.get("*") or [{}]
    spec: dict[str, Any] = {
        "replica_num": replica_num,
        "job_num": job_num,
        "jobs_per_replica": jobs_per_replica(run_spec),
        "slot": name,
        "submission_num": submission_num,
        "sim": dict(behaviours[min(submission_num, len(behaviours) - 1)]),
    }
    stop = run_spec.get("stop_duration", DEFAULT_STOP_DURATION)
    if stop is not None:  # null: "off", never killed
        spec["stop_duration"] = stop
    if run_spec.get("max_duration") is not None:
        spec["max_duration"] = run_spec["max_duration"]
    return spec


def first_jobs(run_spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every slot's first submission (submission_num 0), as ``submit_run`` creates them."""
    return [
        job_spec(run_spec, r, j, 0)
        for r in range(replicas(run_spec))
        for j in range(jobs_per_replica(run_spec))
    ]
