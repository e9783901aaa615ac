"""``POST /api/report``: the dashboard's one write, a pushed report (token-gated).

Everything else the dashboard serves is read-only. This endpoint lets an
operator's script or a webhook push a report (:meth:`Repository.report
<drover.storage.reports.ReportSink.report>`, the same as ``drover report``)
and exists only behind the token gate: a dashboard started without
``--auth-token`` answers 403. The token must come as ``Authorization: Bearer
T``: the login cookie of a browser is not enough for a write.

The body is read only up to :data:`MAX_REPORT_BODY` bytes (413 past it) and
parsed without recursion errors; its fields are checked by the one check of a
report (:mod:`drover.model.reporting`), and its ``source`` goes in the
``api:`` namespace, so it never writes history under a handler's name.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from drover.model.checks import load_json
from drover.model.errors import DroverError, InvalidSpecError, UnknownEntityError
from drover.model.reporting import outside_source
from drover.web.dashboard import dashboard_of

__all__ = ["MAX_REPORT_BODY", "report"]

#: Most bytes a report's body may have: its fields' own bounds (``data`` at most 64 KiB
#: as JSON) fit well within, even written with ``\uXXXX`` escapes.
MAX_REPORT_BODY = 1024 * 1024

_FIELDS = frozenset({"entity_id", "status", "expected", "status_info", "data", "message", "source"})


def _error(text: str, status: int) -> Response:
    return JSONResponse({"error": text}, status_code=status)


class _TooLarge(Exception):
    pass


async def _body(request: Request) -> bytes:
    """The request's body, read only up to :data:`MAX_REPORT_BODY` bytes; _TooLarge past it."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_REPORT_BODY:
        raise _TooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_REPORT_BODY:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


async def _fields(request: Request) -> dict[str, Any]:
    """The body's fields, or InvalidSpecError (a 400) naming what is wrong with it."""
    raw = await _body(request)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSpecError("the body is not UTF-8 text") from None
    # Parsed only: each field is checked by the report's check, which names it.
    body = load_json(text, "the body")
    if not isinstance(body, dict):
        raise InvalidSpecError("the body must be a JSON object")
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise InvalidSpecError(f"unknown field(s) {unknown}; known: {sorted(_FIELDS)}")
    return body


async def report(request: Request) -> Response:
    """Apply ``{"entity_id", "status", "expected"?, "status_info"?, "data"?, "message"?,
    "source"?}``: 200 when it applied, 409 when the compare-and-set did not hold, 400 for
    a field the report's check refuses, 413 for a body past :data:`MAX_REPORT_BODY`."""
    dashboard = dashboard_of(request)
    if dashboard.auth_token is None or dashboard.reporter is None:
        return _error("reports need a dashboard started with --auth-token", 403)
    scheme, _, _ = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return _error("a report needs Authorization: Bearer T (not the login cookie)", 403)
    try:
        body = await _fields(request)
        # Any JSON value: the report's one check names a field that is not text.
        entity_id: Any = body.get("entity_id")
        status: Any = body.get("status")
        ok = await dashboard.reporter.report(
            entity_id,
            status,
            expected=body.get("expected"),
            status_info=body.get("status_info"),
            data=body.get("data"),
            message=body.get("message"),
            source=outside_source(body.get("source")),
        )
    except _TooLarge:
        return _error(f"the body is larger than {MAX_REPORT_BODY} bytes", 413)
    except UnknownEntityError as error:
        return _error(str(error), 404)
    except DroverError as error:
        return _error(str(error), 400)
    return JSONResponse({"entity_id": entity_id, "applied": ok}, status_code=200 if ok else 409)
