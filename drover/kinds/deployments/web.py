"""The deployments' dashboard pages and JSON endpoints, added through ``drover_register_web``.

``/deployments`` and ``/deployments/{name}`` (templates in ``templates/``, they
extend the dashboard's ``base.html``), ``/api/deployments`` and
``/api/deployments/{name}/endpoints`` (for a load balancer). They use only
:mod:`drover.web`'s public helpers and the read-only queries, as a plugin's would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from drover.kinds.deployments.serialization import deployment_json, route_json
from drover.kinds.deployments.status import RouteStatus
from drover.model.errors import DroverError, UnknownEntityError
from drover.model.values import Entity
from drover.plugins.registry import WebRegistry
from drover.serialization import history_json
from drover.web import Dashboard, dashboard_of, page

__all__ = [
    "COLOURS",
    "TEMPLATES",
    "deployment_endpoints",
    "deployment_of",
    "deployment_page",
    "deployments",
    "deployments_page",
    "register_web",
]

#: The pages' templates (``deployments.html``, ``deployment.html``).
TEMPLATES = Path(__file__).parent / "templates"

#: The dashboard's colours of the deployment and route statuses, (background, text): the
#: session statuses' for the same meanings. PENDING, TERMINATING and TERMINATED have
#: drover's own (:data:`drover.web.palette.STATUS_COLOURS`).
COLOURS: dict[str, tuple[str, str]] = {
    "CREATED": ("#f59e0b", "#1f1300"),  # amber, as PENDING
    "SCALING": ("#7e22ce", "#ffffff"),  # purple: being prepared
    "DEPLOYING": ("#4338ca", "#ffffff"),  # indigo
    "READY": ("#1d4ed8", "#ffffff"),  # blue: serving
    "DESTROYING": ("#475569", "#ffffff"),  # slate: ending
    "DESTROYED": ("#15803d", "#ffffff"),  # green: ended
    "PROVISIONING": ("#ea580c", "#ffffff"),  # orange
    "DEGRADED": ("#ca8a04", "#1f1300"),  # yellow: not answering yet
    "HEALTHY": ("#1d4ed8", "#ffffff"),  # blue: serving
    "UNHEALTHY": ("#b91c1c", "#ffffff"),  # red
    "FAILED_TO_START": ("#7f1d1d", "#ffffff"),  # dark red
}


async def deployment_of(request: Request) -> Entity:
    """The deployment the path's ``name`` names (a name, an id or an id prefix, by the
    repository's one resolver); 404 if none, 400 if ambiguous."""
    name = request.path_params["name"]
    repo = dashboard_of(request).repo
    try:
        return await repo.get_entity(await repo.resolve_entity_id(name, "deployment"))
    except UnknownEntityError:
        raise HTTPException(404, f"no deployment named {name!r}") from None
    except DroverError as error:
        raise HTTPException(400, str(error)) from None


async def deployments_page(request: Request) -> Response:
    """``/deployments``: every deployment."""
    found = await dashboard_of(request).repo.list_entities("deployment", limit=None)
    return page(
        request,
        "deployments.html",
        {"title": "Deployments", "deployments": [deployment_json(d) for d in found]},
    )


async def deployment_page(request: Request) -> Response:
    """``/deployments/{name}``: one deployment, its routes' last checks and their history."""
    repo = dashboard_of(request).repo
    deployment = await deployment_of(request)
    routes = []
    rows = list(await repo.history(deployment.id))
    for route in deployment.children:
        data = route_json(route)
        own = await repo.history(route.id)
        checks = [r for r in own if r.handler == "health-check-route"]
        data["last_check"] = f"{checks[-1].result}: {checks[-1].message or ''}" if checks else None
        # The replica session's own status and result, shown beside the route's health.
        data["session"] = await _replica(dashboard_of(request), data["session_id"])
        routes.append(data)
        rows.extend(own)
    # Oldest first, as every timeline of the dashboard (the session page's too): the
    # newest 200 rows, in the order they happened.
    rows.sort(key=lambda r: (r.created_at, r.id))
    rows = rows[-200:]
    return page(
        request,
        "deployment.html",
        {
            "title": f"Deployment {deployment.name}",
            "d": deployment_json(deployment),
            "routes": routes,
            "timeline": [history_json(r) for r in rows],
        },
    )


async def _replica(dashboard: Dashboard, session_id: str | None) -> dict[str, Any] | None:
    """A replica session's status and result (``None``: none yet, or gone)."""
    if session_id is None:
        return None
    try:
        session = await dashboard.repo.get_entity(session_id)
    except DroverError:
        return None
    return {"status": str(session.status), "result": session.result}


async def deployments(request: Request) -> Response:
    """``/api/deployments``: every deployment."""
    found = await dashboard_of(request).repo.list_entities("deployment", limit=None)
    return JSONResponse([deployment_json(d) for d in found])


async def deployment_endpoints(request: Request) -> Response:
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


def register_web(register: WebRegistry) -> None:
    """Register the templates, the two pages (``Deployments`` in the navigation), the API
    and the statuses' colours."""
    register.templates(TEMPLATES)
    register.colours(COLOURS)
    register.route("/deployments", deployments_page, name="deployments", nav="Deployments")
    register.route("/deployments/{name}", deployment_page, name="deployment", page_of="deployment")
    register.route("/api/deployments", deployments)
    register.route("/api/deployments/{name}/endpoints", deployment_endpoints)
