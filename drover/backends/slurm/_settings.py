"""The Slurm backend's settings: ``[backend.settings]`` structured with cattrs."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

import attrs
import cattrs

from drover.backends.settings import (
    DAY,
    HOUR,
    MIN_POLL,
    bounded,
    refuse,
    seconds,
    settings_converter,
    structure_settings,
)

__all__ = ["SlurmSettings", "settings_from"]


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


def _strings(value: Any, _type: Any) -> list[str]:
    if isinstance(value, str):
        # From an environment variable or a flag: one shell-quoted string.
        return shlex.split(value)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of strings, got {value!r}")
    return list(value)


def _settings_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook_func(lambda t: t == list[str], _strings)
    return settings_converter(SlurmSettings, conv)


_CONVERTER = _settings_converter()


#: Most ``sbatch_args``, and the longest one.
MAX_SBATCH_ARGS = 256
_MAX_ARG = 4096
#: A Slurm name (partition, account): no whitespace, no shell or list separators.
_NAME = r"[^\s,;:'\"]+"


def settings_from(raw: Mapping[str, Any]) -> SlurmSettings:
    """Structure ``backend.settings`` and check that its values make sense; a wrong key or
    value is a :class:`~drover.model.errors.DroverError` naming each."""
    s = structure_settings(_CONVERTER, raw, SlurmSettings, "slurm")
    name = "a name without spaces, ',', ';', ':' or quotes"
    refuse(
        "slurm",
        [
            bounded("partition", s.partition, 255, pattern=_NAME, meaning=f"must be {name}"),
            bounded("account", s.account, 255, pattern=_NAME, meaning=f"must be {name}"),
            bounded(
                "job_name_prefix", s.job_name_prefix, 64, pattern=r"[A-Za-z0-9._-]*",
                meaning="must be letters, digits, '.', '_' and '-'",
            ),
            bounded(
                "signal", s.signal, 16, pattern=r"[A-Za-z0-9+]+",
                meaning="must be a signal's name or number (TERM, USR1, 15)",
            ),
            seconds("poll_interval", s.poll_interval, MIN_POLL, HOUR),
            seconds("nodes_interval", s.nodes_interval, MIN_POLL, DAY),
            seconds("kill_grace", s.kill_grace, 0.0, DAY),
            seconds("command_timeout", s.command_timeout, 0.1, HOUR),
            bounded("jobcomp_file", s.jobcomp_file, 4096),
            *(bounded(tool, getattr(s, tool), 4096) for tool in _TOOLS),
            (
                f"backend.settings.sbatch_args: {len(s.sbatch_args)} arguments, at most "
                f"{MAX_SBATCH_ARGS}"
                if len(s.sbatch_args) > MAX_SBATCH_ARGS
                else None
            ),
            *(
                bounded(f"sbatch_args[{i}]", arg, _MAX_ARG)
                for i, arg in enumerate(s.sbatch_args[:MAX_SBATCH_ARGS])
            ),
        ],
    )  # fmt: skip
    return s


_TOOLS = ("sbatch", "squeue", "sinfo", "scontrol", "scancel")
