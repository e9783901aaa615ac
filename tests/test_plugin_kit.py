"""The plugin kit: the other hooks, observers, whole-graph checks and `drover plugins`."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import asyncpg
import click
import pytest
from click.testing import CliRunner
from scripted import ScriptedPlugin

from drover import (
    DeclaredHandler,
    Field,
    HandlerOptions,
    HandlerResult,
    SchedulingResult,
    SessionStatus,
    StatusTransitions,
    TransitionStatus,
    hookimpl,
    make_plugin_manager,
)
from drover.app import App, UnknownBackendError
from drover.backends.simulated import SimulatedBackend
from drover.cli.group import _add_plugin_commands
from drover.cli.group import main as cli_main
from drover.config import load_config
from drover.coordinator.observers import HistoryEvent, ObserverDispatcher
from drover.kinds import BUILTIN_PLUGINS, short_name
from drover.kinds.sessions import SESSION
from drover.plugins.graph import check_graph, edges_of
from drover.storage.scratch import asyncpg_dsn
from drover.testing import CoordinatorHarness, database_kinds, fresh_database
from drover.testing.databases import pg_url

S = SessionStatus


class Recorder:
    """An observer that keeps what it is given."""

    def __init__(self) -> None:
        self.batches: list[list[HistoryEvent]] = []

    async def on_history(self, records):
        self.batches.append(list(records))


async def test_observers_receive_each_committed_ticks_history():
    """An observer registered by a plugin sees every outcome of every tick."""
    recorder = Recorder()

    class ObserverPlugin:
        @hookimpl
        def drover_register_observers(self, register):
            register(recorder)

    scripted = ScriptedPlugin()
    async with CoordinatorHarness(
        plugins=[scripted, ObserverPlugin()], include_builtin_handlers=False
    ) as h:
        sid = await h.create_session()
        scripted.handler.script = lambda t: HandlerResult(successes=[sid])
        await h.tick("scripted")
        (batch,) = recorder.batches
        (event,) = batch
        assert (event.handler, event.session_id, event.result) == (
            "scripted",
            sid,
            SchedulingResult.SUCCESS,
        )
        assert (event.from_status, event.to_status) == (S.PENDING, S.SCHEDULED)
        await h.tick("scripted")  # nothing to do: no records, no call
        assert len(recorder.batches) == 1


def _event(i: int) -> HistoryEvent:
    from datetime import UTC, datetime

    return HistoryEvent(
        "h", f"s{i}", SchedulingResult.SUCCESS, S.PENDING, S.SCHEDULED, None, None,
        datetime.now(UTC), kind="session",
    )  # fmt: skip


async def test_a_slow_observer_never_blocks_and_overflow_drops_the_oldest(caplog):
    """publish() returns at once; a full queue drops the oldest records, counted and logged."""
    release = asyncio.Event()
    seen: list[str] = []

    class Slow:
        async def on_history(self, records):
            await release.wait()
            seen.extend(r.session_id for r in records)

    dispatcher = ObserverDispatcher([("slow-plugin", Slow())], capacity=3, batch=10, timeout=30)
    dispatcher.start()
    dispatcher.publish([_event(0)])
    await asyncio.sleep(0.01)  # the worker takes s0 and blocks in on_history
    started = time.perf_counter()
    with caplog.at_level(logging.WARNING):
        for i in range(1, 8):
            dispatcher.publish([_event(i)])
    assert time.perf_counter() - started < 0.05  # never waits for the observer
    assert dispatcher.dropped == {"slow-plugin": 4}
    assert "observer slow-plugin is too slow: dropped 1 oldest record(s) (4 so far)" in caplog.text
    release.set()
    await dispatcher.drain()
    assert seen == ["s0", "s5", "s6", "s7"]
    await dispatcher.close()


async def test_failing_and_hanging_observers_are_logged_and_counted(caplog):
    """Exceptions and timeouts are logged; the next records are still delivered."""
    calls: list[int] = []

    class Flaky:
        async def on_history(self, records):
            calls.append(len(records))
            if len(calls) == 1:
                raise RuntimeError("webhook down")
            if len(calls) == 2:
                await asyncio.sleep(10)

    dispatcher = ObserverDispatcher([("flaky", Flaky())], timeout=0.05)
    dispatcher.start()
    for i in range(3):
        dispatcher.publish([_event(i)])
        await dispatcher.drain()
    assert calls == [1, 1, 1]
    assert dispatcher.failures == {"flaky": 2}
    assert "observer flaky failed" in caplog.text
    assert "observer flaky did not return within 0.05s" in caplog.text
    await dispatcher.close()


async def test_registering_something_that_is_not_an_observer_is_refused():
    """register(obj) needs `async def on_history(records)`."""

    class Bad:
        @hookimpl
        def drover_register_observers(self, register):
            register(object())

    with pytest.raises(TypeError, match="has no `async def on_history"):
        async with CoordinatorHarness(plugins=[Bad()]):
            pass


class FakeBackend(SimulatedBackend):
    """A backend contributed by a plugin."""


class BackendPlugin:
    @hookimpl
    def drover_register_backends(self, register):
        register("fake", lambda config: FakeBackend(run_for=config.backend.settings.get("run")))


def test_a_plugin_backend_is_chosen_by_name(tmp_path):
    """backend.name selects a registered backend; its factory gets [backend.settings]."""
    flags = {
        "database_url": f"sqlite+aiosqlite:///{tmp_path}/x.db",
        "backend.name": "fake",
        "backend.settings": {"run": 7},
    }
    app = App(load_config(None, environ={}, flags=flags))
    app.plugin_manager.register(BackendPlugin(), name="fake-backend-plugin")
    assert isinstance(app.backend, FakeBackend)
    assert app.backend.run_for == 7
    asyncio.run(app.close())


def test_an_unknown_backend_names_the_registered_ones(tmp_path):
    """A typo in backend.name is one clear error."""
    flags = {"database_url": f"sqlite+aiosqlite:///{tmp_path}/x.db", "backend.name": "lcoal"}
    app = App(load_config(None, environ={}, flags=flags))
    with pytest.raises(
        UnknownBackendError, match=r"no such backend; registered: \['container', 'local', "
    ):
        _ = app.backend
    asyncio.run(app.close())


def test_plugins_add_cli_commands():
    """drover_register_commands(cli) adds click commands to `drover`."""

    @click.command("hello-report")
    def hello_report() -> None:
        """Example: drover hello-report"""
        click.echo("hello from a plugin command")

    class CommandPlugin:
        @hookimpl
        def drover_register_commands(self, cli):
            cli.add_command(hello_report)

    group = click.Group("drover")
    pm = make_plugin_manager(plugins=[CommandPlugin()], include_builtins=False)
    _add_plugin_commands(group, pm=pm)
    result = CliRunner().invoke(group, ["hello-report"])
    assert result.output == "hello from a plugin command\n"


def test_a_broken_plugin_does_not_take_the_cli_down():
    """A plugin whose command hook raises gives one warning line; the CLI still works.

    drover's own commands (from its kind packages) are added first, whatever follows.
    """

    class Broken:
        @hookimpl
        def drover_register_commands(self, cli):
            raise RuntimeError("boom")

    group = click.Group("drover")
    pm = make_plugin_manager(plugins=[Broken()], include_builtins=False)
    _add_plugin_commands(group, pm=pm)  # no exception
    assert set(group.commands) == {
        # The session lifecycle's commands, then the deployments'.
        *("submit", "sessions", "logs"),
        *("deploy", "deployments", "scale", "destroy", "routes"),
    }


def _builtins_without(*names: str) -> list[object]:
    return [p for n, p in BUILTIN_PLUGINS if short_name(n) not in names]


async def test_the_builtin_graph_has_no_warnings():
    """The built-in lifecycle is sound: every live status targeted, reachable and exitable."""
    async with CoordinatorHarness() as h:
        assert check_graph(h.handlers, SESSION) == []


async def test_graph_warnings_for_an_incomplete_set():
    """Without the termination handlers, TERMINATING is a dead end nobody targets."""
    plugins = _builtins_without("terminate-sessions", "promote-to-terminated")
    async with CoordinatorHarness(plugins=plugins, include_builtin_handlers=False) as h:
        warnings = {(w.kind, w.status) for w in check_graph(h.handlers, SESSION)}
    assert ("untargeted", S.TERMINATING) in warnings
    assert ("no-exit", S.TERMINATING) in warnings
    assert ("no-exit", S.RUNNING) in warnings  # RUNNING only leads to TERMINATING


async def test_graph_warnings_for_an_extra_plugin_handler():
    """A plugin promoting into a status nothing else handles is flagged."""
    from drover import KernelMatchType, KernelStatus, SessionPromotionHandler

    class ToError(SessionPromotionHandler):
        @classmethod
        def name(cls):
            return "park-in-preparing"

        @property
        def target_session_statuses(self):
            return frozenset({S.RUNNING})

        @property
        def check_kernel_statuses(self):
            return frozenset({KernelStatus.ERROR})

        @property
        def match_type(self):
            return KernelMatchType.ALL

        @classmethod
        def success_session_status(cls):
            return S.PREPARING

    class Plugin:
        @hookimpl
        def drover_register_handlers(self, register):
            register(ToError())

    plugins = [*_builtins_without("prepare-sessions", "promote-to-prepared"), Plugin()]
    async with CoordinatorHarness(plugins=plugins, include_builtin_handlers=False) as h:
        kinds = {(w.kind, w.status) for w in check_graph(h.handlers, SESSION)}
        edges = {
            (e.source, e.target, e.handler, e.outcome) for e in edges_of(h.handlers, kind=SESSION)
        }
    # The plugin's edge is part of the graph...
    assert (S.RUNNING, S.PREPARING, "park-in-preparing", "promotion") in edges
    # ...and with nothing promoting PREPARING sessions, PREPARED cannot be reached.
    assert kinds == {("unreachable", S.PREPARED)}


async def test_a_need_retry_that_moves_the_status_is_flagged():
    """Moving the status on every retry resets the handler's tries: max_retries never fires."""
    from scripted import ScriptedPlugin

    from drover import StatusTransitions, TransitionStatus

    plugin = ScriptedPlugin(
        transitions=StatusTransitions(
            success=TransitionStatus(S.SCHEDULED), need_retry=TransitionStatus(S.SCHEDULED)
        )
    )
    async with CoordinatorHarness(plugins=[plugin]) as h:
        warnings = [w for w in check_graph(h.handlers, SESSION) if w.kind == "retry-moves"]
    assert [(w.status, w.message) for w in warnings] == [
        (
            S.PENDING,
            "handler scripted: need_retry moves PENDING to SCHEDULED, which resets its tries "
            "on every retry, so max_retries can never give up",
        )
    ]


