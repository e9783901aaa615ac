"""Results that mean what happened (issue 22): a stop somebody asked for is CANCELLED,
never FAILURE; failures stay FAILURE and are counted where the operator looks."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_web import make_client  # noqa: F401  (fixture: the dashboard on this test's database)

from drover.kinds.deployments.status import RouteStatus
from drover.kinds.sessions.values import SessionStatus

RUNS = {"cpu": 1, "mem": 64}
FAILS = {"cpu": 1, "mem": 64, "sim": {"run_for": 0, "exit_code": 3}}
SUCCEEDS = {"cpu": 1, "mem": 64, "sim": {"run_for": 0}}


async def test_a_pending_session_the_user_terminated_is_cancelled_not_failed(make_harness):
    async with make_harness() as h:
        sid = await h.create_session(name="never-ran")
        await h.request_termination(sid)
        found = await h.session(sid)
        assert (found.status, found.result) == (SessionStatus.CANCELLED, "CANCELLED")
        assert found.data == {"stop_requested_by": "api"}


async def test_a_running_session_the_user_terminated_ends_terminated_cancelled(make_harness):
    async with make_harness() as h:
        sid = await h.create_session(kernels=[RUNS, RUNS])
        await h.run_until_settled()
        assert (await h.session(sid)).status == SessionStatus.RUNNING
        await h.request_termination(sid)
        await h.run_until_settled()
        found = await h.session(sid)
        assert (found.status, found.result) == (SessionStatus.TERMINATED, "CANCELLED")


async def test_failures_and_successes_keep_their_results(make_harness):
    async with make_harness() as h:
        failed = await h.create_session(kernels=[FAILS])
        succeeded = await h.create_session(kernels=[SUCCEEDS])
        await h.run_until_settled()
        assert (await h.session(failed)).result == "FAILURE"
        assert (await h.session(succeeded)).result == "SUCCESS"
        # A request that reaches a session already ended changes nothing.
        await h.request_termination(failed)
        assert (await h.session(failed)).result == "FAILURE"


async def test_a_replica_ended_by_a_scale_down_or_a_destroy_is_cancelled(make_harness):
    async with make_harness() as h:
        kernel = {"command": ["true"], **RUNS}
        dep = await h.create("deployment", spec={"replicas": 2, "kernel": kernel}, name="web")
        await h.run_until_settled()
        routes = (await h.get(dep)).children
        sessions = [r.data["session_id"] for r in routes]
        await h.repository.update_spec(dep, {"replicas": 1})  # a scale-down
        await h.run_until_settled()
        ended = [s for s in sessions if (await h.session(s)).status == SessionStatus.TERMINATED]
        assert len(ended) == 1
        assert (await h.session(ended[0])).result == "CANCELLED"
        await h.repository.request_termination([dep])  # a destroy
        await h.run_until_settled()
        for sid in sessions:
            found = await h.session(sid)
            assert (found.status, found.result) == (SessionStatus.TERMINATED, "CANCELLED")
        assert {r.status for r in (await h.get(dep)).children} == {RouteStatus.TERMINATED}


@pytest.fixture
def seeded(database):
    """Two failed sessions (one ends TERMINATED, one ERROR), one cancelled, one succeeded."""
    from drover.testing import CoordinatorHarness

    async def go():
        async with CoordinatorHarness(
            database_url=database.url, database_schema=database.schema
        ) as h:
            ids = {
                "failed": await h.create_session(name="failed", kernels=[FAILS]),
                "ok": await h.create_session(name="ok", kernels=[SUCCEEDS]),
                "stopped": await h.create_session(name="stopped", kernels=[RUNS]),
            }
            await h.run_until_settled()
            await h.request_termination(ids["stopped"])
            await h.run_until_settled()
            sessions = {n: await h.session(i) for n, i in ids.items()}
            return {n: (s.status, s.result) for n, s in sessions.items()}

    return asyncio.run(go())


def test_the_overview_counts_failures_and_paints_only_them_red(seeded, make_client):  # noqa: F811
    assert seeded["failed"][1] == "FAILURE"
    assert seeded["stopped"] == (SessionStatus.TERMINATED, "CANCELLED")
    with make_client() as client:
        page = client.get("/")
        assert page.status_code == 200
        html = page.text
        assert 'data-count-result="FAILURE"' in html
        badge = html.split('data-count-result="FAILURE"', 1)[1].split("</a>", 1)[0]
        assert '<span class="n">1</span>' in badge
        rows = {
            line.split('data-result="', 1)[1].split('"', 1)[0]: line
            for line in html.splitlines()
            if "data-session-id=" in line
        }
        assert 'class="failed"' in rows["FAILURE"]
        assert 'class="failed"' not in rows["CANCELLED"]
        assert 'class="cancelled"' in rows["CANCELLED"]


def test_metrics_count_ended_entities_by_result(seeded, make_client):  # noqa: F811
    with make_client() as client:
        text = client.get("/metrics").text
    samples = {
        (s.labels["kind"], s.labels["result"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "drover_entity_results"
        for s in family.samples
    }
    assert samples[("session", "FAILURE")] == 1
    assert samples[("session", "CANCELLED")] == 1
    assert samples[("session", "SUCCESS")] == 1
