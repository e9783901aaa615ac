"""solo lease: a lone PostgreSQL coordinator's lease, under which its ticks claim no rows

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: no coordinator holds the lease until one finds itself alone.
    with op.batch_alter_table("coordinators") as batch:
        batch.add_column(sa.Column("solo_token", sa.String(36), nullable=True))
        batch.add_column(sa.Column("solo_until", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("coordinators") as batch:
        batch.drop_column("solo_until")
        batch.drop_column("solo_token")
