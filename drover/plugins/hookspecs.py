"""The hooks a drover plugin may implement. Each is a register-callback hook."""

from __future__ import annotations

from typing import TYPE_CHECKING

from drover.plugins.markers import hookspec

if TYPE_CHECKING:
    from drover.plugins.registry import HandlerRegistry

__all__ = ["drover_register_handlers"]


@hookspec
def drover_register_handlers(register: HandlerRegistry) -> None:
    """Register handler instances by calling ``register(handler, ...)``.

    ``register.context`` gives the runtime services (``repository``, ``backend``,
    ``clock``) for handlers that need them. Example::

        @hookimpl
        def drover_register_handlers(register):
            register(MyHandler(register.context.backend))
    """
