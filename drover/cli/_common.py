"""Options and helpers shared by CLI commands."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
from sqlalchemy import exc

from drover.coordinator.errors import DroverError
from drover.storage.engine import DEFAULT_DATABASE_URL

__all__ = ["database_option", "run_async"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def database_option(func: F) -> F:
    """Add ``--database`` (env ``DROVER_DATABASE_URL``) to a command."""
    return click.option(
        "--database",
        "database_url",
        envvar="DROVER_DATABASE_URL",
        default=DEFAULT_DATABASE_URL,
        show_default=True,
        help="SQLAlchemy async URL of the database (env DROVER_DATABASE_URL).",
    )(func)


def run_async(work: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine; turn drover and database errors into one clear line and exit 1."""
    try:
        return asyncio.run(work())  # type: ignore[arg-type]
    except DroverError as error:
        raise click.ClickException(str(error)) from None
    except (exc.OperationalError, exc.InterfaceError, OSError) as error:
        detail = str(getattr(error, "orig", None) or error).splitlines()[0]
        raise click.ClickException(f"cannot reach the database: {detail}") from None
