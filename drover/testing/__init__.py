"""Testing support for drover and for plugin authors."""

from drover.testing.databases import (
    TestDatabase,
    asyncpg_dsn,
    database_kinds,
    fresh_database,
    pg_schema,
    pg_skipped,
    pg_url,
)
from drover.testing.harness import CoordinatorHarness

__all__ = [
    "CoordinatorHarness",
    "TestDatabase",
    "asyncpg_dsn",
    "database_kinds",
    "fresh_database",
    "pg_schema",
    "pg_skipped",
    "pg_url",
]
