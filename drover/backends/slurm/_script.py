"""What a kernel spec becomes in Slurm: ``sbatch`` resource arguments and the batch script."""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["SpecProblem", "job_script", "resource_args"]


class SpecProblem(Exception):
    """A kernel spec that cannot become a Slurm job; the message says why."""


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _amount(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def resource_args(spec: Mapping[str, Any], known_gres: Sequence[str]) -> list[str]:
    """``sbatch`` arguments for a kernel's slots: cpu, mem (MiB) and GRES by name.

    The scheduler reads every top-level number of a kernel spec as a slot, so
    each one must map to Slurm; anything else is refused, naming what is known.
    """
    args = ["--nodes=1", "--ntasks=1"]
    cpu = _amount(spec.get("cpu"))
    # Slurm allocates whole CPUs and at least one.
    args.append(f"--cpus-per-task={max(1, math.ceil(cpu or 0))}")
    mem = _amount(spec.get("mem"))
    if mem:
        args.append(f"--mem={math.ceil(mem)}M")
    gres: list[str] = []
    for slot, value in sorted(spec.items()):
        amount = _amount(value)
        if slot in {"cpu", "mem"} or amount is None or amount == 0:
            continue
        if slot not in known_gres:
            known = ", ".join(["cpu", "mem", *sorted(known_gres)])
            raise SpecProblem(
                f"resource slot {slot!r} (= {amount:g}) has no Slurm equivalent; "
                f"the slots Slurm offers here are: {known}"
            )
        if amount < 0 or amount != int(amount):
            raise SpecProblem(f"resource slot {slot!r} must be a whole number, got {value!r}")
        gres.append(f"{slot}:{int(amount)}")
    if gres:
        args.append("--gres=" + ",".join(gres))
    return args


def _argv(value: Any, what: str) -> list[str]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(a, str | int | float) and not isinstance(a, bool) for a in value)
    ):
        raise SpecProblem(f"invalid kernel spec: {what!r} must be a non-empty list of arguments")
    return [str(a) for a in value]


def job_script(spec: Mapping[str, Any], *, cwd: str, session_id: str, kernel_id: str) -> str:
    """The batch script: environment, optional setup, then ``exec`` of the command.

    A failed setup ends the job with the setup's exit code and says so on stderr.
    """
    command = _argv(spec.get("command"), "command")
    env = spec.get("env") or {}
    if not isinstance(env, Mapping):
        raise SpecProblem("invalid kernel spec: 'env' must be a table of NAME = value")
    lines = ["#!/bin/sh"]
    exports = {**{str(k): str(v) for k, v in env.items()}}
    exports["DROVER_SESSION_ID"] = session_id
    exports["DROVER_KERNEL_ID"] = kernel_id
    for name, value in exports.items():
        if not _ENV_NAME.match(name):
            raise SpecProblem(f"invalid kernel spec: {name!r} is not an environment variable name")
        lines.append(f"export {name}={shlex.quote(value)}")
    # The working directory is created first: the setup and the command both run in it.
    lines.append(f"mkdir -p -- {shlex.quote(cwd)}; cd {shlex.quote(cwd)} || exit 126")
    setup = spec.get("setup")
    if setup:
        if isinstance(setup, str):
            setup_cmd = f"/bin/sh -c {shlex.quote(setup)}"
        elif isinstance(setup, list):
            setup_cmd = shlex.join(_argv(setup, "setup"))
        else:
            raise SpecProblem(
                "invalid kernel spec: 'setup' must be a shell command string or an argument list"
            )
        lines.append(
            f"{setup_cmd} || {{ code=$?; "
            'echo "drover: setup failed with exit code $code" >&2; exit $code; }'
        )
    lines.append(f"exec {shlex.join(command)}")
    return "\n".join(lines) + "\n"
