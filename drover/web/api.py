"""The dashboard's JSON API (``/api/…``), and ``/metrics`` and ``/healthz`` for operators.

The JSON shapes are :mod:`drover.serialization`'s, the same as the CLI's
``--json``. A bad query parameter is a 400 with ``{"error": message}``.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from drover.inspection.health import recent_handler_errors
from drover.inspection.history import timeline
from drover.inspection.stats import collect_stats
from drover.inspection.why import diagnose_session
from drover.kinds.sessions.values import SESSION_KIND
from drover.model.errors import DroverError
from drover.model.values import CoordinatorInfo
from drover.serialization import (
    diagnosis_json,
    graph_json,
    history_json,
    session_json,
    stats_json,
)
from drover.web.dashboard import bad_request, dashboard_of, session_id_of
from drover.web.metrics import CONTENT_TYPE_METRICS, render_metrics
from drover.web.params import BadFilterError, session_filter, time_param

__all__ = [
    "graph",
    "healthz",
    "metrics",
    "session",
    "session_timeline",
    "session_why",
    "sessions",
    "stats",
]


async def sessions(request: Request) -> Response:
    """``/api/sessions``: the sessions the filters select."""
    dashboard = dashboard_of(request)
    try:
        f = session_filter(request.query_params, dashboard.now())
    except BadFilterError as error:
        return bad_request(request, str(error), api=True)
    return JSONResponse([session_json(s) for s in await dashboard.repo.read(SESSION_KIND, f)])


async def session(request: Request) -> Response:
    """``/api/sessions/{session_id}``: one session with its kernels and history."""
    repo = dashboard_of(request).repo
    sid = await session_id_of(request)
    data = session_json(await repo.read_one(SESSION_KIND, sid))
    data["history"] = [history_json(r) for r in await repo.history(sid)]
    return JSONResponse(data)


async def session_why(request: Request) -> Response:
    """``/api/sessions/{session_id}/why``: what the session waits for (``drover why``)."""
    dashboard = dashboard_of(request)
    sid = await session_id_of(request)
    coordinator = dashboard.coordinator()
    diagnosis = await diagnose_session(dashboard.repo, coordinator, sid, dashboard.now())
    return JSONResponse(diagnosis_json(diagnosis))


async def session_timeline(request: Request) -> Response:
    """``/api/sessions/{session_id}/timeline``: the session's and its kernels' history."""
    sid = await session_id_of(request)
    return JSONResponse(await timeline(dashboard_of(request).repo, sid))


async def stats(request: Request) -> Response:
    """``/api/stats?since=``: each handler's ticks, results and timings."""
    dashboard = dashboard_of(request)
    now = dashboard.now()
    try:
        since = time_param(request.query_params, "since", now)
    except BadFilterError as error:
        return bad_request(request, str(error), api=True)
    return JSONResponse(stats_json(await collect_stats(dashboard.repo, since=since, now=now)))


async def graph(request: Request) -> Response:
    """``/api/graph?kind=``: a kind's statuses and the loaded handlers' edges between them."""
    try:
        kind, edges = dashboard_of(request).kind_edges(request.query_params.get("kind"))
    except DroverError as error:
        return bad_request(request, str(error), api=True)
    return JSONResponse(graph_json(edges, kind))


async def metrics(request: Request) -> Response:
    """``/metrics``: Prometheus text, read from the database at scrape time."""
    snapshot = await dashboard_of(request).repo.metrics_snapshot()
    return Response(render_metrics(snapshot), media_type=CONTENT_TYPE_METRICS)


def _handlers_line(alive: Sequence[CoordinatorInfo]) -> str:
    """Which handlers the live coordinators run: after installing a plugin, is it running?"""
    recorded = [c.handlers for c in alive if c.handlers is not None]
    if not recorded:
        return "handlers not recorded (a coordinator of an older drover)"
    names = sorted(set().union(*recorded))
    return f"{len(names)} handler(s) running: {', '.join(names)}"


async def healthz(request: Request) -> Response:
    """``/healthz``: 200 ``ok`` or ``degraded`` while a coordinator beats; else 503.

    The line names the handlers the live coordinators run, as they recorded them.
    """
    dashboard = dashboard_of(request)
    repo = dashboard.repo
    window = 3 * dashboard.heartbeat_interval

    try:
        await repo.ping()
    except Exception as error:  # any failure to answer is unhealthy
        detail = str(getattr(error, "orig", None) or error).splitlines()[0]
        return PlainTextResponse(
            f"unhealthy: the database does not answer: {type(error).__name__}: {detail}\n",
            status_code=503,
        )
    try:
        alive = await repo.coordinators(alive_within=window)
    except Exception as error:
        return PlainTextResponse(
            f"unhealthy: cannot read coordinators: {type(error).__name__}: {error}\n",
            status_code=503,
        )
    if not alive:
        return PlainTextResponse(
            f"unhealthy: no coordinator heartbeat in the last {window:g}s "
            "(3 x heartbeat_interval); is `drover run` running?\n",
            status_code=503,
        )
    newest = alive[0]
    now = dashboard.now()
    age = now - max(c.heartbeat_at.timestamp() for c in alive)
    liveness = (
        f"the database answers; {len(alive)} live coordinator(s), "
        f"newest {newest.id} on {newest.host} (pid {newest.pid}), "
        f"last heartbeat {age:.1f}s ago; {_handlers_line(alive)}"
    )
    failing = await recent_handler_errors(repo, now)
    if failing:
        # Still 200: the coordinator runs and other handlers make progress.
        names = "; ".join(
            f"handler {e.handler} failed {e.count} time(s), last: {e.last_error}" for e in failing
        )
        return PlainTextResponse(
            f"degraded: {names} (in the last 10 minutes); {liveness}\n",
            headers={"X-Drover-Health": "degraded"},
        )
    return PlainTextResponse(f"ok: {liveness}\n", headers={"X-Drover-Health": "ok"})
