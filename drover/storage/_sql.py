"""Small helpers for building statements over long id lists."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

__all__ = ["CHUNK", "chunked"]

T = TypeVar("T")

#: Ids per IN list: 200-5,000 all perform the same; this stays far below bind limits.
CHUNK = 500


def chunked(items: Sequence[T], size: int = CHUNK) -> Iterator[list[T]]:
    """Yield ``items`` in lists of at most ``size``."""
    for start in range(0, len(items), size):
        yield list(items[start : start + size])
