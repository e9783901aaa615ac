"""The built-in backends, registered through ``drover_register_backends`` like any plugin's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from drover.backends.base import AgentBackend, AgentInfo
from drover.plugins.markers import hookimpl
from drover.plugins.registry import BackendRegistry

if TYPE_CHECKING:
    from drover.config import Config

__all__ = ["drover_register_backends"]


def _agents(config: Config) -> list[AgentInfo]:
    from drover.config import default_agents

    return [
        AgentInfo(a.id, a.capacity(), a.devices)
        for a in (config.backend.agents or default_agents())
    ]


def _local(config: Config) -> AgentBackend:
    from drover.backends.local import LocalBackend

    return LocalBackend(
        _agents(config),
        config.data_dir,
        kill_grace=config.backend.kill_grace,
        device_variables=config.backend.device_variables,
    )


def _simulated(config: Config) -> AgentBackend:
    from drover.backends.simulated import SimulatedBackend

    return SimulatedBackend(
        _agents(config),
        pull_delay=config.backend.pull_delay,
        create_delay=config.backend.create_delay,
        run_for=config.backend.run_for,
        # Under the daemon, due progress is delivered by the backend itself.
        pump_interval=0.02,
    )


def _slurm(config: Config) -> AgentBackend:
    from drover.backends.slurm import SlurmBackend
    from drover.backends.slurm._settings import settings_from
    from drover.config import ConfigError
    from drover.model.errors import DroverError

    try:
        settings = settings_from(config.backend.settings)
    except DroverError as error:
        raise ConfigError(str(error)) from None
    # Agents are the cluster's nodes (sinfo); backend.agents is not used.
    return SlurmBackend(
        settings,
        config.data_dir,
        kill_grace=config.backend.kill_grace,
    )


def _container(config: Config) -> AgentBackend:
    from drover.backends.container import ContainerBackend
    from drover.backends.container._settings import settings_from
    from drover.config import ConfigError
    from drover.model.errors import DroverError

    try:
        settings = settings_from(config.backend.settings)
    except DroverError as error:
        raise ConfigError(str(error)) from None
    return ContainerBackend(
        _agents(config),
        settings,
        config.data_dir,
        kill_grace=config.backend.kill_grace,
        device_variables=config.backend.device_variables,
    )


@hookimpl
def drover_register_backends(register: BackendRegistry) -> None:
    """Register ``local`` (real processes), ``simulated``, ``slurm`` (Slurm batch jobs) and
    ``container`` (containers through the Docker Engine API)."""
    register("local", _local)
    register("simulated", _simulated)
    register("slurm", _slurm)
    register("container", _container)
