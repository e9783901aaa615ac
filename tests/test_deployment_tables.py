"""Every cell of the seed's deployment and route tables, on SQLite and PostgreSQL.

Replicas are sessions on the simulated backend; their "port" is a real HTTP
server in this process (stdlib ``http.server``) whose answer the test sets, so
``health-check-route`` makes real GET requests.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from drover import SchedulingResult
from drover.kinds.deployments.status import EndpointLifecycle, RouteStatus
from drover.kinds.sessions.values import SessionStatus

E, R = EndpointLifecycle, RouteStatus

KERNEL = {"command": ["true"], "cpu": 1, "mem": 64}


class _Replica(BaseHTTPRequestHandler):
    code = 200

    def do_GET(self) -> None:
        self.send_response(type(self).code)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def replica() -> Iterator[Any]:
    """A real HTTP server; set ``replica.code`` to choose its answer."""

    class Handler(_Replica):
        code = 200

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Handler.port = server.server_address[1]  # type: ignore[attr-defined]
    Handler.server_ = server  # type: ignore[attr-defined]
    yield Handler
    server.shutdown()
    server.server_close()


def spec(replicas: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "replicas": replicas,
        "kernel": KERNEL,
        "health_path": "/healthz",
        "evict_after": 5,
        "stale_after": 30,
        **extra,
    }


async def deployment(h: Any, status: str = E.PENDING, routes: Any = (), **extra: Any) -> str:
    children = [{"status": s, "spec": {"kernel": KERNEL, **extra.get("route", {})}} for s in routes]
    return await h.create(
        "deployment",
        status=status,
        spec=spec(**{k: v for k, v in extra.items() if k != "route"}),
        children=children,
        name="web",
    )


def with_port(port: int) -> dict[str, Any]:
    """A replica kernel that the simulated backend reports listening on ``port``."""
    return {**KERNEL, "sim": {"port": port}}


async def run_replicas(h: Any, dep: str) -> list[str]:
    """Provision the deployment's routes and run their replica sessions; return the routes."""
    await h.tick("provisioning-route")
    for handler in ("schedule-sessions", "prepare-sessions", "promote-to-prepared"):
        await h.tick(handler)
    await h.tick("start-sessions")
    await h.tick("promote-to-running")
    routes = [c.id for c in (await h.get(dep)).children]
    for route in routes:
        session = await h.session((await h.get(route)).data["session_id"])
        assert session.status == SessionStatus.RUNNING
    return routes


async def routed(h: Any, replica: Any, *, replicas: int = 1) -> tuple[str, list[str]]:
    """A READY deployment whose routes have RUNNING replicas answering on ``replica``."""
    dep = await h.create(
        "deployment", spec=spec(replicas, kernel=with_port(replica.port)), name="web"
    )
    await h.tick("check-pending-deployment")
    await h.tick("scaling-deployment")
    return dep, await run_replicas(h, dep)


async def status(h: Any, entity_id: str) -> str:
    return str((await h.get(entity_id)).status)


# -- deployments --------------------------------------------------------------------


@pytest.mark.parametrize("start", [E.PENDING, E.CREATED])
async def test_check_pending_deployment_success_is_scaling(make_harness, start):
    async with make_harness() as h:
        dep = await deployment(h, start)
        report = await h.tick("check-pending-deployment")
        assert report.count(SchedulingResult.SUCCESS) == 1
        assert await status(h, dep) == E.SCALING


async def test_scaling_deployment_creates_routes_then_is_degraded_until_they_answer(
    make_harness,
):
    """Issue 35: READY only once the wanted replicas are HEALTHY; new routes are not yet."""
    async with make_harness() as h:
        dep = await h.create("deployment", status=E.SCALING, spec=spec(3), name="web")
        await h.tick("scaling-deployment")
        found = await h.get(dep)
        assert (found.status, found.status_info) == (E.DEGRADED, "0 of 3 healthy")
        assert [c.status for c in found.children] == [R.PROVISIONING] * 3
        assert found.data == {"scaled_to": 3}
        (created,) = {
            (r.handler, str(r.result)) for c in found.children for r in await h.history(c.id)
        }
        assert created == ("scaling-deployment", "CREATED")


