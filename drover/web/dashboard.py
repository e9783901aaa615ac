"""What every dashboard endpoint shares: the :class:`Dashboard` and how answers are made.

:func:`~drover.web.app.create_app` keeps one :class:`Dashboard` in
``app.state.dashboard``; the endpoints (:mod:`drover.web.pages`,
:mod:`drover.web.api`) are plain functions of the request that reach it with
:func:`dashboard_of` and answer with :func:`page`, :func:`bad_request` or an
:class:`~starlette.exceptions.HTTPException` (see :func:`http_error`).

A plugin's pages and JSON endpoints (``drover_register_web``) are written the
same way: :func:`dashboard_of`, :func:`page`, :func:`bad_request` and the
read-only ``Dashboard.repo`` (:class:`~drover.storage.queries.Queries`) are
public, and re-exported by :mod:`drover.web`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import urlencode

from jinja2 import BaseLoader, ChoiceLoader, Environment, FileSystemLoader, select_autoescape
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.templating import Jinja2Templates

from drover.backends.base import KernelReporter
from drover.coordinator.tick import Coordinator
from drover.kinds.sessions.values import SESSION_KIND, TERMINAL_SESSION_STATUSES, SessionStatus
from drover.model.errors import DroverError, UnknownEntityError
from drover.model.kinds import EntityKind, Kinds
from drover.plugins.graph import Edge, edges_of
from drover.serialization import display_time
from drover.storage.queries import LIST_ORDERS, Queries
from drover.web.logs import LOG_TAIL_BYTES
from drover.web.palette import STATUS_COLOURS
from drover.web.svg_graph import render_svg

if TYPE_CHECKING:
    import pluggy

    from drover.config import Config

__all__ = [
    "Dashboard",
    "DashboardApp",
    "bad_request",
    "dashboard_of",
    "http_error",
    "page",
    "session_id_of",
]

_TEMPLATES = Path(__file__).parent / "templates"


class DashboardApp(Protocol):
    """The running drover a dashboard shows: :class:`drover.app.App` is one.

    A protocol, so that the dashboard imports nothing of how drover is assembled
    (the app runs the dashboard in the daemon: ``drover run --http``).
    """

    @property
    def config(self) -> Config:
        """The effective configuration."""

    @property
    def queries(self) -> Queries:
        """Read-only queries on the database."""

    @property
    def repository(self) -> KernelReporter:
        """Where pushed reports (``POST /api/report``) go."""

    @property
    def kinds(self) -> Kinds:
        """The registered entity kinds."""

    @property
    def coordinator(self) -> Coordinator | None:
        """The daemon's coordinator, once built."""

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        """The loaded plugins (their pages: ``drover_register_web``)."""

    def load_handlers(self) -> Coordinator:
        """The coordinator of the loaded handlers, built on first use."""

    async def close(self) -> None:
        """Release the database and the backend."""


class Dashboard:
    """What the endpoints need: read-only queries, kinds and handlers, the templates, a clock.

    The dashboard is read-only by type: ``repo`` is a :class:`Queries`, which
    has no method that writes. ``auth_token`` is None when the dashboard is
    open; ``refresh_seconds`` is how often the pages reload their live parts.
    ``template_dirs`` are the plugins' template directories, searched after
    drover's own; ``nav`` the plugins' ``(label, path)`` links for the top
    navigation (``drover_register_web``); ``entity_pages`` the path of the page
    of one entity of a kind, by kind (``page_of``; sessions have drover's own);
    ``colours`` each status's (background, text), drover's and the plugins'
    (:func:`~drover.web.palette.with_plugin_colours`; drover's own if None).
    """

    def __init__(
        self,
        app: DashboardApp,
        *,
        auth_token: str | None = None,
        refresh_seconds: float = 3.0,
        template_dirs: Sequence[Path] = (),
        nav: Sequence[tuple[str, str]] = (),
        entity_pages: Mapping[str, str] | None = None,
        colours: Mapping[str, tuple[str, str]] | None = None,
    ) -> None:
        self._app = app
        self.repo: Queries = app.queries
        #: Seconds between a daemon's heartbeats (``/healthz`` allows three).
        self.heartbeat_interval = app.config.heartbeat_interval
        self.auth_token = auth_token or None
        #: Pushed reports (``POST /api/report``), the dashboard's one write: only behind
        #: the token gate, so ``None`` without a token.
        self.reporter: KernelReporter | None = app.repository if self.auth_token else None
        self.refresh_seconds = refresh_seconds
        #: ``(label, path)`` of the plugins' links in the top navigation, in order.
        self.nav: list[tuple[str, str]] = list(nav)
        #: Kind -> path of the page showing one entity of it (``/deployments/{name}``).
        self.entity_pages: dict[str, str] = {"session": "/sessions/{session_id}"}
        self.entity_pages.update(entity_pages or {})
        #: Status -> (background, text): the badges (``/palette.css``) and the graph boxes.
        self.colours: dict[str, tuple[str, str]] = dict(colours or STATUS_COLOURS)
        self.templates = _templates(self, template_dirs)
        # The loaded handlers never change in a process: dot runs once per kind.
        self._svg: dict[str, str] = {}

    @property
    def kinds(self) -> Kinds:
        """The registered entity kinds (read on first use: plugins load then)."""
        return self._app.kinds

    def entity_url(self, kind: str, entity_id: str) -> str | None:
        """The page of one entity of ``kind`` (``None`` if no page shows that kind)."""
        path = self.entity_pages.get(kind)
        if path is None:
            return None
        head, _, rest = path.partition("{")
        return head + entity_id + rest.partition("}")[2]

    def now(self) -> float:
        """The wall-clock time the pages measure ages and relative filters against."""
        return time.time()

    def coordinator(self) -> Coordinator:
        """The daemon's coordinator, or one built (not run) from the configuration."""
        return self._app.coordinator or self._app.load_handlers()

    def kind_edges(self, kind_name: str | None) -> tuple[EntityKind, list[Edge]]:
        """The kind named ``kind_name`` (sessions if None) and its edges in the loaded handlers."""
        handlers = self.coordinator().handlers
        kind = self.kinds[kind_name or "session"]
        return kind, edges_of(handlers, kind=kind)

    async def graph_svg(self, kind: EntityKind) -> str:
        """The state graph of ``kind`` from the loaded handlers, laid out by Graphviz (cached)."""
        if kind.name not in self._svg:
            edges = edges_of(self.coordinator().handlers, kind=kind)
            self._svg[kind.name] = await render_svg(edges, kind, self.colours)
        return self._svg[kind.name]


