"""Scratch PostgreSQL schemas: a new, empty schema for one test, dropped (with its contents)
afterwards. Tests of drover and of plugins use it to run on PostgreSQL side by side."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from sqlalchemy.engine import make_url

__all__ = ["asyncpg_dsn", "scratch_pg_schema"]


def asyncpg_dsn(url: str) -> str:
    """``url`` (a SQLAlchemy URL such as ``postgresql+asyncpg://…``) as a DSN asyncpg takes."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _execute(url: str, statement: str) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@asynccontextmanager
async def scratch_pg_schema(url: str, prefix: str) -> AsyncIterator[str]:
    """A new, empty schema ``<prefix>_<random>`` on the PostgreSQL at ``url``, dropped with
    its contents on exit. A server that cannot be reached raises (a test fails, never skips).

    Example::

        async with scratch_pg_schema("postgresql+asyncpg://postgres@localhost/test", "t") as s:
            engine = create_engine(url, schema=s)
    """
    schema = f"{prefix}_{uuid.uuid4().hex[:16]}"
    await _execute(url, f'CREATE SCHEMA "{schema}"')
    try:
        yield schema
    finally:
        await _execute(url, f'DROP SCHEMA "{schema}" CASCADE')
