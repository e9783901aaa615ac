"""Reading entities of any kind: by id, name or prefix, listed and filtered, counted.

:class:`EntityReads` is one of the read-only services :class:`~drover.storage.queries.Queries`
is made of. Entities come back as their kind's values
(:func:`drover.storage._reading.values_of`: a kind's own reader, or
:class:`~drover.model.values.Entity`), or as ``Entity`` whatever their kind
(:meth:`EntityReads.get_entity`, :meth:`EntityReads.list_entities`: what a
plugin reads of any kind). The statements are here, beside their use.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Any

import attrs
import sqlalchemy as sa

from drover.model.checks import MAX_NAME_LENGTH, check_filter, text_problem
from drover.model.errors import InvalidSpecError, UnknownEntityError
from drover.model.ids import ID_LENGTH
from drover.model.pools import PoolHolding, PoolUsage, in_family, is_family
from drover.model.values import Entity
from drover.storage._reading import links_of, values_of
from drover.storage._service import Service
from drover.storage._sql import bounded_statement, chunked, ids_value, statement
from drover.storage.rows import ENTITY_COLUMNS, entities_with_children
from drover.storage.schema import (
    LIST_ORDERS,
    entities,
    relations,
    scheduling_history,
    status_changes,
)
from drover.storage.statements.apply import latest_history_ids
from drover.storage.statements.ids import checked_only
from drover.storage.statements.pools import capacity_of, family_names, holder_rows

__all__ = ["PREFIX_MATCHES", "EntityFilter", "EntityReads"]

e = entities
h = scheduling_history

#: How many matches of an id prefix are read to tell an entity from its own children.
PREFIX_MATCHES = 64

#: A round trip that reads nothing: is the database reachable?
_PING = sa.text("SELECT 1")
_ENTITY_BY_ID = sa.select(*ENTITY_COLUMNS).where(e.c.id == sa.bindparam("b_id"))
_CHILDREN_OF_ENTITY = sa.select(*ENTITY_COLUMNS).where(e.c.parent_id == sa.bindparam("b_id"))
_LATEST_ENTITY_ID = sa.select(sa.func.max(e.c.id))
_LATEST_HISTORY_ID = sa.select(sa.func.max(h.c.id))
_LATEST_CHANGE_ID = sa.select(sa.func.max(status_changes.c.id))
#: Every entity's columns a tick can write, in id order (the harness's "settled" test).
_FINGERPRINT_ROWS = sa.select(
    e.c.id, e.c.status, e.c.tries, e.c.budgets, e.c.requeues, e.c.data, e.c.spec,
    e.c.result, e.c.status_info, e.c.exit_code,
).order_by(e.c.id)  # fmt: skip
_COUNTS_BY_STATUS = (
    sa.select(e.c.status, sa.func.count())
    .where(e.c.kind == sa.bindparam("kind"))
    .group_by(e.c.status)
)
_COUNTS_BY_RESULT = (
    sa.select(e.c.result, sa.func.count())
    .where(e.c.kind == sa.bindparam("kind"), e.c.result.is_not(None))
    .group_by(e.c.result)
)
_COUNTS_BY_STATUS_RESULT = (
    sa.select(e.c.status, e.c.result, sa.func.count())
    .where(e.c.kind == sa.bindparam("kind"), e.c.result.is_not(None))
    .group_by(e.c.status, e.c.result)
)
# Found by id: kind is checked as an expression, so SQLite never walks the (kind, status)
# index instead (every kernel ever run, for a backend's monitor asking after a few).
_STATUSES_OF = sa.select(e.c.id, e.c.status).where(e.c.id.in_(sa.bindparam("ids", expanding=True)))
_STATUSES_OF_KIND = _STATUSES_OF.where(checked_only(e.c.kind) == sa.bindparam("kind"))


@attrs.frozen
class EntityFilter:
    """Which entities of a kind to read; every filter that is set must hold.

    ``ids``: only these; ``statuses`` (empty: any); ``name``: a pattern,
    shell-style with ``*`` and ``?`` (the whole name), else a substring,
    case-insensitive; ``handler``: the entity's latest history row is that
    handler's; created at or after ``since``, at or before ``until`` (epoch
    seconds); ``result`` (``"-"``: none yet); ``linked_to``: entities with a
    relation to that entity or to one of its children. ``sort``: a key of
    :data:`~drover.storage.schema.LIST_ORDERS` or ``"id"``; ``limit``
    (``None``: all).

    A text filter longer than :data:`~drover.model.checks.MAX_FILTER_LENGTH`, or
    holding a NUL, is refused here (InvalidSpecError), whoever builds the filter.
    """

    ids: tuple[str, ...] | None = None
    statuses: tuple[str, ...] = ()
    name: str | None = None
    handler: str | None = None
    since: float | None = None
    until: float | None = None
    limit: int | None = 100
    sort: str = "newest"
    result: str | None = None
    linked_to: str | None = None

    def __attrs_post_init__(self) -> None:
        for field in ("name", "handler", "result", "linked_to"):
            check_filter(getattr(self, field), f"the {field} filter")


def name_matches(pattern: str) -> sa.ColumnElement[bool]:
    """Case-insensitive: names matching ``pattern`` whole, shell-style (``*`` any run of
    characters, ``?`` one), when it has a wildcard; else names containing it."""
    text = pattern.lower()
    if "*" not in text and "?" not in text:
        return sa.func.lower(e.c.name).contains(text, autoescape=True)
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    like = escaped.replace("*", "%").replace("?", "_")
    return sa.func.lower(e.c.name).like(like, escape="\\")


def _latest_by(handler: str) -> sa.Select[Any]:
    """Ids of the entities whose latest history row is ``handler``'s."""
    latest = (
        sa.select(h.c.entity_id, sa.func.max(h.c.id).label("latest_id"))
        .group_by(h.c.entity_id)
        .subquery()
    )
    return (
        sa.select(latest.c.entity_id)
        .join(h, h.c.id == latest.c.latest_id)
        .where(h.c.handler == handler)
    )


