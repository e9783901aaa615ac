"""The read-only web dashboard: server-rendered pages, a JSON API, metrics and health.

:func:`create_app` builds a Starlette application over an :class:`~drover.app.App`
(its repository, configuration and loaded handlers). It never writes to the
database. ``drover serve`` runs it alone; ``drover run --http PORT`` runs it in
the daemon's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import QueryParams
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from drover.app import App
from drover.coordinator.tick import Coordinator
from drover.inspection._format import duration, parse_time
from drover.inspection.health import recent_handler_errors
from drover.inspection.history import search_history, timeline
from drover.inspection.stats import collect_stats
from drover.inspection.why import diagnose_session
from drover.model.errors import DroverError, UnknownSessionError
from drover.model.kinds import EntityKind
from drover.model.status import (
    TERMINAL_SESSION_STATUSES,
    RouteStatus,
    SchedulingResult,
    SessionStatus,
)
from drover.model.values import Entity
from drover.plugins.graph import Edge, edges_of
from drover.serialization import (
    deployment_json,
    diagnosis_json,
    display_time,
    graph_json,
    history_json,
    route_json,
    session_json,
    stats_json,
)
from drover.storage.sessions import SESSION_ORDERS, SessionFilter
from drover.web.metrics import render_metrics
from drover.web.palette import STATUS_COLOURS, badge_css
from drover.web.security import HostCheck, SecurityHeaders, TokenGate
from drover.web.svg_graph import GraphvizError, render_svg

__all__ = ["CONTENT_TYPE_METRICS", "LOG_TAIL_BYTES", "MAX_LOG_BYTES", "Dashboard", "create_app"]

_HERE = Path(__file__).parent
CONTENT_TYPE_METRICS = "text/plain; version=0.0.4; charset=utf-8"
#: How much of the end of each kernel log the session page shows.
LOG_TAIL_BYTES = 16 * 1024
#: The most ``/sessions/{id}/kernels/{n}/stdout?bytes=N`` returns.
MAX_LOG_BYTES = 1024 * 1024


class BadFilterError(ValueError):
    """A query parameter could not be understood."""


class Dashboard:
    """What the pages need: the app, the optional token, and the loaded handlers."""

    def __init__(
        self, app: App, *, auth_token: str | None = None, refresh_seconds: float = 3.0
    ) -> None:
        self.app = app
        self.auth_token = auth_token or None
        self.refresh_seconds = refresh_seconds
        # The loaded handlers never change in a process: dot runs once per kind.
        self._svg: dict[str, str] = {}

    async def graph_svg(self, kind: EntityKind) -> str:
        """The state graph of ``kind`` from the loaded handlers, laid out by Graphviz (cached)."""
        if kind.name not in self._svg:
            edges = edges_of(self.coordinator().handlers, kind=kind)
            self._svg[kind.name] = await render_svg(edges, kind)
        return self._svg[kind.name]

    def coordinator(self) -> Coordinator:
        """The daemon's coordinator, or one built (not run) from the configuration."""
        if self.app.coordinator is None:
            self.app.load_handlers()
        assert self.app.coordinator is not None
        return self.app.coordinator


# -- query parameters -----------------------------------------------------------------


def _time_param(params: QueryParams, name: str, now: float) -> float | None:
    raw = (params.get(name) or "").strip()
    if not raw:
        return None
    try:
        return parse_time(raw, now)
    except ValueError as error:
        raise BadFilterError(f"{name}: {error}") from None


def _limit_param(params: QueryParams, default: int = 100) -> int:
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


def _sort_param(params: QueryParams) -> str:
    raw = (params.get("sort") or "newest").strip().lower()
    if raw not in SESSION_ORDERS:
        raise BadFilterError(f"sort: {raw!r} is not one of {', '.join(SESSION_ORDERS)}")
    return raw


