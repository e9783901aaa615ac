"""The container backend's settings: ``[backend.settings]`` structured with cattrs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from drover.backends.settings import settings_converter, structure_settings
from drover.model.errors import DroverError

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


_CONVERTER = settings_converter(ContainerSettings)


def settings_from(raw: Mapping[str, Any]) -> ContainerSettings:
    """Structure ``backend.settings``; a wrong key or value is a :class:`DroverError`."""
    settings = structure_settings(_CONVERTER, raw, ContainerSettings, "container")
    if settings.poll_interval <= 0:
        raise DroverError("invalid container backend settings: poll_interval must be > 0 seconds")
    if not settings.label_prefix or not settings.label_prefix.replace("-", "").isalnum():
        raise DroverError(
            "invalid container backend settings: label_prefix must be letters, digits and '-'"
        )
    return settings
