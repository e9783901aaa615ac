"""The deployment lifecycle, as a plugin package: services of N replicas, each replica a route.

A deployment keeps ``spec["replicas"]`` routes live; each route runs one
session (the session lifecycle, :mod:`drover.kinds.sessions`) and is
health-checked over HTTP. The package registers through the hooks a
third-party plugin uses:

* ``drover_register_kinds`` (:mod:`~drover.kinds.deployments.kinds`):
  ``deployment`` and its child kind ``route``;
* ``drover_register_handlers``: five deployment handlers
  (:mod:`~drover.kinds.deployments.deployments`) and five route handlers
  (:mod:`~drover.kinds.deployments.routes`), two plugins;
* ``drover_register_commands`` (:mod:`~drover.kinds.deployments.cli`):
  ``drover deploy / deployments / scale / destroy / routes``;
* ``drover_register_web`` (:mod:`~drover.kinds.deployments.web`): the
  dashboard's ``/deployments`` pages and ``/api/deployments`` endpoints.

Their JSON shapes are :mod:`~drover.kinds.deployments.serialization`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drover._lazy import lazy_attributes

if TYPE_CHECKING:
    from drover.kinds.deployments.deployments import (
        CheckPendingDeployment,
        CheckReplicaDeployment,
        DestroyingDeployment,
        ReconcileDeployment,
        ScalingDeployment,
    )
    from drover.kinds.deployments.kinds import DEPLOYMENT, ROUTE
    from drover.kinds.deployments.plugins import HANDLER_PLUGINS
    from drover.kinds.deployments.routes import (
        HealthCheckRoute,
        ProvisioningRoute,
        RouteEviction,
        RunningRoute,
        TerminatingRoute,
    )
    from drover.kinds.deployments.serialization import deployment_json, route_json
    from drover.kinds.deployments.status import EndpointLifecycle, RouteStatus

__all__ = [
    "DEPLOYMENT",
    "HANDLER_PLUGINS",
    "ROUTE",
    "CheckPendingDeployment",
    "CheckReplicaDeployment",
    "DestroyingDeployment",
    "EndpointLifecycle",
    "HealthCheckRoute",
    "ProvisioningRoute",
    "ReconcileDeployment",
    "RouteEviction",
    "RouteStatus",
    "RunningRoute",
    "ScalingDeployment",
    "TerminatingRoute",
    "deployment_json",
    "route_json",
]

# Imported on first use: the command line imports this package to list its commands.
__getattr__ = lazy_attributes(
    __name__,
    {
        "CheckPendingDeployment": "drover.kinds.deployments.deployments",
        "CheckReplicaDeployment": "drover.kinds.deployments.deployments",
        "DestroyingDeployment": "drover.kinds.deployments.deployments",
        "ReconcileDeployment": "drover.kinds.deployments.deployments",
        "ScalingDeployment": "drover.kinds.deployments.deployments",
        "DEPLOYMENT": "drover.kinds.deployments.kinds",
        "ROUTE": "drover.kinds.deployments.kinds",
        "HealthCheckRoute": "drover.kinds.deployments.routes",
        "ProvisioningRoute": "drover.kinds.deployments.routes",
        "RouteEviction": "drover.kinds.deployments.routes",
        "RunningRoute": "drover.kinds.deployments.routes",
        "TerminatingRoute": "drover.kinds.deployments.routes",
        "deployment_json": "drover.kinds.deployments.serialization",
        "route_json": "drover.kinds.deployments.serialization",
        "EndpointLifecycle": "drover.kinds.deployments.status",
        "RouteStatus": "drover.kinds.deployments.status",
        "HANDLER_PLUGINS": "drover.kinds.deployments.plugins",
    },
)
