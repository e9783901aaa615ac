"""The command kit: what every ``drover`` command uses, drover's own and a kind package's.

The configuration (:class:`CliState`), the app a command works on
(:func:`with_app`, typed by :class:`CommandApp`: its read-only ``queries``, and
``repository`` and ``submit`` for writes), common options, errors and output.
It imports nothing of how drover is assembled (:mod:`drover.app`) nor any other
command module: the kind packages' commands (``drover_register_commands``) use
it, and every plugin manager loads those packages.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import click

from drover.model.checks import MAX_COUNT

if TYPE_CHECKING:
    from drover.backends.base import AgentBackend
    from drover.config import LoadedConfig
    from drover.kinds.sessions.store import Queries, Repository
    from drover.model.kinds import Kinds
    from drover.model.values import NewEntity

# The heavy modules (the app, SQLAlchemy, rich) are imported where they are
# used: every command module imports this one, and ``drover --help`` must stay
# cheap (bench/cli_startup.py).

__all__ = [
    "CliState",
    "CommandApp",
    "count_range",
    "database_option",
    "emit_json",
    "json_option",
    "parse_env",
    "print_table",
    "run_async",
    "with_app",
]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class CommandApp(Protocol):
    """What a command may use of the app it works on (:class:`drover.app.App` is one).

    Reads go through ``queries``, which cannot write; ``repository``,
    ``submit`` and ``create`` write.
    """

    @property
    def kinds(self) -> Kinds:
        """The registered entity kinds (reading them loads the plugins)."""

    @property
    def queries(self) -> Queries:
        """Read-only queries on the database."""

    @property
    def repository(self) -> Repository:
        """The write store: creation, spec changes, termination requests."""

    async def read_kinds(self) -> Kinds:
        """The kinds a read needs, loading installed plugins only if the database needs them."""

    async def submit(self, requests: Sequence[Mapping[str, Any]]) -> list[str]:
        """Create sessions as ``drover submit`` does, every check made first; their ids."""

    async def create(self, news: Sequence[NewEntity]) -> list[str]:
        """Create entities of any kind, every check made first (``drover deploy``); their ids."""

    @property
    def backend(self) -> AgentBackend:
        """The configured backend, built but not started (what a request is checked against)."""

    async def check_schema(self) -> None:
        """Raise unless the database is at drover's schema head."""

    async def close(self) -> None:
        """Release the database and the backend."""


#: The app a command works on, as drover's own commands name it (their ``App``).
A = TypeVar("A", bound=CommandApp)


class CliState:
    """Group-level options, resolved into a configuration on first use.

    ``open_app(loaded, reading=…)`` builds the app a command works on from the
    configuration (``reading``: the command only reads): the ``drover`` group
    passes one building :class:`drover.app.App`.
    """

    def __init__(
        self,
        config_path: str | None,
        flags: dict[str, Any],
        open_app: Callable[..., CommandApp],
    ) -> None:
        self.config_path = config_path
        self.flags = flags
        self.open_app = open_app
        self._loaded: LoadedConfig | None = None

    @classmethod
    def of(cls, ctx: click.Context) -> CliState:
        """The state of the ``drover`` group ``ctx`` runs under."""
        state = ctx.find_object(cls)
        if state is None:
            raise RuntimeError("a drover command runs under the drover group")
        return state

    def use(self, *, config_path: str | None = None, database_url: str | None = None) -> None:
        """The group's ``--config`` / ``--database`` given after a command's name instead."""
        if config_path is not None:
            self.config_path = config_path
        if database_url is not None:
            self.flags = {**self.flags, "database_url": database_url}
        self._loaded = None

    def loaded(self, **more_flags: Any) -> LoadedConfig:
        """The effective configuration (flags > environment > file > defaults)."""
        from drover.config import ConfigError, load_config

        if self._loaded is None or more_flags:
            try:
                self._loaded = load_config(self.config_path, flags={**self.flags, **more_flags})
            except ConfigError as error:
                raise click.ClickException(str(error)) from None
        return self._loaded


def count_range(low: int) -> click.IntRange:
    """A count flag's type: a whole number from ``low`` to MAX_COUNT (what the database holds)."""
    return click.IntRange(low, MAX_COUNT)


def database_option(func: F) -> F:
    """Add ``--database`` (env ``DROVER_DATABASE_URL``) to a command."""
    return click.option(
        "--database",
        "database_url",
        default=None,
        help="SQLAlchemy async URL of the database "
        "[env DROVER_DATABASE_URL; default sqlite+aiosqlite:///./drover.db].",
    )(func)


def parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    """The ``--env NAME=VALUE`` flags as a mapping; a pair without a name or ``=`` is refused."""
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint="--env")
        env[name] = value
    return env


def json_option(func: F) -> F:
    """Add ``--json`` to a listing command."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON (stable field names).")(
        func
    )


def run_async(work: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine; turn drover and database errors into one clear line and exit 1."""
    from drover.model.errors import DroverError
    from drover.storage.connect import DATABASE_ERRORS, database_error_line

    try:
        return asyncio.run(work())  # type: ignore[arg-type]
    except DroverError as error:
        raise click.ClickException(str(error)) from None
    except DATABASE_ERRORS as error:
        raise click.ClickException(database_error_line(error)) from None


def with_app(
    ctx: click.Context,
    work: Callable[[A], Awaitable[T]],
    *,
    database_url: str | None = None,
    check_schema: bool = True,
    reading: bool = False,
    plugins: bool = False,
) -> T:
    """Build the app from the configuration, run ``work`` with it, and close it.

    ``work`` takes a :class:`CommandApp` (a kind package's commands), or drover's
    own ``App`` (drover's commands): the app :attr:`CliState.open_app` builds.
    ``reading``: ``work`` only reads, through ``queries`` or ``repository``'s reads,
    and loads no handler; the installed plugins are loaded only if the database
    holds entities of their kinds (:meth:`CommandApp.read_kinds`), so that a read
    costs little more than the interpreter and SQLAlchemy (bench/cli_startup.py).
    ``plugins``: every installed plugin is loaded all the same (``reading`` work that
    needs the handlers, as ``drover why`` does).
    """
    state = CliState.of(ctx)
    loaded = state.loaded(database_url=database_url) if database_url else state.loaded()

    async def runner() -> T:
        # The group's open_app builds drover's App, the one type a command's work names
        # besides the protocol.
        app = cast(A, state.open_app(loaded, reading=reading))
        try:
            if not reading or plugins:
                _ = app.kinds  # a broken plugin is the error, before the schema's
            if check_schema:
                await app.check_schema()
            if reading and not plugins:
                await app.read_kinds()
            return await work(app)
        finally:
            await app.close()

    return run_async(runner)


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON."""
    click.echo(json.dumps(data, indent=2, default=str))


def print_table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None
) -> None:
    """A rich table on a terminal; tab-separated lines (header first) otherwise."""
    rows = [["" if v is None else str(v) for v in row] for row in rows]
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(*columns, title=title)
        for row in rows:
            table.add_row(*row)
        Console().print(table)
        return
    if title:
        click.echo(f"# {title}")
    click.echo("\t".join(columns))
    for row in rows:
        click.echo("\t".join(row))
