"""Assembling drover from a configuration: engine, repository, backend, plugins, coordinator."""

from __future__ import annotations

from importlib import metadata
from typing import Any

import pluggy
from sqlalchemy.ext.asyncio import AsyncEngine

from drover.backends.base import AgentBackend, AgentInfo
from drover.backends.local import LocalBackend
from drover.backends.simulated import SimulatedBackend
from drover.config import Config, LoadedConfig, default_agents
from drover.coordinator.clock import SystemClock
from drover.coordinator.engine import Coordinator
from drover.coordinator.errors import DroverError
from drover.plugins.manager import collect_handlers, make_plugin_manager
from drover.plugins.registry import RegisteredHandler, RuntimeContext
from drover.storage.engine import create_engine
from drover.storage.migrate import current_revision, head_revision, upgrade
from drover.storage.repository import Repository

__all__ = ["App", "SchemaNotReadyError", "build_backend", "handler_overrides"]


class SchemaNotReadyError(DroverError):
    """The database is not at drover's schema head."""


def build_backend(config: Config) -> AgentBackend:
    """The backend named in the configuration, with its agents."""
    agents = [AgentInfo(a.id, a.capacity()) for a in (config.backend.agents or default_agents())]
    if config.backend.name == "simulated":
        return SimulatedBackend(
            agents,
            pull_delay=config.backend.pull_delay,
            create_delay=config.backend.create_delay,
            run_for=config.backend.run_for,
        )
    return LocalBackend(agents, config.data_dir, kill_grace=config.backend.kill_grace)


def handler_overrides(config: Config) -> dict[str, dict[str, Any]]:
    """``[handlers.<name>]`` option fields that were set, as coordinator overrides.

    ``timeout = 0`` means no timeout and ``max_retries = -1`` means no limit.
    """
    out: dict[str, dict[str, Any]] = {}
    for name, hc in config.handlers.items():
        layer: dict[str, Any] = {}
        if hc.max_retries is not None:
            layer["max_retries"] = None if hc.max_retries < 0 else hc.max_retries
        if hc.timeout is not None:
            layer["timeout"] = None if hc.timeout <= 0 else hc.timeout
        if hc.batch_size is not None:
            layer["batch_size"] = hc.batch_size
        out[name] = layer
    return out


class App:
    """The pieces of a running drover, built from a :class:`LoadedConfig`."""

    def __init__(self, loaded: LoadedConfig) -> None:
        self.loaded = loaded
        self.config = loaded.config
        self.engine: AsyncEngine = create_engine(
            self.config.database_url, schema=self.config.database_schema or None
        )
        self.clock = SystemClock()
        self.repository = Repository(self.engine, clock=self.clock)
        self._backend: AgentBackend | None = None
        self.coordinator: Coordinator | None = None
        self.registered: list[RegisteredHandler] = []
        self.plugin_manager: pluggy.PluginManager | None = None

    @property
    def backend(self) -> AgentBackend:
        """The configured backend (built on first use)."""
        if self._backend is None:
            self._backend = build_backend(self.config)
        return self._backend

    async def check_schema(self, *, auto_upgrade: bool = False) -> None:
        """Upgrade (``auto_upgrade``) or insist that the database is at head."""
        if auto_upgrade:
            await upgrade(self.engine)
            return
        revision = await current_revision(self.engine)
        if revision != head_revision():
            state = "empty (not upgraded)" if revision is None else f"at {revision}"
            raise SchemaNotReadyError(
                f"the database is {state}, drover needs {head_revision()}: "
                "run `drover db upgrade` first"
            )

    def load_handlers(self) -> Coordinator:
        """Load plugins (respecting load/block lists), validate handlers, build the coordinator."""
        plugins = self.config.plugins
        self.plugin_manager = make_plugin_manager(
            include_builtins=True,
            load_entrypoints=False,
            block=plugins.block,
        )
        _load_entry_points(self.plugin_manager, plugins.load, plugins.block)
        context = RuntimeContext(self.repository, self.backend, self.clock)
        handlers, self.registered = collect_handlers(self.plugin_manager, context)
        self.coordinator = Coordinator(
            self.repository, handlers, options=handler_overrides(self.config), clock=self.clock
        )
        return self.coordinator

    async def close(self) -> None:
        """Dispose of the database engine."""
        await self.engine.dispose()


def _load_entry_points(pm: pluggy.PluginManager, allow: list[str] | None, block: list[str]) -> None:
    for ep in metadata.entry_points(group="drover"):
        if allow is not None and ep.name not in allow:
            continue
        if ep.name in block or pm.is_blocked(ep.name):
            continue
        pm.register(ep.load(), name=ep.name)
    pm.check_pending()
