"""Pushed reports: outside events move an entity of any kind with compare-and-set.

Kinds from ``tests/tree.py`` (job -> task -> attempt), on SQLite and PostgreSQL;
the backends' kernel reports are one case of the same path (``tests/test_storage.py``).
"""

from __future__ import annotations

import pytest
from tree import Attempt, Job, Task, harness, tree, tree_cli

from drover import InvalidSpecError, UnknownEntityError


async def test_a_report_moves_an_entity_of_any_kind_with_a_history_row(make_harness):
    async with harness(make_harness) as h:
        job = await h.create("job", status=Job.RUNNING)
        task = await h.create("task", status=Task.RUNNING, parent=job)
        h.clock.advance(1)
        ok = await h.repository.report(
            task,
            Task.DONE,
            expected=[Task.RUNNING],
            status_info="EXIT_0",
            data={"worker": "w1"},
            message="worker w1 says done",
        )
        assert ok is True
        found = await h.get(task)
        assert (found.status, found.status_info, found.data, found.result) == (
            Task.DONE,
            "EXIT_0",
            {"worker": "w1"},
            "SUCCESS",
        )
        last = (await h.history(task))[-1]
        assert (last.handler, last.result, last.from_status, last.to_status, last.message) == (
            "report",
            "MOVED",
            Task.RUNNING,
            Task.DONE,
            "worker w1 says done",
        )
        # The parent's view of its children has it too.
        (change,) = await h.repository.kernel_history(session_id=job)
        assert (change.source, change.to_status) == ("report", Task.DONE)


async def test_a_report_that_loses_its_race_changes_nothing(make_harness):
    async with harness(make_harness) as h:
        job = await h.create("job", status=Job.RUNNING)
        assert not await h.repository.report(job, Job.DONE, expected=[Job.QUEUED])
        assert (await h.get(job)).status == Job.RUNNING
        ended = await h.create("job", status=Job.FAILED)
        # An ended entity never changes again by a report (reopen does that).
        assert not await h.repository.report(ended, Job.RUNNING)
        assert (await h.get(ended)).status == Job.FAILED
        assert len(await h.history(job)) == 1
        with pytest.raises(UnknownEntityError):
            await h.repository.report("nope", Job.DONE)
        with pytest.raises(InvalidSpecError, match="'LOST' is not one of its statuses"):
            await h.repository.report(job, "LOST")


async def test_a_heartbeat_of_the_same_status_only_patches_data(make_harness):
    async with harness(make_harness) as h:
        job = await h.create("job", status=Job.RUNNING)
        assert await h.repository.report(job, Job.RUNNING, data={"beat": 1})
        assert await h.repository.report(job, Job.RUNNING, data={"beat": 2, "host": "a"})
        found = await h.get(job)
        assert (found.status, found.data) == (Job.RUNNING, {"beat": 2, "host": "a"})
        # A same-status report without data is no news.
        assert not await h.repository.report(job, Job.RUNNING)
        assert [r.result for r in await h.history(job)] == ["CREATED"]


async def test_an_entity_without_children_a_report_ends_gets_its_result(make_harness):
    async with harness(make_harness) as h:
        _, _, (good, bad) = await tree(h)
        assert await h.repository.report(good, Attempt.SUCCEEDED)
        assert await h.repository.report(bad, Attempt.PREEMPTED)
        assert [(await h.get(a)).result for a in (good, bad)] == ["SUCCESS", "FAILURE"]


async def test_a_report_that_ends_an_entity_ends_its_tree(make_harness):
    async with harness(make_harness) as h:
        job, tasks, attempts = await tree(h)
        assert await h.repository.report(job, Job.CANCELLED, source="webhook")
        assert {(await h.get(t)).status for t in tasks} == {Task.CANCELLED}
        assert {(await h.get(a)).status for a in attempts} == {Attempt.FAILED}
        assert (await h.get(job)).result == "FAILURE"
        last = (await h.history(attempts[0]))[-1]
        assert (last.handler, last.to_status) == ("webhook", Attempt.FAILED)


def test_drover_report_moves_an_entity_and_exits_1_when_it_did_not_apply(
    database, monkeypatch, tmp_path
):
    import json

    job, task, cli = tree_cli(database, monkeypatch, tmp_path)
    assert "Example: drover report" in cli("report", "--help").output
    done = cli("report", task[:20], "done", "--expected", "running", "--info", "EXIT_0",
               "--data", '{"worker": "w1"}', "--json")  # fmt: skip
    assert done.exit_code == 0, done.output
    assert json.loads(done.output) == {
        "entity_id": task, "kind": "task", "applied": True, "status": "DONE",
        "status_info": "EXIT_0", "result": "SUCCESS",
    }  # fmt: skip
    again = cli("report", task, "DONE", "--expected", "RUNNING")
    assert again.exit_code == 1
    assert f"{task}: not applied: the task is DONE (expected RUNNING)" in again.output
    bad = cli("report", job, "DONE", "--data", "[1]")
    assert bad.exit_code == 2
    assert "must be a JSON object" in bad.output
    shown = json.loads(cli("show", task, "--json").output)
    assert [(r["handler"], r["result"]) for r in shown["history"]] == [
        ("api", "CREATED"),
        ("report", "MOVED"),
    ]


def test_post_api_report_is_the_dashboards_one_write_behind_the_token(
    database, monkeypatch, tmp_path
):
    import json

    from starlette.testclient import TestClient

    from drover.app import App
    from drover.config import load_config
    from drover.web import create_app

    _, task, cli = tree_cli(database, monkeypatch, tmp_path)
    flags = {"database_url": database.url, "database_schema": database.schema or ""}

    def client(**kwargs):
        app = App(load_config(None, environ={}, flags=flags))
        web = create_app(app, close_app_on_shutdown=True, **kwargs)
        return TestClient(web, base_url="http://127.0.0.1:8080")

    body = {"entity_id": task, "status": "DONE", "expected": ["RUNNING"], "source": "ci"}
    with client() as open_dashboard:
        refused = open_dashboard.post("/api/report", json=body)
        assert refused.status_code == 403
        assert "--auth-token" in refused.json()["error"]
    token = {"Authorization": "Bearer t0ken"}
    with client(auth_token="t0ken") as gated:
        assert gated.post("/api/report", json=body).status_code == 401
        assert gated.get("/api/report", headers=token).status_code == 405
        ok = gated.post("/api/report", json=body, headers=token)
        assert (ok.status_code, ok.json()) == (200, {"entity_id": task, "applied": True})
        lost = gated.post("/api/report", json=body, headers=token)
        assert (lost.status_code, lost.json()["applied"]) == (409, False)
        unknown = gated.post("/api/report", json={**body, "entity_id": "nope"}, headers=token)
        assert unknown.status_code == 404
        wrong = gated.post("/api/report", json={**body, "status": "LOST"}, headers=token)
        assert wrong.status_code == 400
        extra = gated.post("/api/report", json={**body, "force": True}, headers=token)
        assert "unknown field(s) ['force']" in extra.json()["error"]
    shown = json.loads(cli("show", task, "--json").output)
    # An outside source is recorded in a namespace of its own, never as a handler.
    assert (shown["status"], shown["history"][-1]["handler"]) == ("DONE", "api:ci")
