"""The Slurm backend's settings: ``[backend.settings]`` structured with cattrs."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

import attrs
import cattrs

from drover.backends.settings import settings_converter, structure_settings
from drover.model.errors import DroverError

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


def settings_from(raw: Mapping[str, Any]) -> SlurmSettings:
    """Structure ``backend.settings``; a wrong key or value is a :class:`DroverError`."""
    settings = structure_settings(_CONVERTER, raw, SlurmSettings, "slurm")
    if settings.poll_interval <= 0 or settings.nodes_interval <= 0:
        raise DroverError("invalid slurm backend settings: intervals must be > 0 seconds")
    return settings
