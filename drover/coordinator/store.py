"""What the coordinator needs from storage: a narrow protocol, implemented in ``drover.storage``.

The coordinator never imports storage; :class:`drover.storage.Repository`
satisfies these protocols, and a test may pass anything else that does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from drover.model.filters import CandidateFilter
from drover.model.plan import ApplyOutcome, Change
from drover.model.promotion import PromotionRule
from drover.model.values import CoordinatorInfo

__all__ = ["CoordinatorStore", "DaemonStore"]


class CoordinatorStore(Protocol):
    """The operations of a tick: fetch a handler's targets, apply its changes, promote.

    A promotion selects its candidates and moves them in one transaction
    (``promote``): it runs no handler code, so nothing needs to leave the
    database between the two.
    """

    async def fetch_lifecycle_targets(
        self,
        handler: str,
        kind: str,
        statuses: Iterable[str],
        filters: Sequence[CandidateFilter],
        limit: int,
        *,
        now: float,
    ) -> Sequence[Any]:
        """Entities of ``kind`` in ``statuses`` passing ``filters``, in fetch order.

        Sessions come as :class:`~drover.model.values.SessionWithKernels`,
        other kinds as :class:`~drover.model.values.Entity`. Each target's
        ``try_count`` is ``handler``'s count; ``now`` is the time filters on
        ages compare with.
        """
        ...

    async def promote(
        self,
        rule: PromotionRule,
        limit: int,
        *,
        now: float,
        inject_failure: Callable[[str], None] | None = None,
    ) -> ApplyOutcome:
        """Promote (up to ``limit`` of) the sessions ``rule`` matches, in one transaction."""
        ...

    async def apply(
        self,
        source: str,
        changes: Sequence[Change],
        *,
        now: float,
        inject_failure: Callable[[str], None] | None = None,
    ) -> ApplyOutcome:
        """Write one tick's changes in one transaction, with compare-and-set on statuses."""
        ...


class DaemonStore(CoordinatorStore, Protocol):
    """What the daemon needs besides ticks: liveness, tick records, retention, news."""

    async def register_coordinator(self, info: CoordinatorInfo) -> None:
        """Insert this coordinator's row."""
        ...

    async def heartbeat(self, coordinator_id: str) -> None:
        """Refresh this coordinator's heartbeat."""
        ...

    async def coordinator_stopped(self, coordinator_id: str) -> None:
        """Mark this coordinator as cleanly stopped."""
        ...

    async def record_ticks(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Store tick summaries."""
        ...

    async def prune_history(
        self, *, older_than: float, dry_run: bool = False, batch: int = 5000
    ) -> dict[str, int]:
        """Delete old history of ended sessions."""
        ...

    async def latest_entity_id(self) -> str | None:
        """The newest id of anything created (a cheap "is there news?")."""
        ...
