"""Exceptions drover raises for bad input and missing things."""

from __future__ import annotations

from drover.model.deprecation import moved_names

__all__ = [
    "CoordinatorConflictError",
    "DroverError",
    "InvalidHandlerError",
    "InvalidSpecError",
    "UnknownEntityError",
    "UnknownHandlerError",
]

# The session kind's errors moved to its package (0.2).
__getattr__ = moved_names(
    __name__,
    {
        name: "drover.kinds.sessions.values"
        for name in ("UnknownKernelError", "UnknownSessionError")
    },
)


class DroverError(Exception):
    """Base class of drover's own errors."""


class UnknownEntityError(DroverError, LookupError):
    """No entity (of ``kind``, when given) has the given id or name."""

    def __init__(self, entity_id: str, kind: str | None = None, *, what: str = "id") -> None:
        shown = entity_id if len(entity_id) <= 80 else f"{entity_id[:40]}…({len(entity_id)} chars)"
        super().__init__(f"no {kind or 'entity'} with {what} {shown!r}")
        self.entity_id = entity_id
        self.kind = kind


class UnknownHandlerError(DroverError, LookupError):
    """No loaded handler has the given name."""


class InvalidSpecError(DroverError, ValueError):
    """A request, a spec or an input is malformed; nothing was written."""


class InvalidHandlerError(DroverError, ValueError):
    """A handler or handler set fails validation at load time."""


class CoordinatorConflictError(DroverError):
    """Another coordinator is running on a database that allows only one (SQLite)."""
