"""`drover status` and /healthz say which handlers the running daemon loaded (issue 22)."""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner
from daemon_helpers import running_daemon
from starlette.testclient import TestClient

from drover.app import App
from drover.cli import main
from drover.config import load_config
from drover.web import create_app


async def test_status_and_healthz_list_the_handlers_the_daemon_runs(database, tmp_path):
    """The example plugin's handler shows once the daemon loaded it; a disabled one does not."""
    flags = {"handlers.detect-start-failure.enabled": False}
    env = {"DROVER_DATABASE_URL": database.url, "DROVER_DATABASE_SCHEMA": database.schema or ""}
    async with running_daemon(database, tmp_path / "data", **flags) as (_app, daemon):
        assert "enforce-max-duration" in daemon.names  # the example plugin, installed by make venv
        result = await asyncio.to_thread(
            CliRunner().invoke, main, ["status", "--json"], env=env, catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
        (coordinator,) = json.loads(result.stdout)["coordinators"]
        assert coordinator["handlers"] == daemon.names
        assert "schedule-sessions" in coordinator["handlers"]
        assert "enforce-max-duration" in coordinator["handlers"]
        assert "detect-start-failure" not in coordinator["handlers"]

        text = await asyncio.to_thread(
            CliRunner().invoke, main, ["status"], env=env, catch_exceptions=False
        )
        assert f"{daemon.id}\t{' '.join(daemon.names)}" in text.stdout

        def healthz() -> str:
            loaded = load_config(
                None,
                environ={},
                flags={"database_url": database.url, "database_schema": database.schema or ""},
            )
            web = create_app(App(loaded), close_app_on_shutdown=True)
            with TestClient(web, base_url="http://127.0.0.1:8080") as client:
                response = client.get("/healthz")
                assert response.status_code == 200, response.text
                return response.text

        line = await asyncio.to_thread(healthz)
        assert f"{len(daemon.names)} handler(s) running: " in line
        assert ", enforce-max-duration, " in line or line.rstrip().endswith("enforce-max-duration")
        assert "detect-start-failure" not in line
