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

from typing import TYPE_CHECKING, Any

from drover.storage.doctor import DoctorReads
from drover.storage.entity_reads import EntityFilter, EntityReads
from drover.storage.history import HistoryReads
from drover.storage.schema import LIST_ORDERS
from drover.storage.stats import BUCKETS, HandlerErrors, MetricsSnapshot, StatsReads

if TYPE_CHECKING:
    from drover.storage.doctor_facts import (
        ClaimRow,
        EndRecord,
        LiveChild,
        OversizedClaim,
        PoolUse,
        RecordedMoves,
    )

_DOCTOR_RECORDS = {
    "ClaimRow",
    "EndRecord",
    "LiveChild",
    "OversizedClaim",
    "PoolUse",
    "RecordedMoves",
}


def __getattr__(name: str) -> Any:
    # The doctor's records are imported when first named: only drover doctor reads them.
    if name in _DOCTOR_RECORDS:
        import drover.storage.doctor_facts as facts

        return getattr(facts, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
