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
