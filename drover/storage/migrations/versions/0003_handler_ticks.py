"""handler_ticks: per-tick durations and counts for stats

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "handler_ticks",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("handler", sa.String(length=128), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("duration", sa.Double(), nullable=False),
        sa.Column("fetched", sa.Integer(), nullable=False),
        sa.Column("counts", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_handler_ticks")),
    )
    with op.batch_alter_table("handler_ticks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_handler_ticks_started_at"), ["started_at"])
        batch_op.create_index(
            batch_op.f("ix_handler_ticks_handler_started_at"), ["handler", "started_at"]
        )


def downgrade() -> None:
    with op.batch_alter_table("handler_ticks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_handler_ticks_handler_started_at"))
        batch_op.drop_index(batch_op.f("ix_handler_ticks_started_at"))
    op.drop_table("handler_ticks")
