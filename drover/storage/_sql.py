"""Passing many ids to one statement, and building hot statements once.

A list of ids travels as ONE bind parameter: a JSON array read with
``json_each`` on SQLite, an array compared with ``= ANY`` on PostgreSQL
(the condition is :func:`drover.storage.statements.ids.ids_param`; the
value to bind is :func:`ids_value`). One parameter instead of hundreds keeps
SQLAlchemy's per-execution work (expanding and processing every element) off
the hot path, needs no chunking under the databases' parameter limits, and
turns a thousand ids into one statement.

Statements on the hot path are built once per shape and reused: SQLAlchemy
memoizes a statement object's cache key, so a reused object skips the
traversal a freshly built one costs on every execution. Keys that a plugin's
values shape (a handler's candidate filters) go through
:func:`bounded_statement`, which keeps only the most recently used ones: a
daemon's cache never grows for its whole life.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa

__all__ = [
    "BOUNDED_STATEMENTS",
    "CHUNK",
    "bounded_statement",
    "cached_statements",
    "chunked",
    "driver_execute",
    "driver_rows",
    "ids_value",
    "statement",
]

T = TypeVar("T")

#: Ids per IN list where a statement still takes lists: far below bind limits.
CHUNK = 500

#: Statements kept by :func:`bounded_statement` (the least recently used goes first).
BOUNDED_STATEMENTS = 256

_STATEMENTS: dict[Hashable, Any] = {}
_BOUNDED: OrderedDict[Hashable, Any] = OrderedDict()


#: Bytes an id may hold to be written into a JSON string as it is: printable ASCII
#: but the quote and the backslash (JSON escapes those and control characters).
_PLAIN_JSON = bytes(range(0x20, 0x7F)).replace(b'"', b"").replace(b"\\", b"")


def ids_value(ids: Sequence[str], postgres: bool) -> Any:
    """The value to bind to an :func:`~drover.storage.statements.ids.ids_param` parameter."""
    if postgres:
        return list(ids)
    listed = list(ids)
    try:
        text = "".join(listed)
    except TypeError:  # not all strings: the encoder says what it makes of them
        return json.dumps(listed)
    # Ids (UUIDs) need no escaping: joined, they are the JSON array json.dumps would
    # write, in a tenth of its time (a tick binds a thousand ids a few times over).
    if text.isascii() and not text.encode().translate(None, _PLAIN_JSON):
        return '["' + '","'.join(listed) + '"]' if listed else "[]"
    return json.dumps(listed)


def statement(key: Hashable, build: Callable[[], T]) -> T:
    """The statement built by ``build`` for ``key``, built once per process."""
    found = _STATEMENTS.get(key)
    if found is None:
        found = _STATEMENTS[key] = build()
    return found


def bounded_statement(key: Hashable, build: Callable[[], T]) -> T:
    """Like :func:`statement`, keeping only the :data:`BOUNDED_STATEMENTS` most recently used."""
    found = _BOUNDED.get(key)
    if found is None:
        found = _BOUNDED[key] = build()
        while len(_BOUNDED) > BOUNDED_STATEMENTS:
            _BOUNDED.popitem(last=False)
    else:
        _BOUNDED.move_to_end(key)
    return found


def cached_statements() -> int:
    """How many statements this process keeps built."""
    return len(_STATEMENTS) + len(_BOUNDED)


def chunked(items: Sequence[T], size: int = CHUNK) -> Iterator[list[T]]:
    """Yield ``items`` in lists of at most ``size``."""
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


#: Statements whose SQL :func:`driver_rows` keeps rendered (the least recently used goes).
DRIVER_STATEMENTS = 256
# id(query) -> (the query, its SQL, its parameters' names in order, their constant
# values, the converters of the parameters given per execution).
_DRIVER_SQL: OrderedDict[
    int, tuple[Any, str | None, tuple[str, ...], dict[str, Any], dict[str, Any]]
] = OrderedDict()
_DRIVER_LOCK = threading.Lock()


def _rendered(
    conn: sa.Connection, query: Any, params: Mapping[str, Any]
) -> tuple[str | None, tuple[str, ...], dict[str, Any], dict[str, Any]]:
    """``query``'s SQL rendered once for the driver, its parameters' names in order, its
    constants' values (converted once) and the converters of the others; no SQL when it
    must run through SQLAlchemy (a list expanded per execution)."""
    with _DRIVER_LOCK:  # SQLite's reads run in several threads
        found = _DRIVER_SQL.get(id(query))
        if found is None or found[0] is not query:
            compiled = query.compile(dialect=conn.dialect)
            state = compiled.construct_expanded_state(dict(params))
            names = tuple(state.positiontup or ())
            processed = getattr(compiled, "_bind_processors", {})
            # A constant (a NULL a statement sets, a literal) is converted once, here.
            constants = {
                n: processed[n](v) if n in processed else v
                for n, v in state.parameters.items()
                if n not in params
            }
            # A list given per execution expands to different SQL each time: those
            # run through SQLAlchemy. A value it would convert (a float's to_float) is
            # converted here, per execution, by the same converter.
            plain = not any(
                bind.expanding for name, bind in compiled.binds.items() if name in params
            )
            converters = {n: processed[n] for n in names if n in params and n in processed}
            entry = (query, state.statement if plain else None, names, constants, converters)
            found = _DRIVER_SQL[id(query)] = entry
            while len(_DRIVER_SQL) > DRIVER_STATEMENTS:
                _DRIVER_SQL.popitem(last=False)
        else:
            _DRIVER_SQL.move_to_end(id(query))
    return found[1], found[2], found[3], found[4]


def _driver(conn: sa.Connection) -> sqlite3.Connection | None:
    driver = conn.connection.driver_connection
    if conn.dialect.name != "sqlite" or not isinstance(driver, sqlite3.Connection):
        return None
    return driver


def driver_rows(
    conn: sa.Connection, query: sa.Select[Any], params: Mapping[str, Any]
) -> Sequence[Sequence[Any]]:
    """The rows of a hot read, as tuples, straight from the driver's cursor on SQLite.

    ``query`` is a statement built once (:func:`statement`); when its
    parameters are plain values (ids as one parameter, no list expanded per
    execution, nothing SQLAlchemy converts) its SQL is rendered once, and every execution skips
    SQLAlchemy's per-execution and per-row work (a thousand sessions and four
    thousand kernels a tick). Columns come as the driver returns them, so
    the statement must need no result processing (JSON as text, see
    :mod:`drover.storage.rows`). Elsewhere (PostgreSQL) it runs through
    SQLAlchemy.
    """
    driver = _driver(conn)
    if driver is None:
        return conn.execute(query, dict(params)).all()
    sql, names, constants, converters = _rendered(conn, query, params)
    if sql is None:
        return conn.execute(query, dict(params)).all()
    if not conn.in_transaction():
        # As SQLAlchemy's first execute would: the begin event opens the transaction.
        conn.begin()
    return driver.execute(sql, _values(names, params, constants, converters)).fetchall()


def driver_execute(conn: sa.Connection, stmt: sa.Executable, params: Mapping[str, Any]) -> Any:
    """Run a hot write (one set of parameters) straight on the driver's cursor on SQLite.

    As :func:`driver_rows` for the apply's statements: rendered once, run
    without SQLAlchemy's per-execution work. Returns what has ``rowcount`` and
    yields the ``RETURNING`` rows as tuples (a cursor, or SQLAlchemy's result
    elsewhere and for statements that need it).
    """
    driver = _driver(conn)
    if driver is None:
        return conn.execute(stmt, dict(params))
    sql, names, constants, converters = _rendered(conn, stmt, params)
    if sql is None:
        return conn.execute(stmt, dict(params))
    if not conn.in_transaction():
        conn.begin()
    return driver.execute(sql, _values(names, params, constants, converters))


def _values(
    names: tuple[str, ...],
    params: Mapping[str, Any],
    constants: dict[str, Any],
    converters: dict[str, Any],
) -> list[Any]:
    """The positional values of one execution, converted as SQLAlchemy would."""
    values = [params[n] if n in params else constants[n] for n in names]
    if converters:
        for i, name in enumerate(names):
            convert = converters.get(name)
            if convert is not None:
                values[i] = convert(values[i])
    return values
