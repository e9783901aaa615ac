"""What the API and the CLI write: new entities, spec changes, links, termination requests
and reopens, each in one transaction, each recorded in history (handler ``api`` unless
another source is named).

:class:`EntityWrites` is one of the services :class:`~drover.storage.repository.Repository`
is made of; its statements are here. Creation goes through the one creation check
(:func:`drover.model.creation.check_new_entities`); termination and reopening are
changes written by the one apply (:class:`drover.storage.apply.Apply`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from drover.model.creation import check_limits, check_new_entities, check_spec_patch
from drover.model.errors import InvalidSpecError, UnknownEntityError
from drover.model.kinds import EntityKind, Kinds
from drover.model.plan import Change
from drover.model.values import Entity, NewEntity, TerminationOutcome
from drover.storage._sql import statement
from drover.storage.apply import Apply
from drover.storage.entity_reads import EntityReads
from drover.storage.inserts import API_SOURCE, INSERT_RELATIONS, insert_new_entities, merge_patch
from drover.storage.journal import history_row, write_history
from drover.storage.notify import notify
from drover.storage.schema import entities, pool_capacities, relations

__all__ = ["REOPENED", "EntityWrites"]

e = entities
#: ``result`` of the history row a reopen writes.
REOPENED = "REOPENED"

#: Id and kind of the entities among ``:ids`` (a list) that exist.
_KINDS_OF = sa.select(e.c.id, e.c.kind).where(e.c.id.in_(sa.bindparam("ids", expanding=True)))
#: ``spec = :b_spec`` of the entity ``:b_id``.
_SET_SPEC = (
    sa.update(e)
    .where(e.c.id == sa.bindparam("b_id"))
    .values(spec=sa.bindparam("b_spec", type_=e.c.spec.type))
)
#: The link ``:b_source --:b_name--> :b_target``, if it exists.
_RELATION_EXISTS = sa.select(relations.c.name).where(
    relations.c.source_id == sa.bindparam("b_source"),
    relations.c.name == sa.bindparam("b_name"),
    relations.c.target_id == sa.bindparam("b_target"),
)
#: Clear the ``status_info`` of the entity ``:b_id``: it said how the entity had ended.
_CLEAR_STATUS_INFO = e.update().where(e.c.id == sa.bindparam("b_id")).values(status_info=None)


#: The largest capacity a pool may be given (the ``capacity`` column is 32-bit).
_MAX_CAPACITY = 2**31 - 1
#: Forget the run-time capacity of the pool ``:name`` (before it is written again).
_DROP_CAPACITY = sa.delete(pool_capacities).where(pool_capacities.c.name == sa.bindparam("name"))
_INSERT_CAPACITY = sa.insert(pool_capacities)


def _spec_of(postgres: bool) -> sa.Select[Any]:
    """Kind, status and spec of the entity ``:b_id``, locked on PostgreSQL (before a patch)."""
    query = sa.select(e.c.kind, e.c.status, e.c.spec).where(e.c.id == sa.bindparam("b_id"))
    return query.with_for_update() if postgres else query


def _entity_and_parent(postgres: bool) -> sa.Select[Any]:
    """Kind and status of the entity ``:b_id``, and its parent's id and status (locked on
    PostgreSQL)."""
    parent = entities.alias("parent")
    query = (
        sa.select(e.c.kind, e.c.status, parent.c.id, parent.c.status)
        .select_from(e.outerjoin(parent, parent.c.id == e.c.parent_id))
        .where(e.c.id == sa.bindparam("b_id"))
    )
    return query.with_for_update(of=e) if postgres else query


class EntityWrites(EntityReads):
    """Creating, changing, linking, ending and reopening entities of any kind."""

    async def create_entities(
        self, news: Sequence[NewEntity], *, seeding: bool = False
    ) -> list[str]:
        """Check and create entities of any kind (with children and links) in one transaction.

        Every entity is checked first (the check the apply uses for a handler's
        creations too): one refused entity raises InvalidSpecError and nothing is
        written; a parent or link target that does not exist raises
        UnknownEntityError. ``seeding`` (tests and benchmarks, see
        :meth:`seed_entities`) allows any status of the kind.
        """
        kinds = self._db.kinds
        news = check_new_entities(news, kinds, seeding=seeding)
        if not news:
            return []
        now = self._db.clock.time()
        created = {n.id for n in news}
        parents = {n.parent_id for n in news if n.parent_id is not None}
        wanted = sorted((parents | {t for n in news for _, t in n.links}) - created)

        def work(conn: sa.Connection) -> list[str]:
            if wanted:
                found = {r[0]: r[1] for r in conn.execute(_KINDS_OF, {"ids": wanted})}
                for new in news:
                    _check_references(new, found, created, kinds[new.kind].parent)
            insert_new_entities(conn, news, now, API_SOURCE, kinds)
            # Coordinators listening (PostgreSQL) wake their handlers on commit.
            notify(conn, {"new": 1})
            return [n.id for n in news]

        return await self._db.write(work)

    async def seed_entities(self, news: Sequence[NewEntity]) -> list[str]:
        """Like :meth:`create_entities`, for tests and benchmarks: any status of the kind
        (outside its ``created_in``), and children with an ``agent_id``."""
        return await self.create_entities(news, seeding=True)

    async def create_entity(
        self,
        kind: str,
        *,
        spec: Mapping[str, Any] | None = None,
        status: str | None = None,
        parent_id: str | None = None,
        priority: int = 0,
        name: str | None = None,
        children: Sequence[Mapping[str, Any]] = (),
        links: Sequence[tuple[str, str]] = (),
    ) -> str:
        """Create one entity of ``kind`` and return its id (history row ``CREATED`` by ``api``)."""
        new = NewEntity(
            kind, dict(spec or {}), parent_id=parent_id, status=status, name=name,
            priority=priority, children=list(children), links=list(links),
        )  # fmt: skip
        (entity_id,) = await self.create_entities([new])
        return entity_id

    async def update_spec(self, entity_id: str, patch: Mapping[str, Any]) -> Entity:
        """Merge-patch an entity's spec (desired state), recorded in history as ``api``."""
        patch = check_spec_patch(patch)
        now, db = self._db.clock.time(), self._db

        def work(conn: sa.Connection) -> None:
            query = statement(("spec-of", db.postgres), lambda: _spec_of(db.postgres))
            row = conn.execute(query, {"b_id": entity_id}).first()
            if row is None:
                raise UnknownEntityError(entity_id)
            kind, status, spec = row
            merged = merge_patch(spec, patch)
            if kind in db.kinds:
                # The limits hold for a changed spec as for a new one (drover scale).
                check_limits(db.kinds[kind], merged)
            conn.execute(_SET_SPEC, {"b_id": entity_id, "b_spec": merged})
            message = f"spec changed: {', '.join(sorted(patch))}"
            write_history(conn, [history_row(
                entity_id, kind, API_SOURCE, "SUCCESS", status, status, None, message, now
            )])  # fmt: skip

        await db.write(work)
        return await self.get_entity(entity_id)

    async def link(self, source_id: str, relation: str, target_id: str) -> None:
        """Link two entities (``depends_on``, or a plugin's own relation name; idempotent)."""
        if not relation or len(relation) > 64:
            raise InvalidSpecError(f"relation name {relation!r} must be 1-64 characters")

        def work(conn: sa.Connection) -> None:
            ids = {"ids": [source_id, target_id]}
            found = {r[0] for r in conn.execute(_KINDS_OF, ids)}
            for entity_id in (source_id, target_id):
                if entity_id not in found:
                    raise UnknownEntityError(entity_id)
            wanted = {"b_source": source_id, "b_name": relation, "b_target": target_id}
            if conn.execute(_RELATION_EXISTS, wanted).first() is None:
                row = {"source_id": source_id, "name": relation, "target_id": target_id}
                conn.execute(INSERT_RELATIONS, row)

        await self._db.write(work)

    async def set_pool_capacities(self, capacities: Mapping[str, int]) -> None:
        """Change pools' capacities while drover runs (``drover pools set``): every apply,
        fetch and read of those pools, on every coordinator, uses them from now on.

        Each name must be a pool the kinds declare, a member of a pool family they
        declare (``gpu-node-n7`` of ``gpu-node-*``; the family's own name sets the
        default of its members given none), and each capacity a whole number
        >= 0; otherwise InvalidSpecError names the first problem and nothing is
        written. A lower capacity refuses new holders only: entities holding the
        pool keep it.
        """
        kinds = self._db.kinds
        for name, capacity in capacities.items():
            if not isinstance(name, str) or kinds.pool(name) is None:
                known = ", ".join(sorted(kinds.pools)) or "none"
                raise InvalidSpecError(
                    f"no pool named {name!r}; pools: {known} (pools are declared by kinds:"
                    " declare one with capacity 0 and raise it here when it is needed, or a"
                    " family 'prefix-*' whose members appear at run time)"
                )
            if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
                raise InvalidSpecError(
                    f"pool {name!r}: capacity must be a whole number >= 0, not {capacity!r}"
                )
            if capacity > _MAX_CAPACITY:
                raise InvalidSpecError(f"pool {name!r}: capacity must be <= {_MAX_CAPACITY}")
        now, db = self._db.clock.time(), self._db
        rows = [{"name": n, "capacity": c, "changed_at": now} for n, c in capacities.items()]

        def work(conn: sa.Connection) -> None:
            for row in rows:
                conn.execute(_DROP_CAPACITY, row)
            if rows:
                conn.execute(_INSERT_CAPACITY, rows)

        await db.write(work)

    async def request_termination(
        self,
        session_ids: Sequence[str],
        *,
        source: str = API_SOURCE,
        reason: str | None = None,
        mode: str | None = None,
    ) -> list[TerminationOutcome]:
        """Ask for entities (of any kind) to end, each by its kind's termination rule.

        Recorded as SUCCESS rows of ``source``, with ``status_info``
        USER_REQUESTED (or the rule's own) and ``reason`` in the message.
        ``mode`` names a termination mode (the kinds' rules of that mode). Raises
        UnknownEntityError for an unknown id, and InvalidSpecError for a kind
        without the mode, writing nothing. A handler asks for the same (plain)
        through its result (``HandlerResult.terminate``), in its tick's apply.
        """
        now, db = self._db.clock.time(), self._db
        clock = db.clock.time

        def work(conn: sa.Connection) -> list[TerminationOutcome]:
            apply = Apply(conn, source, now, postgres=db.postgres, kinds=db.kinds, clock=clock)
            return apply.end(session_ids, reason=reason, mode=mode)

        return await db.write(work)

    async def reopen(
        self, entity_id: str, status: str, *, source: str = API_SOURCE, message: str | None = None
    ) -> None:
        """Take an ended entity back to the live ``status``; clear its result and status_info.

        The one way out of a terminal status: dependents (``DependenciesSucceeded``)
        wait for it again, and nothing says how it had ended. Written by the one
        apply (compare-and-set, a history row ``REOPENED`` by ``source``). Raises
        UnknownEntityError for an unknown id, and InvalidSpecError (writing
        nothing) when ``status`` is not a live status of its kind, the entity has
        not ended, or its parent has (reopen the parent first).
        """
        now, db = self._db.clock.time(), self._db
        pg, clock = db.postgres, db.clock.time

        def work(conn: sa.Connection) -> None:
            query = statement(("entity-and-parent", pg), lambda: _entity_and_parent(pg))
            row = conn.execute(query, {"b_id": entity_id}).first()
            if row is None:
                raise UnknownEntityError(entity_id)
            kind_name, current, parent_id, parent_status = row
            kind = db.kinds[kind_name]
            _check_reopen(entity_id, status, kind, current, parent_id, parent_status, db.kinds)
            change = Change(
                entity_id=entity_id,
                from_status=kind.status(current),
                result=REOPENED,
                to_status=kind.status(status),
                message=message or f"reopened by {source}",
                kind=kind.name,
            )
            apply = Apply(conn, source, now, postgres=pg, kinds=db.kinds, clock=clock)
            outcome = apply.run([change])
            if not outcome.stale:
                # The status_info said how it had ended (TIMEOUT, DEPENDENCY…), as the
                # result did: a live entity carries neither until it ends again.
                conn.execute(_CLEAR_STATUS_INFO, {"b_id": entity_id})

        await db.write(work)


