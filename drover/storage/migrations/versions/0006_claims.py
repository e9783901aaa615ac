"""claims with fencing: claim owner, token and expiry on entities

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable columns without defaults: adding them rewrites no row on either database.
    with op.batch_alter_table("entities") as batch:
        batch.add_column(sa.Column("claim_owner", sa.String(length=36), nullable=True))
        batch.add_column(sa.Column("claim_token", sa.String(length=36), nullable=True))
        batch.add_column(sa.Column("claim_expires", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("entities") as batch:
        batch.drop_column("claim_expires")
        batch.drop_column("claim_token")
        batch.drop_column("claim_owner")
