"""SQLAlchemy Core tables. Times are stored as epoch seconds (double precision, UTC).

Every entity of every kind (sessions, their kernels, and whatever kinds plugins
register) is one row of ``entities``: one engine, one compare-and-set, one
history for all of them. A child (a kernel) points at its parent (its session)
with ``parent_id``.

Epoch floats keep the hot path free of per-row datetime parsing on SQLite and
compare the same way on both databases; storage turns them into aware
datetimes at the edge.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

__all__ = [
    "FETCH_ORDER",
    "LIST_ORDERS",
    "coordinators",
    "entities",
    "fetch_marks",
    "handler_ticks",
    "metadata",
    "pool_capacities",
    "relations",
    "scheduling_history",
    "status_changes",
]

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    }
)

# An autoincrementing 64-bit key that is a rowid alias on SQLite.
_BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


# jsonb on PostgreSQL: its operators patch and read JSON inside statements
# (per-handler try counts, data patches, filters); NULL stays SQL NULL.
class _JsonType(sa.types.TypeDecorator[Any]):
    """JSON, stored as jsonb on PostgreSQL: the PostgreSQL dialect is imported only
    when it is the database's (a read on SQLite does not pay for it)."""

    impl = sa.JSON
    cache_ok = True

    def __init__(self) -> None:
        super().__init__(none_as_null=True)

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import JSONB

            return dialect.type_descriptor(JSONB(none_as_null=True))
        return dialect.type_descriptor(sa.JSON(none_as_null=True))


_Json = _JsonType()

