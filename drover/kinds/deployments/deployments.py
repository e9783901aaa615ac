"""The deployment lifecycle's five handlers (the seed's "Deployment Handler Analysis").

A deployment keeps ``spec["replicas"]`` live routes (not TERMINATING or
TERMINATED); each route runs one session, its replica (see
:mod:`drover.kinds.deployments.routes`). The seed's table:

=========================  ================  ===========  ===========
handler                    current           SUCCESS      FAILURE
=========================  ================  ===========  ===========
check-pending-deployment   PENDING, CREATED  SCALING      (maintain)
scaling-deployment         SCALING           READY        (maintain)
check-replica-deployment   READY             SCALING      (maintain)
reconcile-deployment       READY             (maintain)   SCALING
destroying-deployment      DESTROYING        DESTROYED    DESTROYED
=========================  ================  ===========  ===========

Routes are created by ``scaling-deployment`` in the apply of its tick
(``HandlerResult.create``); surplus routes after a scale-down are drained by
``running-route``. Replacing lost routes spends the deployment's
``replacements`` budget, so a replica that dies at once is not replaced
forever.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from drover.coordinator.handlers import LifecycleHandler
from drover.kinds.deployments.status import EndpointLifecycle, RouteStatus
from drover.model.values import (
    Entity,
    HandlerOptions,
    HandlerResult,
    NewEntity,
    StatusTransitions,
    Transition,
)
from drover.plugins.markers import hookimpl
from drover.plugins.registry import HandlerRegistry

__all__ = [
    "CheckPendingDeployment",
    "CheckReplicaDeployment",
    "DestroyingDeployment",
    "ReconcileDeployment",
    "ScalingDeployment",
    "drover_register_handlers",
    "live_routes",
    "route_spec",
]

_E, _R = EndpointLifecycle, RouteStatus
#: Routes that no longer count as replicas.
ENDING_ROUTES = frozenset({_R.TERMINATING, _R.TERMINATED})
#: What a route copies from its deployment's spec when it is created.
ROUTE_KEYS = (
    "kernel",
    "health_path",
    "check_timeout",
    "stale_after",
    "evict_after",
    "options",
    "max_requeues",
)


def live_routes(deployment: Entity) -> list[Entity]:
    """The deployment's routes that count as replicas (not TERMINATING or TERMINATED)."""
    return [r for r in deployment.children if r.status not in ENDING_ROUTES]


