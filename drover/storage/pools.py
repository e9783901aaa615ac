"""Pools of counter tokens (:mod:`drover.model.pools`) enforced inside the apply.

Before an apply moves entities into a status that holds a pool, it counts
the pool's holders and admits only as many as there are free tokens; the
others are refused (SKIPPED, :data:`~drover.model.pools.POOL_FULL`, with the
count in the message). Atomic on both databases: on SQLite every write
transaction is the only one (``BEGIN IMMEDIATE``); on PostgreSQL the apply
first takes each pool's transaction-level lock, in name order (so two applies
never wait on each other in a cycle), and counts after it: a second
coordinator's apply waits until the first has committed, then counts its
moves.

A pool a kind declares ``claimed`` counts the units its holders claim
(``spec["pools"]``, read in the same statement) instead of one per holder,
and the group's claims are read once, by id, before the admission. A claim
the handler decided for the move (``HandlerResult.claims``, carried as
``Change.claims``) is counted instead of the spec's and, once the move is
written, replaces ``spec["pools"]`` in the same transaction, under the same
locks: the next apply's count includes it.

A pool family (``gpu-node-*``) is entered member by member: each entity
enters the members its claims name (``Change.claims``, else ``spec["pools"]``,
read once by id for the whole apply, before any lock), and each member is
locked (in name order, with the declared pools) and counted like a declared
claimed pool.

Only the applies of kinds that declare pools pay: one dictionary lookup per
group otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from drover.model.kinds import Kinds
from drover.model.plan import AppliedChange, Change
from drover.model.pools import POOLS_KEY, PoolHolders, in_family, is_family
from drover.storage._sql import bounded_statement, ids_value, statement
from drover.storage.schema import entities
from drover.storage.statements.ids import ids_param
from drover.storage.statements.pools import claimed_units, claims_json, usage

__all__ = ["PoolGate"]


e = entities


def lock_pool() -> sa.Select[Any]:
    """PostgreSQL: take the pool ``:pool_key``'s lock until the transaction ends.

    A transaction-level advisory lock: every apply that may move entities into
    the pool takes it before counting, so two coordinators never both see room
    for the same token. (SQLite needs none: ``BEGIN IMMEDIATE`` already makes
    every write transaction the only one.)
    """
    key = sa.func.hashtextextended(sa.bindparam("pool_key", type_=sa.String), 0)
    return sa.select(sa.func.pg_advisory_xact_lock(key))


def claims_of(names: tuple[str, ...], postgres: bool) -> sa.Select[Any]:
    """Id and the units of each pool of ``names`` claimed by the entities ``:ids``."""
    columns = [claimed_units(name, postgres).label(f"c{i}") for i, name in enumerate(names)]
    return sa.select(e.c.id, *columns).where(ids_param(e.c.id, "ids", postgres))


def pool_claims(postgres: bool) -> sa.Select[Any]:
    """Id and ``spec["pools"]`` (JSON text, or NULL) of the entities ``:ids``."""
    return sa.select(e.c.id, claims_json(postgres)).where(ids_param(e.c.id, "ids", postgres))


def _units(value: object) -> int:
    """A claim's units (anything but a positive integer reads as none)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def set_claims(postgres: bool) -> sa.Update:
    """``spec["pools"] = :claims`` (JSON text) of the entity ``:eid`` (executed with many rows).

    The claims a handler decided for a move replace the entity's earlier ones:
    a task placed on another worker than last time no longer claims the old one.
    """
    claims = sa.bindparam("claims", type_=sa.String)
    value: sa.ColumnElement[Any]
    if postgres:
        from sqlalchemy.dialects.postgresql import JSONB

        path = sa.literal([POOLS_KEY], sa.ARRAY(sa.Text))
        value = sa.func.jsonb_set(e.c.spec, path, sa.cast(claims, JSONB))
    else:
        value = sa.func.json_set(e.c.spec, f"$.{POOLS_KEY}", sa.func.json(claims))
    return sa.update(e).where(e.c.id == sa.bindparam("eid")).values(spec=value)


