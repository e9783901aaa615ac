"""What a kernel spec asks of the container engine: checks, and the create request.

Private to the container backend. Spec keys (docs/containers.md): ``image``,
``command`` (optional: the image's own), ``env``, ``cwd`` (the working directory
inside the container), ``mounts`` (``{source, target, read_only}``, as
:mod:`~drover.backends.container._mounts` allows), and the slots
``cpu`` (a CPU quota: ``NanoCpus``) and ``mem`` (MiB: a memory limit).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from typing import Any

from drover.backends.container._mounts import MountPolicy
from drover.kinds.sessions.values import KernelInfo

__all__ = [
    "MIB",
    "container_config",
    "free_port",
    "image_of",
    "memory_limit",
    "port_of",
    "spec_problem",
]

MIB = 1024 * 1024


def image_of(spec: Mapping[str, Any], default: str | None) -> str | None:
    """The image a kernel runs in: its spec's ``image``, else the backend's default."""
    image = spec.get("image")
    return image if isinstance(image, str) and image else default


def memory_limit(spec: Mapping[str, Any]) -> int | None:
    """The memory limit in bytes (``mem`` is MiB), or ``None`` for none."""
    mem = spec.get("mem")
    if isinstance(mem, int | float) and not isinstance(mem, bool) and mem > 0:
        return int(mem * MIB)
    return None


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(a, str | int | float) for a in value)


def spec_problem(
    spec: Mapping[str, Any], default_image: str | None, mounts: MountPolicy
) -> str | None:
    """Why a kernel spec cannot run in a container, or ``None`` (its ``mounts`` checked
    against ``mounts``, from the spec alone)."""
    if image_of(spec, default_image) is None:
        return (
            "invalid kernel spec: 'image' is required by the container backend "
            "(or set backend.settings.default_image)"
        )
    command = spec.get("command")
    if command is not None and not (_strings(command) and command):
        return "invalid kernel spec: 'command' must be a non-empty list of arguments"
    env = spec.get("env")
    if env is not None and not isinstance(env, Mapping):
        return "invalid kernel spec: 'env' must be a table of NAME = value"
    if env and any("=" in str(name) or not str(name) for name in env):
        return "invalid kernel spec: an environment variable name is empty or contains '='"
    cwd = spec.get("cwd")
    if cwd is not None and not (isinstance(cwd, str) and cwd.startswith("/")):
        return "invalid kernel spec: 'cwd' must be an absolute path inside the container"
    return mounts.problem(spec.get("mounts"))


def container_config(
    kernel: KernelInfo,
    *,
    session_id: str,
    image: str,
    labels: Mapping[str, str],
    env: Mapping[str, str],
    network: str | None,
    port: int | None,
    mounts: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The body of ``POST /containers/create`` for a kernel whose spec passed the check.

    ``port``: the kernel's ``$PORT``; the same number is published on
    127.0.0.1 unless the container shares the host's network. ``mounts``: the
    Engine API's ``Mounts``, as :meth:`~drover.backends.container._mounts.MountPolicy.resolve`
    gave them (structured, never a ``source:target:options`` string).
    """
    spec = kernel.spec
    variables = {str(k): str(v) for k, v in (spec.get("env") or {}).items()}
    variables.update(env)
    variables["DROVER_SESSION_ID"] = session_id
    variables["DROVER_KERNEL_ID"] = kernel.id
    host: dict[str, Any] = {}
    cpu = spec.get("cpu")
    if isinstance(cpu, int | float) and not isinstance(cpu, bool) and cpu > 0:
        host["NanoCpus"] = int(cpu * 1_000_000_000)
    memory = memory_limit(spec)
    if memory is not None:
        # No swap beyond the limit: a kernel over its memory is killed, not slowed.
        host["Memory"] = memory
        host["MemorySwap"] = memory
    if mounts:
        host["Mounts"] = [dict(m) for m in mounts]
    if network:
        host["NetworkMode"] = network
    config: dict[str, Any] = {
        "Image": image,
        "Env": [f"{k}={v}" for k, v in variables.items()],
        "Labels": dict(labels),
        "HostConfig": host,
    }
    command = spec.get("command")
    if command:
        config["Cmd"] = [str(a) for a in command]
    if spec.get("cwd"):
        config["WorkingDir"] = spec["cwd"]
    if port is not None:
        variables["PORT"] = str(port)
        config["Env"] = [f"{k}={v}" for k, v in variables.items()]
        if network != "host":
            config["ExposedPorts"] = {f"{port}/tcp": {}}
            host["PortBindings"] = {f"{port}/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]}
    return config


def port_of(ports: Mapping[str, Any]) -> dict[str, Any]:
    """The ``$PORT`` an adopted container was given (its published port, from the
    engine's ``ports`` of it); ``{}`` if none."""
    for key in ports:
        number = key.split("/", 1)[0]
        if number.isdigit():
            return {"port": int(number)}
    return {}


def free_port() -> int:
    """A port nothing listens on now, for a kernel's ``$PORT``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
