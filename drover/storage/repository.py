"""The write store: every storage service on one database.

:class:`Repository` is the tick store (the coordinator's
:class:`~drover.coordinator.store.CoordinatorStore`), the report sink (what
backends and outside systems push), the daemon's store (its
:class:`~drover.coordinator.store.DaemonStore`), the entity writes of the API,
the runtimes held one taker per agent at a time (device ids,
:class:`~drover.storage.agent_runtimes.AgentRuntimes`) and the read-only
:class:`~drover.storage.queries.Queries`, each a service
whose methods are the implementation. The dashboard, the CLI's read commands
and handlers get a plain ``Queries`` (:attr:`Repository.queries`), which
cannot write.
"""

from __future__ import annotations

from drover.storage.agent_runtimes import AgentRuntimes
from drover.storage.daemon_store import DaemonStore
from drover.storage.entity_writes import EntityWrites
from drover.storage.queries import Queries
from drover.storage.reports import ReportSink
from drover.storage.tick_store import TickStore

__all__ = ["Repository"]


class Repository(Queries, EntityWrites, ReportSink, TickStore, DaemonStore, AgentRuntimes):
    """Reads and writes entities, reports, ticks and history on one async engine.

    ``kinds`` are the registered entity kinds: :class:`drover.app.App`
    collects them from the plugins (``App.kinds``); there is no default set.
    """

    @property
    def queries(self) -> Queries:
        """A read-only view of this repository's database (the same connections)."""
        return Queries.sharing(self._db)
