"""Side effects fenced by the tick's claim, and destroyed kernels ending TERMINATED (issue 24).

A coordinator paused past its claim (SIGSTOP) and then resumed must not spawn,
kill or cancel what another coordinator owns by then; a kernel drover destroys
ends TERMINATED (``destroyed; killed by SIG…``) whoever sees it end, and one
killed from outside still ends ERROR.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import SKIP_PG, Database
from daemon_helpers import ends_on_word, process_alive, running_daemon, wait_for
from scripted import Scripted
from slurm_helpers import (  # noqa: F401  (fixtures)
    job_prefix_fixture,
    jobs_named,
    slurm_cluster_fixture,
    slurm_settings,
)

from drover import HandlerResult, KernelStatus, SchedulingResult, SessionStatus, SessionWithKernels
from drover.app import App
from drover.backends.fence import Fence, FencedError
from drover.config import load_config
from drover.coordinator.tick import Coordinator
from drover.kinds.sessions._common import run_per_session
from drover.model.clock import SystemClock
from drover.model.values import Claim
from drover.testing import CoordinatorHarness

R = SchedulingResult
S = SessionStatus
K = KernelStatus

pg_only = pytest.mark.skipif(SKIP_PG, reason="DROVER_TEST_SKIP_PG=1")

BIG_AGENT = [{"id": "shared-agent", "cpu": 10_000, "mem": 10_000_000}]


# -- the fence itself, on both databases ---------------------------------------------------


async def test_a_fence_holds_while_its_claim_does_and_fails_once_lapsed_or_taken_over(
    database: Database,
):
    """PostgreSQL: each target carries its tick's claim; the fence passes while the claim
    holds, and fails once it expired (by the clock) or another coordinator took the entity
    over (by the token, whatever the clock says). SQLite: one coordinator, nothing is
    claimed, the fence always passes."""
    pg = database.kind == "postgresql"
    async with CoordinatorHarness(
        include_builtin_handlers=False,
        database_url=database.url,
        database_schema=database.schema,
    ) as h:
        sid = await h.create_session()
        repo = h.repository
        now = h.clock.time()
        mine = Claim("coordinator-a", "token-a", now + 10, ttl=10)
        (target,) = await repo.fetch_lifecycle_targets(
            "scripted", "session", {S.PENDING}, (), 10, now=now, claim=mine
        )
        assert target.claim == (mine if pg else None)
        fence = Fence.of(target, repo)
        await fence.check()
        fence.check_clock()

        h.clock.advance(11)  # the claim lapses: no side effect on the clock's word alone
        if pg:
            with pytest.raises(FencedError, match=r"coordinator-a .* expired"):
                fence.check_clock()
        # Nobody took it over: the database check renews it (a slow call keeps its claim).
        await fence.check()
        fence.check_clock()
        assert fence.expires == (h.clock.time() + 10 if pg else math.inf)

        h.clock.advance(11)

        theirs = Claim("coordinator-b", "token-b", h.clock.time() + 10, ttl=10)
        (taken,) = await repo.fetch_lifecycle_targets(
            "scripted", "session", {S.PENDING}, (), 10, now=h.clock.time(), claim=theirs
        )
        assert taken.claim == (theirs if pg else None)
        # B took it over: A's fence fails, even for a clock that still believes in A's
        # claim (a skewed host); the token decides. B's holds.
        skewed = Fence(sid, Claim("coordinator-a", "token-a", h.clock.time() + 100, 10), repo)
        if pg:
            with pytest.raises(FencedError, match="taken over"):
                await fence.check()
            with pytest.raises(FencedError, match="taken over"):
                await skewed.check()
        else:
            await fence.check()
            await skewed.check()
        await Fence.of(taken, repo).check()


async def test_a_side_effect_fenced_inside_the_handler_is_skipped_fenced_and_not_done(
    database: Database,
):
    """A handler's backend call checks the fence before its side effect, and the claim
    lapsed in between (the coordinator was paused): on PostgreSQL nothing is done and the
    session is SKIPPED `fenced`, no try counted; on SQLite (no claims) it is done."""
    pg = database.kind == "postgresql"
    async with CoordinatorHarness(
        include_builtin_handlers=False,
        database_url=database.url,
        database_schema=database.schema,
    ) as h:
        sid = await h.create_session()
        done: list[str] = []

        class PausedBackendCall(Scripted):
            async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult:
                async def side_effect(session: SessionWithKernels) -> None:
                    fence = Fence.of(session, h.repository)
                    await fence.check()
                    h.clock.advance(11)  # paused here, past claim_ttl
                    fence.check_clock()
                    done.append(session.id)

                return await run_per_session(targets, side_effect)

        coordinator = Coordinator(
            h.repository,
            {"scripted": PausedBackendCall()},
            clock=h.clock,
            kinds=h.app.kinds,
            claim_owner="coordinator-a",
            claim_ttl=10.0,
        )
        report = await coordinator.tick("scripted")
        session = await h.session(sid)
        if pg:
            assert done == []
            assert [(c.result, c.error_code) for c in report.changes] == [(R.SKIPPED, "fenced")]
            assert (session.status, session.try_count) == (S.PENDING, 0)
        else:
            assert done == [sid]
            assert session.status == S.SCHEDULED


@pg_only
async def test_a_live_tick_that_outlives_its_claim_ttl_keeps_its_claim(pg: Database):
    """PostgreSQL only (SQLite has one coordinator). The daemon's coordinator renews a
    tick's claim while its handler runs: after twice claim_ttl another coordinator still
    cannot take the session, and the slow tick applies (not fenced)."""
    async with CoordinatorHarness(
        include_builtin_handlers=False, database_url=pg.url, database_schema=pg.schema
    ) as h:
        sid = await h.create_session()
        entered, gate = asyncio.Event(), asyncio.Event()

        class Slow(Scripted):
            async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult:
                entered.set()
                await gate.wait()
                return HandlerResult(successes=[t.id for t in targets])

        def coordinator(owner: str, handler: Scripted) -> Coordinator:
            return Coordinator(
                h.repository, {"scripted": handler}, clock=SystemClock(), kinds=h.app.kinds,
                claim_owner=owner, claim_ttl=1.0, renew_claims=True,
            )  # fmt: skip

        a, b = coordinator("coordinator-a", Slow()), coordinator("coordinator-b", Scripted())
        tick_a = asyncio.create_task(a.tick("scripted"))
        await asyncio.wait_for(entered.wait(), timeout=10)
        await asyncio.sleep(2.5)  # well past claim_ttl: only the renewals keep the claim
        assert (await b.tick("scripted")).fetched == 0, "A's live tick still holds it"
        gate.set()
        report = await asyncio.wait_for(tick_a, timeout=10)
        assert [(c.result, c.error_code) for c in report.changes] == [(R.SUCCESS, None)]
        assert (await h.session(sid)).status == S.SCHEDULED


# -- a real coordinator stopped with SIGSTOP inside prepare-sessions (PostgreSQL) -----------

# `drover run`, except that the first prepare() stops the whole process (SIGSTOP) right
# after it got its session: the coordinator holds the prepare-sessions claim, frozen.
_PAUSING_DAEMON = """
import os, signal, sys
from pathlib import Path
from drover.backends.{module} import {name} as Backend

