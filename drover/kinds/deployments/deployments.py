"""The deployment lifecycle's five handlers (the seed's "Deployment Handler Analysis").

A deployment keeps ``spec["replicas"]`` live routes (not TERMINATING or
TERMINATED); each route runs one session, its replica (see
:mod:`drover.kinds.deployments.routes`). The seed's table:

=========================  ================  ===========  ===========  ==========
handler                    current           SUCCESS      FAILURE      BACK-OFF
=========================  ================  ===========  ===========  ==========
check-pending-deployment   PENDING, CREATED  SCALING      (maintain)   -
scaling-deployment         SCALING           READY        (maintain)   -
check-replica-deployment   READY, DEGRADED   SCALING      (maintain)   -
reconcile-deployment       READY, DEGRADED   (maintain)   SCALING      DEGRADED
destroying-deployment      DESTROYING        DESTROYED    DESTROYED    -
=========================  ================  ===========  ===========  ==========

(``back-off`` is a named outcome; DEGRADED is drover's addition to the seed's
table.) A deployment is READY only while every wanted replica is HEALTHY:
``scaling-deployment`` ends in DEGRADED (``degraded``) while its new replicas
start, and ``reconcile-deployment`` moves it between READY (``recovered``) and
DEGRADED (``unhealthy``) as its routes' health changes, with ``status_info``
"n of m healthy". Routes are created by ``scaling-deployment`` in the apply of its tick
(``HandlerResult.create``); surplus routes after a scale-down are drained by
``running-route``. Lost routes are replaced as Kubernetes restarts a
crashing container (CrashLoopBackOff): the first round at once, then after
10 s, 20 s, 40 s… capped at 300 s, never giving up while the deployment
wants replicas; the deployment is DEGRADED while it waits. The count of
rounds resets once every replica has been HEALTHY for the cap. Every replica
replaced counts in ``data["replaced"]``; an optional ``spec["max_replacements"]``
stops replacing there (DEGRADED, REPLACEMENTS_SPENT).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from drover.coordinator.handlers import LifecycleHandler
from drover.kinds.deployments.status import EndpointLifecycle, RouteStatus
from drover.model.clock import Clock
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
    "RolloutDeployment",
    "ScalingDeployment",
    "backoff_delay",
    "drover_register_handlers",
    "live_routes",
    "route_spec",
]

_E, _R = EndpointLifecycle, RouteStatus
#: Routes that no longer count as replicas.
ENDING_ROUTES = frozenset({_R.TERMINATING, _R.TERMINATED})
#: What a route copies from its deployment's spec when it is created.
ROUTE_KEYS = (
    "revision",
    "kernel",
    "health_path",
    "check_timeout",
    "start_timeout",
    "stale_after",
    "evict_after",
    "options",
    "max_requeues",
)


def live_routes(deployment: Entity) -> list[Entity]:
    """The deployment's routes that count as replicas (not TERMINATING or TERMINATED)."""
    return [r for r in deployment.children if r.status not in ENDING_ROUTES]


def health(deployment: Entity, wanted: int) -> tuple[int, str]:
    """HEALTHY live routes (at most ``wanted``), and ``"n of m healthy"``: a deployment's
    ``status_info`` unless it waits for something else (a back-off, a limit)."""
    healthy = min(wanted, sum(1 for r in live_routes(deployment) if r.status == _R.HEALTHY))
    return healthy, f"{healthy} of {wanted} healthy"


