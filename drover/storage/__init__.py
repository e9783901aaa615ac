"""Storage: schema, migrations, engines and the repository (SQLAlchemy Core).

Its names are imported on first use: importing a submodule (``drover.storage.x``)
runs this file, and must not pull in Alembic for a module that does not need it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drover.storage.connect import create_engine
    from drover.storage.migrate import current_revision, head_revision, upgrade
    from drover.storage.repository import Repository

__all__ = [
    "Repository",
    "create_engine",
    "current_revision",
    "head_revision",
    "upgrade",
]

_MODULES = {
    "create_engine": "drover.storage.connect",
    "current_revision": "drover.storage.migrate",
    "head_revision": "drover.storage.migrate",
    "upgrade": "drover.storage.migrate",
    "Repository": "drover.storage.repository",
}


def __getattr__(name: str) -> Any:
    """Import a public name on first use (storage imports only model and storage)."""
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULES[name]), name)
    globals()[name] = value
    return value