class PoolGate:
    """The pools of one apply's transaction: locks taken, and what each group may enter."""

    def __init__(self, conn: sa.Connection, kinds: Kinds, postgres: bool) -> None:
        self._conn = conn
        self._kinds = kinds
        self._postgres = postgres
        self._locked: set[str] = set()
        # spec["pools"] of the entities entering a pool family, read once per apply.
        self._specs: dict[str, dict[str, Any]] = {}

    def entered(self, kind: str, from_status: str, to_status: str) -> tuple[PoolHolders, ...]:
        """The pools a move enters (none for kinds without pools)."""
        return self._kinds.pools_entered(kind, from_status, to_status)

    def lock(self, names: Iterable[str]) -> None:
        """Take the pools' locks (PostgreSQL), in name order, once per transaction."""
        if not self._postgres:
            return
        stmt = statement(("lock-pool",), lock_pool)
        for name in sorted(set(names) - self._locked):
            self._conn.execute(stmt, {"pool_key": f"drover-pool:{name}"})
            self._locked.add(name)

    def lock_for(self, changes: Sequence[Change]) -> None:
        """Lock every pool any of ``changes`` would enter (a family's: the members their
        claims name), before the apply writes anything."""
        names: set[str] = set()
        families: list[tuple[Change, PoolHolders]] = []
        for c in changes:
            if not c.changes_status:
                continue
            for pool in self.entered(c.kind, c.from_status, str(c.to_status)):
                if is_family(pool.name):
                    families.append((c, pool))
                else:
                    names.add(pool.name)
        if families:
            self._read_specs([c.entity_id for c, _ in families if c.claims is None])
            for c, family in families:
                names.update(self._members(c, (family,)))
        self.lock(names)

    def _read_specs(self, ids: Sequence[str]) -> None:
        """Read (once) the ``spec["pools"]`` of the entities ``ids``."""
        wanted = [i for i in dict.fromkeys(ids) if i not in self._specs]
        if not wanted:
            return
        pg = self._postgres
        query = statement(("pool-specs", pg), lambda: pool_claims(pg))
        for eid, text in self._conn.execute(query, {"ids": ids_value(wanted, pg)}):
            claims = json.loads(text) if isinstance(text, str) else text
            self._specs[eid] = claims if isinstance(claims, dict) else {}

    def _members(self, change: Change, families: Sequence[PoolHolders]) -> dict[str, int]:
        """The members of ``families`` ``change``'s entity claims, and the units of each."""
        if change.claims is not None:
            source: Mapping[str, Any] = change.claims
        else:
            source = self._specs.get(change.entity_id, {})
        return {
            name: _units(units)
            for name, units in source.items()
            if _units(units) and any(in_family(f.name, name) for f in families)
        }

    def usage(self, pool: PoolHolders) -> tuple[int, int]:
        """``(units held, capacity)`` of ``pool`` now (its lock taken first; the capacity as
        changed at run time, if it was)."""
        self.lock([pool.name])
        pg = self._postgres
        # A family's members are as many as the workers, say: keep only the recent ones.
        cache = statement if pool.family is None else bounded_statement
        query = cache(("pool-usage", pool, pg), lambda: usage(pool, pg))
        held, capacity = self._conn.execute(query).one()
        return int(held or 0), int(capacity)

    def _claims(self, names: tuple[str, ...], ids: list[str]) -> dict[str, tuple[int, ...]]:
        """The units of each pool of ``names`` each entity of ``ids`` claims (``spec["pools"]``)."""
        pg = self._postgres
        query = statement(("pool-claims", names, pg), lambda: claims_of(names, pg))
        rows = self._conn.execute(query, {"ids": ids_value(ids, pg)}).all()
        return {row[0]: tuple(int(units) for units in row[1:]) for row in rows}

    def admit(self, group: Sequence[Change]) -> tuple[list[Change], list[tuple[Change, str]]]:
        """Split a group of alike changes into those admitted and those refused (with why).

        The group's order (the fetch order: priority, then age) decides who
        gets the free tokens; each entity takes them first-fit: one that needs
        more units than are left is refused, and a later one that needs fewer
        may still be admitted. An entity needs one unit of a plain pool, and
        of a ``claimed`` pool the units its spec claims (none: always admitted).
        """
        first = group[0]
        if not first.changes_status:
            return list(group), []
        entered = self.entered(first.kind, first.from_status, str(first.to_status))
        if not entered:
            return list(group), []
        pools = [p for p in entered if not is_family(p.name)]
        families = [p for p in entered if is_family(p.name)]
        claimed = tuple(p.name for p in pools if first.kind in p.claimed_by)
        # Claims the handler decided for the move stand in for the spec's.
        from_spec = [c.entity_id for c in group if c.claims is None]
        claims = self._claims(claimed, from_spec) if claimed and from_spec else {}
        for c in group:
            if c.claims is not None:
                claims[c.entity_id] = tuple(int(c.claims.get(name, 0)) for name in claimed)
        if families:
            self._read_specs(from_spec)
        members = {c.entity_id: self._members(c, families) for c in group} if families else {}
        # Per pool: [units held now, capacity], counted with the moves this group is admitted
        # to make; a family's members after the declared pools, in name order.
        room = {pool.name: list(self.usage(pool)) for pool in pools}
        for name in sorted({n for found in members.values() for n in found}):
            member = self._kinds.pool(name)
            if member is not None:
                room[name] = list(self.usage(member))
        admitted: list[Change] = []
        refused: list[tuple[Change, str]] = []
        for change in group:
            claim = iter(claims.get(change.entity_id, (0,) * len(claimed)))
            needs = {pool.name: next(claim) if pool.name in claimed else 1 for pool in pools}
            needs.update(
                (n, units) for n, units in members.get(change.entity_id, {}).items() if n in room
            )
            short = next(
                # An entity that claims none of a pool is never refused by it, even over capacity.
                (n for n, units in needs.items() if units and room[n][0] + units > room[n][1]),
                None,
            )
            if short is None:
                admitted.append(change)
                for name, units in needs.items():
                    room[name][0] += units
                continue
            count = f"{room[short][0]}/{room[short][1]} held"
            if short in claimed or short not in {p.name for p in pools}:
                count += f", {needs[short]} claimed"
            refused.append(
                (
                    change,
                    f"pool {short!r} is full ({count}); stays {first.from_status}, "
                    f"not moved to {first.to_status}",
                )
            )
        return admitted, refused

    def write_claims(self, group: Sequence[Change], applied: Sequence[AppliedChange]) -> None:
        """Write the handler-decided claims of the changes whose move was written.

        ``spec["pools"]`` becomes the change's claims, so later counts (this
        transaction's and every other coordinator's, after its commit) see them.
        """
        moved = {a.entity_id for a in applied if a.to_status != a.from_status}
        rows = [
            {"eid": c.entity_id, "claims": json.dumps(dict(c.claims), sort_keys=True)}
            for c in group
            if c.claims is not None and c.entity_id in moved
        ]
        if rows:
            pg = self._postgres
            self._conn.execute(statement(("set-claims", pg), lambda: set_claims(pg)), rows)
