"""What every storage service stands on: one :class:`~drover.storage._db.Database`.

The services (:class:`~drover.storage.queries.Queries` and its reads, the
tick store, the report sink, the daemon store, the entity writes) are
classes whose methods *are* the implementation, each beside its statements.
:class:`~drover.storage.repository.Repository` is all of them on one
database; :meth:`Service.sharing` gives another service the same connections
(the read-only :class:`Queries` of a repository).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import sqlalchemy as sa

from drover.model.clock import Clock
from drover.model.kinds import Kinds
from drover.storage._db import Database

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["Service"]

S = TypeVar("S", bound="Service")


class Service:
    """A storage service on one database (``Service(engine, kinds=…)`` opens its own)."""

    _db: Database

    def __init__(
        self, engine: AsyncEngine | sa.Engine, *, clock: Clock | None = None, kinds: Kinds
    ) -> None:
        self._db = Database(engine, clock, kinds)

    @classmethod
    def sharing(cls: type[S], db: Database) -> S:
        """This service on ``db``'s connections (a repository's read-only view, say)."""
        service = cls.__new__(cls)
        service._db = db
        return service

    @property
    def engine(self) -> AsyncEngine | sa.Engine:
        """The engine this service uses: an asyncio engine, or the synchronous engine of
        a SQLite file it was opened on (the command line's reads)."""
        return self._db.engine

    @property
    def kinds(self) -> Kinds:
        """The entity kinds this service knows."""
        return self._db.kinds

    @property
    def clock(self) -> Clock:
        """The clock stamping writes made outside a tick."""
        return self._db.clock

    async def close(self) -> None:
        """Release the worker threads and connections this service holds.

        The engine it was given stays open: whoever created it disposes of it.
        """
        self._db.close()