def desired_replicas(deployment: Entity) -> int:
    """``spec["replicas"]`` (0 when missing or not a whole number >= 0)."""
    value = deployment.spec.get("replicas", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def route_spec(deployment: Entity) -> dict[str, Any]:
    """A new route's spec: the deployment's replica settings, as they are now."""
    spec = {k: deployment.spec[k] for k in ROUTE_KEYS if k in deployment.spec}
    spec["deployment"] = deployment.name
    return spec


class _DeploymentHandler(LifecycleHandler):
    """Shared: the kind, no retries to judge (the seed's deployments know only success/failure)."""

    kind = "deployment"

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """No retry limit, no timeout."""
        return HandlerOptions(max_retries=None, timeout=None)


class CheckPendingDeployment(_DeploymentHandler):
    """PENDING (or CREATED) deployments start scaling."""

    @classmethod
    def name(cls) -> str:
        """``check-pending-deployment``."""
        return "check-pending-deployment"

    @property
    def target_statuses(self) -> frozenset[str]:
        """PENDING, CREATED."""
        return frozenset({_E.PENDING, _E.CREATED})

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """SUCCESS: SCALING; failure keeps the status."""
        return StatusTransitions(success=Transition(_E.SCALING))

    async def execute(self, targets: Sequence[Any]) -> HandlerResult:
        """Every pending deployment is ready to scale."""
        return HandlerResult(successes=[t.id for t in targets])


class ScalingDeployment(_DeploymentHandler):
    """Create the missing routes; READY once the live routes equal the desired replicas."""

    @classmethod
    def name(cls) -> str:
        """``scaling-deployment``."""
        return "scaling-deployment"

    @property
    def target_statuses(self) -> frozenset[str]:
        """SCALING."""
        return frozenset({_E.SCALING})

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """SUCCESS: READY; failure keeps SCALING."""
        return StatusTransitions(success=Transition(_E.READY))

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Create routes up to ``replicas``; wait while surplus routes drain."""
        successes: list[str] = []
        skipped: list[str] = []
        messages: dict[str, str] = {}
        create: list[NewEntity] = []
        data: dict[str, dict[str, Any]] = {}
        for deployment in targets:
            live = len(live_routes(deployment))
            desired = desired_replicas(deployment)
            if live > desired:
                skipped.append(deployment.id)
                messages[deployment.id] = (
                    f"waiting for {live - desired} surplus route(s) to drain ({live} live, "
                    f"{desired} wanted)"
                )
                continue
            spec = route_spec(deployment)
            for _ in range(desired - live):
                create.append(NewEntity("route", dict(spec), parent_id=deployment.id))
            successes.append(deployment.id)
            messages[deployment.id] = (
                f"{desired} replica(s): {desired - live} route(s) created"
                if desired > live
                else f"{desired} replica(s)"
            )
            data[deployment.id] = {"scaled_to": desired}
        return HandlerResult(
            successes=successes, skipped=skipped, messages=messages, create=create, data=data
        )


class CheckReplicaDeployment(_DeploymentHandler):
    """READY deployments whose desired replicas changed (``drover scale``) scale again."""

    @classmethod
    def name(cls) -> str:
        """``check-replica-deployment``."""
        return "check-replica-deployment"

    @property
    def target_statuses(self) -> frozenset[str]:
        """READY."""
        return frozenset({_E.READY})

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """SUCCESS: SCALING."""
        return StatusTransitions(success=Transition(_E.SCALING))

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Success for each deployment whose ``replicas`` differs from what it scaled to."""
        successes: list[str] = []
        messages: dict[str, str] = {}
        for deployment in targets:
            scaled_to = (deployment.data or {}).get("scaled_to")
            desired = desired_replicas(deployment)
            if scaled_to != desired:
                successes.append(deployment.id)
                messages[deployment.id] = f"replicas changed: {scaled_to} -> {desired}"
        return HandlerResult(successes=successes, messages=messages)


class ReconcileDeployment(_DeploymentHandler):
    """READY deployments that lost routes (evicted, ended) scale again, within a budget.

    Each such failure spends the deployment's ``replacements`` budget (limit:
    the kind's 10, ``[budgets.deployment]``, or ``spec["budgets"]``); past it
    the deployment gives up replacing and stays READY with fewer replicas.
    """

    @classmethod
    def name(cls) -> str:
        """``reconcile-deployment``."""
        return "reconcile-deployment"

    @property
    def target_statuses(self) -> frozenset[str]:
        """READY."""
        return frozenset({_E.READY})

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """FAILURE: SCALING; a spent budget keeps READY."""
        return StatusTransitions(need_retry=Transition(_E.SCALING))

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """A failure for each deployment whose live routes differ from what it scaled to."""
        failures: list[str] = []
        messages: dict[str, str] = {}
        budgets: dict[str, str] = {}
        for deployment in targets:
            scaled_to = (deployment.data or {}).get("scaled_to")
            if scaled_to != desired_replicas(deployment):
                continue  # a desired-state change: check-replica-deployment's
            live = len(live_routes(deployment))
            if live != scaled_to:
                failures.append(deployment.id)
                budgets[deployment.id] = "replacements"
                messages[deployment.id] = f"{live} live route(s), {scaled_to} wanted"
        return HandlerResult(failures=failures, messages=messages, budgets=budgets)


class DestroyingDeployment(_DeploymentHandler):
    """DESTROYING deployments end DESTROYED once every route has ended."""

    @classmethod
    def name(cls) -> str:
        """``destroying-deployment``."""
        return "destroying-deployment"

    @property
    def target_statuses(self) -> frozenset[str]:
        """DESTROYING."""
        return frozenset({_E.DESTROYING})

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """DESTROYED on success and on failure alike."""
        done = Transition(_E.DESTROYED)
        return StatusTransitions(success=done, need_retry=done, give_up=done)

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Success once no route is left but TERMINATED ones; else wait."""
        successes: list[str] = []
        skipped: list[str] = []
        messages: dict[str, str] = {}
        for deployment in targets:
            waiting = [r for r in deployment.children if r.status != _R.TERMINATED]
            if waiting:
                skipped.append(deployment.id)
                messages[deployment.id] = f"waiting for {len(waiting)} route(s) to terminate"
            else:
                successes.append(deployment.id)
        return HandlerResult(successes=successes, skipped=skipped, messages=messages)


HANDLERS: Mapping[str, type[_DeploymentHandler]] = {
    h.name(): h
    for h in (
        CheckPendingDeployment,
        ScalingDeployment,
        CheckReplicaDeployment,
        ReconcileDeployment,
        DestroyingDeployment,
    )
}


@hookimpl
def drover_register_handlers(register: HandlerRegistry) -> None:
    """Register the five deployment handlers."""
    register(*(cls() for cls in HANDLERS.values()))
