"""Shared fixtures: every database-backed test runs on SQLite and on PostgreSQL.

PostgreSQL comes from ``DROVER_TEST_PG_URL`` (default: the local server at
127.0.0.1:5432, database ``test``). A PostgreSQL test that cannot connect
FAILS; it never skips. Set ``DROVER_TEST_SKIP_PG=1`` to deselect the
PostgreSQL variants explicitly on a machine without a server, and
``DROVER_TEST_SKIP_BROWSER=1`` to deselect the headless-browser tests on a
machine without Debian's chromium.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from container_helpers import label_prefix_fixture, podman_fixture

from drover.storage.scratch import asyncpg_dsn
from drover.testing import CoordinatorHarness, databases

# The container backend's Podman: one service for the whole run, shared by every module.
__all__ = ["label_prefix_fixture", "podman_fixture"]

# One path for fresh databases: drover's own pytest plugin (drover.testing), which plugin
# authors use too. These names stay for the tests that import them from here.
DEFAULT_PG_URL = databases.DEFAULT_PG_URL
PG_URL = databases.pg_url()
SKIP_PG = databases.pg_skipped()

BACKENDS = databases.database_kinds()

# The browser tests need Debian's chromium; like the PostgreSQL variants they
# FAIL without it, unless explicitly deselected on a machine that lacks it.
collect_ignore = (
    ["test_web_browser.py"] if os.environ.get("DROVER_TEST_SKIP_BROWSER") == "1" else []
)

Database = databases.TestDatabase
_asyncpg_dsn = asyncpg_dsn


@pytest.fixture
def database(drover_database: Database) -> Database:
    """A fresh, empty database: a temporary SQLite file, or a new PostgreSQL schema
    (drover's ``drover_database`` fixture, parametrized over both)."""
    return drover_database


def pg_schema(prefix: str) -> AbstractAsyncContextManager[str]:
    """A new, empty PostgreSQL schema on ``PG_URL``, dropped (with its contents) afterwards."""
    return databases.pg_schema(prefix, PG_URL)


@pytest.fixture
async def pg(request: pytest.FixtureRequest) -> AsyncIterator[Database]:
    """A fresh PostgreSQL schema, for what exists only there (claims, fencing, news)."""
    async with pg_schema(request.module.__name__.removeprefix("test_")[:12]) as schema:
        yield Database("postgresql", PG_URL, schema)


HarnessFactory = Callable[..., CoordinatorHarness]


@pytest.fixture
def make_harness(database: Database) -> HarnessFactory:
    """Build a CoordinatorHarness on this test's database (use with ``async with``)."""

    def factory(**kwargs: Any) -> CoordinatorHarness:
        kwargs.setdefault("database_url", database.url)
        kwargs.setdefault("database_schema", database.schema)
        return CoordinatorHarness(**kwargs)

    return factory
