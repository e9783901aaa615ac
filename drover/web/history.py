"""The dashboard's history: ``/history`` (a live page), ``/history.csv`` and ``/api/history``.

All three take the CLI's filters (``drover history``): ``handler``, ``result``,
``kind``, ``entity`` (an id, a unique id prefix or a name, of any kind; the
API's older ``session`` and ``kernel`` too), ``since``, ``until`` and
``limit``; they show the latest rows that match in the one history order, the
order the rows were written, latest last (``reverse=1``: newest first). A
filter that can select nothing (an unknown result, handler or kind) is a 400
naming it, as the CLI refuses it.
"""

from __future__ import annotations

import contextlib
import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from drover.inspection.history import UnknownFilterError, check_history_filters, search_history
from drover.kinds.sessions.values import SESSION_KIND
from drover.model.errors import DroverError
from drover.model.status import SchedulingResult
from drover.model.values import HistoryRecord
from drover.serialization import history_json
from drover.web.dashboard import Dashboard, bad_request, dashboard_of, page
from drover.web.params import BadFilterError, limit_param, text_param, time_param

__all__ = ["history_api", "history_csv", "history_page"]

#: The filters, as the page's form and the export links carry them.
FILTERS = ("handler", "result", "kind", "entity", "since", "until", "limit", "reverse")
#: The CSV's columns: the JSON's keys (``session_id`` only on a session's row).
CSV_COLUMNS = (
    "id", "created_at", "updated_at", "kind", "entity_id", "handler", "result",
    "from_status", "to_status", "attempts", "error_code", "message",
)  # fmt: skip


async def _entity(dashboard: Dashboard, params: QueryParams) -> tuple[str | None, str | None]:
    """The entity the filters name: (its id, the kernel whose session it is for ``kernel``)."""
    repo = dashboard.repo
    entity, session = text_param(params, "entity"), text_param(params, "session")
    kernel = text_param(params, "kernel")
    try:
        if entity is not None:
            return await repo.resolve_entity_id(entity), None
        if session is not None:
            return await repo.resolve_entity_id(session, SESSION_KIND), None
    except DroverError as error:
        raise BadFilterError(f"entity: {error}") from None
    return None, kernel


async def _select(
    dashboard: Dashboard, params: QueryParams
) -> tuple[list[HistoryRecord], dict[str, str]]:
    """The rows the filters select, latest last (``reverse``: newest first), and the
    filters as given (for the form and the export links). BadFilterError if one is bad."""
    now = dashboard.now()
    handler, kind = text_param(params, "handler"), text_param(params, "kind")
    result = text_param(params, "result")
    if result is not None and result.upper() in SchedulingResult.__members__:
        result = result.upper()
    try:
        await check_history_filters(
            dashboard.repo, kinds=list(dashboard.kinds),
            handlers=lambda: dashboard.coordinator().handlers,
            handler=handler, result=result, kind=kind,
        )  # fmt: skip
        entity_id, kernel_id = await _entity(dashboard, params)
        rows = await search_history(
            dashboard.repo, session_id=entity_id, kernel_id=kernel_id, handler=handler,
            result=result, since=time_param(params, "since", now),
            until=time_param(params, "until", now), limit=limit_param(params), kind=kind,
        )  # fmt: skip
    except (UnknownFilterError, DroverError) as error:
        raise BadFilterError(str(error)) from None
    if params.get("reverse") in ("1", "true", "on"):
        rows.reverse()
    return rows, {name: (params.get(name) or "").strip() for name in FILTERS}


async def history_api(request: Request) -> Response:
    """``/api/history``: the rows the filters select, as ``drover history --json``."""
    try:
        rows, _ = await _select(dashboard_of(request), request.query_params)
    except BadFilterError as error:
        return bad_request(request, str(error), api=True)
    return JSONResponse([history_json(r) for r in rows])


def _csv(rows: Sequence[Mapping[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


async def history_csv(request: Request) -> Response:
    """``/history.csv``: the rows the filters select, as CSV (a download)."""
    try:
        rows, _ = await _select(dashboard_of(request), request.query_params)
    except BadFilterError as error:
        return bad_request(request, str(error), api=False)
    return Response(
        _csv([history_json(r) for r in rows]),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": 'attachment; filename="drover-history.csv"'},
    )


async def history_page(request: Request) -> Response:
    """``/history``: the history the filters select, live, with CSV and JSON exports."""
    dashboard = dashboard_of(request)
    try:
        rows, filters = await _select(dashboard, request.query_params)
    except BadFilterError as error:
        return bad_request(request, str(error), api=False)
    handler_names: list[str] = []
    # A configuration whose handlers do not load still has history to show.
    with contextlib.suppress(DroverError):
        handler_names = sorted(dashboard.coordinator().handlers)
    return page(
        request,
        "history.html",
        {
            "title": "History",
            "rows": [history_json(r) for r in rows],
            "filters": filters,
            "handler_names": [*handler_names, "api"],
            "result_names": [r.value for r in SchedulingResult] + ["CREATED", "REOPENED"],
            "kind_names": list(dashboard.kinds),
            "entity_url": dashboard.entity_url,
        },
    )
