"""The pluggy markers for the project name ``drover``."""

from __future__ import annotations

import pluggy

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "drover"
hookspec = pluggy.HookspecMarker(PROJECT)
#: Decorate a plugin's hook implementations with this.
hookimpl = pluggy.HookimplMarker(PROJECT)
