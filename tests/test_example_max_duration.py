"""examples/drover-max-duration: end to end with the real daemon, and its tutorial.

The end-to-end test: the installed example plugin stops a long ``sleep``
after its max_duration.

The real daemon, the local backend and a real process, on both databases. The
plugin is found the way an operator's would be: through its installed entry
point (group ``drover``), loaded by ``drover.app.App``. ``make venv`` installs
it; if it is missing, this test fails rather than skips, so a broken install
cannot pass CI unnoticed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
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
        loaded = {(e.plugin, e.name) for e in app.registered}
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


def test_the_tutorial_code_passes_its_own_tests(tmp_path: Path):
    """docs/plugins/tutorial.md's handler and tests, pasted into a package, pass as written.

    Keeps the tutorial from drifting away from drover's API. The copy is put
    first on PYTHONPATH, so it shadows the installed example of the same name.
    """
    tutorial = Path(__file__).parent.parent / "docs" / "plugins" / "tutorial.md"
    blocks = re.findall(r"```python\n(.*?)```", tutorial.read_text(), re.S)
    assert len(blocks) == 2, "the tutorial should have two python blocks: handler, tests"
    handler, tests = blocks
    package = tmp_path / "src" / "drover_max_duration"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(handler)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_max_duration.py").write_text(tests)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nasyncio_mode = "auto"\n'
        'asyncio_default_fixture_loop_scope = "function"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "src")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout, done.stdout
    # ...and it was the tutorial's copy that was tested, not the installed example.
    probe = subprocess.run(
        [sys.executable, "-c", "import drover_max_duration as m; print(m.__file__)"],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "src")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.stdout.strip() == str(package / "__init__.py"), probe.stdout + probe.stderr
