"""Running Slurm's tools and reading what they print: jobs, nodes, exit codes.

Nothing here keeps state; :mod:`drover.backends.slurm._client` calls these and
:mod:`drover.backends.slurm.backend` decides what the results mean for kernels.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from drover.backends.base import BackendError

__all__ = [
    "FINISHED_STATES",
    "SINFO_FORMAT",
    "SlurmCommandError",
    "SlurmJob",
    "SlurmNode",
    "decode_exit",
    "job_from_fields",
    "parse_jobcomp",
    "parse_key_values",
    "parse_sinfo",
    "parse_squeue_json",
    "run_tool",
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


class SlurmCommandError(BackendError):
    """A Slurm tool failed; ``transient`` when retrying may help (controller unreachable)."""

    def __init__(self, argv: Sequence[str], message: str, *, transient: bool) -> None:
        super().__init__(f"{argv[0]}: {message}")
        self.transient = transient


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
        wait=wait_exponential(multiplier=0.2, max=3.0) + wait_random(0, 0.2),
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
