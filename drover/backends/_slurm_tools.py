"""The Slurm backend's pure parts: settings, running the tools, reading their output.

Nothing here keeps state. :mod:`drover.backends.slurm` decides what to do with
what these functions read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from drover.backends.base import BackendError
from drover.model.errors import DroverError

__all__ = [
    "FINISHED_STATES",
    "SlurmCommandError",
    "SlurmJob",
    "SlurmNode",
    "SlurmSettings",
    "SpecProblem",
    "decode_exit",
    "job_from_fields",
    "job_script",
    "parse_jobcomp",
    "parse_key_values",
    "parse_sinfo",
    "parse_squeue_json",
    "resource_args",
    "run_tool",
    "settings_from",
    "transient_retry",
]

#: Base job states after which a job never runs again (``--no-requeue`` is always given).
FINISHED_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "NODE_FAIL",
        "BOOT_FAIL",
        "DEADLINE",
        "PREEMPTED",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
#: Job states in which the job has been given a node and its script runs (or ran).
_ALLOCATED_STATES = frozenset(
    {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"}
)
#: Node states (``sinfo %T``) that take new jobs; anything else (drained, down, not
#: responding ``*``, maintenance, failing…) is not offered as an agent.
_USABLE_NODE_STATES = frozenset({"idle", "mixed", "allocated", "completing", "planned"})
_USABLE_NODE_FLAGS = frozenset({"cloud", "powered_down", "powering_up", "planned"})
# stderr of a tool when slurmctld is briefly unreachable or busy: worth a retry.
_TRANSIENT = re.compile(
    r"socket timed out|unable to contact slurm controller|connection refused|"
    r"zero bytes were transmitted|temporarily unable|resource temporarily unavailable|"
    r"communication connection failure|transport endpoint|try again",
    re.IGNORECASE,
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SpecProblem(Exception):
    """A kernel spec that cannot become a Slurm job; the message says why."""


class SlurmCommandError(BackendError):
    """A Slurm tool failed; ``transient`` when retrying may help (controller unreachable)."""

    def __init__(self, argv: Sequence[str], message: str, *, transient: bool) -> None:
        super().__init__(f"{argv[0]}: {message}")
        self.transient = transient


@attrs.frozen
class SlurmSettings:
    """``[backend.settings]`` when ``backend.name = "slurm"`` (docs/slurm.md)."""

    #: Partition to submit to and take nodes from; unset: the cluster's default partition.
    partition: str | None = None
    #: ``--account`` of every job; unset: the submitting user's default account.
    account: str | None = None
    #: Extra ``sbatch`` arguments, as a list (``["--time=04:00:00", "--qos=normal"]``).
    sbatch_args: list[str] = attrs.field(factory=list)
    #: Seconds between two polls (one ``squeue --json`` for all jobs).
    poll_interval: float = 1.0
    #: Seconds between two reads of the nodes (``sinfo``).
    nodes_interval: float = 10.0
    #: ``True``: submit with ``--nodelist`` on the node drover's scheduler chose.
    #: ``False``: submit to the partition and let Slurm choose (recorded as ``runtime.node``).
    placement: bool = True
    #: Signal ``scancel --signal`` sends first when destroying; the final cancel follows
    #: after ``kill_grace``.
    signal: str = "TERM"
    #: Seconds between the signal and the final cancel; unset: ``backend.kill_grace``.
    kill_grace: float | None = None
    #: The ``jobcomp/filetxt`` file, read for jobs that left the controller; unset:
    #: ``JobCompLoc`` from ``scontrol show config`` when ``JobCompType=jobcomp/filetxt``.
    jobcomp_file: str | None = None
    #: Every job is named ``<prefix><kernel id>``; drover finds its jobs by this name.
    job_name_prefix: str = "drover-"
    #: Seconds one tool call may take before it counts as a (transient) failure.
    command_timeout: float = 30.0
    #: The tools, as paths or names on ``PATH``.
    sbatch: str = "sbatch"
    squeue: str = "squeue"
    sinfo: str = "sinfo"
    scontrol: str = "scontrol"
    scancel: str = "scancel"


def _settings_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)

    def _number(value: Any, _type: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError(f"expected a number, got {value!r}")
        return float(value)

    def _bool(value: Any, _type: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"true", "false"}:
            return value.lower() == "true"
        raise ValueError(f"expected true or false, got {value!r}")

    def _string(value: Any, _type: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {value!r}")
        return value

    def _strings(value: Any, _type: Any) -> list[str]:
        if isinstance(value, str):
            # From an environment variable or a flag: one shell-quoted string.
            return shlex.split(value)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"expected a list of strings, got {value!r}")
        return list(value)

    conv.register_structure_hook(float, _number)
    conv.register_structure_hook(bool, _bool)
    conv.register_structure_hook(str, _string)
    conv.register_structure_hook_func(lambda t: t == list[str], _strings)
    conv.register_structure_hook(
        SlurmSettings, make_dict_structure_fn(SlurmSettings, conv, _cattrs_forbid_extra_keys=True)
    )
    return conv


_CONVERTER = _settings_converter()


def settings_from(raw: Mapping[str, Any]) -> SlurmSettings:
    """Structure ``backend.settings``; a wrong key or value is a :class:`DroverError`."""
    try:
        settings = _CONVERTER.structure(dict(raw), SlurmSettings)
    except cattrs.BaseValidationError as error:
        problems = "; ".join(cattrs.transform_error(error, path="backend.settings"))
        raise DroverError(f"invalid slurm backend settings: {problems}") from None
    if settings.poll_interval <= 0 or settings.nodes_interval <= 0:
        raise DroverError("invalid slurm backend settings: intervals must be > 0 seconds")
    return settings


# -- running the tools -------------------------------------------------------------


async def run_tool(argv: Sequence[str], *, stdin: str | None = None, limit: float) -> str:
    """Run one Slurm tool without blocking the event loop; return its stdout.

    Raises :class:`SlurmCommandError` (``transient`` for timeouts and an
    unreachable controller) when it cannot start, times out or exits non-zero.
    """
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as error:
        raise SlurmCommandError(argv, f"cannot run it: {error}", transient=False) from None
    data = stdin.encode() if stdin is not None else None
    try:
        out, err = await asyncio.wait_for(proc.communicate(data), limit)
    except BaseException as error:
        # Timed out or cancelled: never leave the tool running, nor its pipes open.
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(Exception):
            await asyncio.shield(proc.communicate())
        if isinstance(error, TimeoutError):
            raise SlurmCommandError(argv, f"no answer in {limit:g}s", transient=True) from None
        raise
    if proc.returncode != 0:
        text = err.decode(errors="replace").strip() or out.decode(errors="replace").strip()
        raise SlurmCommandError(
            argv,
            f"exit code {proc.returncode}: {text}",
            transient=bool(_TRANSIENT.search(text)),
        )
    return out.decode(errors="replace")


def transient_retry(attempts: int = 4) -> AsyncRetrying:
    """Retry only transient tool failures (the controller unreachable), with jitter."""
    return AsyncRetrying(
        retry=retry_if_exception(lambda e: isinstance(e, SlurmCommandError) and e.transient),
        stop=stop_after_attempt(attempts),
        wait=wait_exponential_jitter(initial=0.2, max=3.0),
        reraise=True,
    )


# -- jobs ------------------------------------------------------------------------------


@attrs.frozen
class SlurmJob:
    """What drover needs to know of one Slurm job."""

    job_id: int
    name: str
    #: Base state: PENDING, CONFIGURING, RUNNING, COMPLETING, COMPLETED, FAILED…
    state: str
    reason: str | None
    #: The exit code, or ``-N`` when killed by signal N (as :func:`os.waitstatus_to_exitcode`).
    exit_code: int | None
    #: The node(s) it was given; ``None`` while it waits.
    node: str | None

    @property
    def finished(self) -> bool:
        """It ended and will not run again."""
        return self.state in FINISHED_STATES

    @property
    def allocated(self) -> bool:
        """It was given a node and its script started (or ran and ended)."""
        if self.state in _ALLOCATED_STATES:
            return True
        return self.finished and self.node is not None

    def describe(self) -> str:
        """``slurm job 12 FAILED (NonZeroExitCode)``."""
        reason = f" ({self.reason})" if self.reason and self.reason != "None" else ""
        return f"slurm job {self.job_id} {self.state}{reason}"


def decode_exit(raw: Any) -> int | None:
    """Slurm's exit code as drover records it: the code, or ``-signal``.

    22.05's ``squeue --json`` gives the raw wait status (768 is exit 3, 15 is
    SIGTERM); later releases give ``{"return_code": …, "signal": {"signal_id": …}}``.
    """
    if isinstance(raw, dict):
        if "number" in raw:  # 23.11's {"set": …, "number": …}
            return decode_exit(raw["number"]) if raw.get("set", True) else None
        signal = raw.get("signal")
        sig = signal.get("signal_id") if isinstance(signal, dict) else signal
        sig_number = _int(sig.get("number") if isinstance(sig, dict) else sig)
        if sig_number:
            return -sig_number
        return _int(raw.get("return_code"))
    status = _int(raw)
    if status is None:
        return None
    if status & 0x7F:
        return -(status & 0x7F)
    return (status >> 8) & 0xFF


def _int(value: Any) -> int | None:
    if isinstance(value, dict) and "number" in value:
        return _int(value["number"]) if value.get("set", True) else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return None


def _state(value: Any) -> str:
    # 22.05: "RUNNING"; later: ["RUNNING", "COMPLETING"…] with the base first.
    if isinstance(value, list):
        value = value[0] if value else "UNKNOWN"
    return str(value).split()[0].split("+")[0].upper() if value else "UNKNOWN"


def parse_squeue_json(text: str) -> dict[int, SlurmJob]:
    """``squeue --json`` output as jobs by id (every job the controller still holds)."""
    data = json.loads(text)
    jobs: dict[int, SlurmJob] = {}
    for raw in data.get("jobs") or []:
        job_id = _int(raw.get("job_id"))
        if job_id is None:
            continue
        nodes = raw.get("nodes") or raw.get("batch_host") or None
        jobs[job_id] = SlurmJob(
            job_id=job_id,
            name=str(raw.get("name") or ""),
            state=_state(raw.get("job_state")),
            reason=str(raw.get("state_reason") or "") or None,
            exit_code=decode_exit(raw.get("exit_code")),
            node=str(nodes) if nodes else None,
        )
    return jobs


_KEY = re.compile(r"(?:^|\s)([A-Za-z][\w/:]*)=")


def parse_key_values(line: str) -> dict[str, str]:
    """``Key=value Key2=value with spaces`` (``scontrol -o``, jobcomp lines) as a dict."""
    fields: dict[str, str] = {}
    matches = list(_KEY.finditer(line))
    for here, after in zip(matches, [*matches[1:], None], strict=True):
        end = after.start() if after is not None else len(line)
        fields[here.group(1)] = line[here.end() : end].strip()
    return fields


def job_from_fields(fields: Mapping[str, str]) -> SlurmJob | None:
    """A job from ``scontrol -o show job`` or a jobcomp line; ``None`` if it is not one."""
    job_id = _int(fields.get("JobId"))
    if job_id is None:
        return None
    exit_code: int | None = None
    code, _, sig = (fields.get("ExitCode") or "").partition(":")
    if _int(sig):
        exit_code = -(_int(sig) or 0)
    elif _int(code) is not None:
        exit_code = _int(code)
    node = fields.get("NodeList") or fields.get("BatchHost")
    reason = fields.get("Reason")
    return SlurmJob(
        job_id=job_id,
        name=fields.get("JobName") or fields.get("Name") or "",
        state=_state(fields.get("JobState")),
        reason=reason if reason not in (None, "", "None", "(null)") else None,
        exit_code=exit_code,
        node=node if node not in (None, "", "(null)", "None assigned") else None,
    )


def parse_jobcomp(text: str, prefix: str) -> dict[int, SlurmJob]:
    """The jobs of a ``jobcomp/filetxt`` file whose name starts with ``prefix``."""
    jobs: dict[int, SlurmJob] = {}
    for line in text.splitlines():
        if prefix not in line:
            continue
        job = job_from_fields(parse_key_values(line))
        if job is not None and job.name.startswith(prefix):
            jobs[job.job_id] = job
    return jobs


# -- nodes -----------------------------------------------------------------------------

#: ``sinfo`` format: name, CPUs, memory (MiB), GRES, long state, partition.
SINFO_FORMAT = "%N|%c|%m|%G|%T|%P"


@attrs.frozen
class SlurmNode:
    """One node of the partition, as ``sinfo`` shows it."""

    name: str
    cpus: float
    mem: float
    gres: dict[str, float]
    state: str
    partitions: tuple[str, ...]

    @property
    def usable(self) -> bool:
        """Whether it takes jobs now: not drained, down, failing or unresponsive."""
        parts = self.state.lower().split("+")
        base = parts[0]
        if base.endswith("*"):  # not responding
            return False
        return base.rstrip("~#%!^-@$") in _USABLE_NODE_STATES and all(
            flag in _USABLE_NODE_FLAGS for flag in parts[1:]
        )


def _gres(text: str) -> dict[str, float]:
    """``gpu:tesla:2(S:0-1),mps:100`` as ``{"gpu": 2, "mps": 100}``."""
    found: dict[str, float] = {}
    if not text or text in {"(null)", "N/A"}:
        return found
    # Commas inside "(S:0,1)" socket lists do not separate entries.
    for item in re.split(r",(?![^()]*\))", text):
        bare = item.split("(")[0].strip()
        parts = bare.split(":")
        if not parts[0]:
            continue
        count = _int(parts[-1]) if len(parts) > 1 else 1
        found[parts[0]] = found.get(parts[0], 0.0) + float(count or 0)
    return found


def parse_sinfo(text: str) -> list[SlurmNode]:
    """``sinfo -N -h -o SINFO_FORMAT`` output; a node listed per partition appears once."""
    nodes: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 6 or not fields[0]:
            continue
        name, cpus, mem, gres, state, partition = fields
        partition = partition.strip()
        known = nodes.get(name)
        parts = (*known.partitions, partition) if known else (partition,)
        nodes[name] = SlurmNode(
            name=name,
            cpus=float(_int(cpus) or 0),
            mem=float(_int(mem.rstrip("+")) or 0),
            gres=_gres(gres),
            state=state.strip(),
            partitions=parts,
        )
    return list(nodes.values())


# -- what a kernel asks for --------------------------------------------------------------


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
    lines.append(f"cd {shlex.quote(cwd)} || exit 126")
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