async def test_scaling_deployment_keeps_scaling_while_surplus_routes_drain(make_harness):
    async with make_harness() as h:
        dep = await deployment(h, E.SCALING, routes=[R.HEALTHY, R.HEALTHY], replicas=1)
        report = await h.tick("scaling-deployment")
        assert report.count(SchedulingResult.SKIPPED) == 1
        assert await status(h, dep) == E.SCALING
        assert "1 surplus route(s)" in ((await h.history(dep))[-1].message or "")


async def test_check_replica_deployment_scales_when_replicas_change(make_harness):
    async with make_harness() as h:
        dep = await h.create("deployment", status=E.SCALING, spec=spec(1), name="web")
        await h.tick("scaling-deployment")
        assert (await h.tick("check-replica-deployment")).changes == ()  # unchanged: maintain
        await h.repository.update_spec(dep, {"replicas": 2})
        await h.tick("check-replica-deployment")
        assert await status(h, dep) == E.SCALING


async def test_reconcile_deployment_replaces_at_once_then_backs_off_degraded(make_harness):
    """Issue 22: a crash loop backs off (10 s, 20 s…), DEGRADED while it waits, never gives up."""
    async with make_harness() as h:
        dep = await h.create("deployment", status=E.SCALING, spec=spec(1), name="web")
        await h.tick("scaling-deployment")
        assert (await h.tick("reconcile-deployment")).changes == ()  # routes match: maintain

        async def lose_the_route() -> None:
            live = [c for c in (await h.get(dep)).children if c.status != R.TERMINATING]
            await h.repository.request_termination([live[-1].id])

        await lose_the_route()
        await h.tick("reconcile-deployment")  # the first round: at once
        found = await h.get(dep)
        assert found.status == E.SCALING
        assert found.data["restarts"] == 1
        await h.tick("scaling-deployment")  # a replacement route
        assert (await h.get(dep)).data["replaced"] == 1
        for rounds, delay in ((1, 10), (2, 20), (3, 40)):
            await lose_the_route()
            await h.tick("reconcile-deployment")
            found = await h.get(dep)
            assert (found.status, found.status_info) == (E.DEGRADED, "CRASH_LOOP_BACK_OFF")
            assert f"crash-loop back-off: round {rounds + 1} in {delay}s" in (
                (await h.history(dep))[-1].message or ""
            )
            h.clock.advance(delay - 1)
            await h.tick("reconcile-deployment")
            assert await status(h, dep) == E.DEGRADED  # still waiting
            h.clock.advance(2)
            await h.tick("reconcile-deployment")
            assert await status(h, dep) == E.SCALING
            await h.tick("scaling-deployment")
            found = await h.get(dep)
            # Its replacement has not answered yet: DEGRADED, not READY (issue 35).
            assert (found.status, found.data["replaced"]) == (E.DEGRADED, rounds + 1)
            assert found.status_info == "0 of 1 healthy"
        assert not found.budgets  # no lifetime budget any more


async def test_the_replacement_limit_counts_replicas_not_rounds(make_harness):
    """Issue 24 §4: with 2 replicas and max_replacements 3, 3 replicas are replaced, then the
    deployment is DEGRADED (REPLACEMENTS_SPENT), not READY."""
    async with make_harness() as h:
        dep = await h.create(
            "deployment",
            status=E.SCALING,
            spec=spec(2, max_replacements=3, backoff_initial=1),
            name="web",
        )
        await h.tick("scaling-deployment")
        for _ in range(3):
            live = [c.id for c in (await h.get(dep)).children if c.status != R.TERMINATING]
            await h.repository.request_termination(live)  # both replicas lost
            h.clock.advance(600)
            await h.tick("reconcile-deployment")
            await h.tick("scaling-deployment")
        found = await h.get(dep)
        assert found.data["replaced"] == 3  # 2, then 1 more: the limit
        assert [c.status for c in found.children].count(R.PROVISIONING) == 1
        await h.tick("reconcile-deployment")
        found = await h.get(dep)
        assert (found.status, found.status_info) == (E.DEGRADED, "REPLACEMENTS_SPENT")
        last = (await h.history(dep))[-1].message or ""
        assert "3 replaced, the limit (max_replacements=3) is reached" in last


