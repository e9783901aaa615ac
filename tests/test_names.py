"""Names wherever an id is accepted (issue 22, "Finding things"): the one resolver of
``Queries.resolve_entity_id`` behind show, logs, why, history, terminate, the deployment
commands and the dashboard's entity URLs; ``drover sessions --name PATTERN``."""

from __future__ import annotations

import json

import pytest
from test_cli import cli, harness  # noqa: F401  (fixtures: the CLI on this test's database)
from test_web import make_client  # noqa: F401  (fixture: the dashboard on it)

from drover.model.errors import InvalidSpecError, UnknownEntityError


def _sessions(harness, *names: str) -> dict[str, str]:  # noqa: F811
    async def go(h):
        return {n: await h.create_session(name=n) for n in names}

    return harness(go)


def test_show_why_logs_history_and_terminate_take_a_live_sessions_name(cli, harness):  # noqa: F811
    ids = _sessions(harness, "hello", "other")
    shown = cli("show", "hello", "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["id"] == ids["hello"]
    why = cli("why", "hello")
    assert why.exit_code == 0, why.output
    assert ids["hello"] in why.output
    history = cli("history", "hello", "--json")
    assert history.exit_code == 0, history.output
    assert {r["session_id"] for r in json.loads(history.output)} == {ids["hello"]}
    logs = cli("logs", "hello")  # resolved: the session is PENDING, it has no log yet
    assert logs.exit_code != 0
    assert f"kernel 1 of {ids['hello']} has no stdout log yet" in logs.output
    ended = cli("terminate", "hello")
    assert ended.exit_code == 0, ended.output
    assert ended.output.strip() == f"{ids['hello']}: PENDING -> CANCELLED"
    assert harness(lambda h: h.session(ids["other"])).status == "PENDING"


def test_a_name_two_live_sessions_share_is_refused_listing_them(cli, harness):  # noqa: F811
    first, second = harness(
        lambda h: _two(h, "twin"),
    )
    for command in ("show", "why", "logs", "terminate"):
        result = cli(command, "twin")
        assert result.exit_code != 0, command
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1, result.output
        assert "name 'twin' is ambiguous: 2 live sessions have it" in lines[0]
        assert first in lines[0]
        assert second in lines[0]
    statuses = {s.id: s.status for s in harness(lambda h: h.repository.list_sessions())}
    assert statuses == {first: "PENDING", second: "PENDING"}  # nothing terminated


async def _two(h, name: str) -> tuple[str, str]:
    return await h.create_session(name=name), await h.create_session(name=name)


def test_a_name_only_ended_sessions_have_means_the_newest_and_one_live_wins(cli, harness):  # noqa: F811
    async def go(h):
        old = await h.create_session(name="job")
        await h.request_termination(old)
        newer = await h.create_session(name="job")
        await h.request_termination(newer)
        return old, newer

    old, newer = harness(go)
    assert json.loads(cli("show", "job", "--json").output)["id"] == newer
    live = harness(lambda h: h.create_session(name="job"))
    assert json.loads(cli("show", "job", "--json").output)["id"] == live
    assert old != live


def test_an_unknown_name_says_id_or_name(cli):  # noqa: F811
    result = cli("show", "nobody")
    assert result.exit_code != 0
    assert "no entity with id or name 'nobody'" in result.output


def test_why_and_routes_take_a_deployments_name(cli, harness):  # noqa: F811
    deployment = harness(
        lambda h: h.create(
            "deployment", spec={"replicas": 0, "kernel": {"command": ["true"]}}, name="web"
        )
    )
    why = cli("why", "web")
    assert why.exit_code == 0, why.output
    assert deployment in why.output
    shown = json.loads(cli("show", "web", "--json").output)
    assert (shown["id"], shown["kind"]) == (deployment, "deployment")
    routes = cli("routes", deployment[:20])  # an id prefix, through the same resolver
    assert routes.exit_code == 0, routes.output


def test_sessions_name_pattern(cli, harness):  # noqa: F811
    _sessions(harness, "web-1", "web-2", "batch_web", "Other")

    def names(*args: str) -> list[str]:
        result = cli("sessions", "--json", *args)
        assert result.exit_code == 0, result.output
        return sorted(s["name"] for s in json.loads(result.output))

    assert names("--name", "web-*") == ["web-1", "web-2"]
    assert names("--name", "web") == ["batch_web", "web-1", "web-2"]  # no wildcard: a substring
    assert names("--name", "?ther") == ["Other"]  # case-insensitive, whole name
    assert names("--name", "batch_*") == ["batch_web"]  # _ is a character, not a wildcard
    assert names("--name", "*2", "--status", "PENDING") == ["web-2"]


def test_the_dashboard_takes_a_name_in_a_session_url(make_client, harness):  # noqa: F811
    ids = _sessions(harness, "hello", "twin")
    harness(lambda h: h.create_session(name="twin"))
    with make_client() as client:
        page = client.get("/sessions/hello")
        assert page.status_code == 200
        assert ids["hello"] in page.text
        assert client.get("/api/sessions/hello").json()["id"] == ids["hello"]
        ambiguous = client.get("/api/sessions/twin")
        assert ambiguous.status_code == 400
        assert "ambiguous" in ambiguous.text
        assert client.get("/sessions/nobody").status_code == 404


async def test_the_resolver_by_kind(make_harness):
    async with make_harness() as h:
        sid = await h.create_session(name="web")
        dep = await h.create("deployment", spec={"replicas": 0}, name="web")
        repo = h.repository
        assert await repo.resolve_entity_id("web", "deployment") == dep
        assert await repo.resolve_session_id("web") == sid
        with pytest.raises(InvalidSpecError, match="2 live entities have it"):
            await repo.resolve_entity_id("web")
        with pytest.raises(UnknownEntityError, match="no route with id or name 'web'"):
            await repo.resolve_entity_id("web", "route")
