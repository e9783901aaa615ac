"""What only one entity on an agent may hold at once, recorded in ``runtime``, one taker
at a time across coordinators.

An agent may offer a slot as specific device ids (``gpu = ["0", "1"]``): a
kernel given an id records it in its ``runtime`` (``runtime["devices"]``), and
an id is taken when the database says so, whichever coordinator looks.
:meth:`AgentRuntimes.update_runtime_on_agent` reads the runtimes of the live
entities on an entity's agent and writes that entity's new runtime (what the
caller computes from them: :mod:`drover.backends.devices` chooses free ids) in
one write transaction, serialised per agent: a transaction-scoped advisory
lock on PostgreSQL (the reads after it see what the previous holder
committed), SQLite's one writer. Two coordinators preparing kernels on the
same agent at the same moment therefore never both see an id free. What an
entity holds is given back by the entity leaving the live statuses (it ended,
or went back to its first status): nothing is released by hand.

Storage reads and writes runtimes; what is in them is the caller's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection
from typing import Any

import sqlalchemy as sa

from drover.model.values import Claim
from drover.storage._service import Service
from drover.storage.schema import entities
from drover.storage.statements.coordinators import SOLO_HELD
from drover.storage.statements.fetch import CLAIM_TOKEN

__all__ = ["AgentRuntimes", "RuntimeUpdate"]

e = entities

#: The new runtime of an entity from its runtime now and the runtimes of the other live
#: entities on its agent; it may raise, and nothing is written.
RuntimeUpdate = Callable[[dict[str, Any], list[dict[str, Any]]], dict[str, Any]]

_OWN = sa.select(e.c.agent_id, e.c.status, e.c.runtime).where(e.c.id == sa.bindparam("b_id"))
#: The runtimes of the entities of ``:b_kind`` in ``:b_live`` on ``:b_agent``, but ``:b_id``.
_OTHERS = sa.select(e.c.runtime).where(
    e.c.kind == sa.bindparam("b_kind"),
    e.c.status.in_(sa.bindparam("b_live", expanding=True)),
    e.c.agent_id == sa.bindparam("b_agent"),
    e.c.id != sa.bindparam("b_id"),
    e.c.runtime.is_not(None),
)
_SET_RUNTIME = (
    sa.update(e)
    .where(e.c.id == sa.bindparam("b_id"))
    .values(runtime=sa.bindparam("b_runtime", type_=e.c.runtime.type))
)
#: One agent's runtimes are updated by one transaction at a time (PostgreSQL).
_LOCK_AGENT = sa.select(sa.func.pg_advisory_xact_lock(sa.bindparam("b_key", type_=sa.BigInteger)))


def _agent_key(agent_id: str) -> int:
    """The advisory lock key of one agent (a signed 64-bit number)."""
    digest = hashlib.sha256(f"drover-agent:{agent_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _claim_holds(conn: sa.Connection, claim: Claim, entity_id: str) -> bool:
    """Whether ``claim`` still holds ``entity_id`` (its token on the row; for a solo tick,
    the lease held and no other claim on the row), in the caller's transaction."""
    token = conn.execute(CLAIM_TOKEN, {"b_id": entity_id}).scalar()
    if not claim.solo:
        return token == claim.token
    lease = {"b_id": claim.owner, "b_token": claim.token}
    return token is None and conn.execute(SOLO_HELD, lease).first() is not None


class AgentRuntimes(Service):
    """Runtimes rewritten one taker per agent at a time (see the module docstring)."""

    async def update_runtime_on_agent(
        self,
        entity_id: str,
        update: RuntimeUpdate,
        *,
        kind: str,
        live: Collection[str],
        takers: Collection[str],
        claim: Claim | None = None,
        claimed_id: str | None = None,
    ) -> dict[str, Any] | None:
        """Write ``entity_id``'s runtime as ``update`` computes it; return it.

        ``update`` gets the entity's runtime and those of the other entities of
        ``kind`` on its agent in one of the ``live`` statuses, read under the
        agent's lock. ``None``, nothing written: the entity is not placed on an
        agent, or not in one of ``takers``, or ``claim`` (a tick's, on
        ``claimed_id``: the entity's parent, say) no longer holds it. On SQLite
        there are no claims.
        """
        db = self._db

        def work(conn: sa.Connection) -> dict[str, Any] | None:
            found = conn.execute(_OWN, {"b_id": entity_id}).first()
            if found is None or found.agent_id is None:
                return None
            if db.postgres:
                conn.execute(_LOCK_AGENT, {"b_key": _agent_key(found.agent_id)})
                # Read again under the lock: as the previous taker committed it.
                found = conn.execute(_OWN, {"b_id": entity_id}).first()
                if found is None or found.agent_id is None:
                    return None
                if claim is not None and not _claim_holds(conn, claim, claimed_id or entity_id):
                    return None
            if found.status not in takers:
                return None
            params = {
                "b_kind": kind, "b_live": sorted(live), "b_agent": found.agent_id,
                "b_id": entity_id,
            }  # fmt: skip
            others = [dict(runtime) for (runtime,) in conn.execute(_OTHERS, params)]
            runtime = update(dict(found.runtime or {}), others)
            conn.execute(_SET_RUNTIME, {"b_id": entity_id, "b_runtime": runtime})
            return runtime

        return await db.write(work)
