"""Storage: schema, migrations, engines and the repository (SQLAlchemy Core)."""

from drover.storage.connect import DEFAULT_DATABASE_URL, create_engine
from drover.storage.migrate import current_revision, head_revision, upgrade
from drover.storage.repository import Repository

__all__ = [
    "DEFAULT_DATABASE_URL",
    "Repository",
    "create_engine",
    "current_revision",
    "head_revision",
    "upgrade",
]