original = Backend.prepare
marker = Path(sys.argv[2])

async def pause_in_prepare(self, session):
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGSTOP)
    return await original(self, session)

Backend.prepare = pause_in_prepare
sys.argv = ["drover", "--config", sys.argv[1], "run"]
from drover.cli.group import main
main()
"""


def _config(path: Path, database: Database, data: Path, backend: str) -> None:
    path.write_text(
        f'database_url = "{database.url}"\n'
        f'database_schema = "{database.schema or ""}"\n'
        f'data_dir = "{data}"\n'
        "heartbeat_interval = 0.5\nsafety_interval = 2.0\nclaim_ttl = 3.0\n"
        f"{backend}"
    )


_LOCAL = (
    '[backend]\nname = "local"\nkill_grace = 2.0\n'
    '[[backend.agents]]\nid = "shared-agent"\ncpu = 10000\nmem = 10000000\n'
)


async def _start_script(
    tmp_path: Path, script: str, config: Path, *args: str
) -> asyncio.subprocess.Process:
    path = tmp_path / f"daemon-{time.monotonic_ns()}.py"
    path.write_text(script)
    with open(tmp_path / "a.log", "ab") as handle:
        return await asyncio.create_subprocess_exec(
            sys.executable, str(path), str(config), *args, stdout=handle, stderr=handle,
            env={k: v for k, v in os.environ.items() if not k.startswith("DROVER_")},
        )  # fmt: skip


def _stopped(pid: int) -> bool:
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state == "T"


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=30)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@pg_only
async def test_a_coordinator_paused_past_its_claim_kills_nothing_once_resumed_local(
    pg: Database, tmp_path: Path
):
    """PostgreSQL only: SQLite runs one coordinator, so no claim can be taken over.

    Coordinator A takes the prepare-sessions claim on a 3-kernel session and is stopped
    (SIGSTOP) inside the handler. Past claim_ttl, coordinator B takes the session over and
    runs its kernels. A is resumed (SIGCONT): its prepare is fenced before it touches a
    process, so the kernels stay RUNNING and alive, each spawned once, and A's tick ends
    in a `fenced` row."""
    data, spawns, go, marker = (tmp_path / n for n in ("data", "spawns.log", "go", "paused"))
    config = tmp_path / "a.toml"
    _config(config, pg, data, _LOCAL)
    app = App(load_config(config, environ={}))
    await app.check_schema(auto_upgrade=True)
    script = _PAUSING_DAEMON.format(module="local", name="LocalBackend")
    a = await _start_script(tmp_path, script, config, str(marker))
    try:
        record = f'echo "$DROVER_KERNEL_ID $$" >> {spawns}'
        kernel = {"command": ends_on_word(go, before=record), "cpu": 1, "mem": 1}
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel] * 3}])
        await wait_for(lambda: _async(marker.exists()), timeout=60, what="A paused in prepare")
        await wait_for(lambda: _async(_stopped(a.pid)), what="A stopped")
        flags = {"backend.agents": BIG_AGENT, "backend.kill_grace": 2.0, "claim_ttl": 3.0}
        async with running_daemon(pg, data, **flags) as (b_app, _b):
            repo = b_app.repository
            running = await wait_for(
                lambda: _status(repo, sid, S.RUNNING), timeout=60, what="RUNNING under B"
            )
            pids = [k.runtime["pid"] for k in running.kernels]
            assert all(process_alive(p) for p in pids)

            a.send_signal(signal.SIGCONT)
            fenced = await wait_for(
                lambda: _fenced_rows(repo, sid), timeout=30, what="A's fenced prepare tick"
            )
            assert [(r.handler, r.result) for r in fenced] == [("prepare-sessions", R.SKIPPED)]
            await _unchanged_for(repo, sid, pids, seconds=3.0)

            lines = [x.split()[0] for x in spawns.read_text().splitlines() if x]
            assert sorted(lines) == sorted(k.id for k in running.kernels), "each spawned once"
            go.touch()
            s = await wait_for(
                lambda: _status(repo, sid, S.TERMINATED), timeout=60, what="TERMINATED"
            )
            assert s.result == "SUCCESS", s.kernels
            assert [(k.status, k.exit_code) for k in s.kernels] == [(K.TERMINATED, 0)] * 3
    finally:
        await _stop(a)
        await app.close()


@pg_only
async def test_a_coordinator_paused_past_its_claim_submits_nothing_once_resumed_slurm(
    pg: Database, tmp_path: Path, job_prefix: str
):
    """PostgreSQL only: SQLite runs one coordinator, so no claim can be taken over.

    The same with the Slurm backend on the real cluster: A freezes holding the
    prepare-sessions claim; B submits the kernel's job and runs it; A resumed submits no
    second job (its sbatch is fenced): one job per kernel, and the kernel stays RUNNING."""
    data, go, marker = (tmp_path / n for n in ("data", "go", "paused"))
    config = tmp_path / "a.toml"
    backend = (
        '[backend]\nname = "slurm"\nkill_grace = 3\n[backend.settings]\n'
        f'poll_interval = 0.2\njob_name_prefix = "{job_prefix}"\n'
    )
    _config(config, pg, data, backend)
    app = App(load_config(config, environ={}))
    await app.check_schema(auto_upgrade=True)
    script = _PAUSING_DAEMON.format(module="slurm", name="SlurmBackend")
    a = await _start_script(tmp_path, script, config, str(marker))
    try:
        kernel = {"command": ends_on_word(go), "cpu": 1, "mem": 64}
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel]}])
        await wait_for(lambda: _async(marker.exists()), timeout=60, what="A paused in prepare")
        await wait_for(lambda: _async(_stopped(a.pid)), what="A stopped")
        flags = {**slurm_settings(job_prefix), "claim_ttl": 3.0}
        async with running_daemon(pg, data, **flags) as (b_app, _b):
            repo = b_app.repository
            running = await wait_for(
                lambda: _status(repo, sid, S.RUNNING), timeout=90, what="RUNNING under B"
            )
            (k,) = running.kernels
            name = f"{job_prefix}{k.id}"

            a.send_signal(signal.SIGCONT)
            fenced = await wait_for(
                lambda: _fenced_rows(repo, sid), timeout=30, what="A's fenced prepare tick"
            )
            assert [(r.handler, r.result) for r in fenced] == [("prepare-sessions", R.SKIPPED)]
            await _unchanged_for(repo, sid, [], seconds=3.0)
            jobs = await jobs_named(name)
            assert [j["job_id"] for j in jobs] == [k.runtime["slurm_job_id"]], "one job"
            go.touch()
            s = await wait_for(
                lambda: _status(repo, sid, S.TERMINATED), timeout=60, what="TERMINATED"
            )
            assert [(k.status, k.exit_code) for k in s.kernels] == [(K.TERMINATED, 0)]
    finally:
        await _stop(a)
        await app.close()


# -- a destroyed kernel ends TERMINATED whoever sees it end (both databases) ---------------

# `drover run`, except that it dies (SIGKILL) right after a destroy signalled a kernel:
# the kernel's supervisor carries on alone (SIGTERM, kill_grace, SIGKILL).
_DIES_AFTER_SIGNALLING = """
import os, signal, sys
from drover.backends.local import backend as local