def _filtered(kind: str, f: EntityFilter) -> sa.Select[Any]:
    """Entities (:data:`ENTITY_COLUMNS`) of ``kind`` passing ``f``, in its order."""
    order = (e.c.id,) if f.sort == "id" else LIST_ORDERS[f.sort]
    query = sa.select(*ENTITY_COLUMNS).where(e.c.kind == kind).order_by(*order)
    if f.ids is not None:
        query = query.where(e.c.id.in_(list(f.ids)))
    if f.statuses:
        query = query.where(e.c.status.in_([str(s) for s in f.statuses]))
    if f.name:
        query = query.where(name_matches(f.name))
    if f.handler:
        query = query.where(e.c.id.in_(_latest_by(f.handler)))
    if f.since is not None:
        query = query.where(e.c.created_at >= f.since)
    if f.until is not None:
        query = query.where(e.c.created_at <= f.until)
    if f.result == "-":
        query = query.where(e.c.result.is_(None))
    elif f.result:
        query = query.where(e.c.result == f.result)
    if f.linked_to:
        near = sa.select(e.c.id).where(sa.or_(e.c.id == f.linked_to, e.c.parent_id == f.linked_to))
        query = query.where(e.c.id.in_(sa.select(relations.c.source_id).where(
            relations.c.target_id.in_(near)
        )))  # fmt: skip
    return query if f.limit is None else query.limit(f.limit)


def _ids_by_prefix(prefix: str, kind: str | None) -> sa.Select[Any]:
    """Id and parent id of the first :data:`PREFIX_MATCHES` + 1 entities (in id order) of
    ``kind`` (``None``: any) whose id starts with ``prefix``, taken literally."""
    query = sa.select(e.c.id, e.c.parent_id).where(e.c.id.startswith(prefix, autoescape=True))
    if kind is not None:
        query = query.where(e.c.kind == kind)
    return query.order_by(e.c.id).limit(PREFIX_MATCHES + 1)


def _ids_by_name(name: str, kind: str | None) -> sa.Select[Any]:
    """Id, kind and status of the newest :data:`PREFIX_MATCHES` + 1 entities of ``kind``
    (``None``: any) named exactly ``name``, newest first."""
    query = sa.select(e.c.id, e.c.kind, e.c.status).where(e.c.name == name)
    if kind is not None:
        query = query.where(e.c.kind == kind)
    return query.order_by(e.c.id.desc()).limit(PREFIX_MATCHES + 1)


def _numeric_request(slot: str, postgres: bool) -> sa.ColumnElement[Any]:
    """``spec[slot]`` when it is a JSON number, else 0: a bad value never breaks the sum."""
    if postgres:
        is_number = sa.func.jsonb_typeof(e.c.spec[slot]) == "number"
    else:
        is_number = sa.func.json_type(e.c.spec, f'$."{slot}"').in_(["integer", "real"])
    return sa.case((is_number, e.c.spec[slot].as_float()), else_=0.0)


