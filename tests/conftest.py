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
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import attrs
import pytest
from container_helpers import label_prefix_fixture, podman_fixture
from sqlalchemy.engine import make_url

from drover.testing import CoordinatorHarness

# The container backend's Podman: one service for the whole run, shared by every module.
__all__ = ["label_prefix_fixture", "podman_fixture"]

DEFAULT_PG_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
PG_URL = os.environ.get("DROVER_TEST_PG_URL") or DEFAULT_PG_URL
SKIP_PG = os.environ.get("DROVER_TEST_SKIP_PG") == "1"

BACKENDS = ["sqlite"] + ([] if SKIP_PG else ["postgresql"])

# The browser tests need Debian's chromium; like the PostgreSQL variants they
# FAIL without it, unless explicitly deselected on a machine that lacks it.
collect_ignore = (
    ["test_web_browser.py"] if os.environ.get("DROVER_TEST_SKIP_BROWSER") == "1" else []
)


@attrs.frozen
class Database:
    """Where one test's data lives."""

    kind: str
    url: str | None
    schema: str | None = None


def _asyncpg_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture(params=BACKENDS)
async def database(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[Database]:
    """A fresh, empty database: a temporary SQLite file, or a new PostgreSQL schema."""
    if request.param == "sqlite":
        yield Database("sqlite", f"sqlite+aiosqlite:///{tmp_path}/drover.db")
        return
    async with pg_schema("t") as schema:
        yield Database("postgresql", PG_URL, schema)


@asynccontextmanager
async def pg_schema(prefix: str) -> AsyncIterator[str]:
    """A new, empty PostgreSQL schema on ``PG_URL``, dropped (with its contents) afterwards."""
    schema = f"{prefix}_{uuid.uuid4().hex[:16]}"
    conn = await asyncpg.connect(_asyncpg_dsn(PG_URL))
    try:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
    finally:
        await conn.close()
    try:
        yield schema
    finally:
        conn = await asyncpg.connect(_asyncpg_dsn(PG_URL))
        try:
            await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        finally:
            await conn.close()


HarnessFactory = Callable[..., CoordinatorHarness]


@pytest.fixture
def make_harness(database: Database) -> HarnessFactory:
    """Build a CoordinatorHarness on this test's database (use with ``async with``)."""

    def factory(**kwargs: Any) -> CoordinatorHarness:
        kwargs.setdefault("database_url", database.url)
        kwargs.setdefault("database_schema", database.schema)
        return CoordinatorHarness(**kwargs)

    return factory
