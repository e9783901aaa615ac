"""What a local kernel spec asks for: checks, environment, working directory, log paths.

Private to the local backend.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from drover.kinds.sessions.values import KernelInfo

__all__ = ["cwd_of", "env_of", "log_paths", "spec_problem"]


def log_paths(workdir: Path) -> dict[str, str]:
    return {"stdout": str(workdir / "stdout.log"), "stderr": str(workdir / "stderr.log")}


def cwd_of(spec: Mapping[str, Any], workdir: Path) -> Path:
    """The kernel's working directory (``cwd``, relative to ``workdir``), created if missing.

    Created before the setup runs, so a setup and its command both run in it
    (as Docker's ``WORKDIR``); if it cannot be created, the supervisor's
    ``chdir`` says why.
    """
    cwd = spec.get("cwd")
    path = workdir / cwd if isinstance(cwd, str) and cwd else workdir
    with contextlib.suppress(OSError, ValueError):
        path.mkdir(parents=True, exist_ok=True)
    return path


def env_of(session_id: str, kernel: KernelInfo) -> dict[str, str]:
    env = dict(os.environ)
    extra = kernel.spec.get("env") or {}
    env.update({str(k): str(v) for k, v in extra.items()})
    env["DROVER_SESSION_ID"] = session_id
    env["DROVER_KERNEL_ID"] = kernel.id
    return env


def _nul(values: Iterable[Any]) -> int | None:
    """The 1-based position of the first value whose text holds a NUL byte."""
    for index, value in enumerate(values, start=1):
        if "\0" in str(value):
            return index
    return None


def spec_problem(spec: Mapping[str, Any]) -> str | None:
    """Why a kernel spec cannot run locally, or ``None``."""
    command = spec.get("command")
    if (
        not isinstance(command, list)
        or not command
        or not all(isinstance(a, str | int | float) for a in command)
    ):
        return "invalid kernel spec: 'command' must be a non-empty list of arguments"
    env = spec.get("env")
    if env is not None and not isinstance(env, Mapping):
        return "invalid kernel spec: 'env' must be a table of NAME = value"
    setup = spec.get("setup")
    if setup is not None and not isinstance(setup, str | list):
        return "invalid kernel spec: 'setup' must be a shell command string or an argument list"
    # No program can receive a NUL byte: the OS takes arguments as C strings.
    at = _nul(command)
    if at is not None:
        return f"failed to start: argument {at} of the command contains a NUL byte"
    if env and (_nul(env) is not None or _nul(env.values()) is not None):
        return "failed to start: the environment contains a NUL byte"
    if env and any("=" in str(name) or not str(name) for name in env):
        return "failed to start: an environment variable name is empty or contains '='"
    if setup is not None and _nul([setup] if isinstance(setup, str) else setup) is not None:
        return "failed to start: the setup command contains a NUL byte"
    if _nul([spec.get("cwd") or ""]) is not None:
        return "failed to start: the working directory contains a NUL byte"
    return None
