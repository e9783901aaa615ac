"""Package attributes imported on first use (PEP 562), so that importing a package is cheap.

The command line imports :mod:`drover` and the kind packages to list its
commands; none of that may pull in SQLAlchemy, Alembic or Starlette
(``drover --help`` must start in well under a second). A package lists where
each public name lives and gets its ``__getattr__`` from
:func:`lazy_attributes`; type checkers see the same names through an
``if TYPE_CHECKING:`` block of ordinary imports.

A name that moved keeps working the same way, with a :class:`DeprecationWarning`
naming its replacement (:func:`moved_attributes`).
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` importing each name of ``modules`` (name -> module) on first use.

    The value is stored in the package, so the second access is an ordinary
    attribute read.
    """

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


def moved_attributes(module: str, moved: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for names that moved: ``moved`` maps each to its replacement.

    The replacement is a dotted name (``"drover.make_plugin_manager"``), imported
    on use; every use warns (:class:`DeprecationWarning`) and names it.
    """

    def __getattr__(name: str) -> Any:
        replacement = moved.get(name)
        if replacement is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} is deprecated: use {replacement}", DeprecationWarning, stacklevel=2
        )
        where, _, attribute = replacement.rpartition(".")
        return getattr(importlib.import_module(where), attribute)

    return __getattr__
