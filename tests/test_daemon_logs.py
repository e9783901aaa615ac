"""What the daemon logs: changes, not repetition, and a start-up line saying what it runs on."""

from __future__ import annotations

import io
import json
import logging

from daemon_helpers import running_daemon, wait_for

from drover.logs import setup_logging
from drover.model.status import SchedulingResult as R


async def test_a_session_that_stays_pending_is_logged_once_not_every_tick(
    database, tmp_path, caplog
):
    """cpu=64 on a 4-cpu agent: SKIPPED every tick with the same reason, one INFO line."""
    caplog.set_level(logging.INFO, logger="drover")
    flags = {"handlers.schedule-sessions.interval": 0.1}
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        (sid,) = await app.repository.create_sessions(
            [{"kernels": [{"command": ["true"], "cpu": 64, "mem": 64}]}]
        )

        async def skipped_often():
            rows = await app.repository.history(sid)
            return rows and rows[-1].result == R.SKIPPED and rows[-1].attempts >= 5

        await wait_for(skipped_often, what="five SKIPPED ticks of the pending session")
    ticks = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tick ")]
    scheduler = [m for m in ticks if m.startswith("tick schedule-sessions ")]
    assert len(scheduler) == 1, ticks
    assert "SKIPPED=1" in scheduler[0]


async def test_the_start_up_line_names_database_backend_capacity_and_data_dir(
    database, tmp_path, caplog
):
    """One INFO line an operator can check the daemon's set-up against."""
    caplog.set_level(logging.INFO, logger="drover")
    data = tmp_path / "data"
    async with running_daemon(database, data):
        pass
    (line,) = [r for r in caplog.records if r.getMessage().startswith("drover ")]
    message = line.getMessage()
    assert f"database {database.url.split('://')[0]}://" in message
    assert "backend local with 1 agent(s) (test-agent), cpu=4 mem=4096" in message
    assert f"data dir {data.resolve()}" in message
    assert line.agents == {"test-agent": {"cpu": 4, "mem": 4096}}  # type: ignore[attr-defined]
    if "@" in database.url:  # PostgreSQL: a password is never logged
        assert ":***@" in message or "postgres@" in message


def test_the_http_client_logs_only_warnings_once_logging_is_set_up():
    """httpx2 logs every request (every health check) at INFO: drover keeps it at WARNING."""
    try:
        setup_logging("text", "DEBUG")
        for name in ("httpx2", "httpcore2.connection"):
            assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
        assert logging.getLogger("drover.daemon").isEnabledFor(logging.DEBUG)
    finally:
        logging.getLogger().handlers.clear()
        logging.getLogger().setLevel(logging.WARNING)


def test_json_lines_come_from_python_json_logger():
    """ts, level, logger, message, the extra fields, and a traceback as `exception`."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    from drover.logs import json_formatter

    handler.setFormatter(json_formatter())
    log = logging.getLogger("drover.test-json")
    log.addHandler(handler)
    try:
        log.warning("tick %s", "x", extra={"handler": "x", "counts": {"SUCCESS": 1}})
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["level"] == "WARNING"
    assert first["logger"] == "drover.test-json"
    assert first["message"] == "tick x"
    assert (first["handler"], first["counts"]) == ("x", {"SUCCESS": 1})
    assert first["ts"].endswith("+00:00")
    assert "ValueError: boom" in second["exception"]
