"""The strict converter every backend's ``[backend.settings]`` is structured with.

Numbers, booleans and strings are checked, not coerced (a TOML string "abc"
for a number is an error, not NaN); unknown keys are refused. A backend adds
hooks of its own (the slurm backend's shell-quoted lists) before registering
its settings class.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import cattrs
from cattrs.gen import make_dict_structure_fn

from drover.model.errors import DroverError

__all__ = ["settings_converter", "structure_settings"]

S = TypeVar("S")


def _number(value: Any, _type: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a number, got {value!r}")
    return float(value)


def _bool(value: Any, _type: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in {"true", "false"}:
        return value.lower() == "true"
    raise ValueError(f"expected true or false, got {value!r}")


def _string(value: Any, _type: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def settings_converter(
    settings_class: type, conv: cattrs.Converter | None = None
) -> cattrs.Converter:
    """A converter for ``settings_class`` with the shared scalar checks (``conv``: one the
    backend already gave hooks of its own)."""
    conv = conv or cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook(float, _number)
    conv.register_structure_hook(bool, _bool)
    conv.register_structure_hook(str, _string)
    conv.register_structure_hook(
        settings_class,
        make_dict_structure_fn(settings_class, conv, _cattrs_forbid_extra_keys=True),
    )
    return conv


def structure_settings(
    conv: cattrs.Converter, raw: Mapping[str, Any], settings_class: type[S], backend: str
) -> S:
    """Structure ``backend.settings`` with ``conv``; a wrong key or value is a
    :class:`DroverError` naming every problem (``backend``: the backend's name)."""
    try:
        return conv.structure(dict(raw), settings_class)
    except cattrs.BaseValidationError as error:
        problems = "; ".join(cattrs.transform_error(error, path="backend.settings"))
        raise DroverError(f"invalid {backend} backend settings: {problems}") from None