def _check_references(
    new: NewEntity, found: Mapping[str, str], created: set[str], parent_kind: str | None
) -> None:
    """A new entity's parent exists and is of its kind's parent kind; its links' targets exist."""
    if new.parent_id is not None and new.parent_id not in created:
        kind = found.get(new.parent_id)
        if kind is None:
            raise UnknownEntityError(new.parent_id)
        if kind != parent_kind:
            raise InvalidSpecError(f"parent {new.parent_id} is a {kind}, not a {parent_kind}")
    for _, target in new.links:
        if target not in created and target not in found:
            raise UnknownEntityError(target)


def _check_reopen(
    entity_id: str,
    status: str,
    kind: EntityKind,
    current: str,
    parent_id: str | None,
    parent_status: str | None,
    kinds: Kinds,
) -> None:
    """InvalidSpecError unless ``entity_id`` may be reopened in ``status``."""
    if status not in kind.live:
        raise InvalidSpecError(
            f"cannot reopen {entity_id} in {status!r}: not a live status of kind "
            f"{kind.name!r} ({', '.join(sorted(kind.live))})"
        )
    if current not in kind.terminal:
        raise InvalidSpecError(f"cannot reopen {entity_id}: it is {current}, which has not ended")
    if parent_id is not None and parent_status in kinds[kind.parent or ""].terminal:
        raise InvalidSpecError(
            f"cannot reopen {entity_id}: its {kind.parent} {parent_id} has ended "
            f"({parent_status}); reopen that first"
        )
