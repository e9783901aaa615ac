"""Issue 24, points 3 and 6: bounded counts, prompt SIGTERM, and input refused in one line.

Every count a request can ask for has a configurable bound (``[limits]``),
checked where it enters; input outside the documented rules is one
``Error:`` line with nothing written, never a traceback. Each test runs on
SQLite and on PostgreSQL (the ``database`` fixture).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from drover.cli import main
from drover.config import LimitsConfig
from drover.kinds.deployments.status import EndpointLifecycle, RouteStatus
from drover.kinds.sessions.values import SessionStatus
from drover.testing import CoordinatorHarness

HUGE = "9223372036854775808"  # 2**63: past every 64-bit integer


@pytest.fixture
def harness(database):
    """Run ``await fn(h)`` on a harness over the test's database, in its own event loop."""

    def call(fn):
        async def go():
            async with CoordinatorHarness(
                database_url=database.url, database_schema=database.schema
            ) as h:
                return await fn(h)

        return asyncio.run(go())

    return call


@pytest.fixture
def cli(database, harness, monkeypatch, tmp_path):
    """Invoke `drover` against this test's (upgraded) database, in an empty directory."""
    harness(lambda h: asyncio.sleep(0))
    monkeypatch.chdir(tmp_path)
    for var in ("DROVER_CONFIG", "DROVER_LOG_FORMAT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DROVER_DATABASE_URL", database.url)
    monkeypatch.setenv("DROVER_DATABASE_SCHEMA", database.schema or "")
    runner = CliRunner()
    return lambda *args: runner.invoke(main, list(args), catch_exceptions=False)


def one_error_line(result, message: str) -> None:
    """Exit 1 with one ``Error:`` line (click's usage lines may stand above it)."""
    assert result.exit_code != 0, result.output
    lines = [line for line in result.output.strip().splitlines() if line]
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    assert all(line.startswith(("Usage: ", "Try ", "Error: ")) for line in lines), lines
    assert message in errors[0], errors[0]


def written(harness) -> tuple[int, int]:
    """(sessions, deployments) in the database."""

    async def count(h):
        sessions = await h.repository.list_sessions()
        deployments = await h.repository.list_entities("deployment", limit=None)
        return len(sessions), len(deployments)

    return harness(count)


# -- 3. every count has a bound ------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["deploy", "big", "--replicas", "9223372036854775807", "--", "true"],
            "spec['replicas'] must be a whole number from 0 to 1000 or null, got "
            "9223372036854775807 (limits.replicas)",
        ),
        (
            ["submit", "--kernels", HUGE, "--", "true"],
            f"{HUGE} kernels: a session may have at most 1000 (limits.kernels_per_session)",
        ),
        (
            ["submit", "--kernels", "1001", "--", "true"],
            "1001 kernels: a session may have at most 1000 (limits.kernels_per_session)",
        ),
        (["sessions", "--limit", HUGE], f"{HUGE} is not in the range"),
    ],
)
def test_a_count_past_its_bound_is_one_line_and_writes_nothing(cli, harness, args, message):
    """The issue's commands: refused at once (the CLI builds no list), nothing written."""
    started = time.monotonic()
    one_error_line(cli(*args), message)
    assert time.monotonic() - started < 30
    assert written(harness) == (0, 0)


def test_scale_past_the_bound_is_refused_and_keeps_the_replicas(cli, harness):
    """`drover scale NAME 2**63` (and one past the configured bound) changes nothing."""
    assert cli("deploy", "web", "--replicas", "2", "--", "true").exit_code == 0
    one_error_line(cli("scale", "web", HUGE), f"got {HUGE} (limits.replicas)")
    one_error_line(cli("scale", "web", "1001"), "from 0 to 1000 or null, got 1001")
    (dep,) = harness(lambda h: h.repository.list_entities("deployment", limit=None))
    assert dep.spec["replicas"] == 2
    assert cli("scale", "web", "1000").exit_code == 0


