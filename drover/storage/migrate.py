"""Run drover's Alembic migrations, shipped inside the package, on an async engine."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import AsyncEngine

from drover.storage.connect import WRITE_OPTION
from drover.storage.statements.migrate import SCHEMA_EXISTS, create_schema

__all__ = ["alembic_config", "current_revision", "head_revision", "schema_exists", "upgrade"]

_MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """Return an Alembic config pointing at the packaged migrations."""
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest revision shipped with this version of drover."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


async def upgrade(
    engine: AsyncEngine, revision: str = "head", *, schema: str | None = None
) -> None:
    """Upgrade the database behind ``engine`` to ``revision`` (default: head).

    On PostgreSQL, ``schema`` (the engine's ``search_path``) is created first
    if it does not exist yet.
    """

    def _run(sync_conn: sa.Connection) -> None:
        if schema and sync_conn.dialect.name == "postgresql":
            sync_conn.execute(create_schema(schema))
        command.upgrade(alembic_config(sync_conn), revision)

    async with engine.execution_options(**{WRITE_OPTION: True}).begin() as conn:
        await conn.run_sync(_run)


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at, or ``None`` for an empty database."""

    def _read(sync_conn: sa.Connection) -> str | None:
        return MigrationContext.configure(sync_conn).get_current_revision()

    async with engine.connect() as conn:
        return await conn.run_sync(_read)


async def schema_exists(engine: AsyncEngine, schema: str) -> bool:
    """Whether PostgreSQL has the schema ``schema`` (always true on SQLite)."""
    if engine.dialect.name != "postgresql":
        return True
    async with engine.connect() as conn:
        return (await conn.execute(SCHEMA_EXISTS, {"name": schema})).first() is not None
