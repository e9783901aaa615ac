"""Package attributes imported on first use (PEP 562), so that importing a package is cheap.

The command line imports :mod:`drover` and the kind packages to list its
commands; none of that may pull in SQLAlchemy, Alembic or Starlette
(``drover --help`` must start in well under a second). A package lists where
each public name lives and gets its ``__getattr__`` from
:func:`lazy_attributes`; type checkers see the same names through an
``if TYPE_CHECKING:`` block of ordinary imports. :mod:`drover` lists its names
once, as re-exports (``from module import Name as Name``, in that block), which
:func:`lazy_reexports` reads for where each one lives and for ``__all__``.

A name that moved keeps working the same way, with a :class:`DeprecationWarning`
naming its replacement (:func:`moved_attributes`).
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
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


def reexports(path: str | Path) -> dict[str, tuple[str, str]]:
    """What the module at ``path`` re-exports: each name it imports as itself
    (``from module import Name as Name``), at the top or in its top-level
    ``if TYPE_CHECKING:`` block -> (module, name)."""
    import ast  # only here: reading the file is the first lazy attribute's cost alone

    tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=str(path))
    statements: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            statements.extend(node.body)
        else:
            statements.append(node)
    return {
        alias.name: (statement.module, alias.name)
        for statement in statements
        if isinstance(statement, ast.ImportFrom) and statement.module
        for alias in statement.names
        if alias.asname == alias.name
    }


def lazy_reexports(package: str, path: str) -> Callable[[str], Any]:
    """A package ``__getattr__`` for what it re-exports (:func:`reexports` of its file
    ``path``): each name of its ``if TYPE_CHECKING:`` block is imported on first use;
    ``__all__`` is every re-exported name, sorted.

    The file is read once, on the first lazy attribute; each value is then stored
    in the package, so the second access is an ordinary attribute read.
    """
    table: dict[str, tuple[str, str]] = {}

    def __getattr__(name: str) -> Any:
        if not table:
            table.update(reexports(path))
        value: Any
        if name == "__all__":
            value = sorted(table)
        elif name in table:
            module, attribute = table[name]
            value = getattr(importlib.import_module(module), attribute)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
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
