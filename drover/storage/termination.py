"""Termination requests from the API and the CLI.

What a request does is decided by each kind's own rule,
:meth:`drover.model.kinds.EntityKind.termination_of`.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from drover.model.values import TerminationOutcome
from drover.storage._db import Database
from drover.storage.apply import Apply
from drover.storage.entities import API_SOURCE

__all__ = ["API_SOURCE", "request_termination"]


async def request_termination(
    db: Database,
    session_ids: Sequence[str],
    source: str = API_SOURCE,
    reason: str | None = None,
    mode: str | None = None,
) -> list[TerminationOutcome]:
    """Ask for entities (sessions, or any kind) to end, recorded as SUCCESS rows of ``api``.

    Each moves as its kind's termination rule says, with ``status_info``
    USER_REQUESTED (or the rule's own ``status_info``); ``reason`` is added to
    the history rows' message. Raises UnknownEntityError, writing nothing, if any id
    is unknown. ``source`` names the requester in history. ``mode`` names a
    termination mode (the kinds' rules of that mode; InvalidSpecError, nothing
    written, if an entity's kind has no such mode). A handler asks for the same
    (plain) through its result (``HandlerResult.terminate``), in its tick's apply.
    """
    now = db.clock.time()

    def work(conn: sa.Connection) -> list[TerminationOutcome]:
        apply = Apply(conn, source, now, postgres=db.postgres, kinds=db.kinds)
        return apply.end(session_ids, reason=reason, mode=mode)

    return await db.write(work)
