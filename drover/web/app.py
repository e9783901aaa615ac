"""The read-only web dashboard: server-rendered pages, a JSON API, metrics and health.

:func:`create_app` builds a Starlette application over a
:class:`~drover.web.dashboard.DashboardApp` (an :class:`~drover.app.App`: its
read-only queries, configuration and loaded handlers). It never writes to the
database. ``drover serve`` runs it alone; ``drover run --http PORT`` runs it in
the daemon's event loop.

The parts: :mod:`~drover.web.dashboard` (what every endpoint shares),
:mod:`~drover.web.pages` (HTML), :mod:`~drover.web.api` (JSON, ``/metrics``,
``/healthz``) and :mod:`~drover.web.security` (Host check, token gate, headers).
Plugins add pages and JSON endpoints through ``drover_register_web`` (so do
drover's own kind packages, :mod:`drover.kinds`): they are served after
drover's own routes, behind the same middleware.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

# Each module by its full name: ``from drover.web import …`` would import the package,
# which imports this module (an import circle).
import drover.web.api as api
import drover.web.history as history
import drover.web.pages as pages
import drover.web.report as report
from drover.model.errors import InvalidHandlerError
from drover.plugins.manager import collect_web
from drover.plugins.registry import Registered, WebRoute
from drover.web.dashboard import Dashboard, DashboardApp, http_error
from drover.web.palette import with_plugin_colours
from drover.web.security import security_middleware

__all__ = ["create_app"]

_STATIC = Path(__file__).parent / "static"


def _routes() -> list[BaseRoute]:
    return [
        Route("/", pages.overview, name="overview"),
        Route("/sessions/{session_id}", pages.session_page, name="session"),
        Route("/history", history.history_page, name="history"),
        Route("/history.csv", history.history_csv, name="history_csv"),
        Route("/handlers", pages.handlers_page, name="handlers"),
        Route("/graph", pages.graph_page, name="graph"),
        Route("/graph.svg", pages.graph_svg, name="graph_svg"),
        Route(
            "/sessions/{session_id}/kernels/{index:int}/{stream:str}",
            pages.kernel_log,
            name="kernel_log",
        ),
        Route("/palette.css", pages.palette_css),
        Route("/api/sessions", api.sessions),
        Route("/api/sessions/{session_id}", api.session),
        Route("/api/sessions/{session_id}/why", api.session_why),
        Route("/api/sessions/{session_id}/timeline", api.session_timeline),
        Route("/api/history", history.history_api),
        Route("/api/report", report.report, methods=["POST"]),
        Route("/api/stats", api.stats),
        Route("/api/graph", api.graph),
        Route("/metrics", api.metrics),
        Route("/healthz", api.healthz),
        Mount("/static", StaticFiles(directory=str(_STATIC)), name="static"),
    ]


def _plugin_routes(own: list[BaseRoute], found: list[Registered[WebRoute]]) -> list[BaseRoute]:
    taken = {route.path for route in own if isinstance(route, Route | Mount)}
    routes: list[BaseRoute] = []
    for entry in found:
        route = entry.item
        if route.path in taken:
            raise InvalidHandlerError(
                f"plugin {entry.plugin!r} registered the dashboard path {route.path!r}, "
                "which is drover's own"
            )
        routes.append(Route(route.path, route.endpoint, name=route.name))
    return routes


def create_app(
    app: DashboardApp,
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
    :mod:`drover.web.security`). With ``close_app_on_shutdown`` the
    application's shutdown closes ``app`` too. The plugins' pages and endpoints
    (``drover_register_web``) come after drover's own routes, their template
    directories after drover's templates, their ``nav`` labels in the top
    navigation, their statuses in the colours they gave them.
    """
    plugins = collect_web(app.plugin_manager)
    own = _routes()
    routes = own + _plugin_routes(own, plugins.routes)
    dashboard = Dashboard(
        app,
        auth_token=auth_token,
        refresh_seconds=refresh_seconds,
        template_dirs=plugins.template_dirs,
        nav=[(e.item.nav, e.item.path) for e in plugins.routes if e.item.nav],
        entity_pages={e.item.page_of: e.item.path for e in plugins.routes if e.item.page_of},
        colours=with_plugin_colours(plugins.status_colours),
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if close_app_on_shutdown:
                await app.close()

    web = Starlette(
        routes=routes,
        middleware=security_middleware(
            host=host, allowed_hosts=allowed_hosts, auth_token=dashboard.auth_token
        ),
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    web.state.dashboard = dashboard
    return web
