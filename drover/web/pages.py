"""The dashboard's HTML pages, and the files they show: kernel logs, graph SVG, palette CSS.

Each endpoint is a function of the request; what it reads comes from the
request's :class:`~drover.web.dashboard.Dashboard`.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import attrs
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from drover.inspection._format import duration, ordered_results
from drover.inspection.history import timeline
from drover.inspection.stats import collect_stats
from drover.inspection.why import diagnose_session
from drover.kinds.sessions.values import SESSION_KIND, SessionStatus
from drover.model.errors import DroverError
from drover.model.status import SchedulingResult
from drover.model.values import Entity, HistoryRecord
from drover.serialization import graph_json, session_json, stats_json
from drover.web.dashboard import Dashboard, bad_request, dashboard_of, page, session_id_of
from drover.web.logs import LOG_TAIL_BYTES, MAX_LOG_BYTES, kernel_logs
from drover.web.palette import badge_css
from drover.web.params import BadFilterError, session_filter, time_param
from drover.web.svg_graph import GraphvizError

__all__ = [
    "graph_page",
    "graph_svg",
    "handlers_page",
    "kernel_log",
    "overview",
    "palette_css",
    "session_page",
]


def _ago(value: datetime | str | None, now: float) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return duration(now - value.timestamp()) + " ago"


async def overview(request: Request) -> Response:
    """``/``: sessions by status, and the sessions the filters select."""
    dashboard = dashboard_of(request)
    now = dashboard.now()
    repo = dashboard.repo
    try:
        f = session_filter(request.query_params, now)
        linked = await _linked_entity(dashboard, f.linked_to)
    except BadFilterError as error:
        return bad_request(request, str(error), api=False)
    if linked is not None:
        f = attrs.evolve(f, linked_to=linked.id)
    found = await repo.read(SESSION_KIND, f)
    counts = await repo.count_by_status(SESSION_KIND)
    results = await repo.count_by_result(SESSION_KIND)
    ended = await repo.count_by_status_and_result(SESSION_KIND)
    # Why each PENDING session waits: its latest history row (the scheduler's reason).
    waiting = [s.id for s in found if s.status == SessionStatus.PENDING]
    reasons = {
        sid: message or result
        for sid, (result, message) in (await repo.latest_messages(waiting)).items()
    }
    params = {
        "status": list(f.statuses),
        "name": request.query_params.get("name", ""),
        "handler": request.query_params.get("handler", ""),
        "since": request.query_params.get("since", ""),
        "until": request.query_params.get("until", ""),
        "sort": f.sort,
        "result": f.result or "",
        "linked_to": request.query_params.get("linked_to", ""),
    }
    handler_names: list[str] = []
    # A configuration whose handlers do not load still has sessions to show.
    with contextlib.suppress(DroverError):
        handler_names = sorted(dashboard.coordinator().handlers)
    return page(
        request,
        "overview.html",
        {
            "title": "Overview",
            "sessions": found,
            "counts": {s.value: counts.get(s, 0) for s in SessionStatus},
            # How the sessions of each ended status ended: SUCCESS, FAILURE, CANCELLED…
            "ended": {status: ordered_results(n) for status, n in ended.items()},
            "total": sum(counts.values()),
            "failed": results.get("FAILURE", 0),
            "filters": params,
            "selected": set(f.statuses),
            "handler_names": handler_names,
            "result_choices": sorted({"SUCCESS", "FAILURE", *results}),
            "reasons": reasons,
            "linked": linked,
            "limit": f.limit,
            "now": now,
            "ago": lambda v: _ago(v, now),
        },
    )


async def _linked_entity(dashboard: Dashboard, ref: str | None) -> Entity | None:
    """The entity ``linked_to`` names (an id, an id prefix or a name); BadFilterError if none."""
    if not ref:
        return None
    repo = dashboard.repo
    try:
        return await repo.get_entity(await repo.resolve_entity_id(ref))
    except DroverError as error:
        raise BadFilterError(f"linked_to: {error}") from None


async def session_page(request: Request) -> Response:
    """``/sessions/{session_id}``: one session, why it waits, its timeline and kernel logs."""
    dashboard = dashboard_of(request)
    repo = dashboard.repo
    now = dashboard.now()
    sid = await session_id_of(request)
    session = await repo.read_one(SESSION_KIND, sid)
    data = session_json(session)
    why_lines: list[str] = []
    why_error = None
    try:
        diagnosis = await diagnose_session(repo, dashboard.coordinator(), sid, now)
        why_lines = list(diagnosis.lines)
    except DroverError as error:
        why_error = str(error)
    rows = await repo.history(sid)
    items = await timeline(repo, sid, history=rows)
    kernel_index = {k["id"]: k["index"] for k in data["kernels"]}
    logs = [await kernel_logs(k.runtime, LOG_TAIL_BYTES) for k in session.kernels]
    return page(
        request,
        "session.html",
        {
            "title": f"Session {session.name}",
            "session": session,
            "data": data,
            "why": why_lines,
            "why_error": why_error,
            "timeline": items,
            "kernel_index": kernel_index,
            "logs": logs,
            "specs": [_kernel_facts(k.spec, k.runtime) for k in session.kernels],
            "run_time": _run_time(rows, now),
            "links": await _links(dashboard, sid),
            "now": now,
            "ago": lambda v: _ago(v, now),
        },
    )


def _kernel_facts(spec: Mapping[str, Any], runtime: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a kernel was asked to run: command, resources, env names (never values), cwd."""
    command = spec.get("command")
    resources = {
        key: value
        for key, value in spec.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }
    env = spec.get("env")
    cwd = spec.get("cwd")
    workdir = (runtime or {}).get("workdir")
    where: Any = cwd or workdir
    if isinstance(cwd, str) and cwd and workdir and not cwd.startswith("/"):
        where = f"{workdir}/{cwd}"
    return {
        "command": shlex.join(str(c) for c in command) if isinstance(command, list) else command,
        "resources": " ".join(f"{k}={v:g}" for k, v in resources.items()),
        "env": sorted(env) if isinstance(env, dict) else [],
        "cwd": where,
    }


