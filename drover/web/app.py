"""The read-only web dashboard: server-rendered pages, a JSON API, metrics and health.

:func:`create_app` builds a Starlette application over an :class:`~drover.app.App`
(its repository, configuration and loaded handlers). It never writes to the
database. ``drover serve`` runs it alone; ``drover run --http PORT`` runs it in
the daemon's event loop.

The parts: :mod:`~drover.web.dashboard` (what every endpoint shares),
:mod:`~drover.web.pages` (HTML), :mod:`~drover.web.api` (JSON, ``/metrics``,
``/healthz``) and :mod:`~drover.web.security` (Host check, token gate, headers).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from drover.app import App
from drover.web import api, pages
from drover.web.dashboard import Dashboard, http_error
from drover.web.security import security_middleware

__all__ = ["create_app"]

_STATIC = Path(__file__).parent / "static"


def _routes() -> list[BaseRoute]:
    return [
        Route("/", pages.overview, name="overview"),
        Route("/sessions/{session_id}", pages.session_page, name="session"),
        Route("/handlers", pages.handlers_page, name="handlers"),
        Route("/deployments", pages.deployments_page, name="deployments"),
        Route("/deployments/{name}", pages.deployment_page, name="deployment"),
        Route("/graph", pages.graph_page, name="graph"),
        Route("/graph.svg", pages.graph_svg, name="graph_svg"),
        Route(
            "/sessions/{session_id}/kernels/{index:int}/{stream:str}",
            pages.kernel_log,
            name="kernel_log",
        ),
        Route("/palette.css", pages.palette_css),
        Route("/api/sessions", api.sessions),
        Route("/api/deployments", api.deployments),
        Route("/api/deployments/{name}/endpoints", api.deployment_endpoints),
        Route("/api/sessions/{session_id}", api.session),
        Route("/api/sessions/{session_id}/why", api.session_why),
        Route("/api/sessions/{session_id}/timeline", api.session_timeline),
        Route("/api/history", api.history),
        Route("/api/stats", api.stats),
        Route("/api/graph", api.graph),
        Route("/metrics", api.metrics),
        Route("/healthz", api.healthz),
        Mount("/static", StaticFiles(directory=str(_STATIC)), name="static"),
    ]


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
    :mod:`drover.web.security`). With ``close_app_on_shutdown`` the
    application's shutdown closes ``app`` too.
    """
    dashboard = Dashboard(app, auth_token=auth_token, refresh_seconds=refresh_seconds)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if close_app_on_shutdown:
                await app.close()

    web = Starlette(
        routes=_routes(),
        middleware=security_middleware(
            host=host, allowed_hosts=allowed_hosts, auth_token=dashboard.auth_token
        ),
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    web.state.dashboard = dashboard
    return web
