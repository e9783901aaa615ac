"""Pools of counter tokens: at most ``capacity`` entities hold a pool at once.

A kind declares the pools its entities hold while in some statuses
(``EntityKind(pools=(Pool("gpu-slots", 4, held_in={JobStatus.RUNNING}),))``);
kinds that declare a pool of the same name share it. The apply refuses a move
into a holding status that would take the pool past its capacity: the entity
is SKIPPED (error code :data:`POOL_FULL`) and stays where it is, to be tried
again by a later tick. Configuration (``[pools] gpu-slots = 8``) overrides a
declared pool's capacity.

A pool declared ``claimed=True`` is held per entity instead: an entity holds
the number of units its ``spec["pools"]`` names for the pool (experimaestro's
``count`` tokens of several counters, ``spec["pools"] = {"xpm-token": 2}``),
and an entity that claims none holds none.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from drover.model.checks import is_kebab_case
from drover.model.errors import InvalidHandlerError

__all__ = [
    "POOLS_KEY",
    "POOL_FULL",
    "Pool",
    "PoolHolders",
    "PoolHolding",
    "PoolUsage",
    "pool_claim",
]

#: Error code of a move the apply refused because a pool was full.
POOL_FULL = "pool-full"
#: The spec key of an entity's claims on ``claimed`` pools: ``{pool name: units}``.
POOLS_KEY = "pools"


def pool_claim(spec: object, name: str) -> int:
    """The units of pool ``name`` an entity's ``spec`` claims (0 when it claims none).

    Creation refuses anything but positive integers; anything else reads as 0.
    """
    claims = spec.get(POOLS_KEY) if isinstance(spec, dict) else None
    units = claims.get(name) if isinstance(claims, dict) else None
    if isinstance(units, bool) or not isinstance(units, int) or units < 0:
        return 0
    return units


def _statuses(values: Iterable[str]) -> frozenset[str]:
    return frozenset(str(v) for v in values)


@attrs.frozen
class Pool:
    """A named pool of ``capacity`` tokens; an entity holds one while in ``held_in``.

    Example (at most 4 jobs on the GPUs)::

        Pool("gpu-slots", 4, held_in={JobStatus.RUNNING})

    ``claimed=True``: an entity holds, while in ``held_in``, the units its
    ``spec["pools"][name]`` claims (a positive integer, checked at creation),
    and none when it claims none. Example (experimaestro's counter tokens: a
    job takes ``count`` of them, ``spec["pools"] = {"xpm-token": 2}``)::

        Pool("xpm-token", 4, held_in={JobState.SCHEDULED, JobState.RUNNING}, claimed=True)
    """

    name: str
    capacity: int
    held_in: frozenset[str] = attrs.field(converter=_statuses)
    claimed: bool = False

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

    ``holders`` are ``(kind, statuses)`` pairs, one per kind declaring the pool;
    ``claimed_by`` the kinds whose entities hold the units their spec claims
    (declared ``claimed=True``) rather than one each.
    """

    name: str
    capacity: int
    holders: tuple[tuple[str, frozenset[str]], ...]
    claimed_by: frozenset[str] = frozenset()

    def held_by(self, kind: str, status: str) -> bool:
        """Whether an entity of ``kind`` in ``status`` holds a token of this pool."""
        return any(k == kind and status in statuses for k, statuses in self.holders)


@attrs.frozen
class PoolHolding:
    """One entity holding a pool: its id, kind, status and the units it holds."""

    entity_id: str
    kind: str
    status: str
    units: int


@attrs.frozen
class PoolUsage:
    """How full a pool is now (``Queries.pool_usage(name)``): its capacity, the units
    held, and who holds them (oldest holding first).

    ``free`` is what is left (0 when the pool is over its capacity: entities
    created or reported holding it may take it past it). Example: Iris picks
    the worker with the most free slots::

        usage = await queries.pool_usage(worker_pool_name(worker))
        if usage.free >= claim: ...
    """

    name: str
    capacity: int
    held: int
    holders: tuple[PoolHolding, ...] = ()

    @property
    def free(self) -> int:
        """Units left before the pool is full (never below 0)."""
        return max(self.capacity - self.held, 0)
