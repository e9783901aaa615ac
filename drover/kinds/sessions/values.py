"""The session kind's vocabulary: its statuses, the values its handlers and backends see.

The Sokovan design card (``SessionStatus``, ``KernelStatus``,
``SessionWithKernels``, ``KernelInfo``, ``TransitionStatus``) is the session
kind's spelling of the generic engine's values: :class:`~drover.model.values.Entity`
and :class:`~drover.model.values.Transition`. The engine (``drover.model``,
``drover.coordinator``, ``drover.storage``) never names them; this package
declares the kinds that use them (:mod:`drover.kinds.sessions.kinds`) and the
backends run their kernels.

This module imports nothing of drover but :mod:`drover.model`, so that a
backend can import it without the rest of the package.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

import attrs

from drover.model.budgets import BudgetUse
from drover.model.errors import DroverError, UnknownEntityError
from drover.model.values import Claim, Transition

__all__ = [
    "HOLDING_KERNEL_STATUSES",
    "KERNEL_KIND",
    "NON_TERMINAL_KERNEL_STATUSES",
    "SESSION_KIND",
    "TERMINAL_KERNEL_STATUSES",
    "TERMINAL_SESSION_STATUSES",
    "KernelInfo",
    "KernelReport",
    "KernelStatus",
    "SessionStatus",
    "SessionWithKernels",
    "TransitionStatus",
    "UnknownKernelError",
    "UnknownSessionError",
    "devices_of",
]

#: The kinds' names.
SESSION_KIND = "session"
KERNEL_KIND = "kernel"


class SessionStatus(StrEnum):
    """The lifecycle status of a session. Values equal names."""

    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    PREPARING = "PREPARING"
    PREPARED = "PREPARED"
    CREATING = "CREATING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    CANCELLED = "CANCELLED"
    ERROR = "ERROR"


class KernelStatus(StrEnum):
    """The lifecycle status of one kernel of a session. Values equal names."""

    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    PREPARING = "PREPARING"
    PULLING = "PULLING"
    PREPARED = "PREPARED"
    CREATING = "CREATING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    CANCELLED = "CANCELLED"
    ERROR = "ERROR"


TERMINAL_SESSION_STATUSES: frozenset[SessionStatus] = frozenset(
    {SessionStatus.TERMINATED, SessionStatus.CANCELLED, SessionStatus.ERROR}
)
TERMINAL_KERNEL_STATUSES: frozenset[KernelStatus] = frozenset(
    {KernelStatus.TERMINATED, KernelStatus.CANCELLED, KernelStatus.ERROR}
)
NON_TERMINAL_KERNEL_STATUSES: frozenset[KernelStatus] = frozenset(
    s for s in KernelStatus if s not in TERMINAL_KERNEL_STATUSES
)
#: Kernel statuses that hold an agent's resources: placed, and neither PENDING nor ended.
HOLDING_KERNEL_STATUSES: frozenset[KernelStatus] = NON_TERMINAL_KERNEL_STATUSES - {
    KernelStatus.PENDING
}


def devices_of(runtime: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """The device ids recorded in a kernel's ``runtime`` (``{"gpu": ["1"]}``; ``{}`` if
    none): a kernel in :data:`HOLDING_KERNEL_STATUSES` holds them."""
    found = (runtime or {}).get("devices")
    if not isinstance(found, Mapping):
        return {}
    return {str(k): [str(d) for d in v] for k, v in found.items() if isinstance(v, list)}


class UnknownSessionError(UnknownEntityError):
    """No session has the given id: the session kind's spelling of :class:`UnknownEntityError`."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id, SESSION_KIND)

    @property
    def session_id(self) -> str:
        """The id that named no session."""
        return self.entity_id


class UnknownKernelError(DroverError, LookupError):
    """No kernel has the given id."""

    def __init__(self, kernel_id: str) -> None:
        super().__init__(f"no kernel with id {kernel_id!r}")
        self.kernel_id = kernel_id


@attrs.frozen(init=False)
class TransitionStatus(Transition):
    """The session kind's spelling of :class:`Transition`: ``session`` and ``kernel``."""

    sides: ClassVar[tuple[str, str]] = ("session", "kernel")

    def __init__(
        self, session: SessionStatus | None = None, kernel: KernelStatus | None = None
    ) -> None:
        self.__attrs_init__(session, kernel)

    @property
    def session(self) -> SessionStatus | None:
        """The session's new status (``None``: kept)."""
        return None if self.to is None else SessionStatus(self.to)

    @property
    def kernel(self) -> KernelStatus | None:
        """The kernels' new status (``None``: kept)."""
        return None if self.children is None else KernelStatus(self.children)


@attrs.frozen
class KernelInfo:
    """One kernel as a handler sees it.

    Like every value drover hands out, treat ``spec`` and ``runtime`` as
    read-only: kernels read together with identical specs share one object.
    """

    id: str
    session_id: str
    status: KernelStatus
    status_changed_at: datetime
    agent_id: str | None
    spec: dict[str, Any]
    exit_code: int | None = None
    status_info: str | None = None
    #: Backend bookkeeping (pid, process identity, log paths); ``None`` if none.
    runtime: dict[str, Any] | None = None

    @property
    def kind(self) -> str:
        """``kernel``."""
        return "kernel"

    @property
    def parent_id(self) -> str:
        """The session: the generic spelling."""
        return self.session_id


@attrs.frozen
class SessionWithKernels:
    """One session with all of its kernels, as a handler sees it.

    ``try_count`` is the number of failures of the handler being run on this
    session in its current status (tries are counted per handler and reset by
    a status change). Read outside a tick (``get_session``, listings), it is
    the highest count of any handler; ``tries`` has every handler's count.
    ``requeues`` counts the times the session was sent back to an earlier
    status by expiry or give-up.
    """

    id: str
    name: str
    status: SessionStatus
    status_changed_at: datetime
    try_count: int
    priority: int
    created_at: datetime
    spec: dict[str, Any]
    status_info: str | None
    result: str | None
    kernels: tuple[KernelInfo, ...] = ()
    tries: dict[str, int] = attrs.field(factory=dict)
    requeues: int = 0
    #: Handler-owned state, patched in the apply (``None``: none yet).
    data: dict[str, Any] | None = None
    #: Named budgets, used and limit (the session kind declares none).
    budgets: dict[str, BudgetUse] | None = None
    #: The claim of the tick this value was fetched for (PostgreSQL with several
    #: coordinators; ``None`` otherwise): backends fence side effects with it
    #: (:mod:`drover.backends.fence`). Not part of the value's equality.
    claim: Claim | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def kind(self) -> str:
        """``session``."""
        return "session"

    @property
    def parent_id(self) -> str | None:
        """Sessions have no parent."""
        return None

    @property
    def children(self) -> tuple[KernelInfo, ...]:
        """The kernels: the generic spelling."""
        return self.kernels


@attrs.frozen
class KernelReport:
    """A backend's report of one kernel's new status.

    ``expected``: apply only if the kernel is currently in one of these statuses
    (compare-and-set); ``None`` applies to any non-terminal kernel. A terminal
    kernel never changes again.
    """

    kernel_id: str
    status: KernelStatus
    expected: frozenset[KernelStatus] | None = None
    exit_code: int | None = None
    message: str | None = None
    #: Replaces the kernel's ``runtime`` bookkeeping when given.
    runtime: dict[str, Any] | None = None
