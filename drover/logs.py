"""Logging: stdlib logging with a text or JSON formatter (python-json-logger)."""

from __future__ import annotations

import logging
import sys

from pythonjsonlogger.json import JsonFormatter

__all__ = ["QUIET_LOGGERS", "json_formatter", "setup_logging"]

#: Libraries that log routine work at INFO (the HTTP client logs every health
#: check request): kept at WARNING, so drover's own lines are what an operator reads.
QUIET_LOGGERS = ("sqlalchemy", "aiosqlite", "asyncio", "alembic", "httpx2", "httpcore2")


def json_formatter() -> logging.Formatter:
    """One JSON object per line: ts, level, logger, message, and any ``extra`` fields."""
    return JsonFormatter(
        "%(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "name": "logger", "exc_info": "exception"},
        timestamp="ts",
    )


def setup_logging(fmt: str = "text", level: str = "INFO") -> None:
    """Send drover's logs to stderr in ``fmt`` (``text`` or ``json``) at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(json_formatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in QUIET_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)
