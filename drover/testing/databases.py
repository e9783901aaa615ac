"""Fresh databases for tests: a temporary SQLite file, or a new PostgreSQL schema.

A plugin's tests run on both through the ``drover_database`` fixture of drover's pytest
plugin; this module holds the value it yields and the helpers behind it, for tests that
need a database outside that fixture.

PostgreSQL comes from ``DROVER_TEST_PG_URL`` (default: :data:`DEFAULT_PG_URL`). A
PostgreSQL that cannot be reached fails the test; it never skips. ``DROVER_TEST_SKIP_PG=1``
deselects the PostgreSQL variants explicitly, on a machine without a server.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import ClassVar

import attrs

from drover.storage.scratch import asyncpg_dsn, scratch_pg_schema

__all__ = [
    "DEFAULT_PG_URL",
    "TestDatabase",
    "asyncpg_dsn",
    "database_kinds",
    "fresh_database",
    "pg_schema",
    "pg_skipped",
    "pg_url",
]

#: The PostgreSQL tests use when ``DROVER_TEST_PG_URL`` is unset.
DEFAULT_PG_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"


def pg_url() -> str:
    """The PostgreSQL tests run on: ``DROVER_TEST_PG_URL``, else :data:`DEFAULT_PG_URL`."""
    return os.environ.get("DROVER_TEST_PG_URL") or DEFAULT_PG_URL


def pg_skipped() -> bool:
    """Whether ``DROVER_TEST_SKIP_PG=1`` deselects the PostgreSQL variants."""
    return os.environ.get("DROVER_TEST_SKIP_PG") == "1"


def database_kinds() -> list[str]:
    """The kinds of database tests run on: ``["sqlite", "postgresql"]``, or only SQLite
    when :func:`pg_skipped`."""
    return ["sqlite"] + ([] if pg_skipped() else ["postgresql"])


@attrs.frozen
class TestDatabase:
    """Where one test's data lives: ``kind`` is ``"sqlite"`` or ``"postgresql"``; ``url``
    the database URL; ``schema`` the PostgreSQL schema (``None`` on SQLite).

    Give ``url`` and ``schema`` to ``CoordinatorHarness(database_url=…, database_schema=…)``.
    """

    # Not a test class, though its name starts with "Test".
    __test__: ClassVar[bool] = False

    kind: str
    url: str
    schema: str | None = None


@asynccontextmanager
async def pg_schema(prefix: str = "drover", url: str | None = None) -> AsyncIterator[str]:
    """A new, empty schema on ``url`` (default :func:`pg_url`), dropped with its contents
    on exit."""
    async with scratch_pg_schema(url or pg_url(), prefix) as schema:
        yield schema


@asynccontextmanager
async def fresh_database(
    kind: str, directory: Path, *, prefix: str = "drover"
) -> AsyncIterator[TestDatabase]:
    """A fresh, empty database of ``kind``: the file ``drover.db`` in ``directory`` (which
    must not hold one yet), or a new PostgreSQL schema named ``<prefix>_<random>``.

    Example::

        async with fresh_database("postgresql", tmp_path) as db:
            async with CoordinatorHarness(database_url=db.url, database_schema=db.schema) as h:
                ...
    """
    if kind == "sqlite":
        yield TestDatabase("sqlite", f"sqlite+aiosqlite:///{directory}/drover.db")
    elif kind == "postgresql":
        url = pg_url()
        async with pg_schema(prefix, url) as schema:
            yield TestDatabase("postgresql", url, schema)
    else:
        raise ValueError(f"unknown database kind {kind!r}; known: sqlite, postgresql")
