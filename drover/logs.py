"""Structured logging: stdlib logging with a text or JSON formatter."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

__all__ = ["JsonFormatter", "setup_logging"]

# Attributes every LogRecord has; anything else came in through ``extra=``.
_STANDARD = set(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, and any ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as a JSON line."""
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def setup_logging(fmt: str = "text", level: str = "INFO") -> None:
    """Send drover's logs to stderr in ``fmt`` (``text`` or ``json``) at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # SQLAlchemy and asyncio are noisy at INFO; keep them at WARNING.
    for noisy in ("sqlalchemy", "aiosqlite", "asyncio", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
