"""drover's command line.

``main`` (the ``drover`` group) is imported on first use: a kind package's
commands import :mod:`drover.cli.kit`, which must not build the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drover._lazy import lazy_reexports

if TYPE_CHECKING:
    from drover.cli.group import main as main

if not TYPE_CHECKING:  # as in drover/__init__.py: type checkers see the import above
    __getattr__ = lazy_reexports(__name__, __file__)