async def test_the_back_off_resets_once_every_replica_was_healthy_for_the_cap(
    make_harness, replica
):
    async with make_harness() as h:
        dep, (route,) = await routed(h, replica)
        await h.tick("health-check-route")
        await h.repository.request_termination([route])
        await h.tick("reconcile-deployment")
        assert (await h.get(dep)).data["restarts"] == 1
        await h.run_until_settled()
        await h.tick("health-check-route")
        assert [c.status for c in (await h.get(dep)).children][-1] == R.HEALTHY
        h.clock.advance(301)
        report = await h.tick("reconcile-deployment")
        assert report.counts == {SchedulingResult.SUCCESS: 1}
        found = await h.get(dep)
        assert (found.status, found.data["restarts"]) == (E.READY, 0)


async def test_destroying_deployment_waits_for_routes_then_is_destroyed(make_harness):
    async with make_harness() as h:
        dep = await deployment(h, E.READY, routes=[R.HEALTHY])
        outcome = (await h.repository.request_termination([dep]))[0]
        assert (outcome.from_status, outcome.to_status) == (E.READY, E.DESTROYING)
        (route,) = (await h.get(dep)).children
        assert route.status == R.TERMINATING  # drained with the request
        assert (await h.tick("destroying-deployment")).count(SchedulingResult.SKIPPED) == 1
        await h.tick("terminating-route")  # no replica session: the route ends at once
        await h.tick("destroying-deployment")
        found = await h.get(dep)
        assert (found.status, found.result) == (E.DESTROYED, "SUCCESS")


async def test_destroying_deployment_failure_is_destroyed_too(make_harness):
    from drover.kinds.deployments.deployments import DestroyingDeployment

    t = DestroyingDeployment.status_transitions()
    assert t.success == t.need_retry == t.give_up
    assert t.success is not None
    assert t.success.to == E.DESTROYED


# -- routes -------------------------------------------------------------------------


async def test_provisioning_route_creates_its_session_and_is_degraded(make_harness):
    async with make_harness() as h:
        dep = await h.create("deployment", status=E.SCALING, spec=spec(1), name="web")
        await h.tick("scaling-deployment")
        await h.tick("provisioning-route")
        (route,) = (await h.get(dep)).children
        assert route.status == R.DEGRADED
        session = await h.session(route.data["session_id"])
        assert session.spec["route_id"] == route.id
        assert [k.spec["command"] for k in session.kernels] == [["true"]]
        assert session.status == SessionStatus.PENDING


async def test_provisioning_route_failure_is_failed_to_start(make_harness):
    async with make_harness() as h:
        dep = await h.create(
            "deployment", status=E.SCALING, spec=spec(1, kernel={"cpu": -1}), name="web"
        )
        await h.tick("scaling-deployment")
        await h.tick("provisioning-route")
        (route,) = (await h.get(dep)).children
        assert route.status == R.FAILED_TO_START
        assert "cannot provision" in ((await h.history(route.id))[-1].message or "")


async def test_health_check_success_is_healthy_failure_unhealthy_and_recovery(
    make_harness, replica
):
    async with make_harness() as h:
        _, (route,) = await routed(h, replica)
        await h.tick("health-check-route")
        found = await h.get(route)
        assert found.status == R.HEALTHY
        assert found.data["url"] == f"http://127.0.0.1:{replica.port}"
        replica.code = 503
        await h.tick("health-check-route")
        assert await status(h, route) == R.UNHEALTHY
        last = (await h.history(route))[-1]
        assert last.message == f"GET http://127.0.0.1:{replica.port}/healthz: 503"
        replica.code = 204
        await h.tick("health-check-route")
        assert await status(h, route) == R.HEALTHY


