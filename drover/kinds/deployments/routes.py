"""The route lifecycle's handlers (the seed's "Route Handler Analysis").

A route is one replica of a deployment: it runs one **session** (linked to
it by the relation ``replica-of``, its id in ``data["session_id"]``) through
the ordinary session lifecycle. The seed's table (``stale`` is a named
outcome):

====================  ===============================  ===========  ===============  ========
handler               current                          SUCCESS      FAILURE          STALE
====================  ===============================  ===========  ===============  ========
provisioning-route    PROVISIONING                     DEGRADED     FAILED_TO_START  -
health-check-route    HEALTHY, UNHEALTHY, DEGRADED     HEALTHY      UNHEALTHY        DEGRADED
running-route         DEGRADED, HEALTHY, UNHEALTHY,    (maintain)   TERMINATING      -
                      FAILED_TO_START
route-eviction        UNHEALTHY                        TERMINATING  (maintain)       -
terminating-route     TERMINATING                      TERMINATED   (maintain)       -
====================  ===============================  ===========  ===============  ========

Health checks are real HTTP: ``GET http://127.0.0.1:$PORT<health_path>`` on
the port the backend gave the replica, through one HTTP client per handler
that ignores proxy variables (``trust_env=False``: a check of 127.0.0.1 never
goes to ``HTTP_PROXY``) and keeps no idle connections. Each check has a total
deadline (``check_timeout``, the whole request and at most 4 KiB of the body)
and runs on its own, so one slow replica never holds another route's verdict
(:mod:`drover.kinds.deployments.health`). 200-399 is success, as
Kubernetes counts it (redirects are not followed); any other answer is a
failure; a URL that cannot be requested fails that route alone; no answer
at all is a failure, or ``stale`` once the route has had no answer for
``stale_after`` seconds. A DEGRADED route (starting) that does not answer
yet waits up to ``spec["start_timeout"]`` seconds (60) counted from when its
replica's session became RUNNING (time spent PENDING for capacity, or
preparing, does not count), or from when it became DEGRADED again if later
(``stale``), then fails to UNHEALTHY.
``route-eviction`` takes routes UNHEALTHY for longer than ``evict_after``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from drover.coordinator.handlers import LifecycleHandler
from drover.kinds.deployments.deployments import ENDING_ROUTES, desired_replicas
from drover.kinds.deployments.health import Probes
from drover.kinds.deployments.status import RouteStatus
from drover.kinds.sessions.kinds import SESSION_KINDS
from drover.kinds.sessions.requests import new_session
from drover.kinds.sessions.values import SESSION_KIND, SessionStatus, SessionWithKernels
from drover.model.clock import Clock
from drover.model.creation import check_new_entities
from drover.model.errors import DroverError, InvalidSpecError
from drover.model.filters import StatusAge
from drover.model.values import (
    Entity,
    HandlerOptions,
    HandlerResult,
    MoveTo,
    NewEntity,
    StatusTransitions,
    Transition,
)
from drover.plugins.markers import hookimpl
from drover.plugins.registry import HandlerRegistry
from drover.storage.queries import Queries

__all__ = [
    "DEFAULT_HEALTH_PATH",
    "HealthCheckRoute",
    "ProvisioningRoute",
    "RouteEviction",
    "RunningRoute",
    "TerminatingRoute",
    "drover_register_handlers",
    "replica_url",
]

_R = RouteStatus
#: The path checked unless the deployment says otherwise.
DEFAULT_HEALTH_PATH = "/"
#: Seconds one health check may take.
DEFAULT_CHECK_TIMEOUT = 2.0
#: Seconds without any answer before a HEALTHY/UNHEALTHY route is stale (DEGRADED).
DEFAULT_STALE_AFTER = 30.0
#: Seconds a starting replica may take to answer, from its session's RUNNING.
DEFAULT_START_TIMEOUT = 60.0
#: Answers that count as healthy: 200-399, as Kubernetes' HTTP probes count them.
HEALTHY_CODES = range(200, 400)
#: ``status_info`` of a route evicted for failing its health checks, and of its replica
#: session, which then ends FAILURE.
EVICTED_UNHEALTHY = "EVICTED_UNHEALTHY"
_TERMINAL_SESSIONS = frozenset(
    {SessionStatus.TERMINATED, SessionStatus.CANCELLED, SessionStatus.ERROR}
)


def _number(spec: dict[str, Any], key: str, default: float) -> float:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return default
    return float(value)


def replica_url(session: SessionWithKernels) -> str | None:
    """``http://127.0.0.1:PORT`` of a replica session, once its backend recorded a port."""
    for kernel in session.kernels:
        port = (kernel.runtime or {}).get("port")
        if isinstance(port, int):
            return f"http://127.0.0.1:{port}"
    return None


