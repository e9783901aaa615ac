"""Query parameters the pages and the API share: times, limits, sort orders, session filters.

Each parser raises :class:`BadFilterError` with a message naming the parameter;
the endpoints answer it with a 400 (a page or ``{"error": …}``).
"""

from __future__ import annotations

import re

from starlette.datastructures import QueryParams

from drover.inspection._format import parse_time
from drover.kinds.sessions.values import SessionStatus
from drover.model.checks import check_filter
from drover.model.errors import InvalidSpecError
from drover.storage.queries import LIST_ORDERS, EntityFilter

__all__ = [
    "BadFilterError",
    "limit_param",
    "session_filter",
    "sort_param",
    "text_param",
    "time_param",
]


class BadFilterError(ValueError):
    """A query parameter could not be understood."""


def time_param(params: QueryParams, name: str, now: float) -> float | None:
    """The time ``name`` gives (a duration before ``now`` such as ``1h``, or ISO 8601), or None."""
    raw = (params.get(name) or "").strip()
    if not raw:
        return None
    try:
        return parse_time(raw, now)
    except ValueError as error:
        raise BadFilterError(f"{name}: {error}") from None


def limit_param(params: QueryParams, default: int = 100) -> int:
    """``limit``: a whole number from 1 to 10000, ``default`` when absent."""
    raw = (params.get("limit") or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadFilterError(f"limit: {raw!r} is not a whole number") from None
    if not 1 <= value <= 10000:
        raise BadFilterError("limit: must be between 1 and 10000")
    return value


def sort_param(params: QueryParams) -> str:
    """``sort``: one of the session orders, ``newest`` when absent."""
    raw = (params.get("sort") or "newest").strip().lower()
    if raw not in LIST_ORDERS:
        raise BadFilterError(f"sort: {raw!r} is not one of {', '.join(LIST_ORDERS)}")
    return raw


def text_param(params: QueryParams, name: str) -> str | None:
    """``name``'s text, stripped (``None`` when absent or empty), or BadFilterError past
    :data:`~drover.model.checks.MAX_FILTER_LENGTH` or with a NUL."""
    try:
        return check_filter((params.get(name) or "").strip(), name)
    except InvalidSpecError as error:
        raise BadFilterError(str(error)) from None


def session_filter(params: QueryParams, now: float) -> EntityFilter:
    """The filter ``status`` (repeated or comma-separated), ``name``, ``handler``, ``since``,
    ``until``, ``limit``, ``sort``, ``result`` (``-``: none yet) and ``linked_to`` (an
    entity id or name, kept as given: the caller resolves it) describe."""
    statuses = []
    for raw in params.getlist("status"):
        for part in raw.split(","):
            if not part.strip():
                continue
            try:
                statuses.append(SessionStatus(part.strip().upper()))
            except ValueError:
                raise BadFilterError(
                    f"status: {part!r} is not one of {', '.join(s.value for s in SessionStatus)}"
                ) from None
    return EntityFilter(
        statuses=tuple(statuses),
        name=text_param(params, "name"),
        handler=text_param(params, "handler"),
        since=time_param(params, "since", now),
        until=time_param(params, "until", now),
        limit=limit_param(params),
        sort=sort_param(params),
        result=_result_param(params),
        linked_to=text_param(params, "linked_to"),
    )


def _result_param(params: QueryParams) -> str | None:
    raw = (params.get("result") or "").strip().upper()
    if raw and raw != "-" and not re.fullmatch(r"[A-Z_]{1,32}", raw):
        raise BadFilterError(f"result: {raw!r} is not a result like SUCCESS or FAILURE (or -)")
    return raw or None