async def test_health_check_silence_is_a_failure_then_stale(make_harness, replica):
    async with make_harness() as h:
        _, (route,) = await routed(h, replica)
        await h.tick("health-check-route")
        assert await status(h, route) == R.HEALTHY
        replica.server_.shutdown()  # the replica stops answering at all
        replica.server_.server_close()
        await h.tick("health-check-route")
        assert await status(h, route) == R.UNHEALTHY  # no answer, recently answered
        h.clock.advance(31)
        report = await h.tick("health-check-route")
        assert report.counts == {"stale": 1}
        assert await status(h, route) == R.DEGRADED
        assert (await h.history(route))[-1].result == "stale"
        # Stale again: a new start budget, counted from then, not from the RUNNING long ago.
        await h.tick("health-check-route")
        assert await status(h, route) == R.DEGRADED
        h.clock.advance(61)
        await h.tick("health-check-route")
        assert await status(h, route) == R.UNHEALTHY
        assert "after it became DEGRADED (start_timeout=60s)" in (
            (await h.history(route))[-1].message or ""
        )


async def test_the_start_timeout_counts_from_the_replicas_running_session(make_harness):
    """Issue 22: time spent PENDING for capacity does not spend the start budget."""
    async with make_harness() as h:
        kernel = with_port(_closed_port())
        dep = await h.create(
            "deployment", status=E.SCALING, spec=spec(1, kernel=kernel), name="web"
        )
        await h.tick("scaling-deployment")
        await h.tick("provisioning-route")
        (route,) = (await h.get(dep)).children
        for _ in range(3):  # the replica's session waits, unscheduled, for 3 minutes
            h.clock.advance(60)
            await h.tick("health-check-route")
        assert await status(h, route.id) == R.DEGRADED
        await run_replicas(h, dep)  # now RUNNING
        h.clock.advance(59)
        await h.tick("health-check-route")
        assert await status(h, route.id) == R.DEGRADED
        h.clock.advance(2)
        await h.tick("health-check-route")
        assert await status(h, route.id) == R.UNHEALTHY
        assert "after its session became RUNNING (start_timeout=60s)" in (
            (await h.history(route.id))[-1].message or ""
        )


async def test_a_degraded_route_that_never_answers_expires_to_unhealthy(make_harness):
    async with make_harness() as h:
        kernel = with_port(_closed_port())
        dep = await h.create(
            "deployment", status=E.SCALING, spec=spec(1, kernel=kernel), name="web"
        )
        await h.tick("scaling-deployment")
        (route,) = await run_replicas(h, dep)
        route = await h.get(route)
        assert (await h.tick("health-check-route")).count(SchedulingResult.SKIPPED) == 1
        assert await status(h, route.id) == R.DEGRADED
        h.clock.advance(61)  # past the 60 s start budget
        await h.tick("health-check-route")
        assert await status(h, route.id) == R.UNHEALTHY


async def test_running_route_ends_routes_whose_replica_ended(make_harness, replica):
    async with make_harness() as h:
        _, (route,) = await routed(h, replica)
        assert (await h.tick("running-route")).changes == ()  # alive: maintain
        session = (await h.get(route)).data["session_id"]
        await h.repository.request_termination([session])
        await h.run_until_settled()
        assert await status(h, route) in (R.TERMINATING, R.TERMINATED)
        rows = [(r.handler, str(r.to_status)) for r in await h.history(route)]
        assert ("running-route", "TERMINATING") in rows


async def test_running_route_ends_failed_to_start_routes(make_harness):
    async with make_harness() as h:
        dep = await deployment(h, E.READY, routes=[R.FAILED_TO_START])
        (route,) = (await h.get(dep)).children
        await h.tick("running-route")
        assert await status(h, route.id) == R.TERMINATING


