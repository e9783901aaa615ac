"""``POST /api/report``: the dashboard's one write, a pushed report (token-gated).

Everything else the dashboard serves is read-only. This endpoint lets an
operator's script or a webhook push a report (:meth:`Repository.report
<drover.storage.repository.Repository.report>`, the same as ``drover report``)
and exists only behind the token gate: a dashboard started without
``--auth-token`` answers 403. The token must come as ``Authorization: Bearer
T``: the login cookie of a browser is not enough for a write.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from drover.model.errors import DroverError, InvalidSpecError, UnknownEntityError
from drover.model.plan import REPORT_SOURCE
from drover.web.dashboard import dashboard_of

__all__ = ["report"]

_FIELDS = frozenset({"entity_id", "status", "expected", "status_info", "data", "message", "source"})


def _error(text: str, status: int) -> Response:
    return JSONResponse({"error": text}, status_code=status)


async def report(request: Request) -> Response:
    """Apply ``{"entity_id", "status", "expected"?, "status_info"?, "data"?, "message"?,
    "source"?}``: 200 when it applied, 409 when the compare-and-set did not hold."""
    dashboard = dashboard_of(request)
    if dashboard.auth_token is None or dashboard.reporter is None:
        return _error("reports need a dashboard started with --auth-token", 403)
    scheme, _, _ = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return _error("a report needs Authorization: Bearer T (not the login cookie)", 403)
    try:
        body: Any = json.loads(await request.body())
    except ValueError as error:
        return _error(f"the body is not JSON: {error}", 400)
    if not isinstance(body, dict):
        return _error("the body must be a JSON object", 400)
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        return _error(f"unknown field(s) {unknown}; known: {sorted(_FIELDS)}", 400)
    entity_id, status = body.get("entity_id"), body.get("status")
    if not isinstance(entity_id, str) or not isinstance(status, str):
        return _error("entity_id and status must be strings", 400)
    expected = body.get("expected")
    if expected is not None and (
        not isinstance(expected, list) or not all(isinstance(s, str) for s in expected)
    ):
        return _error("expected must be a list of statuses", 400)
    data = body.get("data")
    if data is not None and not isinstance(data, dict):
        return _error("data must be a JSON object", 400)
    try:
        ok = await dashboard.reporter.report(
            entity_id,
            status,
            expected=expected,
            status_info=body.get("status_info"),
            data=data,
            message=body.get("message"),
            source=str(body.get("source") or REPORT_SOURCE),
        )
    except UnknownEntityError as error:
        return _error(str(error), 404)
    except InvalidSpecError as error:
        return _error(str(error), 400)
    except DroverError as error:
        return _error(str(error), 400)
    return JSONResponse({"entity_id": entity_id, "applied": ok}, status_code=200 if ok else 409)