async def _sessions_of(repo: Queries, routes: Sequence[Entity]) -> dict[str, SessionWithKernels]:
    """Each route's replica session (routes without one, or whose session is gone, left out)."""
    out: dict[str, SessionWithKernels] = {}
    for route in routes:
        sid = (route.data or {}).get("session_id")
        if not isinstance(sid, str):
            continue
        try:
            out[route.id] = await repo.read_one(SESSION_KIND, sid)
        except DroverError:
            continue
    return out


class _RouteHandler(LifecycleHandler):
    """Shared: the kind, and the repository for reading replicas' sessions."""

    kind = "route"

    def __init__(self, repository: Queries, clock: Clock) -> None:
        self.repository = repository
        self.clock = clock

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """No retry limit, no timeout."""
        return HandlerOptions(max_retries=None, timeout=None)


class ProvisioningRoute(_RouteHandler):
    """Create the route's replica session (in the apply), then wait in DEGRADED.

    At most ``creations_per_tick`` sessions per tick (limits.creations_per_tick); the
    other routes stay PROVISIONING (skipped) for the next tick.
    """

    def __init__(self, repository: Queries, clock: Clock, creations_per_tick: int = 1000) -> None:
        super().__init__(repository, clock)
        self.creations_per_tick = creations_per_tick

    @classmethod
    def name(cls) -> str:
        """``provisioning-route``."""
        return "provisioning-route"

    @property
    def target_statuses(self) -> frozenset[str]:
        """PROVISIONING."""
        return frozenset({_R.PROVISIONING})

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """SUCCESS: DEGRADED; FAILURE: FAILED_TO_START."""
        return StatusTransitions(
            success=Transition(_R.DEGRADED),
            need_retry=Transition(_R.FAILED_TO_START),
            give_up=Transition(_R.FAILED_TO_START),
        )

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """One session per route, with the deployment's kernel spec; a bad spec fails."""
        successes: list[str] = []
        failures: list[str] = []
        messages: dict[str, str] = {}
        create: list[NewEntity] = []
        data: dict[str, dict[str, Any]] = {}
        skipped: list[str] = []
        for route in targets:
            if len(create) >= self.creations_per_tick:
                skipped.append(route.id)
                messages[route.id] = (
                    f"waiting: at most {self.creations_per_tick} replica sessions are created "
                    "per tick (limits.creations_per_tick)"
                )
                continue
            kernel = route.spec.get("kernel")
            spec: dict[str, Any] = {"route_id": route.id}
            for key in ("options", "max_requeues"):
                if key in route.spec:
                    spec[key] = route.spec[key]
            name = f"{route.spec.get('deployment') or 'route'}-{route.id[-8:]}"
            try:
                request = new_session({"kernels": [kernel], "spec": spec})
                links = [("replica-of", route.id)]
                new = attrs.evolve(request, name=name, by=route.id, links=links)
                # Checked here, not only in the apply: a bad kernel spec fails this
                # route (with the reason) instead of the whole tick.
                (session,) = check_new_entities([new], SESSION_KINDS)
            except InvalidSpecError as error:
                failures.append(route.id)
                messages[route.id] = f"cannot provision: {error}"
                continue
            create.append(session)
            data[route.id] = {"session_id": session.id}
            successes.append(route.id)
            messages[route.id] = f"replica session {session.id} created"
        return HandlerResult(
            successes=successes,
            failures=failures,
            skipped=skipped,
            messages=messages,
            create=create,
            data=data,
        )


