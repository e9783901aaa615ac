"""Read-only queries: what the CLI, the dashboard and handlers read.

:class:`Queries` is made of the read services (:class:`~drover.storage.entity_reads.EntityReads`,
:class:`~drover.storage.history.HistoryReads`, :class:`~drover.storage.stats.StatsReads`,
:class:`~drover.storage.doctor.DoctorReads`)
and has no method that writes, so whatever holds one (the web dashboard, a
handler's :class:`~drover.plugins.registry.RuntimeContext`, the CLI's read
commands) is read-only by type. The write store,
:class:`~drover.storage.repository.Repository`, is a ``Queries`` too.
"""

from __future__ import annotations

from drover.storage.doctor import (
    ClaimRow,
    DoctorReads,
    EndRecord,
    LiveChild,
    OversizedClaim,
    PoolUse,
    RecordedMoves,
)
from drover.storage.entity_reads import EntityFilter, EntityReads
from drover.storage.history import HistoryReads
from drover.storage.schema import LIST_ORDERS
from drover.storage.stats import BUCKETS, HandlerErrors, MetricsSnapshot, StatsReads

__all__ = [
    "BUCKETS",
    "LIST_ORDERS",
    "ClaimRow",
    "EndRecord",
    "EntityFilter",
    "HandlerErrors",
    "LiveChild",
    "MetricsSnapshot",
    "OversizedClaim",
    "PoolUse",
    "Queries",
    "RecordedMoves",
]


class Queries(EntityReads, HistoryReads, StatsReads, DoctorReads):
    """Read-only operations on one database (see the module's docstring).

    ``Queries(engine, kinds=…)`` opens its own connections;
    :attr:`Repository.queries <drover.storage.repository.Repository.queries>`
    shares the repository's.
    """