def _usage_per_agent(
    kind: str, statuses: Sequence[str], slots: Sequence[str], postgres: bool
) -> sa.Select[Any]:
    """Per agent: its id, then the sum of each of ``slots`` over its entities of ``kind``
    in ``statuses`` (a positive list, so the (kind, status) index serves it)."""
    columns = [
        sa.func.sum(_numeric_request(name, postgres)).label(f"s{i}") for i, name in enumerate(slots)
    ]
    return (
        sa.select(e.c.agent_id, *columns)
        .where(e.c.kind == kind, e.c.status.in_(list(statuses)), e.c.agent_id.is_not(None))
        .group_by(e.c.agent_id)
    )


def _latest_messages(postgres: bool) -> sa.Select[Any]:
    """``(entity_id, result, message)`` of the latest history row of each entity of ``:ids``."""
    return sa.select(h.c.entity_id, h.c.result, h.c.message).where(
        h.c.id.in_(latest_history_ids(postgres))
    )


class EntityReads(Service):
    """Entities of any kind read back, counted and resolved from what a person types."""

    async def ping(self) -> None:
        """Run ``SELECT 1``: raises if the database does not answer."""
        await self._db.read(lambda conn: conn.execute(_PING))

    async def get_entity(self, entity_id: str) -> Entity:
        """One entity of any kind with its children and links, or UnknownEntityError."""
        params = {"b_id": entity_id}

        def work(conn: sa.Connection) -> list[Entity]:
            rows = conn.execute(_ENTITY_BY_ID, params).all()
            if not rows:
                return []
            children = conn.execute(_CHILDREN_OF_ENTITY, params).all()
            links = links_of(conn, [entity_id])
            return entities_with_children(rows, children, self._db.kinds, links=links)

        found = await self._db.read(work)
        if not found:
            raise UnknownEntityError(entity_id)
        return found[0]

    async def read(self, kind: str, f: EntityFilter = EntityFilter()) -> list[Any]:
        """Entities of ``kind`` passing ``f``, as its values (a kind's own value type)."""
        query = _filtered(kind, f)
        kinds = self._db.kinds
        return await self._db.read(
            lambda conn: values_of(conn, conn.execute(query).all(), kinds, kind)
        )

    async def read_one(self, kind: str, entity_id: str) -> Any:
        """The entity ``entity_id`` of ``kind`` as its value, or UnknownEntityError."""
        found = await self.read(kind, EntityFilter(ids=(entity_id,), limit=None))
        if not found:
            raise UnknownEntityError(entity_id, kind)
        return found[0]

    async def list_entities(
        self, kind: str, *, statuses: Iterable[str] | None = None, limit: int | None = 100
    ) -> list[Entity]:
        """Entities of ``kind`` (as :class:`Entity`, with children and links), newest first."""
        wanted = () if statuses is None else tuple(str(s) for s in statuses)
        if statuses is not None and not wanted:
            return []
        query = _filtered(kind, EntityFilter(statuses=wanted, limit=limit))
        return await self._db.read(
            lambda conn: values_of(conn, conn.execute(query).all(), self._db.kinds, None)
        )

    async def find_by_name(self, kind: str, name: str) -> list[Entity]:
        """Entities of ``kind`` named ``name`` (as :class:`Entity`), live first, then newest."""
        if len(name) > MAX_NAME_LENGTH or text_problem(name):
            return []  # no entity has such a name; PostgreSQL would refuse the NUL
        ended = e.c.status.in_(sorted(self._db.kinds[kind].terminal))
        query = (
            sa.select(*ENTITY_COLUMNS)
            .where(e.c.kind == kind, e.c.name == name)
            .order_by(ended, e.c.created_at.desc(), e.c.id.desc())
        )
        return await self._db.read(
            lambda conn: values_of(conn, conn.execute(query).all(), self._db.kinds, None)
        )

    async def resolve_entity_id(self, ref: str, kind: str | None = None) -> str:
        """The id of the one entity of ``kind`` (``None``: any) that ``ref`` names.

        The one resolver of every command and page that takes an id. In order:
        ``ref`` is an entity's id; else a name, of the one **live** entity of
        that kind with it (several live: ambiguous, the error lists them; none
        live: the newest ended one, so ``drover logs NAME`` works after it
        ended); else a prefix of one entity's id (ids are time-ordered, so a
        session and the kernels created with it share their first characters:
        a prefix matching one entity and only its own children means that
        entity). UnknownEntityError, or InvalidSpecError when ambiguous.
        """
        if not ref or len(ref) > max(ID_LENGTH, MAX_NAME_LENGTH) or text_problem(ref):
            # Nothing longer than an id or a name names an entity; asking would only make
            # the database build a huge pattern (SQLite: "LIKE or GLOB pattern too complex").
            raise UnknownEntityError(ref, kind, what="id or name")
        by_prefix, by_name = _ids_by_prefix(ref, kind), _ids_by_name(ref, kind)

        def work(conn: sa.Connection) -> tuple[list[tuple[str, str | None]], list[Any]]:
            found = [(r[0], r[1]) for r in conn.execute(by_prefix)]
            if any(i == ref for i, _ in found):
                return found, []
            return found, list(conn.execute(by_name))

        found, named = await self._db.read(work)
        ids = [i for i, _ in found]
        if ref in ids:
            return ref
        if named:
            return self._one_named(ref, named)
        if not found:
            raise UnknownEntityError(ref, kind, what="id or name")
        parents = {i for i, parent in found if parent not in ids}
        if len(parents) == 1 and len(found) <= PREFIX_MATCHES:
            return parents.pop()
        raise InvalidSpecError(
            f"{kind or 'entity'} id prefix {ref!r} is ambiguous: it matches {', '.join(ids[:2])}, …"
        )

    def _one_named(self, name: str, named: Sequence[Any]) -> str:
        """The one live entity among ``named`` (newest first), else the newest one."""
        kinds = self._db.kinds
        live = [r for r in named if r[1] not in kinds or r[2] not in kinds[r[1]].terminal]
        if len(live) == 1:
            return str(live[0][0])
        if not live:
            return str(named[0][0])
        listed = ", ".join(f"{r[0]} ({r[1]} {r[2]})" for r in live[:5])
        more = ", …" if len(live) > 5 else ""
        names = {str(r[1]) for r in live}
        what = f"{names.pop()}s" if len(names) == 1 else "entities"
        raise InvalidSpecError(
            f"name {name!r} is ambiguous: {len(live)} live {what} have it: {listed}{more}; "
            "use an id"
        )

    async def latest_entity_id(self) -> str | None:
        """The newest id of anything created (ids are time-ordered): one index lookup."""
        value = await self._db.read(lambda conn: conn.execute(_LATEST_ENTITY_ID).scalar())
        return str(value) if value is not None else None

    async def latest_messages(self, ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """``id -> (result, message)`` of each entity's latest history row (those with one)."""
        if not ids:
            return {}
        pg = self._db.postgres
        query = statement(("latest-messages", pg), lambda: _latest_messages(pg))

        def work(conn: sa.Connection) -> dict[str, tuple[str, str | None]]:
            rows = conn.execute(query, {"ids": ids_value(ids, pg)})
            return {r.entity_id: (str(r.result), r.message) for r in rows}

        return await self._db.read(work)

    async def state_fingerprint(self) -> tuple[Any, ...]:
        """A value that changes whenever anything a tick can write has changed.

        New history rows, status changes, and any entity's status, tries,
        budgets, requeues, data, spec, result or status_info (the harness's
        "settled" test). Merges into an existing history row (a repeated
        SKIPPED) do not count: nothing new was learnt.
        """

        def work(conn: sa.Connection) -> tuple[Any, ...]:
            newest = conn.execute(_LATEST_HISTORY_ID).scalar()
            changes = conn.execute(_LATEST_CHANGE_ID).scalar()
            rows = conn.execute(_FINGERPRINT_ROWS).all()
            digest = hash(tuple(repr(tuple(r)) for r in rows))
            return (newest, changes, len(rows), digest)

        return await self._db.read(work)

    async def pool_usage(self, name: str) -> PoolUsage:
        """Pool ``name``'s capacity now (as changed at run time, if it was) and its holders:
        what a handler choosing where an entity goes reads (InvalidSpecError naming the
        pools for an unknown one).

        ``name`` may be a member of a pool family (``gpu-node-n7`` of ``gpu-node-*``),
        declared or not; the family itself reads as its members' default capacity,
        nothing held (each member is counted on its own: :meth:`pool_members`).
        """
        kinds = self._db.kinds
        pool = kinds.pool(name)
        if pool is None:
            raise InvalidSpecError(
                f"no pool named {name!r}; pools: {', '.join(sorted(kinds.pools))}"
            )
        pg = self._db.postgres
        family = is_family(name)
        cache = statement if pool.family is None else bounded_statement
        query = cache(("pool-holders-rows", pool, pg), lambda: holder_rows(pool, pg))
        now = cache(("pool-capacity", pool), lambda: sa.select(capacity_of(pool)))

        def work(conn: sa.Connection) -> PoolUsage:
            holders = (
                ()
                if family
                else tuple(
                    PoolHolding(eid, kind, status, int(units))
                    for eid, kind, status, units in conn.execute(query)
                )
            )
            held = sum(h.units for h in holders)
            return PoolUsage(name, int(conn.execute(now).scalar_one()), held, holders)

        return await self._db.read(work)

    async def pool_members(self, family: str) -> list[str]:
        """The known members of the pool family ``family`` (``gpu-node-*``), in name order:
        those an entity holding the family claims, and those given a capacity at run time
        (InvalidSpecError if ``family`` is no family the kinds declare)."""
        pools = self._db.kinds.pools
        found = pools.get(family)
        if found is None or not is_family(family):
            families = ", ".join(sorted(n for n in pools if is_family(n))) or "none"
            raise InvalidSpecError(f"no pool family named {family!r}; families: {families}")
        pg = self._db.postgres
        query = statement(("pool-family-names", found, pg), lambda: family_names(found, pg))

        def work(conn: sa.Connection) -> list[str]:
            names: set[str] = set()
            for claims, name in conn.execute(query):
                if name is not None:
                    names.add(name)
                    continue
                held = json.loads(claims) if isinstance(claims, str) else claims
                if isinstance(held, dict):
                    names.update(n for n, units in held.items() if units)
            return sorted(n for n in names if in_family(family, n))

        return await self._db.read(work)

    async def count_by_status(self, kind: str) -> dict[StrEnum | str, int]:
        """The number of entities of ``kind`` in each status (statuses with none omitted),
        keyed by the kind's status members."""
        members = self._db.kinds.members(kind)

        def work(conn: sa.Connection) -> dict[StrEnum | str, int]:
            rows = conn.execute(_COUNTS_BY_STATUS, {"kind": kind})
            return {members.get(status, status): int(n) for status, n in rows}

        return await self._db.read(work)

    async def count_by_result(self, kind: str) -> dict[str, int]:
        """The number of ended entities of ``kind`` per result (SUCCESS, CANCELLED, FAILURE)."""

        def work(conn: sa.Connection) -> dict[str, int]:
            rows = conn.execute(_COUNTS_BY_RESULT, {"kind": kind})
            return {str(result): int(n) for result, n in rows}

        return await self._db.read(work)

    async def count_by_status_and_result(self, kind: str) -> dict[str, dict[str, int]]:
        """Per status, the number of entities of ``kind`` in it with each result (``{
        "TERMINATED": {"SUCCESS": 12, "FAILURE": 5, "CANCELLED": 3}}``); entities with
        no result yet (live ones) are not counted."""

        def work(conn: sa.Connection) -> dict[str, dict[str, int]]:
            found: dict[str, dict[str, int]] = {}
            for status, result, n in conn.execute(_COUNTS_BY_STATUS_RESULT, {"kind": kind}):
                found.setdefault(str(status), {})[str(result)] = int(n)
            return found

        return await self._db.read(work)

    async def statuses_of(
        self, ids: Sequence[str], kind: str | None = None
    ) -> dict[str, StrEnum | str]:
        """The current status of each of ``ids`` (of ``kind``, when given; unknown ids are
        left out), as their kind's members."""
        kinds = self._db.kinds
        query = _STATUSES_OF if kind is None else _STATUSES_OF_KIND

        def work(conn: sa.Connection) -> dict[str, StrEnum | str]:
            found: dict[str, StrEnum | str] = {}
            for chunk in chunked(list(ids)):
                params: dict[str, Any] = {"ids": chunk}
                if kind is not None:
                    params["kind"] = kind
                for eid, status in conn.execute(query, params):
                    found[eid] = status if kind is None else kinds.status(kind, status)
            return found

        return await self._db.read(work)

    async def usage_per_agent(
        self, kind: str, statuses: Iterable[str], slots: Iterable[str]
    ) -> dict[str, dict[str, float]]:
        """What each agent holds: per slot, the sum of ``spec[slot]`` (numbers only; 0
        otherwise) over its entities of ``kind`` in ``statuses``."""
        names, held = sorted(set(slots)), sorted(str(s) for s in statuses)
        pg = self._db.postgres
        query = statement(
            ("usage-per-agent", kind, tuple(held), tuple(names), pg),
            lambda: _usage_per_agent(kind, held, names, pg),
        )

        def work(conn: sa.Connection) -> dict[str, dict[str, float]]:
            return {
                row[0]: {name: float(row[i + 1] or 0) for i, name in enumerate(names)}
                for row in conn.execute(query)
            }

        return await self._db.read(work)
