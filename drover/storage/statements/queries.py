"""The statements of :mod:`drover.storage.queries` that are its own (the rest are its modules')."""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["PING"]

#: A round trip that reads nothing: is the database reachable?
PING = sa.text("SELECT 1")
