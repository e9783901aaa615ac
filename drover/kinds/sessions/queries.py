"""The session kind's reads, spelled as the design card spells them: sessions with their
kernels, kernel histories, counts of sessions, what agents hold.

:class:`SessionQueries` is what ``drover.Queries`` names and what a reading
:class:`drover.app.App` (the command line's reads) builds, without the write side
(:mod:`drover.kinds.sessions.store` adds it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Any

from drover.kinds.sessions.values import (
    HOLDING_KERNEL_STATUSES,
    KERNEL_KIND,
    SESSION_KIND,
    KernelInfo,
    KernelStatus,
    SessionStatus,
    SessionWithKernels,
    UnknownKernelError,
    UnknownSessionError,
)
from drover.model.errors import UnknownEntityError
from drover.model.values import KernelHistoryRecord
from drover.storage.queries import EntityFilter
from drover.storage.queries import Queries as _Queries

__all__ = ["SessionFilter", "SessionQueries"]

#: The dashboard's session filters: an :class:`~drover.storage.queries.EntityFilter`.
SessionFilter = EntityFilter


class SessionQueries(_Queries):
    """:class:`~drover.storage.queries.Queries` with the session kind's reads."""

    async def get_session(self, session_id: str) -> SessionWithKernels:
        """One session with its kernels, or UnknownSessionError."""
        try:
            found: SessionWithKernels = await self.read_one(SESSION_KIND, session_id)
        except UnknownEntityError:
            raise UnknownSessionError(session_id) from None
        return found

    async def resolve_session_id(self, ref: str) -> str:
        """The id of the session ``ref`` names: its id, its name, or an id prefix
        (see :meth:`resolve_entity_id`)."""
        return await self.resolve_entity_id(ref, SESSION_KIND)

    async def list_sessions(
        self,
        *,
        statuses: Iterable[SessionStatus] | None = None,
        limit: int | None = None,
        order: str = "priority",
        name: str | None = None,
    ) -> list[SessionWithKernels]:
        """Sessions (with kernels), optionally filtered by status and name, in ``order``.

        ``order``: ``priority`` (fetch order, the default), ``newest`` or ``oldest``.
        ``name``: a pattern, shell-style with ``*`` and ``?`` (whole name), else a
        substring; case-insensitive.
        """
        wanted = None if statuses is None else tuple(str(s) for s in statuses)
        if wanted == ():
            return []
        f = EntityFilter(statuses=wanted or (), limit=limit, sort=order, name=name)
        return await self.read(SESSION_KIND, f)

    async def filtered_sessions(self, f: EntityFilter) -> list[SessionWithKernels]:
        """Sessions (with kernels) matching the dashboard's filters, in ``f.sort`` order."""
        return await self.read(SESSION_KIND, f)

    async def count_by_status(self, kind: str = SESSION_KIND) -> dict[StrEnum | str, int]:
        """The number of sessions (or entities of ``kind``) in each status, keyed by the
        kind's status members (:class:`SessionStatus` for sessions)."""
        return await super().count_by_status(kind)

    async def count_by_result(self, kind: str = SESSION_KIND) -> dict[str, int]:
        """The number of ended sessions (or entities of ``kind``) per result."""
        return await super().count_by_result(kind)

    async def status_ages(
        self, now: float, kind: str = SESSION_KIND
    ) -> dict[Any, tuple[int, float, float]]:
        """Per status of the sessions (or of ``kind``): entities, and the p50 / p95 of the
        time they have held it."""
        return await super().status_ages(now, kind)

    async def kernels_in(self, statuses: Iterable[KernelStatus]) -> list[KernelInfo]:
        """Every kernel currently in one of ``statuses``, in id order (a backend's view at
        start-up)."""
        wanted = tuple(str(s) for s in statuses)
        if not wanted:
            return []
        return await self.read(KERNEL_KIND, EntityFilter(statuses=wanted, sort="id", limit=None))

    async def kernel_statuses(self, kernel_ids: Sequence[str]) -> dict[str, KernelStatus]:
        """Current status of each of ``kernel_ids`` (unknown ids are left out)."""
        found = await self.statuses_of(kernel_ids, KERNEL_KIND)
        return {kid: KernelStatus(status) for kid, status in found.items()}

    async def get_kernel(self, kernel_id: str) -> KernelInfo:
        """One kernel, or UnknownKernelError."""
        try:
            found: KernelInfo = await self.read_one(KERNEL_KIND, kernel_id)
        except UnknownEntityError:
            raise UnknownKernelError(kernel_id) from None
        return found

    async def agent_usage(self, slots: Iterable[str]) -> dict[str, dict[str, float]]:
        """Resources held per agent: the sum of each slot over its placed, live kernels
        (neither PENDING nor ended: :data:`HOLDING_KERNEL_STATUSES`)."""
        return await self.usage_per_agent(KERNEL_KIND, HOLDING_KERNEL_STATUSES, slots)

    async def kernel_history(
        self, *, kernel_id: str | None = None, session_id: str | None = None
    ) -> list[KernelHistoryRecord]:
        """Status changes of a kernel or of a session's kernels, oldest first."""
        return await self.changes(entity_id=kernel_id, parent_id=session_id)

    async def search_kernel_history(
        self,
        *,
        kernel_id: str,
        since: float | None = None,
        until: float | None = None,
        limit: int = 100,
    ) -> list[KernelHistoryRecord]:
        """One kernel's status changes, newest first."""
        return await self.search_changes(entity_id=kernel_id, since=since, until=until, limit=limit)
