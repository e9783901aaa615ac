"""Where kernels run: the interface built-in handlers act through."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from drover.model.values import SessionWithKernels
from drover.storage.repository import KernelReport

__all__ = ["AgentBackend", "AgentInfo", "BackendError", "KernelReporter"]


class BackendError(Exception):
    """An operation on a backend failed; the handler reports the session as failed."""


@attrs.frozen
class AgentInfo:
    """One agent and the resource capacity it offers (at least ``cpu`` and ``mem``)."""

    id: str
    capacity: Mapping[str, float]


class KernelReporter(Protocol):
    """Where a backend reports kernel status changes (the repository)."""

    async def report_kernel_statuses(self, reports: Sequence[KernelReport]) -> list[bool]:
        """Apply reports with compare-and-set; return which applied."""
        ...


class AgentBackend(ABC):
    """Agents with capacities, and the three kernel operations.

    ``prepare``, ``create`` and ``destroy`` act on one session's kernels and
    return once the work is *started*; progress (PULLING, PREPARED, RUNNING,
    exits) flows back later through the :class:`KernelReporter`. Raising
    :class:`BackendError` makes the handler report the session as failed.
    """

    @abstractmethod
    def agents(self) -> Sequence[AgentInfo]:
        """The agents kernels may be placed on."""

    @abstractmethod
    async def prepare(self, session: SessionWithKernels) -> None:
        """Start preparing the session's kernels (pull images, run setup)."""

    @abstractmethod
    async def create(self, session: SessionWithKernels) -> None:
        """Start the session's prepared kernels."""

    @abstractmethod
    async def destroy(self, session: SessionWithKernels) -> None:
        """Stop the session's live kernels."""