def _templates(dashboard: Dashboard, template_dirs: Sequence[Path]) -> Jinja2Templates:
    # drover's own templates first: a plugin's may extend base.html, never replace it.
    loaders: list[BaseLoader] = [FileSystemLoader(str(d)) for d in (_TEMPLATES, *template_dirs)]
    env = Environment(
        loader=ChoiceLoader(loaders),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    templates = Jinja2Templates(env=env)
    env.globals["statuses"] = [s.value for s in SessionStatus]
    env.globals["status_colours"] = dashboard.colours
    env.globals["iso"] = display_time
    env.globals["at"] = _at
    env.globals["refresh_ms"] = int(dashboard.refresh_seconds * 1000)
    env.globals["terminal_statuses"] = {s.value for s in TERMINAL_SESSION_STATUSES}
    env.globals["url"] = _url
    env.globals["login_required"] = dashboard.auth_token is not None
    env.globals["sort_orders"] = list(LIST_ORDERS)
    env.globals["log_tail_kib"] = LOG_TAIL_BYTES // 1024
    return templates


def _at(value: str | None) -> str:
    """A timeline's ISO time as ``YYYY-MM-DD HH:MM:SS.mmm``: the date always shown."""
    return "" if not value else f"{value[:10]} {value[11:23]}"


def _url(path: str, params: Mapping[str, Any] | None = None, **more: Any) -> str:
    # Never the token: a browser holds the login cookie instead.
    pairs: list[tuple[str, str]] = []
    for key, value in {**(params or {}), **more}.items():
        values = value if isinstance(value, list | tuple) else [value]
        pairs.extend((key, str(v)) for v in values if v is not None and v != "")
    return path + ("?" + urlencode(pairs) if pairs else "")


def dashboard_of(request: Request) -> Dashboard:
    """The :class:`Dashboard` of the application serving ``request``."""
    return cast(Dashboard, request.app.state.dashboard)


def page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
    """Template ``name`` rendered with ``context`` (plus ``now``, ``path``, ``updated``, ``nav``).

    ``name`` is looked up in drover's templates, then in the plugins' template
    directories. ``nav`` is the plugins' navigation links (``base.html`` shows them).
    """
    dashboard = dashboard_of(request)
    context.setdefault("now", dashboard.now())
    context.setdefault("nav", dashboard.nav)
    context.setdefault("path", request.url.path)
    context.setdefault("updated", datetime.now(UTC).strftime("%H:%M:%S UTC"))
    return dashboard.templates.TemplateResponse(request, name, context, status_code=status)


def bad_request(request: Request, message: str, *, api: bool) -> Response:
    """A 400 saying ``message``: ``{"error": message}`` for the API, else the error page."""
    if api:
        return JSONResponse({"error": message}, status_code=400)
    return page(request, "error.html", {"title": "Bad request", "message": message}, 400)


async def http_error(request: Request, exc: Exception) -> Response:
    """An :class:`HTTPException` as ``{"error": detail}`` under ``/api/``, else the error page."""
    assert isinstance(exc, HTTPException)
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)
    title = "Not found" if exc.status_code == 404 else "Error"
    return page(request, "error.html", {"title": title, "message": exc.detail}, exc.status_code)


async def session_id_of(request: Request) -> str:
    """The full id of the session the path's ``session_id`` (an id, a name or an id
    prefix, by the repository's one resolver) names.

    Raises HTTPException: 404 for no such session, 400 for an ambiguous name or prefix.
    """
    prefix = request.path_params["session_id"]
    try:
        return str(await dashboard_of(request).repo.resolve_entity_id(prefix, SESSION_KIND))
    except UnknownEntityError:
        raise HTTPException(404, f"no session {prefix!r}") from None
    except DroverError as error:
        raise HTTPException(400, str(error)) from None
