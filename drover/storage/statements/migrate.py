"""The statements of :mod:`drover.storage.migrate` outside the Alembic migrations themselves."""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["ALEMBIC_VERSION", "SCHEMA_EXISTS", "VERSION_TABLE", "create_schema"]

#: Alembic's table of the database's revision (in the engine's schema on PostgreSQL).
VERSION_TABLE = "alembic_version"

#: The database's revision: what Alembic's ``MigrationContext.get_current_revision`` reads.
ALEMBIC_VERSION = sa.text(f"SELECT version_num FROM {VERSION_TABLE}")

#: One row if PostgreSQL has the schema ``:name``.
SCHEMA_EXISTS = sa.text("SELECT 1 FROM pg_namespace WHERE nspname = :name")


def create_schema(name: str) -> sa.schema.CreateSchema:
    """``CREATE SCHEMA IF NOT EXISTS name`` (PostgreSQL), before the migrations run in it."""
    return sa.schema.CreateSchema(name, if_not_exists=True)
