"""The statements of :mod:`drover.storage.migrate` outside the Alembic migrations themselves."""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["SCHEMA_EXISTS", "create_schema"]

#: One row if PostgreSQL has the schema ``:name``.
SCHEMA_EXISTS = sa.text("SELECT 1 FROM pg_namespace WHERE nspname = :name")


def create_schema(name: str) -> sa.schema.CreateSchema:
    """``CREATE SCHEMA IF NOT EXISTS name`` (PostgreSQL), before the migrations run in it."""
    return sa.schema.CreateSchema(name, if_not_exists=True)
