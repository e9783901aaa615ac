"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22 02:39:31.086755
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _create_kernel_history() -> None:
    """The status changes of kernels, with their indexes."""
    op.create_table(
        "kernel_history",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("kernel_id", sa.String(length=36), nullable=False),
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.Column("source", sa.String(length=128), nullable=False),
        sa.Column("from_status", sa.String(length=16), nullable=False),
        sa.Column("to_status", sa.String(length=16), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kernel_history")),
    )
    with op.batch_alter_table("kernel_history", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_kernel_history_created_at"), ["created_at"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_kernel_history_kernel_id_id"), ["kernel_id", "id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_kernel_history_session_id_id"), ["session_id", "id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_kernel_history_source_to_status"), ["source", "to_status"], unique=False
        )


def _create_scheduling_history() -> None:
    """Every handler outcome on a session, with its indexes."""
    op.create_table(
        "scheduling_history",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.Column("handler", sa.String(length=128), nullable=False),
        sa.Column("result", sa.String(length=16), nullable=False),
        sa.Column("from_status", sa.String(length=16), nullable=False),
        sa.Column("to_status", sa.String(length=16), nullable=False),
        sa.Column("error_code", sa.String(length=128), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default="1", nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_scheduling_history")),
    )
    with op.batch_alter_table("scheduling_history", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_scheduling_history_created_at"), ["created_at"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_scheduling_history_handler_result"), ["handler", "result"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_scheduling_history_session_id_id"), ["session_id", "id"], unique=False
        )


def _create_sessions() -> None:
    """The sessions, indexed by status."""
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("status_changed_at", sa.Double(), nullable=False),
        sa.Column("try_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("priority", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("status_info", sa.Text(), nullable=True),
        sa.Column("result", sa.String(length=16), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
    )
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_sessions_status"), ["status"], unique=False)


def _create_kernels() -> None:
    """A session's kernels, indexed by session and by status."""
    op.create_table(
        "kernels",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("status_changed_at", sa.Double(), nullable=False),
        sa.Column("agent_id", sa.String(length=255), nullable=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("status_info", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_kernels_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kernels")),
        postgresql_with={"fillfactor": 85},
    )
    with op.batch_alter_table("kernels", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_kernels_session_id"), ["session_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_kernels_status"), ["status"], unique=False)


def upgrade() -> None:
    _create_kernel_history()
    _create_scheduling_history()
    _create_sessions()
    _create_kernels()


def downgrade() -> None:
    # ### commands auto generated by Alembic - please adjust! ###
    with op.batch_alter_table("kernels", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_kernels_status"))
        batch_op.drop_index(batch_op.f("ix_kernels_session_id"))

    op.drop_table("kernels")
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_sessions_status"))

    op.drop_table("sessions")
    with op.batch_alter_table("scheduling_history", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_scheduling_history_session_id_id"))
        batch_op.drop_index(batch_op.f("ix_scheduling_history_handler_result"))
        batch_op.drop_index(batch_op.f("ix_scheduling_history_created_at"))

    op.drop_table("scheduling_history")
    with op.batch_alter_table("kernel_history", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_kernel_history_source_to_status"))
        batch_op.drop_index(batch_op.f("ix_kernel_history_session_id_id"))
        batch_op.drop_index(batch_op.f("ix_kernel_history_kernel_id_id"))
        batch_op.drop_index(batch_op.f("ix_kernel_history_created_at"))

    op.drop_table("kernel_history")
    # ### end Alembic commands ###
