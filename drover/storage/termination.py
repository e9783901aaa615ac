"""Termination requests from the API and the CLI.

What a request does is decided by each kind's own rule,
:meth:`drover.model.kinds.EntityKind.termination_of`.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from drover.model.errors import InvalidSpecError, UnknownEntityError
from drover.model.plan import Change
from drover.model.status import SchedulingResult, SessionStatus
from drover.model.values import StatusInfoRule, TerminationOutcome
from drover.storage._db import Database
from drover.storage._sql import chunked
from drover.storage.apply import Apply
from drover.storage.entities import API_SOURCE
from drover.storage.schema import entities

__all__ = ["API_SOURCE", "request_termination"]

_SESSION_STATUS = {s.value: s for s in SessionStatus}
_USER_REQUESTED = StatusInfoRule(default="USER_REQUESTED")

e = entities


async def request_termination(
    db: Database, session_ids: Sequence[str], source: str = API_SOURCE
) -> list[TerminationOutcome]:
    """Ask for entities (sessions, or any kind) to end, recorded as SUCCESS rows of ``api``.

    Each moves as its kind's termination rule says, with ``status_info``
    USER_REQUESTED. Raises UnknownEntityError, writing nothing, if any id
    is unknown. ``source`` names the requester in history (a handler that
    ends what it owns, say ``terminating-route``).
    """
    now = db.clock.time()

    def work(conn: sa.Connection) -> list[TerminationOutcome]:
        found: dict[str, tuple[str, str]] = {}
        with_kernels: set[str] = set()
        for chunk in chunked(list(dict.fromkeys(session_ids))):
            query = sa.select(e.c.id, e.c.kind, e.c.status).where(e.c.id.in_(chunk))
            if db.postgres:
                query = query.with_for_update()
            for sid, kind, status in conn.execute(query):
                found[sid] = (kind, _SESSION_STATUS.get(status, status))
            with_kernels.update(
                r[0]
                for r in conn.execute(
                    sa.select(e.c.parent_id).where(e.c.parent_id.in_(chunk)).distinct()
                )
            )
        for sid in session_ids:
            if sid not in found:
                raise UnknownEntityError(sid)
            kind = db.kinds[found[sid][0]]
            if not kind.terminable:
                raise InvalidSpecError(
                    f"{sid} is a {kind.name}: a {kind.name} ends with its {kind.parent}; "
                    f"terminate that instead"
                )
        changes: list[Change] = []
        outcomes: list[TerminationOutcome] = []
        info = (
            _USER_REQUESTED
            if source == API_SOURCE
            else StatusInfoRule(default=f"REQUESTED_BY_{source.upper().replace('-', '_')}")
        )
        for sid in dict.fromkeys(session_ids):
            kind_name, status = found[sid]
            rule = db.kinds[kind_name].termination_of(status, sid in with_kernels)
            if rule is None:
                outcomes.append(TerminationOutcome(sid, status, status, False, kind_name))
                continue
            changes.append(
                Change(
                    entity_id=sid,
                    from_status=status,
                    result=SchedulingResult.SUCCESS,
                    to_status=rule.to,
                    to_children=rule.children,
                    message=rule.message,
                    status_info=info,
                    kind=kind_name,
                )
            )
            to = _SESSION_STATUS.get(rule.to, rule.to) if kind_name == "session" else rule.to
            outcomes.append(TerminationOutcome(sid, status, to, True, kind_name))
        if changes:
            Apply(conn, source, now, postgres=db.postgres, kinds=db.kinds).run(changes)
        return outcomes

    return await db.write(work)
