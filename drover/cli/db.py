"""``drover db``: schema migrations with Alembic."""

from __future__ import annotations

import click

from drover.cli._common import database_option, run_async
from drover.storage.engine import create_engine
from drover.storage.migrate import current_revision, head_revision, upgrade

__all__ = ["db"]


@click.group()
def db() -> None:
    """Manage the database schema (Alembic migrations shipped with drover).

    Example: drover db upgrade --database postgresql+asyncpg://user@host/drover
    """


@db.command("upgrade")
@database_option
def upgrade_command(database_url: str) -> None:
    """Upgrade the database to the newest schema. Safe to run repeatedly.

    Example: drover db upgrade --database sqlite+aiosqlite:///./drover.db
    """

    async def work() -> tuple[str | None, str]:
        engine = create_engine(database_url)
        try:
            before = await current_revision(engine)
            await upgrade(engine)
            return before, head_revision()
        finally:
            await engine.dispose()

    before, head = run_async(work)
    if before == head:
        click.echo(f"already at {head} (head)")
    else:
        click.echo(f"upgraded {before or 'empty database'} -> {head} (head)")


@db.command("current")
@database_option
def current_command(database_url: str) -> None:
    """Print the schema revision of the database, and whether it is the newest.

    Example: drover db current --database sqlite+aiosqlite:///./drover.db
    """

    async def work() -> str | None:
        engine = create_engine(database_url)
        try:
            return await current_revision(engine)
        finally:
            await engine.dispose()

    revision = run_async(work)
    head = head_revision()
    if revision is None:
        click.echo(f"empty database (not upgraded; head is {head}): run `drover db upgrade`")
    elif revision == head:
        click.echo(f"{revision} (head)")
    else:
        click.echo(f"{revision} (head is {head}: run `drover db upgrade`)")
