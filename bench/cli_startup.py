"""How long the ``drover`` command takes to start: median wall time of each command.

Runs ``python -c pass`` (the interpreter's own start, the baseline), then
``drover --help``, ``drover --version`` and ``drover sessions`` (on a fresh,
upgraded SQLite database in a temporary directory), each ``--runs`` times, and
prints the medians side by side. One warm-up call per command first, so that
Python's bytecode cache exists, as it does on an installed drover
(PYTHONDONTWRITEBYTECODE is dropped for the child processes for the same
reason). Usage::

    .venv/bin/python bench/cli_startup.py --runs 15
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: What drover promises for ``drover --help`` (docs/operations.md).
HELP_BUDGET_S = 0.3


def _drover() -> list[str]:
    script = Path(sys.executable).with_name("drover")
    return [str(script)] if script.exists() else [sys.executable, "-m", "drover"]


def _median_seconds(argv: list[str], runs: int, cwd: str, env: dict[str, str]) -> float:
    times = []
    for i in range(runs + 1):
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode().strip()}")
        if i:  # the first call is the warm-up
            times.append(elapsed)
    return statistics.median(times)


def main() -> None:
    """Measure and print the table (seconds, and over the baseline)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11, help="timed runs of each command")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="drover-cli-bench-")
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONDONTWRITEBYTECODE"}}
    env.pop("DROVER_CONFIG", None)
    env["DROVER_DATABASE_URL"] = f"sqlite+aiosqlite:///{workdir}/drover.db"
    drover = _drover()
    try:
        subprocess.run(
            [*drover, "db", "upgrade"], cwd=workdir, env=env, check=True, capture_output=True
        )
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "drover --help": [*drover, "--help"],
            "drover --version": [*drover, "--version"],
            "drover sessions": [*drover, "sessions"],
        }
        results = {
            name: _median_seconds(argv, args.runs, workdir, env) for name, argv in commands.items()
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    baseline = results["python -c pass"]
    print(f"median of {args.runs} runs on {os.cpu_count()} CPUs (load {os.getloadavg()[0]:.1f})")
    print(f"{'command':<20}{'seconds':>9}{'over baseline':>15}")
    for name, seconds in results.items():
        print(f"{name:<20}{seconds:>9.3f}{seconds - baseline:>15.3f}")
    verdict = "ok" if results["drover --help"] <= HELP_BUDGET_S else "OVER BUDGET"
    print(f"drover --help budget {HELP_BUDGET_S} s: {verdict}")


if __name__ == "__main__":
    main()
