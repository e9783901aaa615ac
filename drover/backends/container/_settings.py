"""The container backend's settings: ``[backend.settings]`` structured with cattrs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

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

__all__ = ["PULL_POLICIES", "ContainerSettings", "settings_from"]

#: ``always``: pull before every start; ``if-missing``: pull only an image the engine
#: does not have; ``never``: use the engine's images only.
PULL_POLICIES = ("always", "if-missing", "never")


@attrs.frozen
class ContainerSettings:
    """``[backend.settings]`` when ``backend.name = "container"`` (docs/containers.md)."""

    #: The Docker Engine API: ``unix:///var/run/docker.sock``, Podman's
    #: ``unix:///run/podman/podman.sock``, or ``tcp://host:2375``; unset: ``DOCKER_HOST``,
    #: else Docker's default socket.
    url: str | None = None
    #: The network containers join (``--network``); unset: the engine's default.
    #: ``host`` shares this machine's network: a replica's ``$PORT`` is then on
    #: 127.0.0.1 without publishing.
    network: str | None = None
    #: The image of a kernel whose spec names none; unset: ``image`` is required.
    default_image: str | None = None
    #: ``always``, ``if-missing`` or ``never``.
    pull_policy: Literal["always", "if-missing", "never"] = "if-missing"
    #: Labels are ``<prefix>.kernel``, ``<prefix>.session``; containers are named
    #: ``<prefix>-<kernel id>``. drover finds its containers by these.
    label_prefix: str = "drover"
    #: Seconds between two polls (one list of the labelled containers).
    poll_interval: float = 0.5
    #: Seconds between SIGTERM and SIGKILL when destroying; unset: ``backend.kill_grace``.
    kill_grace: float | None = None
    #: Remove a container once its kernel's end and logs are kept.
    remove: bool = True
    #: Seconds one API call may take (a pull has no limit: it is as slow as the registry).
    api_timeout: float = 60.0
    #: Host directories under which a kernel may mount a ``source`` (absolute paths);
    #: none by default: only the kernel's own directory (docs/containers.md, "Mounts").
    mount_roots: list[str] = attrs.field(factory=list)


#: Most entries of ``mount_roots``.
MAX_MOUNT_ROOTS = 256
#: Longest path (a root, a mount's source or target), as Linux's ``PATH_MAX``.
MAX_PATH = 4096


def _strings(value: Any, _type: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of strings, got {value!r}")
    return list(value)


def _converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook_func(lambda t: t == list[str], _strings)
    return settings_converter(ContainerSettings, conv)


_CONVERTER = _converter()


def _root_problem(index: int, root: str) -> str | None:
    key = f"mount_roots[{index}]"
    problem = bounded(key, root, MAX_PATH)
    if problem:
        return problem
    if not root.startswith("/") or any(c in root for c in ":,"):
        return f"backend.settings.{key} = {root!r}: must be an absolute path without ':' or ','"
    if root.strip("/") == "":
        return (
            f"backend.settings.{key} = {root!r}: '/' would let kernels mount every host "
            "path; name the directories they may mount"
        )
    return None


def settings_from(raw: Mapping[str, Any]) -> ContainerSettings:
    """Structure ``backend.settings`` and check that its values make sense; a wrong key or
    value is a :class:`~drover.model.errors.DroverError` naming each."""
    settings = structure_settings(_CONVERTER, raw, ContainerSettings, "container")
    roots = settings.mount_roots
    refuse(
        "container",
        [
            bounded("url", settings.url, 2048),
            bounded("network", settings.network, 255),
            bounded("default_image", settings.default_image, 1024),
            bounded(
                "label_prefix", settings.label_prefix, 32, pattern=r"[A-Za-z0-9][A-Za-z0-9-]*",
                meaning="must be letters, digits and '-' (a container name's start)",
            ),
            seconds("poll_interval", settings.poll_interval, MIN_POLL, HOUR),
            seconds("kill_grace", settings.kill_grace, 0.0, DAY),
            seconds("api_timeout", settings.api_timeout, 0.1, HOUR),
            (
                f"backend.settings.mount_roots: {len(roots)} entries, at most {MAX_MOUNT_ROOTS}"
                if len(roots) > MAX_MOUNT_ROOTS
                else None
            ),
            *(_root_problem(i, r) for i, r in enumerate(roots[:MAX_MOUNT_ROOTS])),
        ],
    )  # fmt: skip
    return settings