entities = sa.Table(
    "entities",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column(
        "parent_id",
        sa.String(36),
        sa.ForeignKey("entities.id", ondelete="CASCADE"),
        nullable=True,
    ),
    sa.Column("name", sa.String(255), nullable=True),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("status_changed_at", sa.Double(), nullable=False),
    sa.Column("priority", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("created_at", sa.Double(), nullable=False),
    # Desired state, written only through the API.
    sa.Column("spec", _Json, nullable=False),
    # Handler-owned state, patched in the apply.
    sa.Column("data", _Json, nullable=True),
    sa.Column("status_info", sa.Text(), nullable=True),
    sa.Column("result", sa.String(16), nullable=True),
    # {handler name: failures in the current status}; NULL when none.
    sa.Column("tries", _Json, nullable=True),
    # Times moved back to an earlier status by expiry or give-up.
    sa.Column("requeues", sa.Integer(), nullable=False, server_default="0"),
    # {budget name: amount spent}; NULL when nothing was spent.
    sa.Column("budgets", _Json, nullable=True),
    # Kernels: where they run, how they ended, and the backend's bookkeeping.
    sa.Column("agent_id", sa.String(255), nullable=True),
    sa.Column("exit_code", sa.Integer(), nullable=True),
    sa.Column("runtime", _Json, nullable=True),
    # The claim of the coordinator tick acting on this entity (PostgreSQL, several
    # coordinators): who, the tick's fencing token, and when the claim lapses. The
    # apply's compare-and-set checks the token, so a tick whose claim expired or was
    # taken over writes nothing. NULL when unclaimed (always, on SQLite).
    sa.Column("claim_owner", sa.String(36), nullable=True),
    sa.Column("claim_token", sa.String(36), nullable=True),
    sa.Column("claim_expires", sa.Double(), nullable=True),
    sa.Index(None, "parent_id"),
    # The table's fillfactor (85 on PostgreSQL) is the migrations' (0001, 0004): a
    # postgresql_with here would import the PostgreSQL dialect on every SQLite read.
)
# Candidates are read by kind and status in fetch order: this index gives them
# in that order, so a tick reads its batch without sorting the whole queue.
sa.Index(
    "ix_entities_queue",
    entities.c.kind,
    entities.c.status,
    entities.c.priority.desc(),
    entities.c.created_at,
    entities.c.id,
)

#: The order handlers see their candidates in: highest priority, then oldest (the
#: order of ``ix_entities_queue``). Promotions take theirs in it too.
FETCH_ORDER = (entities.c.priority.desc(), entities.c.created_at, entities.c.id)
#: Orders a person may list entities in (``drover sessions --sort``, the dashboard).
LIST_ORDERS: dict[str, tuple[Any, ...]] = {
    "newest": (entities.c.created_at.desc(), entities.c.id.desc()),
    "oldest": (entities.c.created_at, entities.c.id),
    "priority": FETCH_ORDER,
}

# Links between entities: ``source`` depends on / belongs to ``target``, by name.
relations = sa.Table(
    "relations",
    metadata,
    sa.Column(
        "source_id",
        sa.String(36),
        sa.ForeignKey("entities.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column(
        "target_id",
        sa.String(36),
        sa.ForeignKey("entities.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Index(None, "target_id", "name"),
)

# When a handler with ``HandlerOptions(order="oldest-seen")`` last fetched an
# entity: its fetch takes the least recently fetched first. Only such handlers
# read or write it.
fetch_marks = sa.Table(
    "fetch_marks",
    metadata,
    sa.Column("handler", sa.String(128), primary_key=True),
    sa.Column(
        "entity_id",
        sa.String(36),
        sa.ForeignKey("entities.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("seen_at", sa.Double(), nullable=False),
)

# A pool's capacity as changed while drover runs (``drover pools set``, and the
# configuration's ``[pools]`` when a daemon starts): it overrides the capacity the
# kinds declare. Every apply, fetch and read of a pool reads it, so a change reaches
# every coordinator at once.
pool_capacities = sa.Table(
    "pool_capacities",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("capacity", sa.Integer(), nullable=False),
    sa.Column("changed_at", sa.Double(), nullable=False),
)

# One row per outcome a handler (or the API, handler "api") had on an entity
# it targeted; repeats of an entity's latest row merge into ``attempts``.
scheduling_history = sa.Table(
    "scheduling_history",
    metadata,
    sa.Column("id", _BigId, primary_key=True, autoincrement=True),
    sa.Column("entity_id", sa.String(36), nullable=False),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("handler", sa.String(128), nullable=False),
    sa.Column("result", sa.String(64), nullable=False),
    sa.Column("from_status", sa.String(32), nullable=False),
    sa.Column("to_status", sa.String(32), nullable=False),
    sa.Column("error_code", sa.String(128), nullable=True),
    sa.Column("message", sa.Text(), nullable=True),
    sa.Column("attempts", sa.Integer(), nullable=False, server_default="1"),
    sa.Column("created_at", sa.Double(), nullable=False),
    sa.Column("updated_at", sa.Double(), nullable=False),
    sa.Index(None, "entity_id", "id"),
    sa.Index(None, "created_at"),
    sa.Index(None, "handler", "result"),
)

# Every other status change: children moved by their parent's transition
# (source: the handler) and changes a backend reported (source: "backend").
status_changes = sa.Table(
    "status_changes",
    metadata,
    sa.Column("id", _BigId, primary_key=True, autoincrement=True),
    sa.Column("entity_id", sa.String(36), nullable=False),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("parent_id", sa.String(36), nullable=True),
    sa.Column("source", sa.String(128), nullable=False),
    sa.Column("from_status", sa.String(32), nullable=False),
    sa.Column("to_status", sa.String(32), nullable=False),
    sa.Column("message", sa.Text(), nullable=True),
    sa.Column("created_at", sa.Double(), nullable=False),
    sa.Index(None, "parent_id", "id"),
    sa.Index(None, "entity_id", "id"),
    sa.Index(None, "created_at"),
)

coordinators = sa.Table(
    "coordinators",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer(), nullable=False),
    sa.Column("started_at", sa.Double(), nullable=False),
    sa.Column("heartbeat_at", sa.Double(), nullable=False),
    sa.Column("version", sa.String(64), nullable=False),
    sa.Column("stopped_at", sa.Double(), nullable=True),
    # The names of the handlers the daemon runs (a JSON list; NULL: not recorded).
    sa.Column("handlers", sa.JSON(), nullable=True),
    # The solo lease (PostgreSQL): a coordinator that finds itself alone takes it, and
    # its ticks then claim no rows; others claim nothing while any coordinator holds
    # it (docs/scaling.md). NULL: not held.
    sa.Column("solo_token", sa.String(36), nullable=True),
    sa.Column("solo_until", sa.Double(), nullable=True),
    sa.Index(None, "heartbeat_at"),
)

# One row per tick that fetched something or failed (idle ticks are not
# recorded), for `drover stats`, `drover status`, /healthz and /metrics.
# Pruned with the history.
handler_ticks = sa.Table(
    "handler_ticks",
    metadata,
    sa.Column("id", _BigId, primary_key=True, autoincrement=True),
    sa.Column("handler", sa.String(128), nullable=False),
    sa.Column("started_at", sa.Double(), nullable=False),
    sa.Column("duration", sa.Double(), nullable=False),
    sa.Column("fetched", sa.Integer(), nullable=False),
    sa.Column("counts", sa.JSON(), nullable=False),
    # The exception a handler's execute() raised in this tick, if any.
    sa.Column("error", sa.Text(), nullable=True),
    sa.Index(None, "started_at"),
    sa.Index(None, "handler", "started_at"),
)
