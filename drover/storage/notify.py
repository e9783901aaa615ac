"""Wake-ups between processes on PostgreSQL: ``NOTIFY`` in the writing transaction, ``LISTEN``.

A notification is sent inside the transaction whose commit it announces, so it
is delivered only if that commit happens (PostgreSQL queues it until then).
The channel is per schema (``drover.<schema>``): several drover databases
may share one server. On SQLite nothing is sent; the daemon polls instead.

Payloads are small JSON objects:

* ``{"moved": [[kind, status], …], "by": coordinator id}``: entities of these kinds moved
  into these statuses;
* ``{"new": 1}``: sessions were submitted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from drover.storage._db import Database

__all__ = ["CHANNEL_PREFIX", "Subscription", "notify", "subscribe"]

log = logging.getLogger("drover.storage")

CHANNEL_PREFIX = "drover."
#: Send ``:payload`` on the channel ``:prefix`` + the current schema, when the transaction
#: commits.
_NOTIFY = sa.text("SELECT pg_notify(:prefix || current_schema(), :payload)")
#: The schema the connection's ``search_path`` selects (its channel's suffix).
_CURRENT_SCHEMA = sa.text("SELECT current_schema()")


def notify(conn: sa.Connection, payload: dict[str, Any]) -> None:
    """Announce ``payload`` when the open transaction commits (PostgreSQL; no-op on SQLite)."""
    if conn.dialect.name != "postgresql":
        return
    conn.execute(
        _NOTIFY,
        {"prefix": CHANNEL_PREFIX, "payload": json.dumps(payload, separators=(",", ":"))},
    )


class Subscription:
    """A dedicated connection listening on this database's channel until :meth:`close`."""

    def __init__(self, conn: Any, raw: Any, channel: str, listener: Any) -> None:
        self._conn = conn
        self._raw = raw
        self._channel = channel
        self._listener = listener

    def alive(self) -> bool:
        """Whether the listening connection is still open (else resubscribe)."""
        return not self._raw.is_closed()

    async def close(self) -> None:
        """Stop listening and give the connection back."""
        with contextlib.suppress(Exception):
            await self._raw.remove_listener(self._channel, self._listener)
        with contextlib.suppress(Exception):
            await self._conn.close()


async def subscribe(db: Database, on_news: Callable[[dict[str, Any]], None]) -> Subscription | None:
    """Call ``on_news(payload)`` for every notification; ``None`` on SQLite (poll instead)."""
    if not db.postgres:
        return None
    engine = db.engine
    # PostgreSQL databases are always opened on an asyncio engine.
    assert not isinstance(engine, sa.Engine)
    conn = await engine.connect()
    try:
        schema = (await conn.execute(_CURRENT_SCHEMA)).scalar_one()
        await conn.commit()
        raw = (await conn.get_raw_connection()).driver_connection
        assert raw is not None
        channel = f"{CHANNEL_PREFIX}{schema}"

        def listener(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
            try:
                news = json.loads(payload)
            except ValueError:
                log.warning("ignoring a malformed notification: %r", payload[:200])
                return
            if isinstance(news, dict):
                on_news(news)

        await raw.add_listener(channel, listener)
    except BaseException:
        with contextlib.suppress(Exception):
            await asyncio.shield(conn.close())
        raise
    return Subscription(conn, raw, channel, listener)
