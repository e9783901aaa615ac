"""The statements of :mod:`drover.storage.notify`: PostgreSQL's ``NOTIFY`` and its channel."""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["CURRENT_SCHEMA", "NOTIFY"]

#: Send ``:payload`` on the channel ``:prefix`` + the current schema, when the transaction
#: commits.
NOTIFY = sa.text("SELECT pg_notify(:prefix || current_schema(), :payload)")

#: The schema the connection's ``search_path`` selects (its channel's suffix).
CURRENT_SCHEMA = sa.text("SELECT current_schema()")
