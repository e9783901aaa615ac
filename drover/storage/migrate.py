"""Run drover's Alembic migrations, shipped inside the package, on an async engine.

Every command checks that the database is at the newest revision before it
reads: :func:`head_revision` and :func:`current_revision` answer that without
importing Alembic (about a tenth of a second a call), which only
:func:`upgrade` needs. They rely on the naming rule of ``migrations/versions``:
revision ``NNNN`` is the file ``NNNN_<what>.py`` and its ``down_revision`` is
the one before (tests/test_storage.py checks it against Alembic's own view).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import sqlalchemy as sa

from drover.storage.connect import WRITE_OPTION

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.ext.asyncio import AsyncEngine

T = TypeVar("T")

__all__ = [
    "alembic_config",
    "current_revision",
    "head_revision",
    "kinds_present",
    "schema_exists",
    "upgrade",
]


#: Alembic's table of the database's revision (in the engine's schema on PostgreSQL).
VERSION_TABLE = "alembic_version"

#: The database's revision: what Alembic's ``MigrationContext.get_current_revision`` reads.
ALEMBIC_VERSION = sa.text(f"SELECT version_num FROM {VERSION_TABLE}")

#: Every kind the entities table holds, one index seek per kind (ix_entities_queue leads
#: with the kind): a scan of the table would cost as much as it has rows.
KINDS_PRESENT = sa.text(
    "WITH RECURSIVE present(kind) AS ("
    " SELECT MIN(kind) FROM entities"
    " UNION ALL"
    " SELECT (SELECT MIN(kind) FROM entities WHERE kind > present.kind) FROM present"
    " WHERE present.kind IS NOT NULL"
    ") SELECT kind FROM present WHERE kind IS NOT NULL"
)

#: One row if PostgreSQL has the schema ``:name``.
SCHEMA_EXISTS = sa.text("SELECT 1 FROM pg_namespace WHERE nspname = :name")


def create_schema(name: str) -> sa.schema.CreateSchema:
    """``CREATE SCHEMA IF NOT EXISTS name`` (PostgreSQL), before the migrations run in it."""
    return sa.schema.CreateSchema(name, if_not_exists=True)


_MIGRATIONS = Path(__file__).parent / "migrations"
_REVISION_FILE = re.compile(r"^(\d{4})_\w+\.py$")


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """Return an Alembic config pointing at the packaged migrations."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest revision shipped with this version of drover (the highest ``NNNN_*.py``)."""
    numbers = [
        match.group(1)
        for path in (_MIGRATIONS / "versions").iterdir()
        if (match := _REVISION_FILE.match(path.name))
    ]
    return max(numbers)


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
        from alembic import command

        command.upgrade(alembic_config(sync_conn), revision)

    async with engine.execution_options(**{WRITE_OPTION: True}).begin() as conn:
        await conn.run_sync(_run)


async def _read(engine: AsyncEngine | sa.Engine, work: Callable[[sa.Connection], T]) -> T:
    # A SQLite file's synchronous engine (the command line's reads) is read in place:
    # one short statement, where a thread hop would cost more than it saves.
    if isinstance(engine, sa.Engine):
        with engine.connect() as sync_conn:
            return work(sync_conn)
    async with engine.connect() as conn:
        return await conn.run_sync(work)


def _revision(sync_conn: sa.Connection) -> str | None:
    if not sa.inspect(sync_conn).has_table(VERSION_TABLE):
        return None
    return sync_conn.execute(ALEMBIC_VERSION).scalar()


async def current_revision(engine: AsyncEngine | sa.Engine) -> str | None:
    """The revision the database is at, or ``None`` for an empty database."""
    return await _read(engine, _revision)


async def schema_exists(engine: AsyncEngine | sa.Engine, schema: str) -> bool:
    """Whether PostgreSQL has the schema ``schema`` (always true on SQLite)."""
    if engine.dialect.name != "postgresql":
        return True
    return await _read(
        engine, lambda conn: conn.execute(SCHEMA_EXISTS, {"name": schema}).first() is not None
    )


async def kinds_present(engine: AsyncEngine | sa.Engine) -> set[str]:
    """The kinds of the entities the database holds (which plugins a read needs)."""
    return await _read(engine, lambda conn: {kind for (kind,) in conn.execute(KINDS_PRESENT)})