original = local.terminate

def terminate_then_die(watch):
    original(watch)
    os.kill(os.getpid(), signal.SIGKILL)

local.terminate = terminate_then_die
sys.argv = ["drover", "--config", sys.argv[1], "run"]
from drover.cli.group import main
main()
"""


async def test_a_kernel_destroyed_by_a_coordinator_that_died_in_its_grace_ends_terminated(
    database: Database, tmp_path: Path
):
    """A destroys a kernel that ignores SIGTERM and is killed (-9) right after signalling
    it. B, which never destroys anything (terminate-sessions disabled), watches the kernel
    die of its supervisor's SIGKILL: it ends TERMINATED `destroyed; killed by SIGKILL`. A
    kernel B's user kills from outside (SIGTERM) ends ERROR `killed by SIGTERM`."""
    data = tmp_path / "data"
    config = tmp_path / "a.toml"
    _config(config, database, data, _LOCAL)
    app = App(load_config(config, environ={}))
    await app.check_schema(auto_upgrade=True)
    a = await _start_script(tmp_path, _DIES_AFTER_SIGNALLING, config)
    try:
        stubborn = {"command": ["sh", "-c", "trap '' TERM; sleep 60 & wait"], "cpu": 1, "mem": 1}
        plain = {"command": ["sleep", "60"], "cpu": 1, "mem": 1}
        destroyed, outside = await app.repository.create_sessions(
            [{"kernels": [stubborn]}, {"kernels": [plain]}]
        )
        for sid in (destroyed, outside):
            await wait_for(
                lambda sid=sid: _status(app.repository, sid, S.RUNNING),
                timeout=60,
                what="RUNNING under A",
            )
        await app.repository.request_termination([destroyed])
        assert await asyncio.wait_for(a.wait(), timeout=60) == -signal.SIGKILL
    finally:
        await _stop(a)
    try:
        flags = {
            "backend.agents": BIG_AGENT,
            "backend.kill_grace": 2.0,
            "handlers.terminate-sessions.enabled": False,
        }
        async with running_daemon(database, data, **flags) as (b_app, _b):
            repo = b_app.repository
            victim = (await repo.get_session(outside)).kernels[0]
            os.kill(victim.runtime["pid"], signal.SIGTERM)
            ends = {}
            for sid in (destroyed, outside):
                ends[sid] = await wait_for(
                    lambda sid=sid: _status(repo, sid, S.TERMINATED), timeout=60, what="ended"
                )
        (k,) = ends[destroyed].kernels
        assert (k.status, k.exit_code, k.status_info) == (
            K.TERMINATED,
            -9,
            "destroyed; killed by SIGKILL",
        )
        (k,) = ends[outside].kernels
        assert (k.status, k.exit_code, k.status_info) == (K.ERROR, -15, "killed by SIGTERM")
    finally:
        await app.close()


