"""one entities table for every kind; history of every kind; tick errors

Sessions and kernels become rows of ``entities`` (kinds ``session`` and
``kernel``, a kernel's ``parent_id`` being its session); ``kernel_history``
becomes ``status_changes``; ``scheduling_history`` gets the entity's kind.
Existing rows are carried over. A session's old shared ``try_count`` cannot be
attributed to a handler and starts again from zero.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_Json = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")


def _json(column: str, postgres: bool) -> str:
    """The column as the new JSON type; a stored JSON ``null`` becomes SQL NULL."""
    if postgres:
        return (
            f"CASE WHEN {column} IS NULL OR {column}::text = 'null' "
            f"THEN NULL ELSE {column}::jsonb END"
        )
    return f"NULLIF({column}, 'null')"


def _create_entities() -> None:
    """The one table of every kind's entities, with its queue and parent indexes."""
    op.create_table(
        "entities",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("parent_id", sa.String(length=36), nullable=True),
        sa.Column("name", sa.String(length=255), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("status_changed_at", sa.Double(), nullable=False),
        sa.Column("priority", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("spec", _Json, nullable=False),
        sa.Column("data", _Json, nullable=True),
        sa.Column("status_info", sa.Text(), nullable=True),
        sa.Column("result", sa.String(length=16), nullable=True),
        sa.Column("tries", _Json, nullable=True),
        sa.Column("requeues", sa.Integer(), server_default="0", nullable=False),
        sa.Column("budgets", _Json, nullable=True),
        sa.Column("agent_id", sa.String(length=255), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("runtime", _Json, nullable=True),
        sa.ForeignKeyConstraint(
            ["parent_id"],
            ["entities.id"],
            name=op.f("fk_entities_parent_id_entities"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_entities")),
        postgresql_with={"fillfactor": 85},
    )
    with op.batch_alter_table("entities", schema=None) as batch_op:
        batch_op.create_index(
            "ix_entities_queue",
            ["kind", "status", sa.text("priority DESC"), "created_at", "id"],
        )
        batch_op.create_index(batch_op.f("ix_entities_parent_id"), ["parent_id"])


def _copy_sessions_and_kernels(postgres: bool) -> None:
    """Every session, then every kernel (its parent: its session), into ``entities``."""
    spec = _json("spec", postgres)
    op.execute(
        "INSERT INTO entities (id, kind, parent_id, name, status, status_changed_at, priority, "
        "created_at, spec, status_info, result, requeues) "
        f"SELECT id, 'session', NULL, name, status, status_changed_at, priority, created_at, "
        f"COALESCE({spec}, '{{}}'), status_info, result, 0 FROM sessions"
    )
    kspec, runtime = _json("k.spec", postgres), _json("k.runtime", postgres)
    op.execute(
        "INSERT INTO entities (id, kind, parent_id, status, status_changed_at, priority, "
        "created_at, spec, status_info, requeues, agent_id, exit_code, runtime) "
        f"SELECT k.id, 'kernel', k.session_id, k.status, k.status_changed_at, 0, s.created_at, "
        f"COALESCE({kspec}, '{{}}'), k.status_info, 0, k.agent_id, k.exit_code, {runtime} "
        "FROM kernels k JOIN sessions s ON s.id = k.session_id"
    )


def _create_status_changes() -> None:
    """The status changes of every kind (``kernel_history`` held kernels' only), indexed."""
    op.create_table(
        "status_changes",
        sa.Column("id", _BigId, autoincrement=True, nullable=False),
        sa.Column("entity_id", sa.String(length=36), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("parent_id", sa.String(length=36), nullable=True),
        sa.Column("source", sa.String(length=128), nullable=False),
        sa.Column("from_status", sa.String(length=32), nullable=False),
        sa.Column("to_status", sa.String(length=32), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_status_changes")),
    )
    with op.batch_alter_table("status_changes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_status_changes_created_at"), ["created_at"])
        batch_op.create_index(batch_op.f("ix_status_changes_entity_id_id"), ["entity_id", "id"])
        batch_op.create_index(batch_op.f("ix_status_changes_parent_id_id"), ["parent_id", "id"])


def _copy_kernel_history(postgres: bool) -> None:
    """``kernel_history`` into ``status_changes``, with the rows' ids."""
    op.execute(
        "INSERT INTO status_changes (id, entity_id, kind, parent_id, source, from_status, "
        "to_status, message, created_at) SELECT id, kernel_id, 'kernel', session_id, source, "
        "from_status, to_status, message, created_at FROM kernel_history"
    )
    if postgres:
        # Rows were copied with their ids: move the sequence past them.
        op.execute(
            "SELECT setval(pg_get_serial_sequence('status_changes', 'id'), "
            "COALESCE((SELECT max(id) FROM status_changes), 0) + 1, false)"
        )


def _scheduling_history_of_any_kind(postgres: bool) -> None:
    """``scheduling_history`` names an entity of any kind: ``entity_id`` and ``kind``, and
    room for other kinds' statuses (32) and results (64)."""
    # Renamed natively (SQLite >= 3.25 rewrites the index too): a rename inside
    # a batch recreate trips over the index on the renamed column.
    if postgres:
        op.alter_column("scheduling_history", "session_id", new_column_name="entity_id")
    else:
        op.execute("ALTER TABLE scheduling_history RENAME COLUMN session_id TO entity_id")
    with op.batch_alter_table("scheduling_history", schema=None) as batch_op:
        batch_op.drop_index("ix_scheduling_history_session_id_id")
        batch_op.add_column(
            sa.Column("kind", sa.String(length=64), nullable=False, server_default="session")
        )
        for column in ("from_status", "to_status"):
            batch_op.alter_column(
                column,
                type_=sa.String(length=32),
                existing_type=sa.String(length=16),
                existing_nullable=False,
            )
        batch_op.alter_column(
            "result",
            type_=sa.String(length=64),
            existing_type=sa.String(length=16),
            existing_nullable=False,
        )
    with op.batch_alter_table("scheduling_history", schema=None) as batch_op:
        batch_op.alter_column(
            "kind", server_default=None, existing_type=sa.String(length=64), existing_nullable=False
        )
        batch_op.create_index(batch_op.f("ix_scheduling_history_entity_id_id"), ["entity_id", "id"])


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    _create_entities()
    _copy_sessions_and_kernels(postgres)
    _create_status_changes()
    _copy_kernel_history(postgres)
    _scheduling_history_of_any_kind(postgres)
    with op.batch_alter_table("handler_ticks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("error", sa.Text(), nullable=True))
    op.drop_table("kernel_history")
    op.drop_table("kernels")
    op.drop_table("sessions")


def downgrade() -> None:
    raise NotImplementedError(
        "drover cannot downgrade past 0004 (entities): restore a backup taken before upgrading"
    )
