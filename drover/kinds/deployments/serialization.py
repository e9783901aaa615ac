"""The JSON shapes of deployments and routes (CLI ``--json``, the dashboard's ``/api/…``).

Built on :func:`drover.serialization.entity_json` and its timestamp format.
"""

from __future__ import annotations

from typing import Any

from drover.kinds.deployments.status import RouteStatus
from drover.model.values import Entity
from drover.serialization import entity_json, iso

__all__ = ["deployment_json", "route_json"]

_ROUTE = RouteStatus


def deployment_json(deployment: Entity) -> dict[str, Any]:
    """A deployment with replica counts and its routes."""
    data = entity_json(deployment)
    routes = deployment.children
    data["replicas"] = deployment.spec.get("replicas")
    data["healthy"] = sum(1 for r in routes if r.status == _ROUTE.HEALTHY)
    data["live_routes"] = sum(
        1 for r in routes if r.status not in (_ROUTE.TERMINATING, _ROUTE.TERMINATED)
    )
    return data


def route_json(route: Entity) -> dict[str, Any]:
    """A route: its status, replica session and URL."""
    data = route.data or {}
    return {
        "id": route.id,
        "status": str(route.status),
        "status_info": route.status_info,
        "session_id": data.get("session_id"),
        "url": data.get("url"),
        "last_answer_at": data.get("last_answer_at"),
        "status_changed_at": iso(route.status_changed_at),
        "created_at": iso(route.created_at),
    }
