"""Engine creation: SQLite pragmas, BEGIN IMMEDIATE for writes, PostgreSQL search_path.

drover's engines are asyncio engines (:func:`create_engine`), except where a
SQLite file is read or written whole in a thread on a synchronous engine
(:func:`sqlite_file_engine`): the daemon's transactions, and the command
line's reads, which open only that one. ``sqlalchemy.ext.asyncio`` imports
SQLAlchemy's ORM (about a tenth of a second), so it is imported only when an
asyncio engine is made.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.engine import URL, make_url

from drover.model.errors import DroverError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "DATABASE_ERRORS",
    "WRITE_OPTION",
    "DatabaseUrlError",
    "Engine",
    "SyncEngine",
    "async_database_url",
    "create_engine",
    "database_error_line",
    "describe_database_error",
    "display_url",
    "is_sqlite",
    "sqlite_file_engine",
    "threaded_sqlite_engine",
]

#: Execution option that makes the SQLite ``begin`` event emit ``BEGIN IMMEDIATE``.
WRITE_OPTION = "drover_write"

#: Seconds a pooled PostgreSQL connection may sit idle and still be handed out unpinged.
PING_AFTER_IDLE = 1.0
_RETURNED_AT = "drover_returned_at"

_SQLITE_PRAGMAS = (
    # First, so that switching a new file to WAL (which needs an exclusive
    # lock) waits for other connections instead of failing at once.
    "PRAGMA busy_timeout=30000",
    "PRAGMA journal_mode=WAL",
    # Debian's build defaults WAL to synchronous=FULL; NORMAL is durable across
    # application crashes and only risks the last commits on power loss.
    "PRAGMA synchronous=NORMAL",
    "PRAGMA cache_size=-131072",
    "PRAGMA foreign_keys=ON",
)


#: The asyncio driver drover uses for each database it supports.
ASYNC_DRIVERS = {"sqlite": "aiosqlite", "postgresql": "asyncpg"}
# Spellings of a backend name SQLAlchemy itself no longer takes.
_BACKEND_ALIASES = {"postgres": "postgresql", "pgsql": "postgresql", "sqlite3": "sqlite"}
_EXAMPLES = "sqlite+aiosqlite:///./drover.db or postgresql+asyncpg://user@host/dbname"


class DatabaseUrlError(DroverError):
    """``database_url`` is not a URL drover can use; the message says what to write."""


def async_database_url(url: str | URL) -> URL:
    """``url`` with drover's asyncio driver: a plain ``postgresql://`` or ``sqlite:///`` URL
    gets ``asyncpg`` or ``aiosqlite``; any other driver is a :class:`DatabaseUrlError`
    that gives the URL to write instead.
    """
    try:
        parsed = make_url(url)
    except (exc.ArgumentError, ValueError):
        raise DatabaseUrlError(
            f"database_url {str(url)!r} is not a database URL; write {_EXAMPLES}"
        ) from None
    name, plus, driver = parsed.drivername.partition("+")
    backend = _BACKEND_ALIASES.get(name, name)
    if backend not in ASYNC_DRIVERS:
        raise DatabaseUrlError(
            f"database_url {parsed.render_as_string()!r}: drover keeps its data in SQLite or "
            f"PostgreSQL, not {name}; write {_EXAMPLES}"
        )
    wanted = ASYNC_DRIVERS[backend]
    fixed = parsed.set(drivername=f"{backend}+{wanted}")
    if plus and driver != wanted:
        raise DatabaseUrlError(
            f"database_url {parsed.render_as_string()!r} names the driver {driver!r}, which "
            f"is not an asyncio driver; write {fixed.render_as_string()!r}"
        )
    return fixed


def describe_database_error(error: BaseException) -> str | None:
    """One line saying what is wrong with the database behind a driver error, if known.

    PostgreSQL's answers are told apart by SQLSTATE: a database, role or
    schema that does not exist, or a password that is refused.
    """
    orig = getattr(error, "orig", None) or error
    cause = getattr(orig, "__cause__", None)
    state = getattr(orig, "sqlstate", None) or getattr(cause, "sqlstate", None)
    detail = str(orig).splitlines()[0] if str(orig) else type(orig).__name__
    quoted = re.search(r'"([^"]+)"', detail)
    name = quoted.group(1) if quoted else "NAME"
    if state == "3D000":
        return f"PostgreSQL says: {detail}; create it (createdb {name}) or fix database_url"
    if state == "28000" and "role" in detail:
        return (
            f"PostgreSQL says: {detail}; create it (createuser {name}) or fix the user "
            "in database_url"
        )
    if state in ("28000", "28P01"):
        return f"PostgreSQL refuses the login: {detail}; fix the user or password in database_url"
    if state == "3F000":
        return f"PostgreSQL says: {detail}; `drover db upgrade` creates the schema"
    return None


#: What a database call may raise that is the database's doing, not drover's.
DATABASE_ERRORS: tuple[type[BaseException], ...] = (exc.DBAPIError, OSError)


def __getattr__(name: str) -> Any:
    # ``Engine``, the type of drover's engines (so that code outside storage needs no
    # SQLAlchemy), is AsyncEngine: imported when asked for, not by every read.
    if name == "Engine":
        from sqlalchemy.ext.asyncio import AsyncEngine

        return AsyncEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    Engine = AsyncEngine

#: The type of a SQLite file's synchronous engine (:func:`sqlite_file_engine`).
SyncEngine = sa.Engine


def database_error_line(error: BaseException) -> str:
    """One line for an error of :data:`DATABASE_ERRORS`: what is wrong, and what to do."""
    known = describe_database_error(error)
    if known:
        return known
    detail = str(getattr(error, "orig", None) or error).splitlines()[0]
    if "no such table" in detail or "does not exist" in detail:
        return f"the database is not upgraded ({detail}): run `drover db upgrade` first"
    if isinstance(error, exc.OperationalError | exc.InterfaceError | OSError):
        return f"cannot reach the database: {detail}"
    return f"the database refused: {detail}"


def display_url(engine: AsyncEngine | sa.Engine) -> str:
    """The engine's URL as a log line may show it: the password hidden."""
    return engine.url.render_as_string(hide_password=True)


