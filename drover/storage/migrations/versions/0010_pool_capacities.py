"""pool capacities: a pool's capacity changed while drover runs

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # No row: the pool has the capacity its kinds declare (or the configuration's).
    op.create_table(
        "pool_capacities",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("capacity", sa.Integer(), nullable=False),
        sa.Column("changed_at", sa.Double(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pool_capacities")
