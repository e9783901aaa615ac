"""Termination requests from the API and the CLI.

What a request does is decided by :func:`drover.model.rules.termination_of`.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from drover.model.errors import UnknownSessionError
from drover.model.plan import Change
from drover.model.rules import termination_of
from drover.model.status import SchedulingResult, SessionStatus
from drover.model.values import StatusInfoRule, TerminationOutcome
from drover.storage._db import Database
from drover.storage._sql import chunked
from drover.storage.apply import Apply
from drover.storage.rows import SESSION_KIND
from drover.storage.schema import entities

__all__ = ["API_SOURCE", "request_termination"]

#: ``handler`` of history rows written for requests made through the API or CLI.
API_SOURCE = "api"
_USER_REQUESTED = StatusInfoRule(default="USER_REQUESTED")

e = entities


async def request_termination(db: Database, session_ids: Sequence[str]) -> list[TerminationOutcome]:
    """Ask for sessions to end, recorded as SUCCESS rows of handler ``api``.

    Each session moves as :func:`~drover.model.rules.termination_of` says, with
    ``status_info`` USER_REQUESTED. Raises UnknownSessionError, writing
    nothing, if any id is unknown.
    """
    now = db.clock.time()

    def work(conn: sa.Connection) -> list[TerminationOutcome]:
        found: dict[str, SessionStatus] = {}
        with_kernels: set[str] = set()
        for chunk in chunked(list(dict.fromkeys(session_ids))):
            query = sa.select(e.c.id, e.c.status).where(e.c.id.in_(chunk), e.c.kind == SESSION_KIND)
            if db.postgres:
                query = query.with_for_update()
            for sid, status in conn.execute(query):
                found[sid] = SessionStatus(status)
            with_kernels.update(
                r[0]
                for r in conn.execute(
                    sa.select(e.c.parent_id).where(e.c.parent_id.in_(chunk)).distinct()
                )
            )
        for sid in session_ids:
            if sid not in found:
                raise UnknownSessionError(sid)
        changes: list[Change] = []
        outcomes: list[TerminationOutcome] = []
        for sid in dict.fromkeys(session_ids):
            status = found[sid]
            termination = termination_of(status, sid in with_kernels)
            if termination is None:
                outcomes.append(TerminationOutcome(sid, status, status, changed=False))
                continue
            changes.append(
                Change(
                    session_id=sid,
                    from_status=status,
                    result=SchedulingResult.SUCCESS,
                    to_session=termination.to_session,
                    to_kernel=termination.to_kernel,
                    message=termination.message,
                    status_info=_USER_REQUESTED,
                )
            )
            outcomes.append(TerminationOutcome(sid, status, termination.to_session, changed=True))
        if changes:
            Apply(conn, API_SOURCE, now, postgres=db.postgres).run(changes)
        return outcomes

    return await db.write(work)
