"""coordinator handlers: the handlers each daemon runs, for drover status and /healthz

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: rows of coordinators that ran before it read as "not recorded".
    with op.batch_alter_table("coordinators") as batch:
        batch.add_column(sa.Column("handlers", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("coordinators") as batch:
        batch.drop_column("handlers")