@pg_only
async def test_a_watcher_on_another_coordinator_does_not_win_against_a_destroy(
    pg: Database, tmp_path: Path
):
    """PostgreSQL only (two live coordinators). A starts and watches the kernel; B, which
    starts nothing and whose own monitor is slow, destroys it. A's watcher sees the death
    by SIGTERM first: it honours B's intent, and the kernel ends TERMINATED
    `destroyed; killed by SIGTERM`, not ERROR."""
    data = tmp_path / "data"
    common = {"backend.agents": BIG_AGENT, "backend.kill_grace": 2.0, "claim_ttl": 20.0}
    watcher = {**common, "handlers.terminate-sessions.enabled": False}
    destroyer = {**common, "handlers.start-sessions.enabled": False}
    async with (
        running_daemon(pg, data, **watcher) as (a_app, _a),
        running_daemon(pg, data, **destroyer) as (b_app, _b),
    ):
        b_backend: Any = b_app.backend
        b_backend.poll_interval = 30.0  # B sees ends late: A's watcher reports first
        repo = a_app.repository
        (sid,) = await repo.create_sessions([{"kernels": [{"command": ["sleep", "60"]}]}])
        await wait_for(lambda: _status(repo, sid, S.RUNNING), timeout=60, what="RUNNING")
        await repo.request_termination([sid])
        s = await wait_for(lambda: _status(repo, sid, S.TERMINATED), timeout=60, what="ended")
    (k,) = s.kernels
    assert (k.status, k.exit_code, k.status_info) == (
        K.TERMINATED,
        -15,
        "destroyed; killed by SIGTERM",
    )
    changes = [(r.source, r.from_status, r.to_status) for r in await _kernel_changes(pg, k.id)]
    assert ("backend", K.RUNNING, K.TERMINATING) in changes, changes


