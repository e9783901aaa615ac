"""The command line starts fast: --help, --version and sessions import only what they use.

Timing is measured by bench/cli_startup.py; these tests check the cause of a
slow start, which does not depend on the machine's load: which heavy
libraries a command imports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: Libraries that cost tens of milliseconds each to import.
HEAVY = ("sqlalchemy", "alembic", "starlette", "uvicorn", "jinja2", "httpx2", "rich", "cattrs")

_PROBE = """
import json, sys
from drover.cli.group import main
try:
    main(sys.argv[1:], prog_name="drover")
except SystemExit:
    pass
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(%r)))
print("HEAVY=" + json.dumps(heavy))
"""


def _imports(args: list[str], cwd: Path) -> tuple[list[str], str]:
    env = {**os.environ, "DROVER_DATABASE_URL": f"sqlite+aiosqlite:///{cwd}/drover.db"}
    env.pop("DROVER_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE % json.dumps(HEAVY), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith("HEAVY="))
    return json.loads(line.removeprefix("HEAVY=")), done.stdout + done.stderr


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["sessions", "--help"]])
def test_help_and_version_import_no_heavy_library(tmp_path, args):
    """``drover --help`` lists every command without importing SQLAlchemy, Alembic or the web."""
    heavy, output = _imports(args, tmp_path)
    assert heavy == [], output
    if args == ["--help"]:
        # drover's own commands and those its kind packages add through the plugin hook.
        for command in ("run", "status", "submit", "sessions", "deploy", "deployments", "why"):
            assert f"  {command} " in output, output


def test_sessions_imports_no_alembic_and_no_web(tmp_path):
    """``drover sessions`` reads the database; it needs neither Alembic nor the dashboard."""
    from click.testing import CliRunner

    from drover.cli import main

    url = f"sqlite+aiosqlite:///{tmp_path}/drover.db"
    assert CliRunner().invoke(main, ["--database", url, "db", "upgrade"]).exit_code == 0
    heavy, output = _imports(["sessions"], tmp_path)
    assert "id\tname\tstatus" in output
    assert not {"alembic", "starlette", "uvicorn", "jinja2"} & set(heavy), output


def test_importing_drover_and_reading_its_names_imports_no_heavy_library():
    """``import drover``, ``drover.__all__`` and what a plugin module imports from it
    (kinds, handlers, hookimpl) cost no heavy library: each name loads on first use."""
    probe = (
        "import json, sys, drover\n"
        "names = drover.__all__\n"
        "from drover import EntityKind, LifecycleHandler, Limit, hookimpl\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & set(json.loads(sys.argv[1])))\n"
        "print(json.dumps([len(names), heavy]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    count, heavy = json.loads(done.stdout)
    assert count > 70
    assert heavy == [], done.stdout


#: What a read never needs: migrations, the daemon, the handlers, the storage's write side
#: (a reading app's queries are built alone), the dashboard, and on a
#: SQLite file SQLAlchemy's asyncio extension, which imports its ORM (a synchronous
#: engine reads the file).
_NOT_ON_A_READ = (
    "alembic",
    "drover.coordinator.daemon",
    "drover.coordinator.tick",
    "drover.kinds.sessions.prepare",
    "drover.storage.repository",
    "drover.storage.tick_store",
    "starlette",
    "sqlalchemy.ext.asyncio",
    "sqlalchemy.orm",
    "aiosqlite",
    # what only drover doctor reads with; a TOML parser where there is no file
    "drover.storage.doctor_facts",
    "tomllib",
)

_READ_PROBE = """
import json, sys
from drover.cli.group import main
try:
    main(sys.argv[1:], prog_name="drover")
except SystemExit as done:
    print("EXIT=" + str(done.code))
