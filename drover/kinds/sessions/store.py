"""The session kind's reads and writes, spelled as the design card spells them.

Storage is generic: it reads and writes entities of any kind
(:class:`~drover.storage.queries.Queries`, :class:`~drover.storage.repository.Repository`).
The session kind adds its own spellings on top: sessions with their kernels,
kernel reports from backends (:class:`~drover.backends.base.KernelReporter`),
counts of sessions, placements of kernels on agents. Each is a generic
operation with the session or kernel kind filled in; the sessions' fast reader
is :mod:`drover.kinds.sessions.reading`, declared on the kinds.

:class:`SessionQueries` and :class:`SessionRepository` are what
:class:`drover.app.App` builds, and what ``drover.Queries`` and
``drover.Repository`` name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from drover.kinds.sessions.queries import SessionFilter, SessionQueries
from drover.kinds.sessions.requests import new_session
from drover.kinds.sessions.values import (
    HOLDING_KERNEL_STATUSES,
    KERNEL_KIND,
    KernelReport,
    KernelStatus,
    SessionStatus,
    UnknownKernelError,
    devices_of,
)
from drover.model.errors import UnknownEntityError
from drover.model.values import Claim, Report
from drover.storage.repository import Repository as _Repository

__all__ = [
    "BACKEND_SOURCE",
    "Queries",
    "Repository",
    "SessionFilter",
    "SessionQueries",
    "SessionRepository",
]

#: ``source`` of the status changes a backend reports.
BACKEND_SOURCE = "backend"
#: Kernel statuses in which a kernel takes its device ids: placed, being prepared.
_TAKING_DEVICES = frozenset({KernelStatus.SCHEDULED, KernelStatus.PREPARING, KernelStatus.PULLING})


class SessionRepository(_Repository, SessionQueries):
    """:class:`~drover.storage.repository.Repository` with the session kind's writes: the
    :class:`~drover.backends.base.KernelReporter` backends report through."""

    @property
    def queries(self) -> SessionQueries:
        """A read-only view of this repository's database (the same connections)."""
        return SessionQueries.sharing(self._db)

    async def create_session(
        self,
        *,
        kernels: Sequence[Mapping[str, Any]],
        name: str | None = None,
        priority: int = 0,
        status: SessionStatus = SessionStatus.PENDING,
        spec: Mapping[str, Any] | None = None,
    ) -> str:
        """Create one PENDING session with its kernels and return its id.

        Each kernel mapping is the kernel's spec (``cpu``, ``mem``, ``command``…),
        checked as :meth:`create_entities` checks every new entity. ``status``
        is there for tests: anything but PENDING is refused; :meth:`seed_sessions`
        starts elsewhere.
        """
        request = {
            "kernels": kernels, "name": name, "priority": priority, "status": status, "spec": spec
        }  # fmt: skip
        (sid,) = await self.create_sessions([request])
        return sid

    async def create_sessions(self, requests: Sequence[Mapping[str, Any]]) -> list[str]:
        """Create many sessions in one transaction; each request has create_session's keywords.

        A request becomes a new entity (:func:`~drover.kinds.sessions.requests.new_session`)
        created like any: one bad request raises InvalidSpecError and nothing is written.
        """
        return await self.create_entities([new_session(r) for r in requests])

    async def seed_sessions(self, requests: Sequence[Mapping[str, Any]]) -> list[str]:
        """Like :meth:`create_sessions`, for tests and benchmarks: start anywhere.

        A request's ``status`` sets the session's initial status, and a
        kernel's ``"status"`` and ``"agent_id"`` keys its own (kernels otherwise
        follow the session).
        """
        return await self.seed_entities([new_session(r, seeding=True) for r in requests])

    async def report_kernel_statuses(self, reports: Sequence[KernelReport]) -> list[bool]:
        """Apply backend reports in one transaction; return, per report, whether it applied.

        A kernel report is a pushed report with source ``backend``:
        compare-and-set (not terminal, and in ``expected`` when given), a
        recorded status change, ``message`` as the kernel's ``status_info``.
        Raises UnknownKernelError, writing nothing, for an unknown kernel id.
        """
        pushed = [
            Report(
                r.kernel_id, r.status, r.expected, r.message, None, r.message, r.exit_code,
                r.runtime,
            )
            for r in reports
        ]  # fmt: skip
        try:
            return await self.report_many(
                pushed, source=BACKEND_SOURCE, of_kind=KERNEL_KIND, backend=True
            )
        except UnknownEntityError as error:
            raise UnknownKernelError(error.entity_id) from None

    async def report_kernel_status(
        self,
        kernel_id: str,
        status: KernelStatus,
        *,
        expected: Iterable[KernelStatus] | None = None,
        exit_code: int | None = None,
        message: str | None = None,
    ) -> bool:
        """Report one kernel's new status, as a backend would (see report_kernel_statuses)."""
        report = KernelReport(
            kernel_id=kernel_id,
            status=status,
            expected=frozenset(expected) if expected is not None else None,
            exit_code=exit_code,
            message=message,
        )
        (ok,) = await self.report_kernel_statuses([report])
        return ok

    async def report_kernel_progress(
        self, kernel_id: str, status: KernelStatus, message: str
    ) -> bool:
        """A backend's progress words for a kernel still in ``status`` (its ``status_info``;
        no status change, no history row)."""
        return await self.report_status_info(kernel_id, status, message)

    async def take_kernel_devices(
        self,
        kernel_id: str,
        choose: Callable[[dict[str, list[str]], dict[str, set[str]]], dict[str, list[str]]],
        *,
        claim: Claim | None = None,
        session_id: str | None = None,
    ) -> dict[str, list[str]] | None:
        """Record the device ids ``choose`` picks in the kernel's ``runtime["devices"]``,
        atomically across coordinators; return them (see
        :meth:`~drover.backends.base.KernelReporter.take_kernel_devices`)."""

        def update(runtime: dict[str, Any], others: list[dict[str, Any]]) -> dict[str, Any]:
            held: dict[str, set[str]] = {}
            for other in others:
                for slot, ids in devices_of(other).items():
                    held.setdefault(slot, set()).update(ids)
            chosen = choose(devices_of(runtime), held)
            runtime.pop("devices", None)
            return {**runtime, "devices": chosen} if chosen else runtime

        found = await self.update_runtime_on_agent(
            kernel_id, update, kind=KERNEL_KIND, live=HOLDING_KERNEL_STATUSES,
            takers=_TAKING_DEVICES, claim=claim, claimed_id=session_id,
        )  # fmt: skip
        return None if found is None else devices_of(found)

    async def assign_agents(
        self, placements: Mapping[str, str], *, status: str = KernelStatus.PENDING
    ) -> int:
        """Set ``agent_id`` on PENDING kernels (``kernel_id -> agent_id``); return how many."""
        return await super().assign_agents(placements, status=status)


#: What ``drover.Queries`` and ``drover.Repository`` name: storage's services with the
#: session kind's spellings (the design card's API plugins were written against).
Queries = SessionQueries
Repository = SessionRepository