# -- helpers ------------------------------------------------------------------------------


async def _kernel_changes(database: Database, kernel_id: str) -> list[Any]:
    """A kernel's status changes, read after the daemons stopped."""
    async with CoordinatorHarness(
        include_builtin_handlers=False,
        database_url=database.url,
        database_schema=database.schema,
    ) as h:
        return await h.kernel_history(kernel_id)


async def _async(value: Any) -> Any:
    return value


async def _status(repo: Any, sid: str, status: SessionStatus) -> SessionWithKernels | None:
    s = await repo.get_session(sid)
    return s if s.status == status else None


async def _fenced_rows(repo: Any, sid: str) -> list[Any]:
    return [r for r in await repo.history(sid) if r.error_code == "fenced"]


async def _unchanged_for(repo: Any, sid: str, pids: list[int], *, seconds: float) -> None:
    """The session stays RUNNING with every kernel RUNNING and alive, for ``seconds``.

    A resumed coordinator that acts does so within milliseconds; the window only gives
    a loaded machine time to show it.
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        s = await repo.get_session(sid)
        assert s.status == S.RUNNING, (s.status, [(k.status, k.status_info) for k in s.kernels])
        assert all(k.status == K.RUNNING for k in s.kernels), s.kernels
        assert all(process_alive(p) for p in pids), "a kernel process was killed"
        await asyncio.sleep(0.1)