def is_sqlite(engine: AsyncEngine | sa.Engine) -> bool:
    """Tell whether ``engine`` talks to SQLite."""
    return engine.dialect.name == "sqlite"


def create_engine(url: str, *, schema: str | None = None, echo: bool = False) -> AsyncEngine:
    """Create the async engine drover uses for ``url`` (see :func:`async_database_url`).

    On SQLite this sets WAL and the other pragmas on every connection and makes
    write transactions ``BEGIN IMMEDIATE`` (so writers queue on the busy timeout
    instead of failing on lock upgrade). On PostgreSQL, ``schema`` sets the
    connection's ``search_path``.
    """
    from sqlalchemy.ext.asyncio import create_async_engine

    parsed = async_database_url(url)
    kwargs: dict[str, Any] = {"echo": echo}
    if parsed.get_backend_name() == "sqlite":
        kwargs["connect_args"] = {"timeout": 30}
    elif parsed.get_backend_name() == "postgresql":
        # A daemon runs a few hundred distinct statements (every handler's fetch, apply
        # and promotion shapes): past SQLAlchemy's default of 100 per connection, the
        # least recently used were prepared again, one more round trip each time.
        connect_args: dict[str, Any] = {"prepared_statement_cache_size": 1000}
        if schema:
            connect_args["server_settings"] = {"search_path": schema}
        kwargs["connect_args"] = connect_args
        # At most 15 connections, as before, but ten stay open: with SQLAlchemy's
        # default of five, the daemon's handlers ticking side by side opened and
        # closed connections all the time (74 in a 9 s run), each a new server
        # process with an empty statement cache.
        kwargs["pool_size"] = 10
        kwargs["max_overflow"] = 5
    engine = create_async_engine(parsed, **kwargs)
    if engine.dialect.name == "sqlite":
        _install_sqlite_hooks(engine.sync_engine)
    elif engine.dialect.name == "postgresql":
        _install_idle_ping(engine.sync_engine)
    return engine


def _install_idle_ping(engine: sa.Engine) -> None:
    """Ping a pooled connection before use only if it sat idle for :data:`PING_AFTER_IDLE`.

    SQLAlchemy's ``pool_pre_ping`` pings on every checkout: with asyncpg that is
    three round trips (BEGIN, a query, ROLLBACK) before every transaction, a
    third of a busy coordinator's round trips. A connection reused within a
    second is all but certainly alive; if it died anyway, its first statement
    fails with the connection invalidated, and the transaction is retried whole
    on a new one (:func:`drover.storage.retry.is_transient`).
    """
    dialect = engine.dialect

    @event.listens_for(engine, "checkin")
    def _returned(_dbapi_connection: Any, record: Any) -> None:
        record.info[_RETURNED_AT] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        returned = record.info.get(_RETURNED_AT)
        if returned is None or time.monotonic() - returned < PING_AFTER_IDLE:
            return  # new, or back a moment ago
        try:
            dialect.do_ping(dbapi_connection)
        except Exception as error:
            if dialect.is_disconnect(error, dbapi_connection, None):  # type: ignore[arg-type]
                # The pool replaces the connection and checks out again.
                raise exc.DisconnectionError(str(error)) from error
            raise


def threaded_sqlite_engine(engine: AsyncEngine) -> sa.Engine | None:
    """A synchronous (pysqlite) engine on ``engine``'s SQLite file, or ``None``.

    drover runs each SQLite transaction whole in a worker thread on this
    engine: one thread hop per transaction, where the async adapter makes
    several per statement. ``None`` for PostgreSQL, and for an in-memory
    database (another engine would see another database).
    """
    return sqlite_file_engine(engine.url, echo=engine.echo)


def sqlite_file_engine(url: str | URL, *, echo: bool = False) -> sa.Engine | None:
    """A synchronous (pysqlite) engine on the SQLite file of ``url``, or ``None`` when
    ``url`` is not one (PostgreSQL, in-memory SQLite).

    It has drover's pragmas and ``BEGIN IMMEDIATE`` for writes. The WAL is
    checkpointed by SQLite in the commit that crosses its 1,000 pages: right
    after a commit, with nothing else writing, a checkpoint copies every frame,
    and the next write starts the WAL over. (A checkpointing thread of drover's
    own, which this replaced, never caught up with a busy writer: the WAL grew
    to 260 MB in ``bench/lifecycle.py`` and every page read searched all of it,
    10-15% of the hot path's CPU; docs/performance.md.)
    """
    parsed = async_database_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    sync = sa.create_engine(
        parsed.set(drivername="sqlite+pysqlite"),
        # Connections move between the worker threads, one at a time. LIFO: the
        # busiest connections stay few and warm, and the others page caches stay small.
        pool_use_lifo=True,
        connect_args={"timeout": 30, "check_same_thread": False},
        echo=echo,
    )
    _install_sqlite_hooks(sync)
    return sync


def _install_sqlite_hooks(engine: sa.Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's begin event, not pysqlite, decide how transactions start.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            for pragma in _SQLITE_PRAGMAS:
                cursor.execute(pragma)
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        if conn.get_execution_options().get(WRITE_OPTION):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")
