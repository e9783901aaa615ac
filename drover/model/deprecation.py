"""Names that moved: they keep working for a minor version, with a ``DeprecationWarning``.

The public API is a contract with plugin authors (``docs/plugins/upgrading.md``):
a public name that moves keeps its old spelling, which warns and names the
new one. A module lists its moved names and gets its ``__getattr__`` from
:func:`moved_names`; the new home is imported only when an old spelling is
used, so this leaf package still imports nothing else of drover.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["moved_names", "warn_kindless", "warn_moved"]


def warn_moved(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated and ``new`` replaces it."""
    warnings.warn(
        f"{old} is deprecated: use {new} (the old spelling goes in a later minor version)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def warn_kindless(value: object) -> None:
    """Warn that ``value`` (a record drover builds) was built without ``kind=``.

    Its kind used to default to the session kind's; the engine names no kind
    now, so a kind-less record's ``kind`` is ``""`` until ``kind=`` is required.
    """
    warnings.warn(
        f"{type(value).__name__}() without kind= is deprecated: pass the entity's kind "
        "(it defaulted to 'session'; it is '' now, and required in a later minor version)",
        DeprecationWarning,
        stacklevel=4,
    )


def moved_names(module: str, moved: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the names of ``module`` that moved (name -> new module).

    Each use of an old spelling warns, naming the new one, and returns the
    object from its new module (the same object: ``isinstance`` keeps working).
    """

    def __getattr__(name: str) -> Any:
        target = moved.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warn_moved(f"{module}.{name}", f"{target}.{name}")
        return getattr(importlib.import_module(target), name)

    return __getattr__
