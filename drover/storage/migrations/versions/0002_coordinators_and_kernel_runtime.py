"""coordinators heartbeat table; kernels.runtime

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("kernels", schema=None) as batch_op:
        batch_op.add_column(sa.Column("runtime", sa.JSON(), nullable=True))
    op.create_table(
        "coordinators",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("heartbeat_at", sa.Double(), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("stopped_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_coordinators")),
    )
    with op.batch_alter_table("coordinators", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_coordinators_heartbeat_at"), ["heartbeat_at"])


def downgrade() -> None:
    with op.batch_alter_table("coordinators", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_coordinators_heartbeat_at"))
    op.drop_table("coordinators")
    with op.batch_alter_table("kernels", schema=None) as batch_op:
        batch_op.drop_column("runtime")