def _session_filter(params: QueryParams, now: float) -> SessionFilter:
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
    return SessionFilter(
        statuses=tuple(statuses),
        name=(params.get("name") or "").strip() or None,
        handler=(params.get("handler") or "").strip() or None,
        since=_time_param(params, "since", now),
        until=_time_param(params, "until", now),
        limit=_limit_param(params),
        sort=_sort_param(params),
    )


# -- kernel logs ----------------------------------------------------------------------


def _tail(path: str, size: int) -> tuple[str, int] | None:
    """The last ``size`` bytes of ``path`` as text, and the file's whole size; None if absent."""
    try:
        with open(path, "rb") as handle:
            total = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, total - size))
            data = handle.read(size)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return None
    text = data.decode("utf-8", "replace")
    if total > size:
        # The cut may fall inside a line (or a character): start at the next line.
        text = text.partition("\n")[2] or text
    return text, total


async def _kernel_logs(runtime: Mapping[str, Any] | None, size: int) -> dict[str, Any]:
    """``{stream: {"path", "text", "size", "cut"}}`` for the streams a kernel has."""
    out: dict[str, Any] = {}
    for stream in ("stdout", "stderr"):
        path = (runtime or {}).get(stream)
        if not isinstance(path, str):
            continue
        found = await asyncio.to_thread(_tail, path, size)
        if found is None:
            out[stream] = {"path": path, "text": None, "size": 0, "cut": False}
        else:
            text, total = found
            out[stream] = {"path": path, "text": text, "size": total, "cut": total > size}
    return out


# -- helpers for templates --------------------------------------------------------------


def _ago(value: datetime | str | None, now: float) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return duration(now - value.timestamp()) + " ago"


