"""relations between entities (depends_on and plugins' own)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "relations",
        sa.Column("source_id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("target_id", sa.String(length=36), nullable=False),
        sa.ForeignKeyConstraint(
            ["source_id"],
            ["entities.id"],
            name=op.f("fk_relations_source_id_entities"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["target_id"],
            ["entities.id"],
            name=op.f("fk_relations_target_id_entities"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("source_id", "name", "target_id", name=op.f("pk_relations")),
    )
    op.create_index(
        op.f("ix_relations_target_id_name"), "relations", ["target_id", "name"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_relations_target_id_name"), table_name="relations")
    op.drop_table("relations")