def _run_time(rows: Sequence[HistoryRecord], now: float) -> str | None:
    """How long the session was (or has been, if still) RUNNING; ``None`` if it never ran."""
    started: float | None = None
    for row in rows:
        moved = row.from_status != row.to_status
        if started is None and moved and row.to_status == SessionStatus.RUNNING:
            started = row.created_at.timestamp()
        elif started is not None and moved and row.from_status == SessionStatus.RUNNING:
            return duration(row.created_at.timestamp() - started)
    return None if started is None else duration(now - started) + " (still running)"


async def _links(dashboard: Dashboard, entity_id: str) -> list[dict[str, Any]]:
    """The entity's relations, each with the target and its ancestors and their pages.

    A deployment's replica session links to its route (``replica-of``); the
    route's parent is the deployment, whose page its kind's plugin registered.
    """
    repo = dashboard.repo
    found: list[dict[str, Any]] = []
    for relation, target_id in (await repo.get_entity(entity_id)).links:
        chain: list[dict[str, Any]] = []
        next_id: str | None = target_id
        while next_id is not None and len(chain) < 5:
            try:
                target = await repo.get_entity(next_id)
            except DroverError:
                break
            chain.append(
                {
                    "kind": target.kind,
                    "id": target.id,
                    "name": target.name or target.id,
                    "url": dashboard.entity_url(target.kind, target.id),
                }
            )
            next_id = target.parent_id
        found.append({"relation": relation, "chain": chain})
    return found


async def handlers_page(request: Request) -> Response:
    """``/handlers``: each handler's ticks, results and timings (``?since=``)."""
    dashboard = dashboard_of(request)
    now = dashboard.now()
    try:
        since = time_param(request.query_params, "since", now)
    except BadFilterError as error:
        return bad_request(request, str(error), api=False)
    stats = stats_json(await collect_stats(dashboard.repo, since=since, now=now))
    results = sorted({r for h in stats["handlers"] for r in h["results"]})
    ordered = [r.value for r in SchedulingResult if r.value in results]
    ordered += [r for r in results if r not in ordered]
    return page(
        request,
        "handlers.html",
        {
            "title": "Handlers",
            "stats": stats,
            "result_names": ordered,
            "since": request.query_params.get("since", ""),
            "fmt_s": lambda v: duration(float(v)) if v else "0s",
            "fmt_ms": lambda v: f"{float(v) * 1000:.1f} ms",
        },
    )


async def graph_page(request: Request) -> Response:
    """``/graph``: one graph per kind that has edges (sessions first), laid out by Graphviz."""
    dashboard = dashboard_of(request)
    graphs: list[dict[str, Any]] = []
    try:
        for name in dashboard.kinds:
            kind, edges = dashboard.kind_edges(name)
            if not edges:
                continue
            svg: str | None = None
            graph_error: str | None = None
            try:
                svg = await dashboard.graph_svg(kind)
            except GraphvizError as error:
                graph_error = str(error)
            graphs.append(
                {
                    "kind": kind.name,
                    "svg": svg,
                    "graph_error": graph_error,
                    "edges": graph_json(edges, kind)["edges"],
                }
            )
    except DroverError as error:
        return page(request, "error.html", {"title": "Graph", "message": str(error)}, 500)
    return page(request, "graph.html", {"title": "State graphs", "graphs": graphs})


async def graph_svg(request: Request) -> Response:
    """``/graph.svg?kind=``: the state graph alone; 503 without Graphviz."""
    dashboard = dashboard_of(request)
    try:
        kind, _edges = dashboard.kind_edges(request.query_params.get("kind"))
        svg = await dashboard.graph_svg(kind)
    except GraphvizError as error:
        return PlainTextResponse(f"{error}\n", status_code=503)
    except DroverError as error:
        return bad_request(request, str(error), api=True)
    return Response(svg, media_type="image/svg+xml")


async def kernel_log(request: Request) -> Response:
    """``/sessions/{id}/kernels/{n}/{stream}?bytes=N``: the end of a kernel's log as text."""
    sid = await session_id_of(request)
    session = await dashboard_of(request).repo.read_one(SESSION_KIND, sid)
    index = int(request.path_params["index"])
    if not 1 <= index <= len(session.kernels):
        raise HTTPException(404, f"session {sid} has no kernel {index}")
    raw = (request.query_params.get("bytes") or "").strip()
    try:
        size = min(int(raw), MAX_LOG_BYTES) if raw else MAX_LOG_BYTES
    except ValueError:
        return bad_request(request, f"bytes: {raw!r} is not a whole number", api=False)
    if size < 1:
        return bad_request(request, "bytes: must be at least 1", api=False)
    stream = request.path_params["stream"]
    found = (await kernel_logs(session.kernels[index - 1].runtime, size)).get(stream)
    if found is not None and found.get("refused"):
        raise HTTPException(403, f"kernel {index} of {sid}: {found['refused']}")
    if found is None or found["text"] is None:
        raise HTTPException(404, f"kernel {index} of {sid} has no {stream} log")
    return PlainTextResponse(found["text"], headers={"X-Drover-Log-Size": str(found["size"])})


async def palette_css(request: Request) -> Response:
    """``/palette.css``: a badge class per status colour (the CSP allows no inline style)."""
    return Response(badge_css(dashboard_of(request).colours) + "\n", media_type="text/css")