def _templates(dashboard: Dashboard) -> Jinja2Templates:
    env = Environment(
        loader=FileSystemLoader(str(_HERE / "templates")),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    templates = Jinja2Templates(env=env)
    env.globals["statuses"] = [s.value for s in SessionStatus]
    env.globals["status_colours"] = STATUS_COLOURS
    env.globals["iso"] = display_time
    env.globals["refresh_ms"] = int(dashboard.refresh_seconds * 1000)
    env.globals["terminal_statuses"] = {s.value for s in TERMINAL_SESSION_STATUSES}

    def url(path: str, params: Mapping[str, Any] | None = None, **more: Any) -> str:
        # Never the token: a browser holds the login cookie instead.
        pairs: list[tuple[str, str]] = []
        for key, value in {**(params or {}), **more}.items():
            values = value if isinstance(value, list | tuple) else [value]
            pairs.extend((key, str(v)) for v in values if v is not None and v != "")
        return path + ("?" + urlencode(pairs) if pairs else "")

    env.globals["url"] = url
    env.globals["login_required"] = dashboard.auth_token is not None
    env.globals["sort_orders"] = list(SESSION_ORDERS)
    env.globals["log_tail_kib"] = LOG_TAIL_BYTES // 1024
    return templates


# -- the application --------------------------------------------------------------------


def create_app(
    app: App,
    *,
    auth_token: str | None = None,
    refresh_seconds: float = 3.0,
    close_app_on_shutdown: bool = False,
    host: str = "127.0.0.1",
    allowed_hosts: Sequence[str] = (),
) -> Starlette:
    """The dashboard over ``app``, served on the address ``host``.

    Requests must name ``host`` (or, on loopback, ``localhost``), or one of
    ``allowed_hosts``, in their ``Host`` header; with ``auth_token`` every
    request must carry the token or the login cookie (see
    :mod:`drover.web.security`).
    """
    dashboard = Dashboard(app, auth_token=auth_token, refresh_seconds=refresh_seconds)
    templates = _templates(dashboard)
    repo = app.repository

    def page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
        context.setdefault("now", time.time())
        context.setdefault("path", request.url.path)
        context.setdefault("updated", datetime.now(UTC).strftime("%H:%M:%S UTC"))
        return templates.TemplateResponse(request, name, context, status_code=status)

    def bad_request(request: Request, message: str, *, api: bool) -> Response:
        if api:
            return JSONResponse({"error": message}, status_code=400)
        return page(request, "error.html", {"title": "Bad request", "message": message}, 400)

    async def resolve(request: Request, *, api: bool) -> str:
        prefix = request.path_params["session_id"]
        try:
            return str(await repo.resolve_session_id(prefix))
        except UnknownSessionError:
            raise HTTPException(404, f"no session {prefix!r}") from None
        except DroverError as error:
            raise HTTPException(400, str(error)) from None

    # -- pages ----------------------------------------------------------------------

    async def overview(request: Request) -> Response:
        now = time.time()
        try:
            f = _session_filter(request.query_params, now)
        except BadFilterError as error:
            return bad_request(request, str(error), api=False)
        found = await repo.filtered_sessions(f)
        counts = await repo.count_by_status()
        params = {
            "status": [s.value for s in f.statuses],
            "name": request.query_params.get("name", ""),
            "handler": request.query_params.get("handler", ""),
            "since": request.query_params.get("since", ""),
            "until": request.query_params.get("until", ""),
            "sort": f.sort,
        }
        handler_names: list[str] = []
        with contextlib.suppress(DroverError):
            handler_names = sorted(dashboard.coordinator().handlers)
        return page(
            request,
            "overview.html",
            {
                "title": "Overview",
                "sessions": found,
                "counts": {s.value: counts.get(s, 0) for s in SessionStatus},
                "total": sum(counts.values()),
                "filters": params,
                "selected": {s.value for s in f.statuses},
                "handler_names": handler_names,
                "limit": f.limit,
                "now": now,
                "ago": lambda v: _ago(v, now),
            },
        )

    async def session_page(request: Request) -> Response:
        now = time.time()
        sid = await resolve(request, api=False)
        session = await repo.get_session(sid)
        data = session_json(session)
        why_lines: list[str] = []
        why_error = None
        try:
            coordinator = dashboard.coordinator()
            diagnosis = await diagnose_session(repo, coordinator, sid, now)
            why_lines = list(diagnosis.lines)
        except DroverError as error:
            why_error = str(error)
        items = await timeline(repo, sid)
        kernel_index = {k["id"]: k["index"] for k in data["kernels"]}
        logs = [await _kernel_logs(k.runtime, LOG_TAIL_BYTES) for k in session.kernels]
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
                "now": now,
                "ago": lambda v: _ago(v, now),
            },
        )

    async def handlers_page(request: Request) -> Response:
        now = time.time()
        try:
            since = _time_param(request.query_params, "since", now)
        except BadFilterError as error:
            return bad_request(request, str(error), api=False)
        stats = stats_json(await collect_stats(repo, since=since, now=now))
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

    def kind_edges(kind_name: str | None) -> tuple[EntityKind, list[Edge]]:
        handlers = dashboard.coordinator().handlers
        kind = app.kinds[kind_name or "session"]
        return kind, edges_of(handlers, kind=kind)

    async def graph_page(request: Request) -> Response:
        """One graph per kind that has edges (sessions first), laid out by Graphviz."""
        graphs = []
        try:
            for name in app.kinds:
                kind, edges = kind_edges(name)
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

    async def kernel_log(request: Request) -> Response:
        sid = await resolve(request, api=False)
        session = await repo.get_session(sid)
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
        found = (await _kernel_logs(session.kernels[index - 1].runtime, size)).get(stream)
        if found is None or found["text"] is None:
            raise HTTPException(404, f"kernel {index} of {sid} has no {stream} log")
        return PlainTextResponse(found["text"], headers={"X-Drover-Log-Size": str(found["size"])})

    async def palette_css(request: Request) -> Response:
        return Response(badge_css() + "\n", media_type="text/css")

    # -- API -------------------------------------------------------------------------

    async def api_sessions(request: Request) -> Response:
        try:
            f = _session_filter(request.query_params, time.time())
        except BadFilterError as error:
            return bad_request(request, str(error), api=True)
        return JSONResponse([session_json(s) for s in await repo.filtered_sessions(f)])

    async def api_session(request: Request) -> Response:
        sid = await resolve(request, api=True)
        data = session_json(await repo.get_session(sid))
        data["history"] = [history_json(r) for r in await repo.history(sid)]
        return JSONResponse(data)

    async def deployment_of(request: Request) -> Entity:
        name = request.path_params["name"]
        found = await repo.find_by_name("deployment", name)
        if not found:
            raise HTTPException(404, f"no deployment named {name!r}")
        return found[0]

    async def deployments_page(request: Request) -> Response:
        found = await repo.list_entities("deployment", limit=None)
        return page(
            request,
            "deployments.html",
            {"title": "Deployments", "deployments": [deployment_json(d) for d in found]},
        )

    async def deployment_page(request: Request) -> Response:
        deployment = await deployment_of(request)
        routes = []
        rows = list(await repo.history(deployment.id))
        for route in deployment.children:
            data = route_json(route)
            own = await repo.history(route.id)
            checks = [r for r in own if r.handler == "health-check-route"]
            data["last_check"] = (
                f"{checks[-1].result}: {checks[-1].message or ''}" if checks else None
            )
            routes.append(data)
            rows.extend(own)
        rows.sort(key=lambda r: (r.updated_at, r.id), reverse=True)
        return page(
            request,
            "deployment.html",
            {
                "title": f"Deployment {deployment.name}",
                "d": deployment_json(deployment),
                "routes": routes,
                "timeline": [history_json(r) for r in rows[:200]],
            },
        )

    async def api_deployments(request: Request) -> Response:
        found = await repo.list_entities("deployment", limit=None)
        return JSONResponse([deployment_json(d) for d in found])

    async def api_deployment_endpoints(request: Request) -> Response:
        """The HEALTHY replicas' URLs, for a load balancer (Traefik's HTTP provider, nginx)."""
        deployment = await deployment_of(request)
        urls = sorted(
            str((r.data or {}).get("url"))
            for r in deployment.children
            if r.status == RouteStatus.HEALTHY and (r.data or {}).get("url")
        )
        return JSONResponse(
            {
                "deployment": deployment.name,
                "id": deployment.id,
                "status": str(deployment.status),
                "endpoints": urls,
            }
        )

    async def api_session_why(request: Request) -> Response:
        sid = await resolve(request, api=True)
        coordinator = dashboard.coordinator()
        diagnosis = await diagnose_session(repo, coordinator, sid, time.time())
        return JSONResponse(diagnosis_json(diagnosis))

    async def api_session_timeline(request: Request) -> Response:
        sid = await resolve(request, api=True)
        return JSONResponse(await timeline(repo, sid))

    async def api_history(request: Request) -> Response:
        params = request.query_params
        now = time.time()
        try:
            raw_result = (params.get("result") or "").strip().upper()
            try:
                result = SchedulingResult(raw_result) if raw_result else None
            except ValueError:
                raise BadFilterError(
                    f"result: {raw_result!r} is not one of "
                    f"{', '.join(r.value for r in SchedulingResult)}"
                ) from None
            session_id = (params.get("session") or "").strip() or None
            if session_id is not None:
                session_id = await repo.resolve_session_id(session_id)
            rows = await search_history(
                repo,
                session_id=session_id,
                kernel_id=(params.get("kernel") or "").strip() or None,
                handler=(params.get("handler") or "").strip() or None,
                result=result,
                since=_time_param(params, "since", now),
                until=_time_param(params, "until", now),
                limit=_limit_param(params),
            )
        except BadFilterError as error:
            return bad_request(request, str(error), api=True)
        except DroverError as error:
            return JSONResponse({"error": str(error)}, status_code=404)
        return JSONResponse([history_json(r) for r in rows])

    async def api_stats(request: Request) -> Response:
        now = time.time()
        try:
            since = _time_param(request.query_params, "since", now)
        except BadFilterError as error:
            return bad_request(request, str(error), api=True)
        return JSONResponse(stats_json(await collect_stats(repo, since=since, now=now)))

    async def api_graph(request: Request) -> Response:
        try:
            kind, edges = kind_edges(request.query_params.get("kind"))
        except DroverError as error:
            return bad_request(request, str(error), api=True)
        return JSONResponse(graph_json(edges, kind))

    async def graph_svg(request: Request) -> Response:
        try:
            kind, _edges = kind_edges(request.query_params.get("kind"))
            svg = await dashboard.graph_svg(kind)
        except GraphvizError as error:
            return PlainTextResponse(f"{error}\n", status_code=503)
        except DroverError as error:
            return bad_request(request, str(error), api=True)
        return Response(svg, media_type="image/svg+xml")

    # -- operations --------------------------------------------------------------------

    async def metrics(request: Request) -> Response:
        return Response(
            render_metrics(await repo.metrics_snapshot()), media_type=CONTENT_TYPE_METRICS
        )

    async def healthz(request: Request) -> Response:
        window = 3 * app.config.heartbeat_interval

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
        now = time.time()
        age = now - max(c.heartbeat_at.timestamp() for c in alive)
        liveness = (
            f"the database answers; {len(alive)} live coordinator(s), "
            f"newest {newest.id} on {newest.host} (pid {newest.pid}), "
            f"last heartbeat {age:.1f}s ago"
        )
        failing = await recent_handler_errors(repo, now)
        if failing:
            # Still 200: the coordinator runs and other handlers make progress.
            names = "; ".join(
                f"handler {e.handler} failed {e.count} time(s), last: {e.last_error}"
                for e in failing
            )
            return PlainTextResponse(
                f"degraded: {names} (in the last 10 minutes); {liveness}\n",
                headers={"X-Drover-Health": "degraded"},
            )
        return PlainTextResponse(f"ok: {liveness}\n", headers={"X-Drover-Health": "ok"})

    # -- errors ----------------------------------------------------------------------

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": exc.detail}, status_code=exc.status_code)
        title = "Not found" if exc.status_code == 404 else "Error"
        return page(request, "error.html", {"title": title, "message": exc.detail}, exc.status_code)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if close_app_on_shutdown:
                await app.close()

    routes = [
        Route("/", overview, name="overview"),
        Route("/sessions/{session_id}", session_page, name="session"),
        Route("/handlers", handlers_page, name="handlers"),
        Route("/deployments", deployments_page, name="deployments"),
        Route("/deployments/{name}", deployment_page, name="deployment"),
        Route("/graph", graph_page, name="graph"),
        Route("/graph.svg", graph_svg, name="graph_svg"),
        Route(
            "/sessions/{session_id}/kernels/{index:int}/{stream:str}",
            kernel_log,
            name="kernel_log",
        ),
        Route("/palette.css", palette_css),
        Route("/api/sessions", api_sessions),
        Route("/api/deployments", api_deployments),
        Route("/api/deployments/{name}/endpoints", api_deployment_endpoints),
        Route("/api/sessions/{session_id}", api_session),
        Route("/api/sessions/{session_id}/why", api_session_why),
        Route("/api/sessions/{session_id}/timeline", api_session_timeline),
        Route("/api/history", api_history),
        Route("/api/stats", api_stats),
        Route("/api/graph", api_graph),
        Route("/metrics", metrics),
        Route("/healthz", healthz),
        Mount("/static", StaticFiles(directory=str(_HERE / "static")), name="static"),
    ]
    # Outermost first: every answer gets the headers, even a refused Host or a 401.
    middleware = [
        Middleware(SecurityHeaders),
        Middleware(HostCheck, bound=host, allowed=tuple(allowed_hosts)),
    ]
    if dashboard.auth_token:
        middleware.append(Middleware(TokenGate, token=dashboard.auth_token))
    web = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    web.state.dashboard = dashboard
    return web
