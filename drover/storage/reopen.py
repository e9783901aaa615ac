"""Reopening: the one way an entity leaves a terminal status.

A handler's transitions never leave a terminal status (refused when it is
registered) and reports never move a terminal entity; ``reopen`` does, on
purpose: the entity goes to a live status of its kind and its ``result`` and
``status_info`` are cleared, so its dependents (``DependenciesSucceeded``) wait
for it again and nothing says how it had ended. It is written as any change
is, by the one apply: compare-and-set on the status read, a history row
(result ``REOPENED``).
"""

from __future__ import annotations

import sqlalchemy as sa

from drover.model.errors import InvalidSpecError, UnknownEntityError
from drover.model.plan import Change
from drover.storage._db import Database
from drover.storage._sql import statement
from drover.storage.apply import Apply
from drover.storage.entities import API_SOURCE
from drover.storage.statements.reopen import clear_status_info, entity_and_parent

__all__ = ["REOPENED", "reopen"]

#: ``result`` of the history row a reopen writes.
REOPENED = "REOPENED"


async def reopen(
    db: Database,
    entity_id: str,
    status: str,
    *,
    source: str = API_SOURCE,
    message: str | None = None,
) -> None:
    """Move the ended entity ``entity_id`` to the live ``status``; clear its result and
    status_info.

    Raises UnknownEntityError for an unknown id, and InvalidSpecError (writing
    nothing) when ``status`` is not a live status of its kind, when the entity
    has not ended, or when its parent has (reopen the parent first: children
    of an ended entity never stay live).
    """
    now = db.clock.time()
    pg = db.postgres

    def work(conn: sa.Connection) -> None:
        query = statement(("entity-and-parent", pg), lambda: entity_and_parent(pg))
        row = conn.execute(query, {"b_id": entity_id}).first()
        if row is None:
            raise UnknownEntityError(entity_id)
        kind_name, current, parent_id, parent_status = row
        kind = db.kinds[kind_name]
        if status not in kind.live:
            raise InvalidSpecError(
                f"cannot reopen {entity_id} in {status!r}: not a live status of kind "
                f"{kind.name!r} ({', '.join(sorted(kind.live))})"
            )
        if current not in kind.terminal:
            raise InvalidSpecError(
                f"cannot reopen {entity_id}: it is {current}, which has not ended"
            )
        if parent_id is not None and parent_status in db.kinds[kind.parent or ""].terminal:
            raise InvalidSpecError(
                f"cannot reopen {entity_id}: its {kind.parent} {parent_id} has ended "
                f"({parent_status}); reopen that first"
            )
        change = Change(
            entity_id=entity_id,
            from_status=kind.status(current),
            result=REOPENED,
            to_status=kind.status(status),
            message=message or f"reopened by {source}",
            kind=kind.name,
        )
        outcome = Apply(conn, source, now, postgres=pg, kinds=db.kinds).run([change])
        if not outcome.stale:
            # The status_info said how it had ended (TIMEOUT, DEPENDENCY…), as the
            # result did: a live entity carries neither until it ends again.
            conn.execute(statement(("clear-status-info",), clear_status_info), {"b_id": entity_id})

    await db.write(work)
