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

A **pool family** is a claimed pool whose name ends in ``-*``
(``Pool("gpu-node-*", 2, held_in={RUNNING}, claimed=True)``): it declares
every pool named by its prefix and a kebab-case suffix (``gpu-node-n7``, at
most 64 characters), so a pool can appear while drover runs (a worker that
joins) without being declared. Each member is counted and locked on its own,
like a declared claimed pool; its capacity is the family's unless one was set
for it (``[pools] gpu-node-n7 = 4``, ``drover pools set``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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
    "collect_pools",
    "in_family",
    "is_family",
    "pool_claim",
    "takes_claim",
]

#: Error code of a move the apply refused because a pool was full.
POOL_FULL = "pool-full"
#: The spec key of an entity's claims on ``claimed`` pools: ``{pool name: units}``.
POOLS_KEY = "pools"
#: The longest pool name (a family's members included).
MAX_POOL_NAME = 64


def is_family(name: str) -> bool:
    """Whether pool ``name`` names a family (``gpu-node-*``) rather than one pool."""
    return name.endswith("*")


def in_family(family: str, name: str) -> bool:
    """Whether pool ``name`` is a member of the pool family ``family`` (``gpu-node-n7`` of
    ``gpu-node-*``): the family's prefix, then a kebab-case suffix, 64 chars at most."""
    prefix = family[:-1]
    return (
        len(prefix) < len(name) <= MAX_POOL_NAME and name.startswith(prefix) and is_kebab_case(name)
    )


def takes_claim(pools: Iterable[Pool], name: str) -> bool:
    """Whether a kind declaring ``pools`` takes a claim on pool ``name``: it declares
    ``name`` claimed, or a family ``name`` is a member of."""
    return any(
        p.claimed and (p.name == name or (is_family(p.name) and in_family(p.name, name)))
        for p in pools
    )


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

    A name ending in ``-*`` declares a family of claimed pools (``claimed=True``
    required): every pool named by the prefix and a kebab-case suffix, each of
    ``capacity`` unless one was set for it. Example (one pool per worker, for
    the workers that join while drover runs)::

        Pool("gpu-node-*", 2, held_in={JobStatus.RUNNING}, claimed=True)
    """

    name: str
    capacity: int
    held_in: frozenset[str] = attrs.field(converter=_statuses)
    claimed: bool = False

    def __attrs_post_init__(self) -> None:
        family = isinstance(self.name, str) and is_family(self.name)
        base = self.name[:-2] if family and self.name.endswith("-*") else self.name
        if not isinstance(base, str) or not is_kebab_case(base) or len(self.name) > 64:
            raise InvalidHandlerError(
                f"pool name {self.name!r} must be kebab-case, 1-64 chars (a family: "
                "kebab-case ending in '-*', like 'gpu-node-*')"
            )
        if family and not self.claimed:
            raise InvalidHandlerError(
                f"pool family {self.name!r} must be claimed=True: an entity holds the members "
                "its claims name (spec['pools'] or the handler's claims)"
            )
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
    (declared ``claimed=True``) rather than one each; ``family`` the family a
    member of one belongs to (``gpu-node-*`` of ``gpu-node-n7``).
    """

    name: str
    capacity: int
    holders: tuple[tuple[str, frozenset[str]], ...]
    claimed_by: frozenset[str] = frozenset()
    family: str | None = None

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


def collect_pools(
    declared: Iterable[tuple[str, Pool]], capacities: Mapping[str, int]
) -> dict[str, PoolHolders]:
    """The pools (and families) the kinds declare, by name, from ``(kind, pool)`` pairs,
    with the configured ``capacities`` (by pool, family or family member) on top."""
    by_name: dict[str, list[tuple[str, Pool]]] = {}
    for kind, pool in declared:
        by_name.setdefault(pool.name, []).append((kind, pool))
    found: dict[str, PoolHolders] = {}
    for name, pairs in by_name.items():
        sizes = {pool.capacity for _, pool in pairs}
        if len(sizes) > 1:
            raise InvalidHandlerError(
                f"pool {name!r} is declared with different capacities "
                f"{sorted(sizes)} by kinds {sorted(k for k, _ in pairs)}"
            )
        capacity = capacities.get(name, sizes.pop())
        holders = tuple(sorted((k, p.held_in) for k, p in pairs))
        claimed = frozenset(k for k, p in pairs if p.claimed)
        found[name] = PoolHolders(name, capacity, holders, claimed)
    families = sorted(n for n in found if is_family(n))
    for name in found:
        # A name two families (or a family and a declared pool) share would be counted twice.
        probe = name[:-1] + "x" if is_family(name) else name
        other = next((f for f in families if f != name and in_family(f, probe)), None)
        if other is not None:
            raise InvalidHandlerError(f"pool {name!r} overlaps the pool family {other!r}")
    unknown = sorted(n for n in capacities if n not in found and not _family_of(families, n))
    if unknown:
        raise InvalidHandlerError(
            f"pools: unknown pool(s) {unknown}; declared by the kinds: {sorted(found)}"
        )
    for name, capacity in capacities.items():
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise InvalidHandlerError(f"pools.{name} must be an integer >= 0, got {capacity!r}")
    return found


def _family_of(families: Iterable[str], name: str) -> str | None:
    return next((f for f in families if in_family(f, name)), None)
