"""Issue 36, point 7: text filters are bounded, refused in one line (400 over HTTP).

``/api/sessions?name=<60,000 characters>`` answered 500 (SQLite: "LIKE or GLOB
pattern too complex") and ``drover sessions --name <60 KB>`` said "cannot reach the
database"; a NUL in a filter is a PostgreSQL DataError. Each filter is checked where
it is built (:class:`~drover.storage.queries.EntityFilter`, the history search, the
dashboard's parameters), on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner

from drover import InvalidSpecError
from drover.app import App
from drover.cli.group import main
from drover.config import load_config
from drover.model.checks import MAX_FILTER_LENGTH
from drover.storage.queries import EntityFilter
from drover.testing import CoordinatorHarness
from drover.web import create_app


@pytest.fixture
def session(database):
    """One session named ``web-1`` in the test's database; its id."""

    async def make():
        async with CoordinatorHarness(
            database_url=database.url, database_schema=database.schema
        ) as h:
            return await h.create_session(name="web-1")

    return asyncio.run(make())


@pytest.fixture
def client(database, session):
    from starlette.testclient import TestClient

    flags = {"database_url": database.url, "database_schema": database.schema or ""}
    app = App(load_config(None, environ={}, flags=flags))
    with TestClient(
        create_app(app, close_app_on_shutdown=True), base_url="http://127.0.0.1:8080"
    ) as c:
        yield c


@pytest.fixture
def cli(database, session, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for var in ("DROVER_CONFIG", "DROVER_LOG_FORMAT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DROVER_DATABASE_URL", database.url)
    monkeypatch.setenv("DROVER_DATABASE_SCHEMA", database.schema or "")
    runner = CliRunner()
    return lambda *args: runner.invoke(main, list(args), catch_exceptions=False)


LONG = "x" * 60_000  # past SQLite's LIKE limit (50,000 bytes), within a URL's (65,536)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (f"/api/sessions?name={LONG}", "name is 60000 characters long; at most 1024"),
        (f"/api/sessions?name=web-*{'?' * 55_000}", "at most 1024 are allowed"),
        ("/api/sessions?name=web%00", "name contains a NUL character"),
        (f"/api/sessions?handler={LONG}", "handler is 60000 characters long"),
        ("/api/sessions?linked_to=a%00", "linked_to contains a NUL character"),
        (f"/api/history?handler={LONG}", "handler is 60000 characters long"),
        ("/api/history?kernel=k%00", "kernel contains a NUL character"),
        (f"/api/history?session={LONG}", "session is 60000 characters long"),
    ],
)
def test_a_filter_past_its_bound_is_a_400(client, path, message):
    answer = client.get(path)
    assert answer.status_code == 400, answer.text
    assert message in answer.json()["error"]


def test_the_overview_page_answers_a_long_filter_with_a_400(client):
    answer = client.get(f"/?name={LONG}")
    assert answer.status_code == 400
    assert "at most 1024 are allowed" in answer.text


def test_a_filter_at_its_bound_is_a_filter(client, session):
    """The bound refuses only what no filter could mean."""
    assert client.get(f"/api/sessions?name={'x' * MAX_FILTER_LENGTH}").json() == []
    assert [s["id"] for s in client.get("/api/sessions?name=WEB-*").json()] == [session]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["sessions", "--name", "x" * 61_440],
            "the name filter is 61440 characters long; at most 1024 are allowed",
        ),
        (["sessions", "--name", "web\x00"], "the name filter contains a NUL character"),
        (
            ["history", "--handler", "h" * 2000],
            "the handler filter is 2000 characters long; at most 1024 are allowed",
        ),
        (["history", "--kernel", "k\x00"], "the entity filter contains a NUL character"),
    ],
)
def test_drover_refuses_a_filter_past_its_bound_in_one_line(cli, args, message):
    """Not "cannot reach the database": one line naming the filter and its bound."""
    result = cli(*args)
    assert (result.exit_code, result.output.strip()) == (1, f"Error: {message}")


def test_every_caller_of_the_entity_filter_gets_the_refusal():
    with pytest.raises(InvalidSpecError, match="the name filter is 2000 characters long"):
        EntityFilter(name="n" * 2000)
    with pytest.raises(InvalidSpecError, match="the linked_to filter must be text"):
        EntityFilter(linked_to=7)  # type: ignore[arg-type]
    assert EntityFilter(name="").name == ""
