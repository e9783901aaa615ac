"""``drover doctor``: the invariants a live database must hold, each a named rule.

What the test campaign checks after every run, an operator can check on a
live database: each rule reads through the read-only queries
(:class:`~drover.storage.doctor.DoctorReads`) and is judged here, for every
kind by its own declaration (terminal statuses, parent kind, pools and
their capacities, exit codes). :func:`examine` returns one
:class:`Problem` per entity (pool, coordinator) and rule broken; none means
every rule holds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import attrs

from drover.storage.queries import Queries, RecordedMoves

__all__ = ["RULES", "Problem", "chain_problem", "examine"]

#: Every rule, by name: what holds when it does.
RULES: dict[str, str] = {
    "ended-with-live-children": "no ended entity has a live child",
    "history-chain": (
        "each entity's recorded status changes chain from the status it was created in to "
        "the status it has"
    ),
    "unexplained-end": (
        "each ended entity of a kind with exit codes (a kernel) says how it ended: its exit "
        "code, its status_info, the message of the change that ended it, or its parent's "
        "move in the same write"
    ),
    "pool-over-capacity": "no pool is held past its capacity",
    "claim-over-capacity": "no live entity claims more units of a pool than the pool has",
    "claim-incomplete": "a tick's claim on an entity has its owner, token and expiry, or none",
    "claim-past-ttl": "no tick's claim lasts longer than claim_ttl",
    "stale-coordinator": (
        "every coordinator not marked stopped beat within three heartbeat intervals"
    ),
}


@attrs.frozen
class Problem:
    """One rule broken: by which entity (``kind`` its kind), pool or coordinator."""

    rule: str
    kind: str
    subject: str
    message: str


def _components(edges: Iterable[tuple[str, str]], nodes: Iterable[str]) -> list[set[str]]:
    parent: dict[str, str] = {n: n for n in nodes}

    def root(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for a, b in edges:
        parent[root(a)] = root(b)
    groups: dict[str, set[str]] = {}
    for n in parent:
        groups.setdefault(root(n), set()).add(n)
    return sorted(groups.values(), key=sorted)


def chain_problem(recorded: RecordedMoves) -> str | None:
    """Why ``recorded``'s moves do not chain to its status, or ``None`` when they do.

    Order-free (rows of several writers carry clocks that disagree): the moves
    chain when they make one path, each used once, from the status it was
    created in (any, when its CREATED row was pruned) to the one it has.
    """
    start, end = recorded.created, recorded.status
    if not recorded.moves:
        if start is not None and start != end:
            return f"created {start}, now {end}, with no recorded change"
        return None
    # Changes out of a status minus changes into it: a path from ``start`` to ``end`` has
    # one more out at its start, one more in at its end, as many of each elsewhere.
    balance: Counter[str] = Counter()
    for source, target, times in recorded.moves:
        balance[source] += times
        balance[target] -= times
    balance[end] += 1
    if start is not None:
        balance[start] -= 1
    else:
        # History pruned from the start: the one status left once more than entered begins it.
        extra = [status for status, off in balance.items() if off]
        if len(extra) == 1 and balance[extra[0]] == 1:
            balance[extra[0]] = 0
    details = [
        f"no recorded change into {status}" if off > 0 else f"no recorded change out of {status}"
        for status, off in sorted(balance.items())
        if off
    ]
    nodes = {end, *(s for move in recorded.moves for s in move[:2])}
    if start is not None:
        nodes.add(start)
    parts = _components(((a, b) for a, b, _ in recorded.moves), nodes)
    # Only when each status is entered as often as left: a gap already splits the chain.
    if not details and len(parts) > 1:
        details.append("separate chains: " + " | ".join(", ".join(sorted(part)) for part in parts))
    if not details:
        return None
    origin = f"created {start}, " if start is not None else ""
    return f"{origin}now {end}: " + "; ".join(details)


async def _entity_rules(queries: Queries) -> list[Problem]:
    by_parent: dict[tuple[str, str, str], list[str]] = {}
    for live in await queries.ended_with_live_children():
        key = (live.parent_kind, live.parent_id, live.parent_status)
        by_parent.setdefault(key, []).append(
            f"{live.child_kind} {live.child_id} ({live.child_status})"
        )
    problems = [
        Problem(
            "ended-with-live-children",
            kind,
            parent,
            f"it is {status}, but {len(children)} child(ren) are live: {', '.join(children)}",
        )
        for (kind, parent, status), children in by_parent.items()
    ]
    for recorded in await queries.recorded_moves():
        gap = chain_problem(recorded)
        if gap is not None:
            problems.append(Problem("history-chain", recorded.kind, recorded.entity_id, gap))
    for end in await queries.silent_ends():
        if end.found and end.message is None and not end.with_parent:
            problems.append(
                Problem(
                    "unexplained-end",
                    end.kind,
                    end.entity_id,
                    f"it ended {end.status} with no exit code, no status_info, no message, "
                    "and not with its parent",
                )
            )
    return problems


async def _claim_rules(queries: Queries, now: float, latest: float) -> list[Problem]:
    problems = [
        Problem(
            "pool-over-capacity",
            "pool",
            use.name,
            f"{use.held} units are held; its capacity is {use.capacity}",
        )
        for use in await queries.pool_use()
        if use.held > use.capacity
    ]
    problems += [
        Problem(
            "claim-over-capacity",
            claim.kind,
            claim.entity_id,
            f"it claims {claim.units} units of pool {claim.pool}, whose capacity is "
            f"{claim.capacity}: it could never hold them",
        )
        for claim in await queries.oversized_claims()
    ]
    for claim in await queries.odd_claims(latest):
        parts = (claim.owner is not None, claim.token, claim.expires is not None)
        if any(parts) and not all(parts):
            missing = [
                n for n, held in zip(("owner", "token", "expiry"), parts, strict=True) if not held
            ]
            problems.append(
                Problem(
                    "claim-incomplete",
                    claim.kind,
                    claim.entity_id,
                    f"its tick claim has no {' and no '.join(missing)}",
                )
            )
        elif claim.expires is not None:
            problems.append(
                Problem(
                    "claim-past-ttl",
                    claim.kind,
                    claim.entity_id,
                    f"{claim.owner}'s claim expires in {claim.expires - now:.0f}s, past claim_ttl",
                )
            )
    return problems


async def examine(
    queries: Queries, *, now: float, claim_ttl: float, heartbeat_interval: float
) -> list[Problem]:
    """Every rule of :data:`RULES` broken, on the database ``queries`` reads (empty: all
    hold). ``claim_ttl`` and ``heartbeat_interval`` are the configuration's: a claim may
    last that long, and a coordinator is stale after three heartbeat intervals (the
    same window is allowed for the clocks of the host and the coordinators to differ)."""
    window = 3 * heartbeat_interval
    problems = await _entity_rules(queries)
    problems += await _claim_rules(queries, now, now + claim_ttl + window)
    for coordinator in await queries.coordinators():
        age = now - coordinator.heartbeat_at.timestamp()
        if coordinator.stopped_at is None and age > window:
            problems.append(
                Problem(
                    "stale-coordinator",
                    "coordinator",
                    coordinator.id,
                    f"not marked stopped, but its last heartbeat is {age:.0f}s old "
                    f"({coordinator.host}, pid {coordinator.pid}): it died without stopping",
                )
            )
    return problems
