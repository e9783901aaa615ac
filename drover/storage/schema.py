"""SQLAlchemy Core tables. Times are stored as epoch seconds (double precision, UTC).

Epoch floats keep the hot path free of per-row datetime parsing on SQLite and
compare the same way on both databases; the repository turns them into aware
datetimes at the edge.
"""

from __future__ import annotations

import sqlalchemy as sa

__all__ = [
    "coordinators",
    "handler_ticks",
    "kernel_history",
    "kernels",
    "metadata",
    "scheduling_history",
    "sessions",
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

sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("status_changed_at", sa.Double(), nullable=False),
    sa.Column("try_count", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("priority", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("created_at", sa.Double(), nullable=False),
    sa.Column("spec", sa.JSON(), nullable=False),
    sa.Column("status_info", sa.Text(), nullable=True),
    sa.Column("result", sa.String(16), nullable=True),
    sa.Index(None, "status"),
)

kernels = sa.Table(
    "kernels",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column(
        "session_id",
        sa.String(36),
        sa.ForeignKey("sessions.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("status_changed_at", sa.Double(), nullable=False),
    sa.Column("agent_id", sa.String(255), nullable=True),
    sa.Column("spec", sa.JSON(), nullable=False),
    sa.Column("exit_code", sa.Integer(), nullable=True),
    sa.Column("status_info", sa.Text(), nullable=True),
    # Backend bookkeeping: pid, process identity, working directory, log paths.
    sa.Column("runtime", sa.JSON(), nullable=True),
    sa.Index(None, "session_id"),
    sa.Index(None, "status"),
    postgresql_with={"fillfactor": 85},
)

scheduling_history = sa.Table(
    "scheduling_history",
    metadata,
    sa.Column("id", _BigId, primary_key=True, autoincrement=True),
    sa.Column("session_id", sa.String(36), nullable=False),
    sa.Column("handler", sa.String(128), nullable=False),
    sa.Column("result", sa.String(16), nullable=False),
    sa.Column("from_status", sa.String(16), nullable=False),
    sa.Column("to_status", sa.String(16), nullable=False),
    sa.Column("error_code", sa.String(128), nullable=True),
    sa.Column("message", sa.Text(), nullable=True),
    sa.Column("attempts", sa.Integer(), nullable=False, server_default="1"),
    sa.Column("created_at", sa.Double(), nullable=False),
    sa.Column("updated_at", sa.Double(), nullable=False),
    sa.Index(None, "session_id", "id"),
    sa.Index(None, "created_at"),
    sa.Index(None, "handler", "result"),
)

kernel_history = sa.Table(
    "kernel_history",
    metadata,
    sa.Column("id", _BigId, primary_key=True, autoincrement=True),
    sa.Column("kernel_id", sa.String(36), nullable=False),
    sa.Column("session_id", sa.String(36), nullable=False),
    sa.Column("source", sa.String(128), nullable=False),
    sa.Column("from_status", sa.String(16), nullable=False),
    sa.Column("to_status", sa.String(16), nullable=False),
    sa.Column("message", sa.Text(), nullable=True),
    sa.Column("created_at", sa.Double(), nullable=False),
    sa.Index(None, "session_id", "id"),
    sa.Index(None, "kernel_id", "id"),
    sa.Index(None, "created_at"),
    sa.Index(None, "source", "to_status"),
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
    sa.Index(None, "heartbeat_at"),
)

# One row per tick that fetched something (idle ticks are not recorded), for
# `drover stats` and the dashboard's handler table. Pruned with the history.
handler_ticks = sa.Table(
    "handler_ticks",
    metadata,
    sa.Column("id", _BigId, primary_key=True, autoincrement=True),
    sa.Column("handler", sa.String(128), nullable=False),
    sa.Column("started_at", sa.Double(), nullable=False),
    sa.Column("duration", sa.Double(), nullable=False),
    sa.Column("fetched", sa.Integer(), nullable=False),
    sa.Column("counts", sa.JSON(), nullable=False),
    sa.Index(None, "started_at"),
    sa.Index(None, "handler", "started_at"),
)
