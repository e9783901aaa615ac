"""Where kernels run: the interface built-in handlers act through."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from drover.kinds.sessions.values import KernelInfo, KernelReport, KernelStatus, SessionWithKernels
from drover.model.clock import Clock
from drover.model.values import Claim

__all__ = ["AgentBackend", "AgentInfo", "BackendError", "KernelReporter", "Wake"]


class BackendError(Exception):
    """An operation on a backend failed; the handler reports the session as failed."""


@attrs.frozen
class AgentInfo:
    """One agent and the resource capacity it offers (at least ``cpu`` and ``mem``).

    ``devices``: the slots declared as device ids (``gpu = ["0", "1"]``), whose
    capacity is how many; a kernel asking for such a slot is given specific ids
    (:mod:`drover.backends.devices`).
    """

    id: str
    capacity: Mapping[str, float]
    devices: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)


class KernelReporter(Protocol):
    """What a backend may do with drover's storage: report kernels, and read them back.

    :class:`drover.storage.Repository` is one.
    """

    @property
    def clock(self) -> Clock:
        """The clock drover runs on (a manual one in tests)."""
        ...

    async def report_kernel_statuses(self, reports: Sequence[KernelReport]) -> list[bool]:
        """Apply reports with compare-and-set; return which applied."""
        ...

    async def report(
        self,
        entity_id: str,
        status: str,
        *,
        expected: Iterable[str] | None = None,
        status_info: str | None = None,
        data: Mapping[str, Any] | None = None,
        message: str | None = None,
        source: str = "report",
    ) -> bool:
        """Push news about an entity of any kind (compare-and-set); return whether it applied.

        ``report_kernel_statuses`` is this, for kernels, with source ``backend``.
        """
        ...

    async def report_kernel_progress(
        self, kernel_id: str, status: KernelStatus, message: str
    ) -> bool:
        """Set the kernel's ``status_info`` to ``message`` while it is in ``status`` (a pull's
        progress); no status change, no history row. Returns whether it was in ``status``."""
        ...

    async def kernels_in(self, statuses: Iterable[KernelStatus]) -> list[KernelInfo]:
        """Every kernel currently in one of ``statuses`` (to adopt them at start-up)."""
        ...

    async def kernel_statuses(self, kernel_ids: Sequence[str]) -> dict[str, KernelStatus]:
        """The current status of each kernel (unknown ids left out)."""
        ...

    async def take_kernel_devices(
        self,
        kernel_id: str,
        choose: Callable[[dict[str, list[str]], dict[str, set[str]]], dict[str, list[str]]],
        *,
        claim: Claim | None = None,
        session_id: str | None = None,
    ) -> dict[str, list[str]] | None:
        """Give the kernel device ids, atomically across coordinators; return them.

        In one transaction, one at a time per agent: ``choose`` gets the ids the
        kernel holds now and those every other live kernel on its agent holds
        (``{slot: ids}``, from their ``runtime["devices"]``) and returns the
        kernel's (it may raise, and nothing is written); they are recorded in its
        ``runtime["devices"]``, where every coordinator sees them. ``None``,
        nothing taken: the kernel is no longer SCHEDULED, PREPARING or PULLING
        on an agent, or ``claim`` (the tick's, on ``session_id``) no longer holds
        it. See :mod:`drover.backends.devices`.
        """
        ...

    async def hold_claim(self, claim: Claim, entity_id: str) -> float | None:
        """Renew ``claim`` on ``entity_id`` if it still holds it: its new expiry, else ``None``.

        See :mod:`drover.backends.fence`.
        """
        ...


#: Called by a backend after reports applied, so the coordinator looks at once.
Wake = Callable[[], None]


class AgentBackend(ABC):
    """Agents with capacities, and the three kernel operations.

    ``prepare``, ``create`` and ``destroy`` act on one session's kernels and
    return once the work is *started*; progress (PULLING, PREPARED, RUNNING,
    exits) flows back later through the :class:`KernelReporter` given to
    :meth:`start`, followed by a call of ``wake``. Raising
    :class:`BackendError` makes the handler report the session as failed.
    """

    #: Whether a running kernel's runtime records the port its process was given
    #: (``$PORT``, ``runtime["port"]``): where a deployment's replicas are
    #: health-checked. A backend that records none (the slurm backend: a job runs on
    #: a compute node whose port it does not know) gets no deployment: ``drover
    #: deploy`` and :meth:`drover.App.create` refuse one in one line.
    records_ports: bool = True

    async def start(self, reporter: KernelReporter, wake: Wake) -> None:  # noqa: B027
        """Begin: remember where to report, adopt what is running, start watching.

        The default does nothing; a backend that reports progress keeps
        ``reporter`` and calls ``wake()`` after its reports applied.
        """

    async def stop(self) -> None:  # noqa: B027
        """Stop watching; kernels keep running, to be adopted by the next start."""

    async def deliver_due(self) -> int:
        """Report progress that is due now; return how many reports applied.

        For backends that queue progress on drover's clock (the simulated one):
        the test harness calls it before every tick, so tests are deterministic.
        Backends that report on their own return 0.
        """
        return 0

    async def prune_files(self, unchanged_since: float) -> int:
        """Delete the files of ended kernels not changed since ``unchanged_since`` (epoch).

        The daemon calls it every ``history.prune_interval`` with
        ``history.kernel_files_retention``; returns how many kernels' files
        went. The default keeps nothing on disk, so it deletes nothing.
        """
        return 0

    @abstractmethod
    def agents(self) -> Sequence[AgentInfo]:
        """The agents kernels may be placed on."""

    async def offered_slots(self) -> set[str] | None:
        """Every resource slot some agent offers, known without :meth:`start` (a submission
        is checked against it). ``None``: not known, so not checked.

        The default reads :meth:`agents`; a backend that learns its agents only
        once started asks for them here.
        """
        return {slot for agent in self.agents() for slot in agent.capacity}

    def kernel_spec_problem(self, spec: Mapping[str, Any]) -> str | None:
        """Why this backend would refuse a kernel spec, known from the spec and the
        backend's settings alone, without :meth:`start` (``drover submit`` asks it, so a
        kernel it would refuse is refused at submit in one line); ``None``: no objection.

        The default has none. The container backend names its mount policy here.
        """
        return None

    @abstractmethod
    async def prepare(self, session: SessionWithKernels) -> None:
        """Start preparing the session's kernels (pull images, run setup)."""

    @abstractmethod
    async def create(self, session: SessionWithKernels) -> None:
        """Start the session's prepared kernels."""

    @abstractmethod
    async def destroy(self, session: SessionWithKernels) -> None:
        """Stop the session's live kernels."""
