"""The JSON shapes of deployments and routes (CLI ``--json``, the dashboard's ``/api/…``).

Built on :func:`drover.serialization.entity_json` and its timestamp format.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from drover.kinds.deployments.status import EndpointLifecycle, RouteStatus
from drover.model.values import Entity
from drover.serialization import entity_json, iso

__all__ = ["deployment_json", "route_json"]

_ROUTE = RouteStatus


def deployment_json(deployment: Entity) -> dict[str, Any]:
    """A deployment with replica counts, its replacements and back-off, and its routes.

    ``degraded`` is true in status DEGRADED (fewer HEALTHY replicas than
    wanted: ``status_info`` says why, "n of m healthy" or a back-off);
    ``health`` is "n of m healthy" in every status; ``replaced`` counts the
    replicas replaced so far, ``restarts`` the replacement rounds in a row
    (the crash-loop back-off's count) and ``backoff_until`` when the next round
    may start.
    """
    data = entity_json(deployment)
    routes = deployment.children
    own = deployment.data or {}
    data["replicas"] = deployment.spec.get("replicas")
    data["healthy"] = sum(1 for r in routes if r.status == _ROUTE.HEALTHY)
    wanted = data["replicas"] if isinstance(data["replicas"], int) else 0
    data["health"] = f"{min(data['healthy'], wanted)} of {wanted} healthy"
    data["live_routes"] = sum(
        1 for r in routes if r.status not in (_ROUTE.TERMINATING, _ROUTE.TERMINATED)
    )
    data["degraded"] = deployment.status == EndpointLifecycle.DEGRADED
    data["replaced"] = own.get("replaced") or 0
    data["restarts"] = own.get("restarts") or 0
    until = own.get("backoff_until")
    data["backoff_until"] = (
        iso(datetime.fromtimestamp(until, UTC)) if isinstance(until, int | float) else None
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
