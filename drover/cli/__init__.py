"""drover's command line.

``main`` (the ``drover`` group) is imported on first use: a kind package's
commands import :mod:`drover.cli.kit`, which must not build the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drover._lazy import lazy_attributes

if TYPE_CHECKING:
    from drover.cli.main import main

__all__ = ["main"]

__getattr__ = lazy_attributes(__name__, {"main": "drover.cli.main"})
