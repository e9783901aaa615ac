"""``drover db``: schema migrations with Alembic."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from drover.cli.kit import database_option, with_app

if TYPE_CHECKING:
    from drover.app import App

__all__ = ["db"]


@click.group()
def db() -> None:
    """Manage the database schema (Alembic migrations shipped with drover).

    \b
    Example: drover db upgrade --database postgresql+asyncpg://user@host/drover
    """


@db.command("upgrade")
@database_option
@click.pass_context
def upgrade_command(ctx: click.Context, database_url: str | None) -> None:
    """Upgrade the database to the newest schema. Safe to run repeatedly.

    \b
    Example: drover db upgrade --database sqlite+aiosqlite:///./drover.db
    """
    from drover.storage.migrate import current_revision, head_revision

    async def work(app: App) -> tuple[str | None, str]:
        before = await current_revision(app.engine)
        await app.upgrade()
        return before, head_revision()

    before, head = with_app(ctx, work, database_url=database_url, check_schema=False)
    if before == head:
        click.echo(f"already at {head} (head)")
    else:
        click.echo(f"upgraded {before or 'empty database'} -> {head} (head)")


@db.command("current")
@database_option
@click.pass_context
def current_command(ctx: click.Context, database_url: str | None) -> None:
    """Print the schema revision of the database, and whether it is the newest.

    \b
    Example: drover db current --database sqlite+aiosqlite:///./drover.db
    """
    from drover.storage.migrate import current_revision, head_revision

    async def work(app: App) -> str | None:
        return await current_revision(app.engine)

    revision = with_app(ctx, work, database_url=database_url, check_schema=False)
    head = head_revision()
    if revision is None:
        click.echo(f"empty database (not upgraded; head is {head}): run `drover db upgrade`")
    elif revision == head:
        click.echo(f"{revision} (head)")
    else:
        click.echo(f"{revision} (head is {head}: run `drover db upgrade`)")
