"""Pools of counter tokens: at most ``capacity`` entities hold a pool at once.

A kind declares the pools its entities hold while in some statuses
(``EntityKind(pools=(Pool("gpu-slots", 4, held_in={JobStatus.RUNNING}),))``);
kinds that declare a pool of the same name share it. The apply refuses a move
into a holding status that would take the pool past its capacity: the entity
is SKIPPED (error code :data:`POOL_FULL`) and stays where it is, to be tried
again by a later tick. Configuration (``[pools] gpu-slots = 8``) overrides a
declared pool's capacity.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from drover.model.checks import is_kebab_case
from drover.model.errors import InvalidHandlerError

__all__ = ["POOL_FULL", "Pool", "PoolHolders"]

#: Error code of a move the apply refused because a pool was full.
POOL_FULL = "pool-full"


def _statuses(values: Iterable[str]) -> frozenset[str]:
    return frozenset(str(v) for v in values)


@attrs.frozen
class Pool:
    """A named pool of ``capacity`` tokens; an entity holds one while in ``held_in``.

    Example (experimaestro's counter tokens: at most 4 jobs on the GPUs)::

        Pool("gpu-slots", 4, held_in={JobStatus.RUNNING})
    """

    name: str
    capacity: int
    held_in: frozenset[str] = attrs.field(converter=_statuses)

    def __attrs_post_init__(self) -> None:
        if not is_kebab_case(self.name) or len(self.name) > 64:
            raise InvalidHandlerError(f"pool name {self.name!r} must be kebab-case, 1-64 chars")
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int):
            raise InvalidHandlerError(f"pool {self.name!r}: capacity must be an integer")
        if self.capacity < 0:
            raise InvalidHandlerError(f"pool {self.name!r}: capacity must be >= 0")
        if not self.held_in:
            raise InvalidHandlerError(f"pool {self.name!r}: held_in names no status")


@attrs.frozen
class PoolHolders:
    """One pool as the engine enforces it: its capacity and who holds it.

    ``holders`` are ``(kind, statuses)`` pairs, one per kind declaring the pool.
    """

    name: str
    capacity: int
    holders: tuple[tuple[str, frozenset[str]], ...]

    def held_by(self, kind: str, status: str) -> bool:
        """Whether an entity of ``kind`` in ``status`` holds a token of this pool."""
        return any(k == kind and status in statuses for k, statuses in self.holders)