class HealthCheckRoute(_RouteHandler):
    """GET each replica's health path; 200-399: HEALTHY, else UNHEALTHY, silent too long: stale."""

    @classmethod
    def name(cls) -> str:
        """``health-check-route``."""
        return "health-check-route"

    @property
    def target_statuses(self) -> frozenset[str]:
        """HEALTHY, UNHEALTHY, DEGRADED."""
        return frozenset({_R.HEALTHY, _R.UNHEALTHY, _R.DEGRADED})

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """SUCCESS: HEALTHY; FAILURE and expiry: UNHEALTHY; ``stale``: DEGRADED."""
        unhealthy = Transition(_R.UNHEALTHY)
        return StatusTransitions(
            success=Transition(_R.HEALTHY),
            need_retry=unhealthy,
            expired=unhealthy,
            give_up=unhealthy,
            outcomes={"stale": Transition(_R.DEGRADED)},
        )

    def __init__(self, repository: Queries, clock: Clock) -> None:
        super().__init__(repository, clock)
        #: The handler's one HTTP client and its probes (:mod:`~drover.kinds.deployments.health`).
        self.probes = Probes()

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Check every route whose replica is RUNNING with a port; wait on the others.

        Each check has a total deadline (``check_timeout``) and runs on its own; the
        tick waits for them at most :data:`~drover.kinds.deployments.health.TICK_WAIT`
        seconds, and a check still running then is judged by a later tick: one
        replica's slow answer never holds the other routes' verdicts.
        """
        sessions = await _sessions_of(self.repository, targets)
        result: dict[str, tuple[str, str]] = {}
        data: dict[str, dict[str, Any]] = {}
        wanted: dict[str, tuple[str, float]] = {}
        bases: dict[str, str] = {}
        for route in targets:
            session = sessions.get(route.id)
            if session is None or session.status != SessionStatus.RUNNING:
                state = "gone" if session is None else str(session.status)
                result[route.id] = ("skipped", f"replica session is {state}")
                continue
            base = replica_url(session)
            if base is None:
                result[route.id] = ("skipped", "no port recorded for the replica yet")
                continue
            bases[route.id] = base
            url = f"{base}{route.spec.get('health_path') or DEFAULT_HEALTH_PATH}"
            wanted[route.id] = (url, _number(route.spec, "check_timeout", DEFAULT_CHECK_TIMEOUT))
        found = await self.probes.run(wanted)
        now = self.clock.time()
        for route in targets:
            if route.id not in wanted:
                continue
            (url, limit), probe = wanted[route.id], found[route.id]
            if probe is None:
                text = f"GET {url}: no complete answer yet (check_timeout={limit:g}s)"
                result[route.id] = ("skipped", text)
            elif probe.broken:
                # This route's URL, not the handler: the route fails, the others are checked.
                result[route.id] = ("failure", f"cannot check: {probe.text}")
            elif probe.code is None:
                text = f"GET {url}: {probe.text}"
                result[route.id] = self._silent(route, sessions[route.id], now, text)
            else:
                data[route.id] = {"last_answer_at": now, "url": bases[route.id]}
                verdict = "success" if probe.code in HEALTHY_CODES else "failure"
                result[route.id] = (verdict, f"GET {url}: {probe.code}")
        return self._result(result, data)

    def _silent(
        self, route: Entity, session: SessionWithKernels, now: float, text: str
    ) -> tuple[str, str]:
        """No answer: a failure, ``stale`` once silent for ``stale_after``, or (DEGRADED,
        starting) a wait within its start timeout."""
        last = (route.data or {}).get("last_answer_at")
        since = float(last) if isinstance(last, int | float) else None
        stale_after = _number(route.spec, "stale_after", DEFAULT_STALE_AFTER)
        if route.status == _R.DEGRADED:
            return self._starting(route, session, now, text)
        if since is not None and now - since > stale_after:
            return ("stale", f"{text} for {now - since:.0f}s")
        return ("failure", text)

    @staticmethod
    def _result(
        result: dict[str, tuple[str, str]], data: dict[str, dict[str, Any]]
    ) -> HandlerResult:
        """The verdicts as the handler's result."""
        out: dict[str, list[str]] = {"success": [], "failure": [], "skipped": []}
        outcomes: dict[str, str] = {}
        for route_id, (verdict, _text) in result.items():
            if verdict == "stale":
                outcomes[route_id] = "stale"
            else:
                out[verdict].append(route_id)
        return HandlerResult(
            successes=out["success"],
            failures=out["failure"],
            skipped=out["skipped"],
            outcomes=outcomes,
            messages={rid: text for rid, (_v, text) in result.items()},
            data=data,
        )

    @staticmethod
    def _starting(
        route: Entity, session: SessionWithKernels, now: float, text: str
    ) -> tuple[str, str]:
        """A DEGRADED route with no answer: wait, or fail once past its start timeout.

        Counted from when its session became RUNNING, or from when the route
        became DEGRADED again (``stale``) if that is later.
        """
        limit = _number(route.spec, "start_timeout", DEFAULT_START_TIMEOUT)
        running = session.status_changed_at.timestamp()
        degraded = route.status_changed_at.timestamp()
        since, what = (
            (running, "its session became RUNNING")
            if running >= degraded
            else (degraded, "it became DEGRADED")
        )
        if now - since > limit:
            return (
                "failure",
                f"{text}; no answer {now - since:.0f}s after {what} (start_timeout={limit:g}s)",
            )
        return ("skipped", f"{text}; waiting for the first answer")


