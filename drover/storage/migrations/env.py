"""Alembic environment for drover. Runs on a connection handed over by drover.storage.migrate."""

from __future__ import annotations

from alembic import context

from drover.storage.schema import metadata

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "drover's migrations run through `drover db upgrade` or drover.storage.migrate, "
        "which hand Alembic a connection"
    )

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