import importlib.metadata as md
installed = {e.value.split(":")[0].split(".")[0] for e in md.entry_points(group="drover")}
loaded = sorted(m for m in sys.modules if m.split(".")[0] in installed)
unwanted = sorted(m for m in sys.modules if m.startswith(tuple(json.loads(%r))))
print("READ=" + json.dumps([loaded, unwanted]))
"""


def _read(
    tmp_path: Path, *args: str, unwanted: tuple[str, ...] = _NOT_ON_A_READ
) -> tuple[list[str], list[str], str]:
    env = {**os.environ, "DROVER_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/drover.db"}
    env.pop("DROVER_CONFIG", None)
    env.pop("DROVER_LOAD_PLUGINS", None)
    done = subprocess.run(
        [sys.executable, "-c", _READ_PROBE % json.dumps(unwanted), *args],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120, check=False,
    )  # fmt: skip
    line = next((x for x in done.stdout.splitlines() if x.startswith("READ=")), None)
    assert line is not None, done.stdout + done.stderr
    loaded, unwanted = json.loads(line.removeprefix("READ="))
    return loaded, unwanted, done.stdout + done.stderr


def test_reads_load_no_installed_plugin_nor_migrations_nor_handlers(tmp_path):
    """``sessions``, ``show``, ``history``, ``logs`` and ``status`` import neither Alembic,
    nor the daemon and the handlers, nor SQLAlchemy's asyncio extension and ORM, nor any
    installed plugin (no entry-point scan) when the database holds only drover's own kinds,
    nor what only ``drover doctor`` reads with."""
    import asyncio

    from drover.testing import CoordinatorHarness

    async def seed() -> str:
        url = f"sqlite+aiosqlite:///{tmp_path}/drover.db"
        async with CoordinatorHarness(database_url=url) as h:
            return await h.create_session(name="one")

    sid = asyncio.run(seed())
    for args in (["sessions"], ["show", sid], ["history"], ["status"], ["logs", sid]):
        loaded, unwanted, output = _read(tmp_path, *args)
        assert (loaded, unwanted) == ([], []), (args, output)
    # The installed plugins are there all the same, for a command that needs them.
    loaded, _, output = _read(tmp_path, "plugins", "--json")
    assert loaded, output
    # `why` loads every handler to explain what acts next, but reads the file as the
    # others do (no asyncio extension, ORM or aiosqlite), and never builds the backend
    # the handlers are given (the local one imports its process machinery and tenacity).
    not_on_why = ("sqlalchemy.ext.asyncio", "sqlalchemy.orm", "aiosqlite", "drover.backends.local")
    not_on_why += ("tenacity", "drover.storage.doctor_facts", "tomllib")
    _, unwanted, output = _read(tmp_path, "why", sid, unwanted=not_on_why)
    assert "is PENDING" in output, output
    assert unwanted == [], output


def test_a_read_loads_the_installed_plugins_when_the_database_holds_their_kinds(tmp_path):
    """An entity of a kind drover's own plugins do not declare: the read loads them all."""
    import asyncio
    import sqlite3

    from drover.app import App
    from drover.config import load_config
    from drover.testing import CoordinatorHarness

    url = f"sqlite+aiosqlite:///{tmp_path}/drover.db"

    async def seed() -> None:
        async with CoordinatorHarness(database_url=url) as h:
            await h.create_session(name="one")

    asyncio.run(seed())

    async def read() -> tuple[set[str], bool]:
        app = App(load_config(None, environ={}, flags={"database_url": url}))
        try:
            kinds = await app.read_kinds()
            names = {name for name, _ in app.plugin_manager.list_name_plugin()}
            return set(kinds), "max-duration" in names
        finally:
            await app.close()

    kinds, installed = asyncio.run(read())
    assert kinds == {"session", "kernel", "deployment", "route"}
    assert not installed
    conn = sqlite3.connect(tmp_path / "drover.db")
    with conn:
        conn.execute(
            "INSERT INTO entities (id, kind, status, status_changed_at, priority, created_at, "
            "spec, requeues) VALUES ('x', 'job', 'QUEUED', 0, 0, 0, '{}', 0)"
        )
    conn.close()
    _, installed = asyncio.run(read())
    assert installed


