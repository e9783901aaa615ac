"""What a ``drover`` command costs: median CPU time (and wall time) of each command.

Builds a SQLite database of ``--sessions`` sessions that went through the
whole lifecycle (simulated kernels: real history rows, kernels and results),
then runs each command ``--runs`` times as a child process and takes the
median of its CPU time (user + system, from ``getrusage(RUSAGE_CHILDREN)``),
which the load of a shared machine changes far less than the wall time.
Two baselines run in the same way in the same run: ``python3 -c pass`` (the
interpreter's own start) and ``python3 -c 'import sqlalchemy'`` (the one
library a read needs). The calls go in rounds, each calling every command
once, so a load that comes and goes weighs on all alike; a read is held to
0.35 s (issue 35) and, on a machine slower or faster than the issue's, to the
same multiple of SQLAlchemy's import (0.35 / 0.23). One warm-up round first,
so that Python's bytecode cache exists, as it does on an installed drover
(PYTHONDONTWRITEBYTECODE is dropped for the child processes for the same
reason). ``--against OLD/.venv/bin/drover`` measures another version's reads
in the same rounds. Usage::

    .venv/bin/python bench/cli_startup.py --runs 7 --sessions 300
    .venv/bin/python bench/cli_startup.py --against ../old/.venv/bin/drover
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: What drover promises for ``drover --help`` (docs/operations.md), in CPU seconds.
HELP_BUDGET_S = 0.3
#: What drover promises for a command that reads the database (issue 35), in CPU seconds.
READ_BUDGET_S = 0.35
#: The same budget relative to SQLAlchemy's import, which the issue measured at 0.23 s: what
#: holds on a machine slower or faster than that one.
READ_BUDGET_RATIO = READ_BUDGET_S / 0.23
#: The commands that read the database, held to READ_BUDGET_S.
READS = ("sessions", "show", "why", "history", "logs", "status")


def _drover() -> list[str]:
    script = Path(sys.executable).with_name("drover")
    return [str(script)] if script.exists() else [sys.executable, "-m", "drover"]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_once(argv: list[str], cwd: str, env: dict[str, str]) -> tuple[float, float]:
    """CPU seconds and wall seconds of one call."""
    cpu_before = _children_cpu()
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    used = _children_cpu() - cpu_before
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()}")
    return used, elapsed


def _measure_all(
    commands: dict[str, list[str]], runs: int, cwd: str, env: dict[str, str]
) -> dict[str, tuple[float, float]]:
    """Median CPU and wall seconds of each command, over ``runs`` rounds (after one warm-up
    round). Each round calls every command once, so that a load that comes and goes on a
    shared machine weighs on every command alike, the baselines included."""
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    wall: dict[str, list[float]] = {name: [] for name in commands}
    for i in range(runs + 1):
        for name, argv in commands.items():
            used, elapsed = _run_once(argv, cwd, env)
            if i:  # the first round only warms the bytecode and the page caches
                cpu[name].append(used)
                wall[name].append(elapsed)
    return {n: (statistics.median(cpu[n]), statistics.median(wall[n])) for n in commands}


async def _populate(url: str, sessions: int) -> str:
    """``sessions`` sessions run to their end on simulated kernels; the id of the last one."""
    from drover.backends.base import AgentInfo
    from drover.backends.simulated import SimulatedBackend
    from drover.testing import CoordinatorHarness

    agents = [AgentInfo("bench-agent", {"cpu": 1e9, "mem": 1e12})]
    harness = CoordinatorHarness(database_url=url, backend=SimulatedBackend(agents, run_for=0))
    async with harness as h:
        ids = [
            await h.create_session(kernels=[{"cpu": 1, "mem": 64}] * 2, name=f"bench-{n}")
            for n in range(sessions)
        ]
        await h.run_until_settled()
    return ids[-1]


def _give_a_log(path: Path, session_id: str, log: Path) -> None:
    """Point the session's first kernel's stdout at ``log``, as the local backend records it."""
    log.write_text("".join(f"line {n}\n" for n in range(1000)))
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "UPDATE entities SET runtime = json_object('stdout', ?) WHERE id = "
            "(SELECT id FROM entities WHERE parent_id = ? ORDER BY id LIMIT 1)",
            (str(log), session_id),
        )
    conn.close()


def main() -> None:
    """Build the database, measure every command and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each command")
    parser.add_argument("--sessions", type=int, default=300, help="sessions in the database")
    parser.add_argument(
        "--against",
        metavar="DROVER",
        help="another drover executable (an older version's .venv/bin/drover): its reads are "
        "measured in the same rounds, as 'old …'",
    )
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="drover-cli-bench-")
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONDONTWRITEBYTECODE"}}
    env.pop("DROVER_CONFIG", None)
    db = Path(workdir) / "drover.db"
    url = f"sqlite+aiosqlite:///{db}"
    env["DROVER_DATABASE_URL"] = url
    drover = _drover()
    try:
        sid = asyncio.run(_populate(url, args.sessions))
        _give_a_log(db, sid, Path(workdir) / "stdout.log")
        python = sys.executable
        commands = {
            "python3 -c pass": [python, "-c", "pass"],
            "python3 -c 'import sqlalchemy'": [python, "-c", "import sqlalchemy"],
            "drover --help": [*drover, "--help"],
            "drover --version": [*drover, "--version"],
            "drover sessions": [*drover, "sessions"],
            "drover show": [*drover, "show", sid],
            "drover why": [*drover, "why", sid],
            "drover history": [*drover, "history"],
            "drover logs": [*drover, "logs", sid],
            "drover status": [*drover, "status"],
        }
        if args.against:
            for read in READS:
                argv = commands[f"drover {read}"]
                commands[f"old drover {read}"] = [args.against, *argv[len(drover) :]]
        results = _measure_all(commands, args.runs, workdir, env)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    base = results["python3 -c pass"][0]
    sqlalchemy = results["python3 -c 'import sqlalchemy'"][0]
    print(
        f"median of {args.runs} rounds, {args.sessions} sessions, on {os.cpu_count()} CPUs "
        f"(load {os.getloadavg()[0]:.1f}); CPU = user + system of the child process; budget: "
        f"{READ_BUDGET_S} s, or {READ_BUDGET_RATIO:.2f} x sqlalchemy on a machine where its "
        "import costs more or less than the issue's 0.23 s"
    )
    header = f"{'command':<32}{'CPU s':>8}{'wall s':>8}{'x pass':>8}{'x sqlalchemy':>14}  budget"
    print(header)
    over = []
    for name, (cpu, wall) in results.items():
        budget = ""
        if name == "drover --help":
            budget = f"{HELP_BUDGET_S} {'ok' if cpu <= HELP_BUDGET_S else 'OVER'}"
        elif name.removeprefix("drover ") in READS:
            ok = cpu <= READ_BUDGET_S
            relative = cpu / sqlalchemy <= READ_BUDGET_RATIO
            budget = f"{READ_BUDGET_S} {'ok' if ok else 'OVER'}"
            budget += f", x{READ_BUDGET_RATIO:.2f} {'ok' if relative else 'OVER'}"
            if not relative:
                over.append(name)
        ratios = f"{cpu / base:>8.2f}{cpu / sqlalchemy:>14.2f}"
        print(f"{name:<32}{cpu:>8.3f}{wall:>8.3f}{ratios}  {budget}")
    print(f"reads over {READ_BUDGET_RATIO:.2f} x sqlalchemy: {', '.join(over) or 'none'}")


if __name__ == "__main__":
    main()