class RunningRoute(_RouteHandler):
    """Routes whose replica ended, that failed to start, or that a scale-down made surplus."""

    @classmethod
    def name(cls) -> str:
        """``running-route``."""
        return "running-route"

    @property
    def target_statuses(self) -> frozenset[str]:
        """DEGRADED, HEALTHY, UNHEALTHY, FAILED_TO_START."""
        return frozenset({_R.DEGRADED, _R.HEALTHY, _R.UNHEALTHY, _R.FAILED_TO_START})

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """FAILURE: TERMINATING (the first failure ends the route: max_retries 0)."""
        return StatusTransitions(give_up=Transition(_R.TERMINATING))

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """Give up on the first failure."""
        return HandlerOptions(max_retries=0, timeout=None)

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Fail the routes that must go; say nothing of the others."""
        sessions = await _sessions_of(self.repository, targets)
        failures: dict[str, str] = {}
        for route in targets:
            if route.status == _R.FAILED_TO_START:
                failures[route.id] = "failed to start"
                continue
            session = sessions.get(route.id)
            if session is None:
                failures[route.id] = "its replica session is gone"
            elif session.status in _TERMINAL_SESSIONS:
                failures[route.id] = (
                    f"its replica session ended: {session.status} "
                    f"({session.status_info or session.result or '-'})"
                )
        for route_id, text in (await self._surplus(targets)).items():
            failures.setdefault(route_id, text)
        return HandlerResult(failures=list(failures), messages=failures)

    async def _surplus(self, targets: Sequence[Entity]) -> dict[str, str]:
        """Routes beyond their deployment's replicas: unhealthy ones first, then the newest."""
        surplus: dict[str, str] = {}
        wanted = {t.id for t in targets}
        rank: dict[str, int] = {
            _R.FAILED_TO_START: 0,
            _R.UNHEALTHY: 1,
            _R.DEGRADED: 2,
            _R.HEALTHY: 3,
        }
        for parent_id in {t.parent_id for t in targets if t.parent_id}:
            try:
                deployment = await self.repository.get_entity(parent_id)
            except DroverError:
                continue
            live = [r for r in deployment.children if r.status not in ENDING_ROUTES]
            replicas = desired_replicas(deployment)
            if len(live) <= replicas:
                continue
            # Keep the healthiest, and among them the oldest.
            live.sort(key=lambda r: (-rank.get(r.status, 0), r.id))
            for route in live[replicas:]:
                if route.id in wanted:
                    surplus[route.id] = f"scaled down to {replicas} replica(s)"
        return surplus


