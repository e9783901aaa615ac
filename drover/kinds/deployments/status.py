"""The statuses of a deployment (a service of N replicas) and of its routes (the replicas)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["EndpointLifecycle", "RouteStatus"]


class EndpointLifecycle(StrEnum):
    """The lifecycle of a deployment (a service of N replicas). Values equal names."""

    PENDING = "PENDING"
    #: Kept for the seed's table; new deployments never enter it.
    CREATED = "CREATED"
    SCALING = "SCALING"
    READY = "READY"
    #: Fewer live replicas than wanted, and none can be replaced now: a crash-loop
    #: back-off is running (``status_info`` CRASH_LOOP_BACK_OFF), or the optional
    #: replacement limit is reached (REPLACEMENTS_SPENT).
    DEGRADED = "DEGRADED"
    DEPLOYING = "DEPLOYING"
    DESTROYING = "DESTROYING"
    DESTROYED = "DESTROYED"


class RouteStatus(StrEnum):
    """The lifecycle of a route: one replica of a deployment. Values equal names.

    Declared in lifecycle order (the engine's requeue and child-move rules
    follow it): a route is provisioned, DEGRADED until its replica answers,
    HEALTHY or UNHEALTHY, and ends through TERMINATING.
    """

    PROVISIONING = "PROVISIONING"
    DEGRADED = "DEGRADED"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    FAILED_TO_START = "FAILED_TO_START"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