async def test_running_route_drains_surplus_routes_keeping_the_healthy(make_harness, replica):
    async with make_harness() as h:
        dep, routes = await routed(h, replica, replicas=3)
        await h.tick("health-check-route")
        await h.repository.update_spec(dep, {"replicas": 1})
        report = await h.tick("running-route")
        assert sorted(c.entity_id for c in report.changes) == routes[1:]  # the newest go
        assert {str(c.to_status) for c in report.changes} == {R.TERMINATING}
        assert await status(h, routes[0]) == R.HEALTHY
        assert "scaled down to 1 replica(s)" in ((await h.history(routes[1]))[-1].message or "")


async def test_route_eviction_only_after_evict_after(make_harness):
    async with make_harness() as h:
        dep = await deployment(h, E.READY, routes=[R.UNHEALTHY], route={"evict_after": 5})
        (route,) = (await h.get(dep)).children
        assert (await h.tick("route-eviction")).fetched == 0  # within: not even fetched
        h.clock.advance(6)
        await h.tick("route-eviction")
        assert await status(h, route.id) == R.TERMINATING


async def test_terminating_route_ends_its_session_first(make_harness, replica):
    async with make_harness() as h:
        _, (route,) = await routed(h, replica)
        session = (await h.get(route)).data["session_id"]
        await h.repository.request_termination([route])
        assert (await h.tick("terminating-route")).count(SchedulingResult.SKIPPED) == 1
        assert await status(h, route) == R.TERMINATING
        ended = await h.session(session)
        assert ended.status == SessionStatus.TERMINATING
        assert ended.status_info == "REQUESTED_BY_TERMINATING_ROUTE"
        assert (await h.history(session))[-1].handler == "terminating-route"
        await h.run_until_settled()
        assert await status(h, route) == R.TERMINATED
        assert (await h.session(session)).status == SessionStatus.TERMINATED


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


# -- whole lifecycles --------------------------------------------------------------------


async def test_a_replica_that_never_answers_is_evicted_within_its_budget_and_replaced(
    make_harness,
):
    async with make_harness() as h:
        kernel = with_port(_closed_port())
        dep = await h.create("deployment", spec=spec(1, kernel=kernel), name="web")
        await h.run_until_settled()
        (first,) = (await h.get(dep)).children
        assert first.status == R.DEGRADED  # waiting for its first answer
        h.clock.advance(61)  # the start budget
        await h.tick("health-check-route")
        assert await status(h, first.id) == R.UNHEALTHY
        h.clock.advance(6)  # evict_after
        await h.tick("route-eviction")
        await h.run_until_settled()
        found = await h.get(dep)
        ended = {c.id: c.status for c in found.children}
        assert ended[first.id] == R.TERMINATED
        assert [s for i, s in ended.items() if i != first.id] == [R.DEGRADED]  # its replacement
        assert found.data["replaced"] == 1
        session = await h.session(first.data["session_id"])
        assert session.status == SessionStatus.TERMINATED


async def test_a_replica_that_exits_at_once_is_replaced_with_a_growing_back_off(make_harness):
    async with make_harness() as h:
        kernel = {**KERNEL, "sim": {"run_for": 0}}
        dep = await h.create("deployment", spec=spec(1, kernel=kernel), name="web")
        await h.run_until_settled(max_rounds=200)
        found = await h.get(dep)
        # The first route and one replacement at once; the next round waits 10 s.
        assert [c.status for c in found.children] == [R.TERMINATED] * 2
        assert (found.status, found.status_info) == (E.DEGRADED, "CRASH_LOOP_BACK_OFF")
        assert found.data["replaced"] == 1
        for delay, replaced in ((10, 2), (20, 3), (40, 4)):
            h.clock.advance(delay + 1)
            await h.run_until_settled(max_rounds=200)
            found = await h.get(dep)
            assert found.data["replaced"] == replaced  # never gives up
            assert found.status == E.DEGRADED


# -- health checks: what counts, the client, one route's failure ---------------------------


async def test_health_check_counts_200_to_399_as_healthy(make_harness, replica):
    async with make_harness() as h:
        _, (route,) = await routed(h, replica)
        replica.code = 302  # a redirect is an answer, as Kubernetes counts it
        await h.tick("health-check-route")
        assert await status(h, route) == R.HEALTHY
        replica.code = 399
        await h.tick("health-check-route")
        assert await status(h, route) == R.HEALTHY
        replica.code = 400
        await h.tick("health-check-route")
        assert await status(h, route) == R.UNHEALTHY


