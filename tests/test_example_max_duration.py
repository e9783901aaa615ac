"""End to end: the installed example plugin stops a long ``sleep`` after its max_duration.

The real daemon, the local backend and a real process, on both databases. The
plugin is found the way an operator's would be: through its installed entry
point (group ``drover``), loaded by ``drover.app.App``. ``make venv`` installs
it; if it is missing, this test fails rather than skips, so a broken install
cannot pass CI unnoticed.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
from daemon_helpers import process_alive, running_daemon, wait_for

from drover import SchedulingResult, SessionStatus

S = SessionStatus
HANDLER = "enforce-max-duration"


def _require_installed_example() -> None:
    if not metadata.entry_points(group="drover", name="max-duration"):
        pytest.fail(
            "the example plugin examples/drover-max-duration is not installed in this "
            "environment (no entry point 'max-duration' in the group 'drover'); install it "
            "with `pip install -e ./examples/drover-max-duration` (`make venv` does)",
            pytrace=False,
        )


async def test_a_long_sleep_is_stopped_after_its_max_duration(database, tmp_path: Path):
    """`sleep 300` with max_duration=1: TERMINATED about 1 s after RUNNING, process gone."""
    _require_installed_example()
    # A short interval so that the stop comes ~1 s after RUNNING, not up to 2 s later.
    fast = {f"handlers.{HANDLER}.interval": 0.2}
    async with running_daemon(database, tmp_path / "data", **fast) as (app, _daemon):
        loaded = {(e.plugin, type(e.handler).name()) for e in app.registered}
        assert ("max-duration", HANDLER) in loaded, f"plugin not loaded by App: {loaded}"

        (sid,) = await app.repository.create_sessions(
            [
                {
                    "kernels": [{"command": ["sleep", "300"], "cpu": 1, "mem": 64}],
                    "spec": {"max_duration": 1},
                }
            ]
        )

        async def running():
            s = await app.repository.get_session(sid)
            return s if s.status == S.RUNNING else None

        pid = (await wait_for(running, what="RUNNING")).kernels[0].runtime["pid"]
        assert process_alive(pid)

        async def terminated():
            s = await app.repository.get_session(sid)
            return s if s.status == S.TERMINATED else None

        s = await wait_for(terminated, timeout=30, what="TERMINATED")
        assert s.status_info == "MAX_DURATION_EXCEEDED"
        assert s.result == "FAILURE"  # the kernel was stopped, it did not exit 0 by itself

        async def gone():
            return not process_alive(pid)

        await wait_for(gone, what=f"pid {pid} to exit")

        rows = await app.repository.history(sid)
        started = next(r for r in rows if r.to_status == S.RUNNING and r.from_status != S.RUNNING)
        (stop,) = [r for r in rows if r.handler == HANDLER]
        assert (stop.result, stop.from_status, stop.to_status) == (
            SchedulingResult.SUCCESS,
            S.RUNNING,
            S.TERMINATING,
        )
        # Stopped after its max duration, and not long after: "about 1 s".
        ran_for = (stop.created_at - started.created_at).total_seconds()
        assert 1.0 < ran_for < 10.0, ran_for
