"""What the coordinator needs from storage: a narrow protocol, implemented in ``drover.storage``.

The coordinator never imports storage. These protocols are the contract (their
docstrings are the documentation); :class:`drover.storage.tick_store.TickStore`
implements :class:`CoordinatorStore`, and with
:class:`drover.storage.daemon_store.DaemonStore` the daemon's
:class:`DaemonStore` (a :class:`drover.storage.repository.Repository` is both). A
test may pass anything else that satisfies them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from drover.model.filters import CandidateFilter
from drover.model.plan import ApplyOutcome, Change, Claim, Move
from drover.model.promotion import PromotionRule
from drover.model.values import CoordinatorInfo, Target

__all__ = ["CoordinatorStore", "DaemonStore", "Subscription"]


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
        claim: Claim | None = None,
        order: str = "priority",
    ) -> Sequence[Target]:
        """Entities of ``kind`` in ``statuses`` passing ``filters``, in fetch order.

        Each is its kind's ``value_type``, built by its kind's reader
        (:class:`~drover.model.values.Entity` for a kind without one). Each target's
        ``try_count`` is ``handler``'s count; ``now`` is the time filters on
        ages compare with. With ``claim``, only entities no other tick holds
        are fetched, and they are claimed (a store with one coordinator, such
        as SQLite, may ignore it). ``order`` is ``HandlerOptions.order``
        (``"oldest-seen"``: least recently fetched by ``handler`` first).
        """
        ...

    async def renew_claims(self, claim: Claim, ids: Sequence[str], until: float) -> None:
        """Extend a tick's claim on ``ids`` until ``until`` (no-op where nothing is claimed)."""
        ...

    async def release_claims(self, claim: Claim, ids: Sequence[str]) -> None:
        """Drop ``claim`` from ``ids`` (a tick that fetched but could not apply)."""
        ...

    async def promote(
        self,
        rule: PromotionRule,
        limit: int,
        *,
        now: float,
        inject_failure: Callable[[str], None] | None = None,
        by: str | None = None,
    ) -> ApplyOutcome:
        """Promote (up to ``limit`` of) the sessions ``rule`` matches, in one transaction;
        ``by`` (the coordinator's id) is named in the news of the moves."""
        ...

    async def apply(
        self,
        source: str,
        changes: Sequence[Change],
        *,
        now: float,
        inject_failure: Callable[[str], None] | None = None,
        claim: Claim | None = None,
        claimed: Sequence[str] = (),
        moves: Sequence[Move] = (),
    ) -> ApplyOutcome:
        """Write one tick's changes in one transaction, with compare-and-set on statuses.

        ``moves`` are the handler's targeted moves of other entities, each with
        its own compare-and-set, in the same transaction.

        With ``claim`` the compare-and-set also checks its token (fencing):
        changes of entities whose claim lapsed are reported ``fenced``, not
        written. The claim is released on ``claimed`` (the tick's targets).
        """
        ...


class Subscription(Protocol):
    """A live subscription to other processes' news (see :meth:`DaemonStore.subscribe`)."""

    def alive(self) -> bool:
        """Whether news still arrives (else subscribe again)."""
        ...

    async def close(self) -> None:
        """Stop listening."""
        ...


class DaemonStore(CoordinatorStore, Protocol):
    """What the daemon needs besides ticks: liveness, tick records, retention, news."""

    async def register_coordinator(
        self, info: CoordinatorInfo, *, stale_after: float = 15.0
    ) -> str | None:
        """Insert this coordinator's row; raise if the store allows no other coordinator.

        Returns a note when it took over from a coordinator that died.
        """
        ...

    async def subscribe(self, on_news: Callable[[dict[str, Any]], None]) -> Subscription | None:
        """Deliver other processes' news (``{"moved": [...]}``, ``{"new": 1}``) to ``on_news``.

        ``None`` when the store cannot push news: the daemon polls instead.
        """
        ...

    async def heartbeat(self, coordinator_id: str) -> None:
        """Refresh this coordinator's heartbeat."""
        ...

    async def coordinator_stopped(self, coordinator_id: str) -> None:
        """Mark this coordinator as cleanly stopped (and give up its solo lease)."""
        ...

    async def take_solo(
        self, coordinator_id: str, token: str, *, until: float, alive_since: float
    ) -> bool:
        """Take the solo lease ``token`` until ``until`` if no other coordinator runs (a
        heartbeat since ``alive_since``) or holds it: this coordinator's ticks then claim
        no rows, and the others' fetch nothing (always ``False`` where nothing is claimed)."""
        ...

    async def keep_solo(
        self, coordinator_id: str, token: str, *, until: float, alive_since: float
    ) -> bool:
        """Renew the solo lease; ``False`` if another coordinator runs or it was revoked."""
        ...

    async def drop_solo(self, coordinator_id: str, token: str) -> None:
        """Give the solo lease up."""
        ...

    async def record_ticks(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Store tick summaries."""
        ...

    async def prune_history(
        self,
        *,
        older_than: float | None,
        ticks_older_than: float | None = None,
        dry_run: bool = False,
        batch: int = 5000,
        on_batch: Callable[[str, int], None] | None = None,
    ) -> dict[str, int]:
        """Delete old history of ended sessions and old tick summaries."""
        ...

    async def latest_entity_id(self) -> str | None:
        """The newest id of anything created (a cheap "is there news?")."""
        ...

    async def release_memory(self) -> int:
        """Drop the caches of idle connections (SQLite's page caches), for a daemon at rest.

        Returns how many connections were shrunk; ``0`` where nothing is cached.
        """
        ...
