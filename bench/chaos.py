"""Kill campaign: several ``drover run``, ``kill -9`` at random, invariants checked in SQL.

K coordinators run on one PostgreSQL schema (and, in a second phase, one on a
SQLite file) with the local backend, all sharing one data directory. A stream
of real sessions is submitted: short commands with random exit codes, several
kernels each, some terminated mid-run, some ignoring SIGTERM, and some long
"victims" whose command the campaign itself kills from outside (SIGTERM or
SIGKILL to the command, as a user or the OOM killer would). Meanwhile a
random coordinator is killed with SIGKILL at random moments and restarted,
and (PostgreSQL, several coordinators) a random one is paused with SIGSTOP
for longer than ``claim_ttl`` and then resumed with SIGCONT, so that others
take its claims over while it sleeps in the middle of whatever it was doing.
Then the campaign lets everything settle and checks, with SQL on the
database and the files the commands wrote:

* every session ended;
* each session's status equals its latest history row's ``to_status``;
* no session moved twice out of the same status (its status-changing history
  rows form a chain: each starts where the previous one ended);
* no kernel was spawned twice (each command appends ``kernel-id pid`` to a
  file as it starts);
* no kernel process is left running;
* each kernel that ran to its end has the exit code its command printed;
* every kernel drover destroyed ended TERMINATED: no kernel ended ERROR
  ``killed by SIG…`` unless the campaign killed it from outside;
* every kernel the campaign killed from outside ended ERROR ``killed by`` that
  signal.

It prints the counts and a ``N passed, M failed`` line, and exits 1 if any
check failed. ``--quick`` is the CI-sized run (about a minute, at least 10
kills), which ``make chaos`` and the test suite run.

    .venv/bin/python bench/chaos.py --quick
    .venv/bin/python bench/chaos.py --coordinators 3 --duration 600 --kill-every 4
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from drover.app import App
from drover.config import load_config
from drover.storage.connect import create_engine

PG_URL = os.environ.get("DROVER_TEST_PG_URL") or "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
TERMINAL = {"TERMINATED", "CANCELLED", "ERROR"}

_SESSIONS_SQL = "SELECT id, status FROM entities WHERE kind = 'session'"
_HISTORY_SQL = (
    "SELECT entity_id, from_status, to_status FROM scheduling_history "
    "WHERE kind = 'session' ORDER BY id"
)
_KERNELS_SQL = "SELECT id, exit_code FROM entities WHERE kind = 'kernel'"
_KERNEL_DETAIL_SQL = (
    "SELECT k.id, k.status, k.exit_code, k.status_info, s.status, s.status_info "
    "FROM entities k JOIN entities s ON s.id = k.parent_id WHERE k.kind = 'kernel'"
)
_FENCED_SQL = "SELECT count(*) FROM scheduling_history WHERE error_code = 'fenced'"
_SIGNALS = {signal.SIGTERM: "SIGTERM", signal.SIGKILL: "SIGKILL"}
# The pids of the coordinators holding an unexpired claim right now.
_CLAIMING_SQL = (
    "SELECT DISTINCT c.pid FROM entities e JOIN coordinators c ON c.id = e.claim_owner "
    "WHERE e.claim_expires > :now AND c.stopped_at IS NULL"
)
_HISTORY_TRAIL_SQL = (
    "SELECT id, created_at, handler, result, from_status, to_status, error_code, message "
    "FROM scheduling_history WHERE entity_id = :id ORDER BY id"
)
# What happened to a kernel (its status changes) and to its session (its history).
_KERNEL_TRAIL_SQL = (
    "SELECT created_at, source, from_status, to_status, message FROM status_changes "
    "WHERE entity_id = :id ORDER BY id"
)
_SESSION_TRAIL_SQL = (
    "SELECT h.created_at, h.handler, h.result, h.from_status, h.to_status, h.error_code "
    "FROM scheduling_history h JOIN entities k ON k.parent_id = h.entity_id "
    "WHERE k.id = :id ORDER BY h.id"
)


def _config(path: Path, url: str, schema: str, data: Path, claim_ttl: float) -> None:
    path.write_text(
        f'database_url = "{url}"\n'
        f'database_schema = "{schema}"\n'
        f'data_dir = "{data}"\n'
        "heartbeat_interval = 0.5\n"
        "safety_interval = 2.0\n"
        "shutdown_grace = 5.0\n"
        f"claim_ttl = {claim_ttl}\n"
        'log_format = "json"\n'
        'log_level = "WARNING"\n'
        "[handlers.prepare-sessions]\ntimeout = 10\n"
        "[handlers.start-sessions]\ntimeout = 10\n"
        "[backend]\n"
        'name = "local"\n'
        "kill_grace = 1.0\n"
        '[[backend.agents]]\nid = "chaos-agent"\ncpu = 100000\nmem = 100000000\n'
    )


class Campaign:
    """One database's campaign: coordinators, the session stream, the kills, the checks."""

    def __init__(self, args: argparse.Namespace, label: str, url: str, schema: str,
                 coordinators: int, duration: float, workdir: Path) -> None:  # fmt: skip
        self.args = args
        self.label = label
        self.url = url
        self.schema = schema
        self.k = coordinators
        self.duration = duration
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = self.dir / "drover.toml"
        self.spawns = self.dir / "spawns.log"
        self.exits = self.dir / "exits.log"
        self.run_id = uuid.uuid4().hex[:12]
        _config(self.config, url, schema, self.dir / "data", args.claim_ttl)
        self.procs: list[asyncio.subprocess.Process | None] = [None] * coordinators
        self.kills = 0
        # (epoch seconds, coordinator index) of each kill, to read a trail against.
        self.kill_times: list[tuple[float, int]] = []
        self.restarts = 0
        self.pauses = 0
        # Kernel id -> the signal the campaign killed its command with, from outside.
        self.outside: dict[str, str] = {}
        self.terminated: set[str] = set()
        self.submitted: list[str] = []
        self.rng = random.Random(args.seed)

    async def _start(self, i: int) -> None:
        # The child keeps its own copy of the descriptor.
        log = open(self.dir / f"coordinator-{i}.log", "ab")  # noqa: SIM115, ASYNC230
        env = {k: v for k, v in os.environ.items() if not k.startswith("DROVER_")}
        self.procs[i] = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "drover", "--config", str(self.config), "run",
            stdout=log, stderr=log, env=env,
        )  # fmt: skip
        log.close()

    def _command(self) -> tuple[list[str], str]:
        """A kernel command and what it is (short, long, deaf to SIGTERM, a victim)."""
        r = self.rng.random()
        code = self.rng.choice([0, 0, 0, 1, 3])
        start = f'echo "$DROVER_KERNEL_ID $$" >> {self.spawns}; '
        done = f'echo "$DROVER_KERNEL_ID {code}" >> {self.exits}; exit {code}'
        if r < 0.06:
            # One process (exec), killed from outside by _outside_kill_loop.
            return ["/bin/sh", "-c", start + "exec sleep 10"], "victim"
        if r < 0.14:
            return ["/bin/sh", "-c", start + "trap '' TERM; sleep 30; " + done], "deaf"
        if r < 0.26:
            return ["/bin/sh", "-c", start + "sleep 30; " + done], "long"
        pause = self.rng.choice([0, 0.1, 0.5, 1.5])
        return ["/bin/sh", "-c", start + f"sleep {pause}; " + done], "short"

    async def _submit(self, app: App, deadline: float) -> None:
        to_end: list[tuple[float, str]] = []
        while time.monotonic() < deadline:
            requests = []
            kinds_of: list[set[str]] = []
            for _ in range(self.args.batch):
                kernels, kinds = [], set()
                for _ in range(self.rng.choice([1, 1, 2, 3])):
                    command, kind = self._command()
                    env = {"DROVER_CHAOS_RUN": self.run_id}
                    if kind == "victim":
                        # Alone in its session, never terminated by the campaign: only
                        # the outside kill ends it, so nothing of drover's races it.
                        env["DROVER_CHAOS_VICTIM"] = "1"
                        kernels = [{"command": command, "cpu": 1, "mem": 1, "env": env}]
                        kinds = {kind}
                        break
                    kinds.add(kind)
                    kernels.append({"command": command, "cpu": 1, "mem": 1, "env": env})
                requests.append({"name": "chaos", "kernels": kernels})
                kinds_of.append(kinds)
            ids = await app.repository.create_sessions(requests)
            self.submitted.extend(ids)
            now = time.monotonic()
            for sid, kinds in zip(ids, kinds_of, strict=True):
                if "victim" in kinds:
                    continue
                if kinds & {"long", "deaf"} or self.rng.random() < 0.05:
                    to_end.append((now + self.rng.uniform(1.0, 5.0), sid))
            due = [sid for t, sid in to_end if t <= now]
            to_end = [(t, sid) for t, sid in to_end if t > now]
            if due:
                await app.repository.request_termination(due)
                self.terminated.update(due)
            await asyncio.sleep(self.args.submit_every)
        # Whatever is still waiting to be terminated is terminated now.
        if to_end:
            ids = [sid for _, sid in to_end]
            await app.repository.request_termination(ids)
            self.terminated.update(ids)

    async def _kill_loop(self, deadline: float) -> None:
        while True:
            await asyncio.sleep(self.rng.uniform(0.5, 1.5) * self.args.kill_every)
            if time.monotonic() >= deadline:
                return
            i = self.rng.randrange(self.k)
            proc = self.procs[i]
            if proc is not None and proc.returncode is None:
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
                self.kills += 1
                self.kill_times.append((time.time(), i))
            await asyncio.sleep(self.rng.uniform(0.2, 1.5))
            await self._start(i)
            self.restarts += 1

    async def _pause_loop(self, deadline: float) -> None:
        """SIGSTOP a coordinator while it holds claims, for 1.5 x claim_ttl, then SIGCONT it.

        PostgreSQL: the others take its claims over while it sleeps in the middle of
        a tick (a handler's execute, a backend call); resumed, it must touch nothing.
        """
        engine = create_engine(self.url, schema=self.schema or None)
        try:
            while True:
                await asyncio.sleep(self.rng.uniform(0.5, 1.5) * self.args.pause_every)
                if time.monotonic() >= deadline:
                    return
                proc = await self._claiming(engine, seconds=3.0)
                if proc is None:
                    continue
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGSTOP)
                    self.pauses += 1
                await asyncio.sleep(1.5 * self.args.claim_ttl)
                # It may have been killed (and restarted) meanwhile: then it is gone.
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(signal.SIGCONT)
        finally:
            await engine.dispose()

    async def _claiming(self, engine: Any, *, seconds: float) -> asyncio.subprocess.Process | None:
        """A live coordinator that holds a claim, caught within ``seconds`` (else a random one)."""
        alive = {p.pid: p for p in self.procs if p is not None and p.returncode is None}
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            async with engine.connect() as conn:
                rows = await conn.execute(sa.text(_CLAIMING_SQL), {"now": time.time()})
                holding = [alive[pid] for (pid,) in rows if pid in alive]
            if holding:
                return self.rng.choice(holding)
            await asyncio.sleep(0.01)
        return self.rng.choice(list(alive.values())) if alive else None

    async def _outside_kill_loop(self, deadline: float) -> None:
        """Kill a running victim's command from outside (SIGTERM or SIGKILL), now and then."""
        while time.monotonic() < deadline:
            await asyncio.sleep(self.rng.uniform(0.5, 2.0))
            victims = [
                (pid, kid) for pid, kid in _victims_of_run(self.run_id) if kid not in self.outside
            ]
            if not victims:
                continue
            pid, kid = self.rng.choice(victims)
            sig = self.rng.choice([signal.SIGTERM, signal.SIGKILL])
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
            self.outside[kid] = _SIGNALS[sig]

    async def run(self) -> dict[str, Any]:
        """Run the campaign; return the counts and the checks."""
        app = App(load_config(self.config, environ={}))
        await app.check_schema(auto_upgrade=True)
        started = time.monotonic()
        try:
            for i in range(self.k):
                await self._start(i)
            deadline = time.monotonic() + self.duration
            loops = [self._submit(app, deadline), self._kill_loop(deadline)]
            loops.append(self._outside_kill_loop(deadline))
            if self.k > 1 and self.args.pause_every > 0:
                loops.append(self._pause_loop(deadline))
            await asyncio.gather(*loops)
            settled = await self._settle(app)
        finally:
            await self._stop_all()
            await app.close()
        result = await self._check(settled)
        result["seconds"] = round(time.monotonic() - started, 1)
        return result

    async def _settle(self, app: App) -> bool:
        deadline = time.monotonic() + self.args.settle
        while time.monotonic() < deadline:
            counts = await app.repository.count_by_status()
            if sum(n for s, n in counts.items() if s.value not in TERMINAL) == 0:
                return True
            await asyncio.sleep(0.5)
        return False

    async def _stop_all(self) -> None:
        for proc in self.procs:
            if proc is not None and proc.returncode is None:
                proc.send_signal(signal.SIGCONT)  # a paused one handles SIGTERM only then
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            if proc is not None and proc.returncode is None:
                try:
                    await asyncio.wait_for(proc.wait(), timeout=30)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()

    async def _check(self, settled: bool) -> dict[str, Any]:
        engine = create_engine(self.url, schema=self.schema or None)
        async with engine.connect() as conn:
            sessions = dict((await conn.execute(sa.text(_SESSIONS_SQL))).all())
            history = (await conn.execute(sa.text(_HISTORY_SQL))).all()
            kernels = dict((await conn.execute(sa.text(_KERNELS_SQL))).all())
            fenced = (await conn.execute(sa.text(_FENCED_SQL))).scalar_one()
            detail = {r[0]: list(r[1:]) for r in await conn.execute(sa.text(_KERNEL_DETAIL_SQL))}
        await engine.dispose()
        latest: dict[str, str] = {}
        chain_breaks = 0
        current: dict[str, str] = {}
        for sid, src, dst in history:
            latest[sid] = dst
            if src == dst:
                continue
            if current.get(sid, "PENDING") != src:
                chain_breaks += 1
            current[sid] = dst
        spawned = Counter(line.split()[0] for line in _lines(self.spawns) if len(line.split()) == 2)
        printed: dict[str, int] = {}
        for line in _lines(self.exits):
            kid, code = line.split()
            printed[kid] = int(code)
        leftovers = _processes_of_run(self.run_id)
        left_kernels = [_kernel_of(pid) for pid in leftovers]
        for pid in leftovers:  # clean up, but count them first
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        by_status = Counter(sessions.values())
        # A kernel destroyed (its session terminated) in the instant between its
        # command printing its code and exiting dies of drover's signal: it was
        # killed, not wrong. Its row says "destroyed; killed by SIGTERM" (a
        # negative code) or "destroyed; its exit status is unknown" (none).
        # Those are counted apart, not as mismatches; a destroyed kernel with a
        # code of its own must have the printed one.
        raced = [
            kid
            for kid, code in printed.items()
            if kernels.get(kid) != code
            and str((detail.get(kid) or [None] * 3)[2] or "").startswith("destroyed")
            and (kernels.get(kid) is None or kernels[kid] < 0)
        ]
        mismatched = [
            kid for kid, code in printed.items() if kernels.get(kid) != code and kid not in raced
        ]
        # A kernel ending ERROR "killed by SIG…" must be one the campaign killed from
        # outside: every other signal came from a destroy, which must say "destroyed".
        killed_error = {
            kid
            for kid, (status, _code, info, *_rest) in detail.items()
            if status == "ERROR" and str(info or "").startswith("killed by")
        }
        destroyed = [k for k, row in detail.items() if str(row[2] or "").startswith("destroyed")]
        destroyed_as_error = sorted(killed_error - set(self.outside))
        outside_misjudged = sorted(
            kid
            for kid, sig in self.outside.items()
            if detail.get(kid, [None] * 3)[:3]
            != ["ERROR", -getattr(signal, sig), f"killed by {sig}"]
        )
        twice = sorted(k for k, n in spawned.items() if n > 1)
        stale = sorted(sid for sid, status in sessions.items() if latest.get(sid) != status)
        trails = await self._trails(mismatched + destroyed_as_error + outside_misjudged + twice)
        trails.update(await self._session_trails(stale))
        checks = {
            "every session ended": settled
            and all(s in TERMINAL for s in sessions.values())
            and len(sessions) == len(self.submitted),
            "status equals the latest history row's to_status": all(
                latest.get(sid) == status for sid, status in sessions.items()
            ),
            "no session moved twice out of the same status": chain_breaks == 0,
            "no kernel spawned twice": all(n == 1 for n in spawned.values()),
            "no process left": not leftovers,
            "exit codes match what the commands printed": not mismatched,
            "every kernel drover destroyed ended TERMINATED": not destroyed_as_error,
            "every kernel killed from outside ended ERROR": not outside_misjudged,
        }
        return {
            "database": self.label,
            "coordinators": self.k,
            "sessions": len(self.submitted),
            "kernels": len(kernels),
            "terminated_by_us": len(self.terminated),
            "kills": self.kills,
            "restarts": self.restarts,
            "pauses": self.pauses,
            "by_status": dict(by_status),
            "kernel_processes_spawned": sum(spawned.values()),
            "spawned_twice": sum(1 for n in spawned.values() if n > 1),
            "fenced_rows": int(fenced),
            "chain_breaks": chain_breaks,
            "processes_left": len(leftovers),
            "exit_code_mismatches": len(mismatched),
            "destroyed_while_exiting": len(raced),
            "destroyed_kernels": len(destroyed),
            "destroyed_as_error": len(destroyed_as_error),
            "killed_from_outside": len(self.outside),
            "outside_misjudged": len(outside_misjudged),
            "checks": checks,
            # Enough to investigate a failure: kernel rows (status, exit code, info,
            # session status, session info) of what went wrong.
            "mismatched": {k: [printed[k], *detail.get(k, [])] for k in mismatched},
            "misjudged": {
                k: [self.outside.get(k, "not by us"), *detail.get(k, [])]
                for k in destroyed_as_error + outside_misjudged
            },
            "left": {k: detail.get(k) for k in left_kernels if k},
            "twice": {k: detail.get(k) for k in twice},
            "stale": {sid: [sessions[sid], latest.get(sid)] for sid in stale},
            "trails": trails,
        }

    async def _session_trails(self, session_ids: list[str]) -> dict[str, list[str]]:
        """Each session's history rows (time, handler, result, move, error code, message)."""
        if not session_ids:
            return {}
        engine = create_engine(self.url, schema=self.schema or None)
        trails: dict[str, list[str]] = {}
        try:
            async with engine.connect() as conn:
                for sid in session_ids:
                    rows = await conn.execute(sa.text(_HISTORY_TRAIL_SQL), {"id": sid})
                    trails[sid] = [
                        f"#{i} {at:.2f} {handler} {result} {src}->{dst} {code or ''} {msg or ''}"
                        for i, at, handler, result, src, dst, code, msg in rows
                    ]
        finally:
            await engine.dispose()
        return trails

    async def _trails(self, kernel_ids: list[str]) -> dict[str, list[str]]:
        """For each kernel: its status changes, its session's history, the exit record and
        the kills nearby, as lines with times relative to when its command's end was recorded."""
        if not kernel_ids:
            return {}
        engine = create_engine(self.url, schema=self.schema or None)
        trails: dict[str, list[str]] = {}
        try:
            async with engine.connect() as conn:
                for kid in kernel_ids:
                    exit_file = self.dir / "data" / "kernels" / kid / ".drover" / "kernel.exit"
                    try:
                        t0 = exit_file.stat().st_mtime
                        lines = [f"exit record {exit_file.read_text().strip()}"]
                    except OSError:
                        t0, lines = 0.0, ["no exit record"]
                    events: list[tuple[float, str]] = []
                    for at, source, src, dst, message in await conn.execute(
                        sa.text(_KERNEL_TRAIL_SQL), {"id": kid}
                    ):
                        events.append((at, f"kernel {src}->{dst} by {source}: {message or ''}"))
                    for at, handler, result, src, dst, code in await conn.execute(
                        sa.text(_SESSION_TRAIL_SQL), {"id": kid}
                    ):
                        events.append(
                            (at, f"session {src}->{dst} by {handler} {result} {code or ''}")
                        )
                    if events:
                        first, last = events[0][0], events[-1][0]
                        for at, i in self.kill_times:
                            if first - 10 <= at <= last + 1:
                                events.append((at, f"kill -9 coordinator {i}"))
                    for at, text in sorted(events):
                        lines.append(f"{at - t0:+8.2f}s {text}")
                    trails[kid] = lines
        finally:
            await engine.dispose()
        return trails


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _processes_of_run(run_id: str) -> list[int]:
    needle = f"DROVER_CHAOS_RUN={run_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state not in {"Z", "X"}:
            found.append(int(entry.name))
    return found


