"""What an operator sees of a sick service (issue 22, "Services"): a deployment whose
replica crashes at once is DEGRADED, backing off, on the CLI, ``/api/deployments``,
``/metrics`` and the dashboard."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_cli import cli, harness  # noqa: F401  (fixtures: the CLI on this test's database)
from test_deployments_e2e import DROVER, SERVER, drover, service_env  # noqa: F401
from test_web import make_client  # noqa: F401  (fixture: the dashboard on it)

CRASHES = {"command": ["true"], "cpu": 1, "mem": 64, "sim": {"run_for": 0}}


@pytest.fixture
def crashing(harness):  # noqa: F811
    """A deployment of 1 replica that exits at once: replaced once, then backing off."""

    async def go(h):
        dep = await h.create("deployment", spec={"replicas": 1, "kernel": CRASHES}, name="web")
        await h.run_until_settled(max_rounds=200)
        return dep

    return harness(go)


def test_the_cli_shows_a_crash_looping_deployment_degraded(crashing, cli):  # noqa: F811
    (row,) = json.loads(cli("deployments", "--json").output)
    assert (row["id"], row["status"], row["degraded"]) == (crashing, "DEGRADED", True)
    assert (row["status_info"], row["healthy"], row["replaced"]) == ("CRASH_LOOP_BACK_OFF", 0, 1)
    assert row["backoff_until"] is not None
    text = cli("deployments").output
    line = next(line for line in text.splitlines() if line.startswith("web\t"))
    assert "\tDEGRADED\t" in line
    assert "CRASH_LOOP_BACK_OFF until " in line


def test_the_api_metrics_and_pages_show_it_degraded(crashing, make_client):  # noqa: F811
    with make_client() as client:
        (row,) = client.get("/api/deployments").json()
        assert (row["status"], row["degraded"]) == ("DEGRADED", True)
        samples = {
            (s.labels["kind"], s.labels["status"]): s.value
            for family in text_string_to_metric_families(client.get("/metrics").text)
            if family.name == "drover_entities"
            for s in family.samples
        }
        assert samples[("deployment", "DEGRADED")] == 1
        assert samples[("deployment", "READY")] == 0
        listing = client.get("/deployments").text
        assert 'class="badge badge-DEGRADED"' in listing
        assert "CRASH_LOOP_BACK_OFF until" in listing
        page = client.get("/deployments/web").text
        assert 'class="degraded"' in page
        assert "next replacement at" in page


def test_deploying_a_live_name_again_updates_it_in_place(cli, harness):  # noqa: F811
    first = cli("deploy", "api", "--replicas", "2", "--", "sh", "-c", "exec server v1")
    assert first.exit_code == 0, first.output
    dep = first.output.strip()
    same = cli("deploy", "api", "--replicas", "2", "--json", "--", "sh", "-c", "exec server v1")
    assert json.loads(same.output) == {
        "id": dep, "name": "api", "replicas": 2, "change": "unchanged (revision 0)",
    }  # fmt: skip
    scaled = cli("deploy", "api", "--replicas", "3", "--json", "--", "sh", "-c", "exec server v1")
    assert json.loads(scaled.output)["change"] == "updated (replicas changed)"
    rolled = cli("deploy", "api", "--replicas", "3", "--env", "V=2", "--", "sh", "-c", "exec v2")
    assert rolled.exit_code == 0, rolled.output
    assert rolled.output.splitlines() == [dep, "api: revision 1 rolling out (kernel changed)"]
    found = harness(lambda h: h.get(dep))
    assert (found.spec["revision"], found.spec["replicas"]) == (1, 3)
    assert found.spec["kernel"]["env"] == {"V": "2"}
    assert found.spec["kernel"]["command"] == ["sh", "-c", "exec v2"]
    assert [d.id for d in harness(lambda h: h.repository.list_entities("deployment"))] == [dep]
    bad = cli("deploy", "api", "--health-path", "/a b", "--", "true")
    assert bad.exit_code != 0
    assert "health path '/a b' is not a URL path" in bad.output
    assert harness(lambda h: h.get(dep)).spec["health_path"] == "/"


def test_deploy_redeploy_and_destroy_wait_with_a_progress_line(service_env, tmp_path):  # noqa: F811
    """`--wait` through the real CLI and a real `drover run` (with a dead HTTP_PROXY set,
    which health checks ignore); a rolling update keeps the service answering."""
    env = {**service_env, "HTTP_PROXY": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}

    def run(*args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*DROVER, *args], env=env, capture_output=True, text=True, timeout=timeout
        )

    log = (tmp_path / "daemon.log").open("w")
    daemon = subprocess.Popen([*DROVER, "run"], env=env, stdout=log, stderr=log)
    try:
        server = ["--", "sh", "-c", SERVER]
        first = run("deploy", "web", "--replicas", "2", "--wait", "--timeout", "120", *server)
        assert first.returncode == 0, first.stderr
        assert first.stderr.splitlines()[-1] == "web: READY: 2/2 healthy"
        again = run(
            "deploy", "web", "--replicas", "2", "--env", "V=2", "--wait", "--timeout", "120",
            *server,
        )  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert "web: revision 1 rolling out (kernel changed)" in again.stderr
        assert again.stderr.splitlines()[-1] == "web: READY: 2/2 healthy"
        rows = drover(env, "routes", "web", "--json")
        assert len(rows) == 2
        for row in rows:
            shown = drover(env, "show", row["id"], "--json")
            assert shown["spec"]["revision"] == 1
        gone = run("destroy", "web", "--wait", "--timeout", "60")
        assert gone.returncode == 0, gone.stderr
        assert gone.stderr.splitlines()[-1].endswith(": DESTROYED: 0 route(s) left")
        crash = run("deploy", "crash", "--wait", "--timeout", "3", "--", "false")
        assert crash.returncode == 1
        assert "crash: not done after 3s (" in crash.stderr
        assert "see drover why crash" in crash.stderr
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
        log.close()
