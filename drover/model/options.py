"""Resolving a handler's options field by field: defaults < configuration < session spec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from drover.model.errors import InvalidHandlerError
from drover.model.values import HandlerOptions, Target

__all__ = [
    "FETCH_ORDERS",
    "OptionOverrides",
    "merge_options",
    "overrides_from",
    "session_options",
    "validate_options",
]

#: The values of ``HandlerOptions.order``.
FETCH_ORDERS = ("priority", "oldest-seen")

#: Field name -> value; only the fields a source actually sets.
OptionOverrides = Mapping[str, Any]

_FIELDS = {f.name for f in attrs.fields(HandlerOptions)}
_CLASS_DEFAULTS = HandlerOptions()


def overrides_from(value: HandlerOptions | Mapping[str, Any] | None) -> dict[str, Any]:
    """Turn a configuration entry into the fields it sets.

    A mapping sets exactly its keys. A :class:`HandlerOptions` instance sets the
    fields that differ from ``HandlerOptions()``'s defaults, so
    ``HandlerOptions(max_retries=2)`` overrides ``max_retries`` only and leaves a
    handler's own default timeout in place.
    """
    if value is None:
        return {}
    if isinstance(value, HandlerOptions):
        return {
            name: getattr(value, name)
            for name in _FIELDS
            if getattr(value, name) != getattr(_CLASS_DEFAULTS, name)
        }
    unknown = set(value) - _FIELDS
    if unknown:
        raise InvalidHandlerError(
            f"unknown handler option(s) {sorted(unknown)}; known options are {sorted(_FIELDS)}"
        )
    return dict(value)


def validate_options(options: HandlerOptions, *, where: str) -> HandlerOptions:
    """Raise InvalidHandlerError naming ``where`` if an option value is out of range."""
    mr, timeout, batch = options.max_retries, options.timeout, options.batch_size
    if mr is not None and (isinstance(mr, bool) or not isinstance(mr, int) or mr < 0):
        raise InvalidHandlerError(
            f"{where}: max_retries must be an integer >= 0 or None, got {mr!r}"
        )
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise InvalidHandlerError(f"{where}: timeout must be seconds > 0 or None, got {timeout!r}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InvalidHandlerError(f"{where}: batch_size must be an integer >= 1, got {batch!r}")
    if options.order not in FETCH_ORDERS:
        raise InvalidHandlerError(
            f"{where}: order must be one of {list(FETCH_ORDERS)}, got {options.order!r}"
        )
    return options


def merge_options(base: HandlerOptions, *layers: Mapping[str, Any]) -> HandlerOptions:
    """Apply override layers to ``base``, later layers winning, field by field."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(layer)
    return attrs.evolve(base, **merged) if merged else base


def session_options(
    handler_options: HandlerOptions, session: Target, handler_name: str
) -> HandlerOptions:
    """The options for one session: ``spec["options"][handler_name]`` overrides the handler's."""
    per_session = session.spec.get("options")
    if not per_session:
        return handler_options
    layer = per_session.get(handler_name)
    if not layer:
        return handler_options
    return merge_options(handler_options, {k: v for k, v in layer.items() if k in _FIELDS})