async def test_hooks_are_called_through_pluggy_by_keyword():
    """A hook wrapper sees drover_register_handlers(register=...), and attribution still works."""
    seen: list[str] = []

    class Wrapper:
        @hookimpl(wrapper=True)
        def drover_register_handlers(self, register):
            seen.append(type(register).__name__)
            return (yield)

    async with CoordinatorHarness(plugins=[Wrapper()]) as h:
        owners = {e.name: e.plugin for e in h.registered}
    assert seen == ["Registry"]
    assert owners["schedule-sessions"] == "drover.kinds.sessions.schedule-sessions"
    assert owners["detect-termination"] == "drover.kinds.sessions.detect-termination"


def test_drover_trace_plugins_prints_pluggys_hook_calls(tmp_path):
    """DROVER_TRACE_PLUGINS=1 turns on pluggy's tracing of every hook call."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "DROVER_TRACE_PLUGINS": "1", "DROVER_LOAD_PLUGINS": ""}
    done = subprocess.run(
        [sys.executable, "-m", "drover", "plugins", "check"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "drover_register_handlers" in done.stderr
    assert "register: <drover.plugins.registry.Registry" in done.stderr


def _cli(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli_main, list(args), env=env or {}, catch_exceptions=False)


def test_plugins_lists_builtins_only_with_all(tmp_path, monkeypatch):
    """`drover plugins --all --json` shows each plugin, its hooks and its handlers."""
    monkeypatch.chdir(tmp_path)
    env = {"DROVER_LOAD_PLUGINS": ""}  # built-ins only, whatever is installed
    assert json.loads(_cli("plugins", "--json", env=env).output) == []
    rows = {r["name"]: r for r in json.loads(_cli("plugins", "--all", "--json", env=env).output)}
    schedule = rows["drover.kinds.sessions.schedule-sessions"]
    assert schedule["builtin"] is True
    assert schedule["hooks"] == ["drover_register_handlers"]
    assert schedule["handlers"] == [
        {"name": "schedule-sessions", "kind": "lifecycle", "targets": ["PENDING"]}
    ]
    assert rows["drover.backends"]["backends"] == ["container", "local", "simulated", "slurm"]
    text = _cli("plugins", env=env).output
    assert "no plugins installed" in text


def test_plugins_check_warns_and_strict_fails(tmp_path, monkeypatch):
    """Blocking the termination handlers leaves warnings; --strict turns them into exit 1."""
    monkeypatch.chdir(tmp_path)
    ok = _cli("plugins", "check", env={"DROVER_LOAD_PLUGINS": ""})
    assert ok.exit_code == 0
    assert "handlers loaded; 0 warning(s)" in ok.output  # the built-ins: sessions, deployments
    env = {
        "DROVER_LOAD_PLUGINS": "",
        "DROVER_DISABLE_PLUGINS": "terminate-sessions,promote-to-terminated",
    }
    lax = _cli("plugins", "check", env=env)
    assert lax.exit_code == 0
    assert "warning: [session: untargeted] no handler targets TERMINATING" in lax.output
    strict = _cli("plugins", "check", "--strict", "--json", env=env)
    assert strict.exit_code == 1
    data = json.loads(strict.output)
    assert data["errors"] == []
    assert {"kind": "untargeted", "status": "TERMINATING"}.items() <= data["warnings"][0].items()


def test_plugins_check_reports_errors_and_exits_1(tmp_path, monkeypatch):
    """A configuration error (an unknown backend) is an error of the check."""
    monkeypatch.chdir(tmp_path)
    result = _cli("plugins", "check", env={"DROVER_LOAD_PLUGINS": "", "DROVER_BACKEND": "nope"})
    assert result.exit_code == 1
    assert "error: backend.name = 'nope'" in result.output


def test_the_example_plugin_is_listed_when_installed(tmp_path, monkeypatch):
    """The example package in examples/ is installed by the project and shows up."""
    monkeypatch.chdir(tmp_path)
    rows = json.loads(_cli("plugins", "--json").output)
    (row,) = [r for r in rows if r["name"] == "max-duration"]
    assert (row["distribution"], row["builtin"]) == ("drover-max-duration", False)
    assert [h["name"] for h in row["handlers"]] == ["enforce-max-duration"]
    blocked = json.loads(
        _cli("plugins", "--json", env={"DROVER_DISABLE_PLUGINS": "max-duration"}).output
    )
    assert "max-duration" not in [r["name"] for r in blocked]  # other packs stay


# -- drover_database: the two-database fixture for plugin authors ------------------------------


async def _pg_tables(schema: str) -> int | None:
    """How many tables ``schema`` holds, or ``None`` when it does not exist."""
    conn = await asyncpg.connect(asyncpg_dsn(pg_url()))
    try:
        exists = await conn.fetchval(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1", schema
        )
        if not exists:
            return None
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1", schema
            )
        )
    finally:
        await conn.close()


async def test_drover_database_gives_the_harness_a_fresh_database(
    drover_harness, drover_database, tmp_path
):
    """Asking for both fixtures puts the harness on that database: drover's tables are
    created there (a new PostgreSQL schema, or the test's own SQLite file)."""
    sid = await drover_harness.create_session(kernels=[{"cpu": 1}])
    assert (await drover_harness.session(sid)).id == sid
    if drover_database.kind == "sqlite":
        assert drover_database.schema is None
        assert drover_database.url == f"sqlite+aiosqlite:///{tmp_path}/drover.db"
        assert (tmp_path / "drover.db").stat().st_size > 0
    else:
        assert drover_database.url == pg_url()
        assert await _pg_tables(drover_database.schema) > 0


@pytest.mark.parametrize("kind", database_kinds())
async def test_fresh_database_is_new_and_its_schema_is_dropped_afterwards(kind, tmp_path):
    """The helper behind drover_database: SQLite starts with no file; a PostgreSQL schema
    exists, empty, inside and is gone (with what was written there) afterwards."""
    async with fresh_database(kind, tmp_path, prefix="kit") as db:
        assert db.kind == kind
        if kind == "sqlite":
            assert not (tmp_path / "drover.db").exists()
        else:
            assert db.schema.startswith("kit_")
            assert await _pg_tables(db.schema) == 0
            async with CoordinatorHarness(database_url=db.url, database_schema=db.schema):
                pass
            assert await _pg_tables(db.schema) > 0
    if kind == "postgresql":
        assert await _pg_tables(db.schema) is None


async def test_fresh_database_refuses_an_unknown_kind(tmp_path):
    with pytest.raises(ValueError, match="unknown database kind 'mysql'; known: sqlite"):
        async with fresh_database("mysql", tmp_path):
            pass


# -- DeclaredHandler: a handler declared in class attributes ------------------------------------


class FinishDone(DeclaredHandler):
    """RUNNING sessions whose spec says ``done``: TERMINATING."""

    handler = "finish-done"
    statuses = frozenset({S.RUNNING})
    filters = (Field("spec", ("done",), "eq", True),)
    transitions = StatusTransitions(
        success=TransitionStatus(session=S.TERMINATING),
        need_retry=None,
        expired=None,
        give_up=None,
    )
    options = HandlerOptions(max_retries=None, timeout=None, batch_size=7)

    async def execute(self, targets):
        return HandlerResult(successes=[t.id for t in targets])


class DeclaredPlugin:
    @hookimpl
    def drover_register_handlers(self, register):
        register(FinishDone())


@pytest.mark.drover(plugins=[DeclaredPlugin()], builtins=False, entrypoints=False)
async def test_a_declared_handler_runs_from_its_class_attributes(drover_harness, drover_database):
    """The name, statuses, filters, transitions and options come from the class attributes:
    the filter is compiled into the fetch, success takes the declared move."""
    assert list(drover_harness.handlers) == ["finish-done"]
    handler = drover_harness.handlers["finish-done"]
    assert handler.target_statuses == {S.RUNNING}
    assert handler.status_transitions() is FinishDone.transitions
    options = drover_harness.coordinator.options("finish-done")
    assert (options.batch_size, options.max_retries, options.timeout) == (7, None, None)
    done = await drover_harness.create_session(status=S.RUNNING, spec={"done": True})
    busy = await drover_harness.create_session(status=S.RUNNING, spec={"done": False})
    report = await drover_harness.tick("finish-done")
    assert report.fetched == 1
    assert report.count(SchedulingResult.SUCCESS) == 1
    assert (await drover_harness.session(done)).status == S.TERMINATING
    assert (await drover_harness.session(busy)).status == S.RUNNING
    rows = await drover_harness.history(done)
    assert (rows[-1].handler, rows[-1].from_status, rows[-1].to_status) == (
        "finish-done",
        S.RUNNING,
        S.TERMINATING,
    )


def test_a_declared_handler_without_a_name_cannot_say_it():
    class Nameless(DeclaredHandler):
        async def execute(self, targets):
            return HandlerResult()

    with pytest.raises(AttributeError, match="handler"):
        Nameless.name()
