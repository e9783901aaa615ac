"""The cycle collector's settings for a drover process (the daemon and the command line)."""

from __future__ import annotations

__all__ = ["GC_THRESHOLD"]

#: Young objects allocated before the collector runs (Python's default is 700). A drover
#: process builds long-lived objects by the ten thousand (SQLAlchemy's, drover's value
#: types, compiled statements) and frees nearly all of its short-lived ones by reference
#: counting: at 700, a command-line read ran about a hundred collections for nothing.
GC_THRESHOLD = (100_000, 50, 100)