class RouteEviction(_RouteHandler):
    """Routes UNHEALTHY for longer than ``evict_after`` seconds are evicted."""

    @classmethod
    def name(cls) -> str:
        """``route-eviction``."""
        return "route-eviction"

    @property
    def target_statuses(self) -> frozenset[str]:
        """UNHEALTHY."""
        return frozenset({_R.UNHEALTHY})

    @property
    def candidate_filters(self) -> tuple[StatusAge]:
        """Only routes past their ``evict_after`` (compiled into the fetch's SQL)."""
        return (StatusAge(spec_key="evict_after"),)

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """SUCCESS: TERMINATING."""
        return StatusTransitions(success=Transition(_R.TERMINATING))

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Every fetched route is past its budget: TERMINATING, EVICTED_UNHEALTHY (its replica
        then ends as a failure: :class:`TerminatingRoute`)."""
        return HandlerResult(
            successes=[t.id for t in targets],
            messages={
                t.id: f"unhealthy for more than {t.spec.get('evict_after')}s" for t in targets
            },
            status_infos=dict.fromkeys((t.id for t in targets), EVICTED_UNHEALTHY),
        )


class TerminatingRoute(_RouteHandler):
    """Terminate the route's replica session; TERMINATED once the session has ended.

    A route evicted for failing its health checks (``status_info``
    EVICTED_UNHEALTHY) ends its RUNNING replica as a failure, not as a stop
    somebody asked for: the session is moved to TERMINATING with that
    ``status_info`` (``MoveTo(fails=True)``), so it ends FAILURE, and the route
    ends FAILURE too. Any other route asks its session to end (CANCELLED,
    REQUESTED_BY_TERMINATING_ROUTE), as ``drover terminate`` would.
    """

    #: What ``drover why`` says its status_info values mean.
    status_info_meanings: ClassVar[Mapping[str, str]] = {
        EVICTED_UNHEALTHY: "its route was evicted: the replica failed its health checks "
        "for longer than evict_after",
    }

    @classmethod
    def name(cls) -> str:
        """``terminating-route``."""
        return "terminating-route"

    @property
    def target_statuses(self) -> frozenset[str]:
        """TERMINATING."""
        return frozenset({_R.TERMINATING})

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """SUCCESS: TERMINATED."""
        return StatusTransitions(success=Transition(_R.TERMINATED))

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Success for routes whose session ended (or never existed); ask the others' to end."""
        sessions = await _sessions_of(self.repository, targets)
        successes: list[str] = []
        skipped: list[str] = []
        messages: dict[str, str] = {}
        to_end: dict[str, list[str]] = {}
        moves: dict[str, MoveTo] = {}
        results: dict[str, str] = {}
        for route in targets:
            evicted = route.status_info == EVICTED_UNHEALTHY
            session = sessions.get(route.id)
            if session is None or session.status in _TERMINAL_SESSIONS:
                successes.append(route.id)
                if evicted:
                    results[route.id] = "FAILURE"
                continue
            skipped.append(route.id)
            messages[route.id] = f"waiting for replica session {session.id} ({session.status})"
            if evicted and session.status == SessionStatus.RUNNING:
                # A failure, not a stop somebody asked for: the session ends FAILURE.
                moves[session.id] = MoveTo(
                    SessionStatus.RUNNING, SessionStatus.TERMINATING, EVICTED_UNHEALTHY, True
                )
            elif session.status != SessionStatus.TERMINATING:
                # Ending what the route owns: recorded in the session's history under
                # this handler's name, by the same rules as `drover terminate`.
                to_end[route.id] = [session.id]
        return HandlerResult(
            successes=successes,
            skipped=skipped,
            messages=messages,
            terminate=to_end,
            moves=moves,
            results=results,
        )


ROUTE_HANDLERS = (
    ProvisioningRoute,
    HealthCheckRoute,
    RunningRoute,
    RouteEviction,
    TerminatingRoute,
)


@hookimpl
def drover_register_handlers(register: HandlerRegistry) -> None:
    """Register the five route handlers with the repository and the clock."""
    context = register.context
    register(
        *(
            cls(context.queries, context.clock, context.creations_per_tick)
            if cls is ProvisioningRoute
            else cls(context.queries, context.clock)
            for cls in ROUTE_HANDLERS
        )
    )
