"""Assembling drover from a configuration: engine, repository, backend, plugins, coordinator."""

from __future__ import annotations

from typing import Any

import pluggy
from sqlalchemy.ext.asyncio import AsyncEngine

from drover.backends.base import AgentBackend
from drover.config import Config, LoadedConfig
from drover.coordinator.tick import Coordinator
from drover.model.clock import SystemClock
from drover.model.errors import DroverError
from drover.plugins.manager import (
    collect_backends,
    collect_handlers,
    collect_observers,
    load_entry_points,
    make_plugin_manager,
)
from drover.plugins.registry import Observer, RegisteredHandler, RuntimeContext
from drover.storage.connect import create_engine
from drover.storage.migrate import current_revision, head_revision, upgrade
from drover.storage.repository import Repository
from drover.storage.retry import run_transaction

__all__ = ["App", "SchemaNotReadyError", "UnknownBackendError", "handler_overrides"]


class SchemaNotReadyError(DroverError):
    """The database is not at drover's schema head."""


class UnknownBackendError(DroverError):
    """``backend.name`` names no registered backend."""


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
        self.observers: list[tuple[str, Observer]] = []
        self._plugin_manager: pluggy.PluginManager | None = None

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        """Built-in and installed plugins, honouring ``plugins.load`` and ``plugins.block``."""
        if self._plugin_manager is None:
            plugins = self.config.plugins
            pm = make_plugin_manager(include_builtins=True, block=plugins.block)
            load_entry_points(pm, plugins.load, plugins.block)
            self._plugin_manager = pm
        return self._plugin_manager

    @property
    def backend(self) -> AgentBackend:
        """The configured backend, built by its registered factory on first use."""
        if self._backend is None:
            registry = collect_backends(self.plugin_manager)
            name = self.config.backend.name
            if name not in registry.factories:
                raise UnknownBackendError(
                    f"backend.name = {name!r} ({self.loaded.source('backend.name')}): no such "
                    f"backend; registered: {sorted(registry.factories)}"
                )
            self._backend = registry.factories[name](self.config)
        return self._backend

    async def check_schema(self, *, auto_upgrade: bool = False) -> None:
        """Upgrade (``auto_upgrade``) or insist that the database is at head."""
        if auto_upgrade:
            # Another process (a CLI call) may hold the new file for a moment.
            await run_transaction(lambda: upgrade(self.engine))
            return
        revision = await current_revision(self.engine)
        if revision != head_revision():
            state = "empty (not upgraded)" if revision is None else f"at {revision}"
            raise SchemaNotReadyError(
                f"the database is {state}, drover needs {head_revision()}: "
                "run `drover db upgrade` first"
            )

    def load_handlers(self) -> Coordinator:
        """Validate the plugins' handlers, collect observers, build the coordinator."""
        context = RuntimeContext(self.repository, self.backend, self.clock)
        handlers, self.registered = collect_handlers(self.plugin_manager, context)
        self.observers = collect_observers(self.plugin_manager)
        self.coordinator = Coordinator(
            self.repository, handlers, options=handler_overrides(self.config), clock=self.clock
        )
        return self.coordinator

    async def close(self) -> None:
        """Dispose of the database engine."""
        await self.engine.dispose()
