"""The strict converter every backend's ``[backend.settings]`` is structured with, and
the bounds its values are checked against.

Numbers, booleans and strings are checked, not coerced (a TOML string "abc"
for a number is an error, not NaN); unknown keys are refused. A backend adds
hooks of its own (the slurm backend's shell-quoted lists) before registering
its settings class.

Values of the right type are then checked for sense (:func:`seconds`,
:func:`bounded`, :func:`refuse`): every duration a finite number of seconds
within bounds (``kill_grace = nan`` would never kill a container that ignores
SIGTERM, ``poll_interval = 1e-300`` spins a core, ``api_timeout = -1`` fails
every call), every name and path bounded in length and free of control
characters. The daemon then does not start, with one line naming each key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import cattrs
from cattrs.gen import make_dict_structure_fn

from drover.model.errors import DroverError

__all__ = [
    "DAY",
    "HOUR",
    "MIN_POLL",
    "bounded",
    "refuse",
    "seconds",
    "settings_converter",
    "structure_settings",
]

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


#: Seconds in an hour and in a day: the upper bounds of intervals and of grace periods.
HOUR = 3600.0
DAY = 86400.0
#: The shortest poll of an engine or a scheduler: 20 a second.
MIN_POLL = 0.05
#: Control characters, never part of a name or a path in a setting.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def seconds(key: str, value: float | None, low: float, high: float) -> str | None:
    """Why ``backend.settings.<key> = value`` is not a finite number of seconds from ``low``
    to ``high`` (``None``: unset, or fine)."""
    if value is None or (math.isfinite(value) and low <= value <= high):
        return None
    return (
        f"backend.settings.{key} = {value!r}: must be a finite number of seconds from "
        f"{low:g} to {high:g}"
    )


def bounded(
    key: str, value: str | None, most: int, *, pattern: str | None = None, meaning: str = ""
) -> str | None:
    """Why the name or path ``backend.settings.<key> = value`` is not acceptable: longer
    than ``most`` characters, holding a control character, or (``pattern``) not matching it
    whole, which ``meaning`` then describes (``None``: unset, or fine)."""
    if value is None:
        return None
    shown = repr(value) if len(value) <= 40 else f"{value[:40]!r}… ({len(value)} characters)"
    if len(value) > most:
        return f"backend.settings.{key} = {shown}: at most {most} characters"
    if _CONTROL.search(value):
        return f"backend.settings.{key} = {shown}: holds a control character"
    if pattern is not None and not re.fullmatch(pattern, value):
        return f"backend.settings.{key} = {shown}: {meaning or f'must match {pattern}'}"
    return None


def refuse(backend: str, problems: Iterable[str | None]) -> None:
    """Raise :class:`DroverError` naming every problem found (``None``: none), in one line."""
    found = [p for p in problems if p]
    if found:
        raise DroverError(f"invalid {backend} backend settings: {'; '.join(found)}")
