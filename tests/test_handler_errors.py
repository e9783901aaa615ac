"""A handler that raises is reported, backed off, and never stops the daemon (both databases)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families
from scripted import ScriptedPlugin
from starlette.testclient import TestClient

from drover import make_plugin_manager
from drover.app import App
from drover.cli import main
from drover.config import Config, load_config
from drover.coordinator.daemon import Daemon
from drover.model.clock import SystemClock
from drover.testing import CoordinatorHarness
from drover.web import create_app


def _error_tick(handler: str, error: str, at: float) -> dict[str, object]:
    return {
        "handler": handler,
        "started_at": at,
        "duration": 0.01,
        "fetched": 1,
        "counts": {"SKIPPED": 1},
        "error": error,
    }


async def test_the_daemon_backs_off_a_failing_handler_and_records_its_errors(database):
    """Ticks of a raising handler slow down exponentially; each error is recorded."""
    plugin = ScriptedPlugin()
    calls: list[float] = []

    def explode(targets):
        calls.append(time.monotonic())
        raise RuntimeError("plugin bug")

    plugin.handler.script = explode
    app = App(
        Config(database_url=database.url, database_schema=database.schema or ""),
        plugin_manager=make_plugin_manager(plugins=[plugin], include_builtins=False),
        clock=SystemClock(),
        claims=True,
    )
    try:
        coordinator = await app.start()
        await app.repository.create_session(kernels=[])
        daemon = Daemon(coordinator, app.repository, default_interval=0.05, submission_poll=0.02)
        task = asyncio.create_task(daemon.run())
        await asyncio.sleep(2.0)
        daemon.stop()
        await asyncio.wait_for(task, timeout=10)
        # Without backoff a 0.05 s interval gives ~40 ticks in 2 s; with it
        # (0.1, 0.2, 0.4, 0.8 s waits) about 5. The bound leaves room for a slow machine.
        assert 2 <= len(calls) <= 7, calls
        assert daemon.errors["scripted"] == len(calls)
        (failing,) = await app.repository.handler_errors(0.0)
        assert (failing.handler, failing.count, failing.last_error) == (
            "scripted",
            len(calls),
            "RuntimeError: plugin bug",
        )
        # The session was never charged for the handler's bug.
        (session,) = await app.repository.list_sessions()
        assert session.try_count == 0
    finally:
        await app.close()


@pytest.fixture
def seeded(database, monkeypatch, tmp_path):
    """A migrated database whose ticks recorded errors of handler ``broken-handler``."""

    async def seed() -> None:
        async with CoordinatorHarness(
            database_url=database.url, database_schema=database.schema
        ) as h:
            now = time.time()
            await h.repository.record_ticks(
                [
                    _error_tick("broken-handler", "KeyError: 'gpu'", now - 5),
                    _error_tick("broken-handler", "KeyError: 'gpu'", now - 1),
                    # An old error no longer makes the handler count as failing.
                    _error_tick("old-handler", "ValueError: x", now - 3600),
                    {"handler": "schedule-sessions", "started_at": now, "duration": 0.01,
                     "fetched": 1, "counts": {"SUCCESS": 1}},
                ]
            )  # fmt: skip

    asyncio.run(seed())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DROVER_DATABASE_URL", database.url)
    if database.schema:
        monkeypatch.setenv("DROVER_DATABASE_SCHEMA", database.schema)
    return database


def test_status_names_the_failing_handler(seeded):
    """`drover status` lists handlers whose execute() raised lately, text and JSON."""
    runner = CliRunner()
    result = runner.invoke(main, ["status", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [(e["handler"], e["errors"], e["last_error"]) for e in data["handler_errors"]] == [
        ("broken-handler", 2, "KeyError: 'gpu'")
    ]
    text = runner.invoke(main, ["status"], catch_exceptions=False).output
    assert "failing handlers" in text
    assert "broken-handler\t2\t" in text


def _client(database) -> TestClient:
    flags = {"database_url": database.url, "database_schema": database.schema or ""}
    app = App(load_config(None, environ={}, flags=flags))
    return TestClient(create_app(app, close_app_on_shutdown=True), base_url="http://127.0.0.1")


def test_healthz_is_degraded_naming_the_handler(seeded):
    """/healthz answers 200 "degraded: …" naming the failing handler while a daemon runs."""

    async def beat() -> None:
        from drover.kinds import BUILTIN_KINDS
        from drover.model.kinds import Kinds
        from drover.model.values import CoordinatorInfo
        from drover.storage import Repository, create_engine

        engine = create_engine(seeded.url, schema=seeded.schema)
        try:
            now = time.time()
            from datetime import UTC, datetime

            stamp = datetime.fromtimestamp(now, UTC)
            repo = Repository(engine, kinds=Kinds(BUILTIN_KINDS))
            await repo.register_coordinator(
                CoordinatorInfo("c1", "host", 1, stamp, stamp, "test", None)
            )
            await repo.close()
        finally:
            await engine.dispose()

    asyncio.run(beat())
    with _client(seeded) as client:
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.headers["x-drover-health"] == "degraded"
    assert response.text.startswith("degraded: handler broken-handler failed 2 time(s)")
    assert "KeyError: 'gpu'" in response.text
    assert "old-handler" not in response.text


def test_metrics_count_handler_errors(seeded):
    """/metrics has drover_handler_errors_total per handler."""
    with _client(seeded) as client:
        text = client.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    errors = {
        s.labels["handler"]: s.value
        for s in families["drover_handler_errors"].samples
        if s.name == "drover_handler_errors_total"
    }
    assert errors == {"broken-handler": 2, "old-handler": 1, "schedule-sessions": 0}