def test_the_bounds_come_from_the_configuration(cli, harness, tmp_path):
    """`[limits]` lowers (or raises) each bound, for flags and session files alike."""
    Path("drover.toml").write_text("[limits]\nkernels_per_session = 2\nreplicas = 3\n")
    one_error_line(cli("submit", "--kernels", "3", "--", "true"), "at most 2 (limits.kern")
    kernels = '[[kernels]]\ncommand = ["true"]\n' * 3
    (tmp_path / "s.toml").write_text(kernels)
    one_error_line(
        cli("submit", "--file", str(tmp_path / "s.toml")),
        "a new session may have at most 2 children, got 3 (limits.kernels_per_session)",
    )
    one_error_line(cli("deploy", "web", "--replicas", "4", "--", "true"), "from 0 to 3")
    assert written(harness) == (0, 0)
    assert cli("submit", "--kernels", "2", "--", "true").exit_code == 0
    assert cli("deploy", "web", "--replicas", "3", "--", "true").exit_code == 0
    assert written(harness) == (1, 1)


async def test_a_deployment_scales_up_a_bounded_number_of_routes_per_tick(make_harness):
    """creations_per_tick = 2: five replicas come 2, 2, 1 routes per tick; scaled, but with
    none healthy yet the deployment is DEGRADED, not READY (issue 35)."""
    limits = LimitsConfig(creations_per_tick=2)
    async with make_harness(limits=limits) as h:
        spec = {"replicas": 5, "kernel": {"command": ["true"]}, "health_path": "/"}
        dep = await h.create("deployment", status=EndpointLifecycle.SCALING, spec=spec, name="w")
        seen = []
        for _ in range(3):
            await h.tick("scaling-deployment")
            found = await h.get(dep)
            seen.append((found.status, len(found.children)))
        assert seen == [
            (EndpointLifecycle.SCALING, 2),
            (EndpointLifecycle.SCALING, 4),
            (EndpointLifecycle.DEGRADED, 5),
        ]
        assert found.status_info == "0 of 5 healthy"
        assert {c.status for c in found.children} == {RouteStatus.PROVISIONING}
        # Their replica sessions come the same way: 2, 2, 1 per provisioning tick.
        sessions = []
        for _ in range(3):
            report = await h.tick("provisioning-route")
            assert report.error is None, report.error
            sessions.append(len(await h.repository.list_sessions()))
        assert sessions == [2, 4, 5]


async def test_a_handler_creating_more_than_a_tick_may_is_an_invalid_result(make_harness):
    """The engine bounds every handler's creations: past the bound, its targets are skipped."""
    from drover.coordinator.handlers import LifecycleHandler
    from drover.model.values import HandlerResult, NewEntity, StatusTransitions, Transition
    from drover.plugins.markers import hookimpl

    class Spawner(LifecycleHandler):
        kind = "session"

        @classmethod
        def name(cls):
            return "spawner"

        @property
        def target_statuses(self):
            return frozenset({SessionStatus.PENDING})

        @classmethod
        def status_transitions(cls):
            return StatusTransitions(success=Transition(SessionStatus.SCHEDULED))

        async def execute(self, targets):
            news = [NewEntity("session", {}, by=t.id) for t in targets for _ in range(3)]
            return HandlerResult(successes=[t.id for t in targets], create=news)

    class Plugin:
        @hookimpl
        def drover_register_handlers(self, register):
            register(Spawner())

    limits = LimitsConfig(creations_per_tick=2)
    async with make_harness(plugins=[Plugin()], limits=limits) as h:
        (sid,) = await h.repository.create_sessions([{"kernels": []}])
        report = await h.tick("spawner")
        assert report.error is not None
        assert "limits.creations_per_tick = 2" in report.error
        assert [s.id for s in await h.repository.list_sessions()] == [sid]
        assert (await h.session(sid)).status == "PENDING"