def test_a_drover_process_takes_the_daemons_collector_thresholds_and_a_test_runner_does_not():
    """A command line process raises the collector's young threshold (a read otherwise runs
    about a hundred collections for nothing); click's test runner passes ``args`` and leaves
    the calling process as it was."""
    import gc

    from click.testing import CliRunner

    from drover._gc import GC_THRESHOLD
    from drover.cli import main

    probe = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('GC=' + repr(gc.get_threshold())))\n"
        "sys.argv = ['drover', '--version']\n"
        "from drover.cli.group import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert f"GC={GC_THRESHOLD!r}" in done.stdout, done.stdout + done.stderr
    before = gc.get_threshold()
    assert CliRunner().invoke(main, ["--version"]).exit_code == 0
    assert gc.get_threshold() == before


_ENDING = """
import atexit, os, sys, threading, time

def _audit(event, args, write=os.write):
    # Raised only as the interpreter tears itself down (the name varies by version).
    if event in {"cpython.PyInterpreterState_Clear", "cpython._PySys_ClearAuditHooks"}:
        write(1, b"TEARDOWN\\n")

sys.addaudithook(_audit)
atexit.register(lambda: print("ATEXIT"))
if sys.argv[1] == "thread":
    threading.Thread(target=lambda: (time.sleep(1.0), print("THREAD DONE"))).start()
sys.argv = ["drover", *sys.argv[2:]]
from drover.cli.group import main
main()
"""


@pytest.mark.parametrize(
    ("args", "code", "shown"),
    [
        (["--version"], 0, "drover"),
        (["sessions", "--json"], 0, "[]"),
        (["show", "no-such-session"], 1, "Error: "),
        (["history", "--result", "BOGUS"], 2, "BOGUS"),
    ],
)
def test_a_drover_process_ends_without_the_interpreters_teardown(tmp_path, args, code, shown):
    """A command's process ends at once once its output is flushed: the interpreter does
    not free every module first (a sixth of a read's CPU), yet the output, the exit code
    and the ``atexit`` callbacks are those of a normal exit. A thread still running gets
    the normal exit, which waits for it."""
    env = {**os.environ, "DROVER_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/drover.db"}
    env.pop("DROVER_CONFIG", None)
    assert subprocess.run(
        [sys.executable, "-m", "drover", "db", "upgrade"], env=env, cwd=tmp_path,
        capture_output=True, timeout=120, check=False,
    ).returncode == 0  # fmt: skip
    for mode in ("alone", "thread"):
        done = subprocess.run(
            [sys.executable, "-c", _ENDING, mode, *args],
            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120, check=False,
        )  # fmt: skip
        output = done.stdout + done.stderr
        assert done.returncode == code, (mode, output)
        assert shown in output, (mode, output)
        assert "ATEXIT" in done.stdout, (mode, output)
        assert ("TEARDOWN" in done.stdout) == (mode == "thread"), (mode, output)
        assert ("THREAD DONE" in done.stdout) == (mode == "thread"), (mode, output)


@pytest.mark.parametrize("closed", [">&-", "2>&-"])
def test_a_drover_process_with_a_closed_standard_stream_still_exits_0(tmp_path, closed):
    """A stream closed when the process starts (a service manager's ``>&-``) is skipped at
    the exit, as Python's own exit skips it: ``drover --version`` still exits 0."""
    done = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -m drover --version {closed}'],
        capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_the_backend_a_read_gives_the_handlers_is_built_only_when_used():
    """``drover why``'s handlers get a stand-in that builds the backend on first use; copying
    it (as a handler might) neither builds the backend nor recurses."""
    import copy

    from drover.backends.deferred import built_on_first_use
    from drover.backends.simulated import SimulatedBackend

    built: list[SimulatedBackend] = []

    def build() -> SimulatedBackend:
        if not built:
            built.append(SimulatedBackend([]))
        return built[0]

    backend = built_on_first_use(build)
    copy.copy(backend)
    assert built == []
    assert list(backend.agents()) == []
    assert len(built) == 1
