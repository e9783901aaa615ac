"""The ``register`` callable handed to ``drover_register_handlers``, and what it collects."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from drover.coordinator.handlers import Handler, LifecycleHandler, SessionPromotionHandler

if TYPE_CHECKING:
    from drover.backends.base import AgentBackend
    from drover.config import Config
    from drover.coordinator.observers import HistoryEvent
    from drover.model.clock import Clock
    from drover.storage.repository import Repository

#: ``factory(config) -> AgentBackend``.
BackendFactory = Callable[["Config"], "AgentBackend"]


@runtime_checkable
class Observer(Protocol):
    """Anything with ``async def on_history(records)``."""

    async def on_history(self, records: Sequence[HistoryEvent]) -> None:
        """Receive one committed tick's history records."""
        ...


__all__ = [
    "BackendFactory",
    "BackendRegistry",
    "HandlerRegistry",
    "Observer",
    "ObserverRegistry",
    "RegisteredHandler",
    "RuntimeContext",
]


@attrs.frozen
class RuntimeContext:
    """Services a handler may need: where kernels run, storage, and the clock."""

    repository: Repository
    backend: AgentBackend
    clock: Clock


@attrs.frozen
class RegisteredHandler:
    """A handler instance and the plugin that registered it."""

    handler: Handler
    plugin: str


class HandlerRegistry:
    """Callable passed as ``register``: ``register(handler, ...)`` records handlers."""

    def __init__(self, context: RuntimeContext) -> None:
        self.context = context
        self.registered: list[RegisteredHandler] = []
        self._current_plugin = "?"

    def for_plugin(self, plugin_name: str) -> HandlerRegistry:
        """Attribute the following registrations to ``plugin_name``."""
        self._current_plugin = plugin_name
        return self

    def __call__(self, *handlers: Any) -> None:
        """Register one or more handler instances."""
        for handler in handlers:
            if isinstance(handler, type):
                raise TypeError(
                    f"plugin {self._current_plugin!r} registered the class {handler.__name__}; "
                    "register an instance, e.g. register(MyHandler())"
                )
            if not isinstance(handler, LifecycleHandler | SessionPromotionHandler):
                raise TypeError(
                    f"plugin {self._current_plugin!r} registered {handler!r}, which is neither "
                    "a LifecycleHandler nor a SessionPromotionHandler"
                )
            self.registered.append(RegisteredHandler(handler, self._current_plugin))


class BackendRegistry:
    """Callable passed as ``register`` to ``drover_register_backends``."""

    def __init__(self) -> None:
        self.factories: dict[str, BackendFactory] = {}
        self.owners: dict[str, str] = {}
        self._current_plugin = "?"

    def for_plugin(self, plugin_name: str) -> BackendRegistry:
        """Attribute the following registrations to ``plugin_name``."""
        self._current_plugin = plugin_name
        return self

    def __call__(self, name: str, factory: BackendFactory) -> None:
        """Register ``factory`` under the backend ``name``."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"plugin {self._current_plugin!r}: a backend name must be a string")
        if not callable(factory):
            raise TypeError(
                f"plugin {self._current_plugin!r}: the factory of backend {name!r} is not callable"
            )
        if name in self.factories:
            raise ValueError(
                f"duplicate backend name {name!r}: registered by plugin {self.owners[name]!r} "
                f"and by plugin {self._current_plugin!r}"
            )
        self.factories[name] = factory
        self.owners[name] = self._current_plugin


class ObserverRegistry:
    """Callable passed as ``register`` to ``drover_register_observers``."""

    def __init__(self) -> None:
        self.observers: list[tuple[str, Observer]] = []
        self._current_plugin = "?"

    def for_plugin(self, plugin_name: str) -> ObserverRegistry:
        """Attribute the following registrations to ``plugin_name``."""
        self._current_plugin = plugin_name
        return self

    def __call__(self, *observers: Any) -> None:
        """Register observers: objects with ``async def on_history(records)``."""
        for observer in observers:
            if not isinstance(observer, Observer):
                raise TypeError(
                    f"plugin {self._current_plugin!r} registered {observer!r}, which has no "
                    "`async def on_history(records)`"
                )
            self.observers.append((self._current_plugin, observer))
