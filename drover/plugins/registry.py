"""The ``register`` callable handed to ``drover_register_handlers``, and what it collects."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from drover.coordinator.interfaces import Handler, LifecycleHandler, SessionPromotionHandler

if TYPE_CHECKING:
    from drover.backends.base import AgentBackend
    from drover.coordinator.clock import Clock
    from drover.storage.repository import Repository

__all__ = ["HandlerRegistry", "RegisteredHandler", "RuntimeContext"]


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