_BUSY_PLUGIN = '''
import pathlib
import time

from drover.coordinator.handlers import LifecycleHandler
from drover.kinds.sessions.values import SessionStatus
from drover.model.values import StatusTransitions, Transition
from drover.plugins.markers import hookimpl


class Busy(LifecycleHandler):
    """Never gives the event loop back: a huge piece of work in one tick."""

    kind = "session"

    @classmethod
    def name(cls):
        return "busy"

    @property
    def target_statuses(self):
        return frozenset({SessionStatus.PENDING})

    @classmethod
    def status_transitions(cls):
        return StatusTransitions(success=Transition(SessionStatus.SCHEDULED))

    async def execute(self, targets):
        pathlib.Path("busy-started").write_text("yes")
        while True:
            time.sleep(0.001)


@hookimpl
def drover_register_handlers(register):
    register(Busy())
'''


def test_sigterm_stops_a_daemon_busy_in_a_tick_within_seconds(database, tmp_path, harness):
    """A daemon whose handler never yields still exits within shutdown_grace + 5 s of SIGTERM."""
    harness(lambda h: h.repository.create_sessions([{"kernels": []}]))
    site = tmp_path / "site"
    dist = site / "drover_busy-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: drover-busy\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[drover]\nbusy = drover_busy_mod\n")
    (site / "drover_busy_mod.py").write_text(_BUSY_PLUGIN)
    (tmp_path / "drover.toml").write_text(
        'shutdown_grace = 1\n[backend]\nname = "simulated"\n'
        '[[backend.agents]]\nid = "a"\ncpu = 1\nmem = 64\n'
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "DROVER_DATABASE_URL": database.url,
        "DROVER_DATABASE_SCHEMA": database.schema or "",
    }
    daemon = subprocess.Popen(
        [sys.executable, "-m", "drover", "run"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "busy-started").exists():
            assert daemon.poll() is None, daemon.stderr.read().decode()
            assert time.monotonic() < deadline, "the busy handler never ran"
            time.sleep(0.05)
        signalled = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        try:
            code = daemon.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pytest.fail("the daemon did not exit within 15 s of SIGTERM")
        assert time.monotonic() - signalled < 1 + 5 + 3
        assert code == 128 + signal.SIGTERM
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        daemon.stderr.close()


# -- 6. input that got a traceback or was silently accepted ---------------------------------

_DEEP = "a = " + "[" * 5000 + "]" * 5000 + "\n"
_AGENT = '[[backend.agents]]\nid = "a"\ncpu = 4\nmem = 4096\n'


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (_DEEP, "drover.toml: nested more than 32 levels deep"),
        ("a = " + "[" * 40 + "]" * 40 + "\n", "drover.toml: nested more than 32 levels deep"),
        ("claim_ttl = -5\n", "claim_ttl = -5.0 (from file drover.toml): must be a finite"),
        ("claim_ttl = 0\n", "claim_ttl = 0.0 (from file drover.toml)"),
        ("claim_ttl = nan\n", "claim_ttl = nan (from file drover.toml)"),
        ("max_requeues = -2\n", "max_requeues = -2 (from file drover.toml): must be a whole"),
        ("max_requeues = 1e30\n", "max_requeues: invalid value for type, expected int, got 1e+30"),
        ("max_requeues = 2.5\n", "max_requeues: invalid value for type, expected int, got 2.5"),
        ("[handlers.start-sessions]\ntimeout = -1\n", "handlers.start-sessions.timeout = -1.0"),
        ("[handlers.start-sessions]\nmax_retries = -7\n", "handlers.start-sessions.max_retries"),
        ("[handlers.start-sessions]\nmax_retries = 1e30\n", "got 1e+30 (from file drover.toml)"),
        ("[handlers.start-sessions]\nbatch_size = 0\n", "handlers.start-sessions.batch_size = 0"),
        ("[budgets.deployment]\nreplacements = -1\n", "budgets.deployment.replacements = -1"),
        ('[plugins]\nload = "abc"\n', "plugins.load: invalid value for type, expected list[str]"),
        ('[plugins]\nblock = "abc"\n', "plugins.block: invalid value for type"),
        (_AGENT + _AGENT, "backend.agents (from file drover.toml): the id 'a' twice"),
        ("[limits]\nreplicas = 0\n", "limits.replicas = 0 (from file drover.toml): must be a"),
        ("[limits]\nkernels_per_session = -1\n", "limits.kernels_per_session = -1"),
        ("[limits]\ncreations_per_tick = 1e3\n", "limits.creations_per_tick: invalid value"),
    ],
)
def test_a_configuration_outside_the_rules_is_one_line_and_writes_nothing(
    cli, harness, toml, message
):
    """Each value the campaign found accepted (or a traceback): refused, naming key and file."""
    Path("drover.toml").write_text(toml)
    one_error_line(cli("submit", "--", "true"), message)
    assert written(harness) == (0, 0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_DEEP, "s.toml: nested more than 32 levels deep"),
        (
            '[[kernels]]\ncommand = ["true"]\nenv = { A = 1 }\n',
            "kernel 1: env A must be text, got 1",
        ),
        (
            '[[kernels]]\ncommand = ["true"]\nenv = ["A=1"]\n',
            "kernel 1: 'env' must be a table of NAME = \"value\", got list",
        ),
        (
            '[[kernels]]\ncommand = ["true"]\nenv = { "A=B" = "1" }\n',
            "kernel 1: env name 'A=B' must be non-empty text without '='",
        ),
        (
            '[[kernels]]\ncommand = ["true"]\nenv = { "" = "1" }\n',
            "kernel 1: env name '' must be non-empty text without '='",
        ),
        ('[[kernels]]\ncommand = [""]\n', "kernel 1: 'command' must start with a program to run"),
        ('[[kernels]]\ncommand = ["true"]\nsetup = 3\n', "kernel 1: 'setup' must be a shell"),
        ('[spec]\nmax_requeues = 1e30\n[[kernels]]\ncommand = ["true"]\n', "got 1e+30"),
        (
            '[spec.budgets]\nx = -1\n[[kernels]]\ncommand = ["true"]\n',
            "spec['budgets'] names 'x', which is not a budget",
        ),
    ],
)
def test_a_session_file_outside_the_rules_is_one_line_and_writes_nothing(
    cli, harness, tmp_path, text, message
):
    """Nested TOML, env values that are not text, an empty program: refused at submit."""
    (tmp_path / "s.toml").write_text(text)
    one_error_line(cli("submit", "--file", str(tmp_path / "s.toml")), message)
    assert written(harness) == (0, 0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["submit", "--", ""], "kernel 1: 'command' must start with a program to run, got ''"),
        (["submit", "--", " ", "x"], "kernel 1: 'command' must start with a program to run"),
        (["submit", "--max-requeues", HUGE, "--", "true"], "is not in the range 0<=x<=2147483647"),
        (["deploy", "", "--", "true"], "Invalid value for NAME: a deployment needs a name"),
        (["deploy", "  ", "--", "true"], "a deployment needs a name"),
        (["deploy", "w", "--", ""], "kernel 1: 'command' must start with a program to run"),
        (["deploy", "w", "--max-replacements", HUGE, "--", "true"], "0<=x<=2147483647"),
        (["history", "--limit", HUGE], "is not in the range 1<=x<=2147483647"),
    ],
)
def test_flags_outside_the_rules_are_one_line_and_write_nothing(cli, harness, args, message):
    """`submit -- ""` is refused at once (it used to fail a second later as a supervisor
    that never started), an empty deployment name is refused, counts stay in range."""
    one_error_line(cli(*args), message)
    assert written(harness) == (0, 0)
