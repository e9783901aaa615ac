"""Exceptions drover raises for bad input and missing things."""

from __future__ import annotations

__all__ = [
    "CoordinatorConflictError",
    "DroverError",
    "InvalidHandlerError",
    "InvalidSpecError",
    "UnknownEntityError",
    "UnknownHandlerError",
    "UnknownKernelError",
    "UnknownSessionError",
]


class DroverError(Exception):
    """Base class of drover's own errors."""


class UnknownEntityError(DroverError, LookupError):
    """No entity (of ``kind``, when given) has the given id or name."""

    def __init__(self, entity_id: str, kind: str | None = None, *, what: str = "id") -> None:
        shown = entity_id if len(entity_id) <= 80 else f"{entity_id[:40]}…({len(entity_id)} chars)"
        super().__init__(f"no {kind or 'entity'} with {what} {shown!r}")
        self.entity_id = entity_id
        self.kind = kind


class UnknownSessionError(UnknownEntityError):
    """No session has the given id: the session kind's spelling of :class:`UnknownEntityError`."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id, "session")

    @property
    def session_id(self) -> str:
        """The id asked for."""
        return self.entity_id


class UnknownKernelError(DroverError, LookupError):
    """No kernel has the given id."""

    def __init__(self, kernel_id: str) -> None:
        super().__init__(f"no kernel with id {kernel_id!r}")
        self.kernel_id = kernel_id


class UnknownHandlerError(DroverError, LookupError):
    """No loaded handler has the given name."""


class InvalidSpecError(DroverError, ValueError):
    """A session or kernel spec is malformed; nothing was written."""


class InvalidHandlerError(DroverError, ValueError):
    """A handler or handler set fails validation at load time."""


class CoordinatorConflictError(DroverError):
    """Another coordinator is running on a database that allows only one (SQLite)."""