def desired_replicas(deployment: Entity) -> int:
    """``spec["replicas"]`` (0 when missing or not a whole number >= 0)."""
    value = deployment.spec.get("replicas", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


#: Crash-loop back-off (Kubernetes' values): the first delay and the cap, in seconds.
BACKOFF_INITIAL = 10.0
BACKOFF_MAX = 300.0


def _seconds(spec: Mapping[str, Any], key: str, default: float) -> float:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return default
    return float(value)


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def backoff_delay(rounds: int, spec: Mapping[str, Any]) -> float:
    """Seconds to wait before replacement round ``rounds + 1`` (0 for the first).

    ``spec["backoff_initial"]`` (10 s) doubled per round in a row, capped at
    ``spec["backoff_max"]`` (300 s), as Kubernetes' CrashLoopBackOff.
    """
    if rounds <= 0:
        return 0.0
    initial = _seconds(spec, "backoff_initial", BACKOFF_INITIAL)
    cap = _seconds(spec, "backoff_max", BACKOFF_MAX)
    return float(min(initial * 2 ** min(rounds - 1, 32), cap))


def replacement_limit(deployment: Entity) -> int | None:
    """``spec["max_replacements"]``: replicas that may be replaced in all (None: no limit)."""
    value = deployment.spec.get("max_replacements")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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
    """Create the missing routes; then READY if every wanted replica is HEALTHY already (a
    scale-down), else DEGRADED (``degraded``) with ``status_info`` "n of m healthy" until
    ``reconcile-deployment`` finds them healthy.

    At most ``creations_per_tick`` routes per tick (limits.creations_per_tick), for all
    its targets together: a deployment that needs more stays SCALING and gets the
    rest on the next ticks, so no row makes the daemon build an unbounded list.
    """

    def __init__(self, creations_per_tick: int = 1000) -> None:
        self.creations_per_tick = creations_per_tick

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
        """SUCCESS: READY; ``degraded`` (not every wanted replica HEALTHY yet): DEGRADED."""
        return StatusTransitions(
            success=Transition(_E.READY), outcomes={"degraded": Transition(_E.DEGRADED)}
        )

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Create routes up to ``replicas``; wait while surplus routes drain."""
        successes: list[str] = []
        skipped: list[str] = []
        messages: dict[str, str] = {}
        create: list[NewEntity] = []
        data: dict[str, dict[str, Any]] = {}
        infos: dict[str, str] = {}
        outcomes: dict[str, str] = {}
        for deployment in targets:
            live = len(live_routes(deployment))
            desired = desired_replicas(deployment)
            known = deployment.data or {}
            if live > desired:
                skipped.append(deployment.id)
                messages[deployment.id] = (
                    f"waiting for {live - desired} surplus route(s) to drain ({live} live, "
                    f"{desired} wanted)"
                )
                continue
            spec = route_spec(deployment)
            missing = desired - live
            patch: dict[str, Any] = {"scaled_to": desired}
            # Back to the number it had scaled to: the new routes replace lost replicas.
            replacing = known.get("scaled_to") == desired and missing > 0
            replaced = _count(known, "replaced")
            if replacing:
                limit = replacement_limit(deployment)
                if limit is not None:
                    missing = min(missing, max(0, limit - replaced))
            # At most creations_per_tick routes per tick, for all the targets together.
            room = min(missing, max(0, self.creations_per_tick - len(create)))
            if replacing:
                patch["replaced"] = replaced + room
            for _ in range(room):
                create.append(NewEntity("route", dict(spec), parent_id=deployment.id))
            if room < missing:
                skipped.append(deployment.id)
                messages[deployment.id] = (
                    f"{room} route(s) created, {missing - room} more on the next ticks "
                    f"(at most {self.creations_per_tick} per tick: limits.creations_per_tick)"
                )
                if replacing:
                    data[deployment.id] = {"replaced": patch["replaced"]}
                continue
            # READY only once every wanted replica answers; the new routes do not yet.
            healthy, infos[deployment.id] = health(deployment, desired)
            if healthy >= desired:
                successes.append(deployment.id)
            else:
                outcomes[deployment.id] = "degraded"
            messages[deployment.id] = (
                f"{desired} replica(s): {missing} route(s) created; {infos[deployment.id]}"
                if missing > 0
                else f"{desired} replica(s); {infos[deployment.id]}"
            )
            data[deployment.id] = {**patch, "backoff_until": None}
        return HandlerResult(
            successes=successes,
            skipped=skipped,
            outcomes=outcomes,
            messages=messages,
            create=create,
            data=data,
            status_infos=infos,
        )


class CheckReplicaDeployment(_DeploymentHandler):
    """READY or DEGRADED deployments whose desired replicas changed (``drover scale``) scale
    again."""

    @classmethod
    def name(cls) -> str:
        """``check-replica-deployment``."""
        return "check-replica-deployment"

    @property
    def target_statuses(self) -> frozenset[str]:
        """READY, DEGRADED."""
        return frozenset({_E.READY, _E.DEGRADED})

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
    """Deployments that lost routes (evicted, ended) replace them, with a crash-loop back-off;
    READY only while every wanted replica is HEALTHY.

    Fewer live routes than it scaled to: the first round of replacements at
    once (SCALING); a round that follows another without the replicas having
    been HEALTHY for the cap waits :func:`backoff_delay` first, DEGRADED
    (``status_info`` CRASH_LOOP_BACK_OFF). Past ``spec["max_replacements"]``
    replicas replaced: DEGRADED for good (REPLACEMENTS_SPENT) until it is
    scaled, redeployed or destroyed. Every route live but fewer HEALTHY than
    wanted: DEGRADED (``unhealthy``) with ``status_info`` "n of m healthy",
    rewritten as the count changes; all HEALTHY again: READY (``recovered``).
    """

    #: What ``drover why`` says its status_info values mean.
    status_info_meanings: ClassVar[Mapping[str, str]] = {
        "CRASH_LOOP_BACK_OFF": "replicas were lost again soon after a replacement; the next "
        "round of replacements waits (crash-loop back-off)",
        "REPLACEMENTS_SPENT": "spec max_replacements replicas were replaced; no more are",
    }

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    @classmethod
    def name(cls) -> str:
        """``reconcile-deployment``."""
        return "reconcile-deployment"

    @property
    def target_statuses(self) -> frozenset[str]:
        """READY, DEGRADED."""
        return frozenset({_E.READY, _E.DEGRADED})

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """FAILURE: SCALING (replace now); ``back-off`` and ``unhealthy``: DEGRADED;
        ``recovered``: READY."""
        return StatusTransitions(
            need_retry=Transition(_E.SCALING),
            outcomes={
                "back-off": Transition(_E.DEGRADED),
                "unhealthy": Transition(_E.DEGRADED),
                "recovered": Transition(_E.READY),
            },
        )

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Per deployment: replace now, wait (back-off), give up (limit), or reset the count."""
        now = self.clock.time()
        out = _Verdicts()
        for deployment in targets:
            scaled_to = (deployment.data or {}).get("scaled_to")
            if scaled_to != desired_replicas(deployment):
                continue  # a desired-state change: check-replica-deployment's
            self._judge(deployment, scaled_to, now, out)
        return out.result()

    @staticmethod
    def _judge(deployment: Entity, scaled_to: int, now: float, out: _Verdicts) -> None:
        did, data, spec = deployment.id, deployment.data or {}, deployment.spec
        live = live_routes(deployment)
        missing = scaled_to - len(live)
        rounds, replaced = _count(data, "restarts"), _count(data, "replaced")
        cap = _seconds(spec, "backoff_max", BACKOFF_MAX)
        if missing <= 0:
            healthy, text = health(deployment, scaled_to)
            if healthy < scaled_to:
                if deployment.status == _E.READY or deployment.status_info != text:
                    sick = Counter(str(r.status) for r in live if r.status != _R.HEALTHY)
                    detail = ", ".join(f"{n} {status}" for status, n in sorted(sick.items()))
                    out.named(did, "unhealthy", f"{text} ({detail})", info=text)
            elif deployment.status == _E.DEGRADED:
                out.named(did, "recovered", f"{text}: every wanted replica answers", info=text)
            elif rounds and all(
                r.status == RouteStatus.HEALTHY and now - r.status_changed_at.timestamp() >= cap
                for r in live
            ):
                out.succeed(did, f"every replica HEALTHY for {cap:g}s: back-off reset", rounds=0)
            return
        lost = f"{missing} replica(s) lost ({len(live)} live, {scaled_to} wanted)"
        limit = replacement_limit(deployment)
        if limit is not None and replaced >= limit:
            text = f"{lost}; {replaced} replaced, the limit (max_replacements={limit}) is reached"
            if deployment.status_info == "REPLACEMENTS_SPENT":
                out.skip(did, text)
            else:
                out.named(did, "back-off", text, info="REPLACEMENTS_SPENT")
            return
        delay = backoff_delay(rounds, spec)
        due = data.get("backoff_until")
        # DEGRADED for its health is no back-off: a lost replica there waits its round too.
        if delay > 0 and not isinstance(due, int | float):
            out.named(
                did,
                "back-off",
                f"{lost}; crash-loop back-off: round {rounds + 1} in {delay:g}s",
                info="CRASH_LOOP_BACK_OFF",
                backoff_until=now + delay,
            )
        elif isinstance(due, int | float) and now < due:
            out.skip(did, f"{lost}; crash-loop back-off: round {rounds + 1} in {due - now:.0f}s")
        else:
            out.fail(did, f"{lost}: replacing (round {rounds + 1})", rounds=rounds + 1)


class _Verdicts:
    """What :class:`ReconcileDeployment` says of each deployment, as one result."""

    def __init__(self) -> None:
        self.successes: list[str] = []
        self.failures: list[str] = []
        self.skipped: list[str] = []
        self.outcomes: dict[str, str] = {}
        self.messages: dict[str, str] = {}
        self.infos: dict[str, str] = {}
        self.data: dict[str, dict[str, Any]] = {}

    def succeed(self, did: str, text: str, *, rounds: int) -> None:
        self.successes.append(did)
        self.messages[did] = text
        self.data[did] = {"restarts": rounds, "backoff_until": None}

    def fail(self, did: str, text: str, *, rounds: int) -> None:
        self.failures.append(did)
        self.messages[did] = text
        self.data[did] = {"restarts": rounds, "backoff_until": None}

    def skip(self, did: str, text: str) -> None:
        self.skipped.append(did)
        self.messages[did] = text

    def named(
        self, did: str, outcome: str, text: str, *, info: str | None = None,
        backoff_until: float | None = None,
    ) -> None:  # fmt: skip
        self.outcomes[did] = outcome
        self.messages[did] = text
        if info is not None:
            self.infos[did] = info
        self.data[did] = {"backoff_until": backoff_until}

    def result(self) -> HandlerResult:
        return HandlerResult(
            successes=self.successes,
            failures=self.failures,
            skipped=self.skipped,
            outcomes=self.outcomes,
            messages=self.messages,
            status_infos=self.infos,
            data=self.data,
        )


def revision(entity: Entity) -> int:
    """``spec["revision"]``: 0 until ``drover deploy`` changed what replicas run."""
    return _count(entity.spec, "revision")


class RolloutDeployment(_DeploymentHandler):
    """Replace the routes of an older revision one at a time (``drover deploy`` again).

    A READY (or DEGRADED: old replicas that fail their checks) deployment at
    its replica count whose routes run an older ``spec["revision"]``: once
    every route of the current revision is HEALTHY, one old route (unhealthy
    ones first, then the oldest) is asked to end and a new one is created in
    the same apply, so at most one replica is unavailable at a time. Nothing
    counts as a replacement or a crash.
    """

    @classmethod
    def name(cls) -> str:
        """``rollout-deployment``."""
        return "rollout-deployment"

    @property
    def target_statuses(self) -> frozenset[str]:
        """READY, DEGRADED (a redeploy is how a broken revision is fixed)."""
        return frozenset({_E.READY, _E.DEGRADED})

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """No status change here (``reconcile-deployment`` judges the replicas' health)."""
        return StatusTransitions()

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """One step per deployment: replace an old route, or wait for the new ones."""
        successes: list[str] = []
        skipped: list[str] = []
        messages: dict[str, str] = {}
        create: list[NewEntity] = []
        terminate: dict[str, list[str]] = {}
        for deployment in targets:
            current = revision(deployment)
            live = live_routes(deployment)
            old = [r for r in live if revision(r) != current]
            scaled_to = (deployment.data or {}).get("scaled_to")
            if not old or scaled_to != desired_replicas(deployment) or len(live) != scaled_to:
                continue  # nothing to roll out, or scaling / replacing comes first
            starting = [r for r in live if revision(r) == current and r.status != _R.HEALTHY]
            if starting:
                skipped.append(deployment.id)
                messages[deployment.id] = (
                    f"rolling out revision {current}: waiting for {len(starting)} new "
                    f"replica(s) to be HEALTHY; {len(old)} old left"
                )
                continue
            old.sort(key=lambda r: (r.status == _R.HEALTHY, r.id))
            victim = old[0]
            successes.append(deployment.id)
            create.append(NewEntity("route", route_spec(deployment), parent_id=deployment.id))
            terminate[deployment.id] = [victim.id]
            messages[deployment.id] = (
                f"rolling out revision {current}: route {victim.id} replaced by a new one; "
                f"{len(old) - 1} old left"
            )
        return HandlerResult(
            successes=successes,
            skipped=skipped,
            messages=messages,
            create=create,
            terminate=terminate,
        )


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
        RolloutDeployment,
        DestroyingDeployment,
    )
}


@hookimpl
def drover_register_handlers(register: HandlerRegistry) -> None:
    """Register the six deployment handlers (``reconcile-deployment`` with the clock,
    ``scaling-deployment`` with limits.creations_per_tick)."""
    context = register.context
    register(
        *(
            cls(context.clock)
            if cls is ReconcileDeployment
            else cls(context.creations_per_tick)
            if cls is ScalingDeployment
            else cls()
            for cls in HANDLERS.values()
        )
    )