def _victims_of_run(run_id: str) -> list[tuple[int, str]]:
    """(pid, kernel id) of the victims' running commands (``sleep``, after its ``exec``)."""
    found = []
    for pid in _processes_of_run(run_id):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        kid = _kernel_of(pid)
        if cmdline[0] == b"sleep" and b"DROVER_CHAOS_VICTIM=1" in environ and kid:
            found.append((pid, kid))
    return found


def _kernel_of(pid: int) -> str | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in environ:
        if item.startswith(b"DROVER_KERNEL_ID="):
            return item.split(b"=", 1)[1].decode()
    return None


async def _pg_schema(create: bool, schema: str) -> None:
    dsn = make_url(PG_URL).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        if create:
            await conn.execute(f'CREATE SCHEMA "{schema}"')
        else:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


async def main_async(args: argparse.Namespace) -> int:
    root = Path(tempfile.mkdtemp(prefix="drover-chaos-", dir=args.tmpdir))
    results = []
    try:
        if args.pg_duration > 0:
            schema = f"chaos_{uuid.uuid4().hex[:12]}"
            await _pg_schema(True, schema)
            try:
                campaign = Campaign(args, "postgresql", PG_URL, schema, args.coordinators,
                                    args.pg_duration, root / "pg")  # fmt: skip
                results.append(await campaign.run())
            finally:
                await _pg_schema(False, schema)
        if args.sqlite_duration > 0:
            url = f"sqlite+aiosqlite:///{root}/sqlite/drover.db"
            campaign = Campaign(args, "sqlite", url, "", 1, args.sqlite_duration, root / "sqlite")
            results.append(await campaign.run())
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    passed = failed = 0
    for result in results:
        print(f"# {result['database']}: {result['coordinators']} coordinator(s), "
              f"{result['seconds']}s")  # fmt: skip
        for key in ("sessions", "kernels", "terminated_by_us", "kills", "restarts", "pauses",
                    "kernel_processes_spawned", "spawned_twice", "fenced_rows", "chain_breaks",
                    "processes_left", "exit_code_mismatches", "destroyed_while_exiting",
                    "destroyed_kernels", "destroyed_as_error", "killed_from_outside",
                    "outside_misjudged"):  # fmt: skip
            print(f"{key:28} {result[key]}")
        print(f"{'sessions by status':28} {result['by_status']}")
        for key in ("mismatched", "misjudged", "twice", "stale", "left"):
            for kernel_id, row in result[key].items():
                what = "session" if key == "stale" else "kernel"
                print(f"  {key}: {what} {kernel_id}: {row}")
                for line in result["trails"].get(kernel_id, []) if key != "left" else []:
                    print(f"    {line}")
        for name, ok in result["checks"].items():
            print(f"{'PASS' if ok else 'FAIL'}  {name}")
            passed += ok
            failed += not ok
    kills = sum(r["kills"] for r in results)
    print(f"{passed} passed, {failed} failed ({kills} kills)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0 if failed == 0 else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; ``--quick`` is the CI-sized campaign."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coordinators", type=int, default=3, help="on PostgreSQL (3)")
    parser.add_argument("--pg-duration", type=float, default=300.0, help="seconds of chaos")
    parser.add_argument("--sqlite-duration", type=float, default=60.0, help="seconds of chaos")
    parser.add_argument("--kill-every", type=float, default=4.0, help="mean seconds between kills")
    parser.add_argument("--submit-every", type=float, default=0.5, help="seconds between batches")
    parser.add_argument("--batch", type=int, default=3, help="sessions per batch")
    parser.add_argument("--claim-ttl", type=float, default=5.0, help="claim_ttl of the daemons")
    parser.add_argument(
        "--pause-every",
        type=float,
        default=12.0,
        help="mean seconds between SIGSTOPs of a coordinator (for 1.5 x claim_ttl; 0: none)",
    )
    parser.add_argument("--settle", type=float, default=90.0, help="seconds allowed to settle")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="CI-sized: about 60 s, >= 10 kills")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    parser.add_argument("--tmpdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.pg_duration, args.sqlite_duration, args.kill_every = 30.0, 12.0, 2.5
        args.pause_every = 8.0
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the campaign; exit 1 if any invariant failed."""
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