async def test_health_checks_ignore_proxy_variables_and_share_one_client(
    make_harness, replica, monkeypatch
):
    import httpx2

    built: list[Any] = []

    class Counted(httpx2.AsyncClient):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            built.append(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(httpx2, "AsyncClient", Counted)
    dead = f"http://127.0.0.1:{_closed_port()}"
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(var, dead)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with make_harness() as h:
        _, (route,) = await routed(h, replica)
        for _ in range(3):
            await h.tick("health-check-route")
            assert await status(h, route) == R.HEALTHY  # not sent to the dead proxy
    assert len(built) == 1  # one client for every tick
    assert built[0]["trust_env"] is False


async def test_a_route_whose_url_cannot_be_requested_fails_alone(make_harness, replica):
    """Issue 24 §4: one bad deployment must not stall another's health checks (no handler
    error, no back-off of the handler)."""
    async with make_harness() as h:
        _, (good,) = await routed(h, replica)
        other = await h.create(
            "deployment", spec=spec(1, kernel=with_port(replica.port)), name="bad"
        )
        await h.tick("check-pending-deployment")
        await h.tick("scaling-deployment")
        await run_replicas(h, other)
        (bad,) = [c.id for c in (await h.get(other)).children]
        # Stored before deploy checked paths: the route's spec is not the deployment's.
        await h.repository.update_spec(bad, {"health_path": "/a\r\nb"})
        report = await h.tick("health-check-route")
        assert report.error is None
        assert await status(h, good) == R.HEALTHY
        assert await status(h, bad) == R.UNHEALTHY
        assert "cannot check" in ((await h.history(bad))[-1].message or "")


@pytest.mark.parametrize("path", ["/a\r\nb", "/a b", "healthz", "/x#y", "/%zz", ""])
async def test_a_deployment_with_a_bad_health_path_is_refused(make_harness, path):
    from drover.model.errors import InvalidSpecError

    async with make_harness() as h:
        with pytest.raises(InvalidSpecError, match="health path"):
            await h.create("deployment", spec=spec(1, health_path=path), name="web")
        assert await h.repository.list_entities("deployment") == []


# -- deploying again: a rolling replacement --------------------------------------------------


async def test_a_new_revision_rolls_out_one_replica_at_a_time(make_harness, replica):
    async with make_harness() as h:
        dep, old = await routed(h, replica, replicas=3)
        await h.tick("health-check-route")
        new_kernel = {**with_port(replica.port), "env": {"VERSION": "2"}}
        await h.repository.update_spec(dep, {"kernel": new_kernel, "revision": 1})
        assert (await h.tick("rollout-deployment")).count(SchedulingResult.SUCCESS) == 1
        for _ in range(40):
            found = await h.get(dep)
            live = [c for c in found.children if c.status not in (R.TERMINATING, R.TERMINATED)]
            assert len(live) == 3
            # At most one replica unavailable at any time.
            assert sum(1 for c in live if c.status == R.HEALTHY) >= 2
            if all(c.spec.get("revision") == 1 and c.status == R.HEALTHY for c in live):
                break
            for handler in (
                "provisioning-route", "schedule-sessions", "prepare-sessions",
                "promote-to-prepared", "start-sessions", "promote-to-running",
                "health-check-route", "terminating-route", "terminate-sessions",
                "promote-to-terminated", "reconcile-deployment", "rollout-deployment",
            ):  # fmt: skip
                await h.tick(handler)
        else:
            pytest.fail("the rollout did not finish")
        assert found.status == E.READY
        assert found.data.get("replaced", 0) == 0  # a rollout is not a replacement
        for route in old:
            assert await status(h, route) in (R.TERMINATING, R.TERMINATED)
        assert {c.spec["kernel"]["env"]["VERSION"] for c in live} == {"2"}
