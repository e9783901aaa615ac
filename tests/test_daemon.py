"""End to end: the real daemon, the local backend and real processes, on both databases."""

from __future__ import annotations

from pathlib import Path

from daemon_helpers import LIFECYCLES, ends_on_word, process_alive, running_daemon, wait_for

from drover import KernelStatus, SchedulingResult, SessionStatus

S = SessionStatus
K = KernelStatus
R = SchedulingResult


def kernel(command: list[str], **extra: object) -> dict[str, object]:
    return {"command": command, "cpu": 1, "mem": 64, **extra}


async def _status(app, sid, *statuses):
    s = await app.repository.get_session(sid)
    return s if s.status in statuses else None


def _moves(rows):
    """The status-changing history rows, without stale-status races between handlers."""
    return [(r.handler, r.from_status, r.to_status) for r in rows if r.from_status != r.to_status]


async def test_a_successful_command(database, tmp_path: Path):
    """exit 0: TERMINATED, result SUCCESS, output in its log, the whole lifecycle in history."""
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        (sid,) = await app.repository.create_sessions(
            [{"kernels": [kernel(["sh", "-c", "echo hello from $DROVER_KERNEL_ID; echo e >&2"])]}]
        )
        s = await wait_for(lambda: _status(app, sid, S.TERMINATED), what="TERMINATED")
        (k,) = s.kernels
        assert (s.result, s.status_info) == ("SUCCESS", "KERNEL_EXITED")
        assert (k.status, k.exit_code) == (K.TERMINATED, 0)
        assert Path(k.runtime["stdout"]).read_text() == f"hello from {k.id}\n"
        assert Path(k.runtime["stderr"]).read_text() == "e\n"
        created, *rows = await app.repository.history(sid)
        assert (created.handler, created.result, created.from_status, created.to_status) == (
            "api",
            "CREATED",
            S.PENDING,
            S.PENDING,
        )
        assert _moves(rows) in LIFECYCLES
        assert all(r.result in (R.SUCCESS, R.SKIPPED) for r in rows)
        krows = await app.repository.kernel_history(kernel_id=k.id)
        assert [r.to_status for r in krows][-2:] == [K.RUNNING, K.TERMINATED]


async def test_a_non_zero_exit(database, tmp_path: Path):
    """exit 3: kernel ERROR with its code; session TERMINATED, FAILURE, ABNORMAL_TERMINATION."""
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        go = tmp_path / "go"
        (sid,) = await app.repository.create_sessions(
            [{"kernels": [kernel(ends_on_word(go, then="exit 3")), kernel(["sleep", "30"])]}]
        )
        await wait_for(lambda: _status(app, sid, S.RUNNING), what="RUNNING")
        go.touch()
        s = await wait_for(lambda: _status(app, sid, S.TERMINATED), what="TERMINATED")
        assert (s.result, s.status_info) == ("FAILURE", "ABNORMAL_TERMINATION")
        failed, slept = s.kernels
        assert (failed.status, failed.exit_code) == (K.ERROR, 3)
        assert failed.status_info == "exited with code 3"
        # the other kernel was stopped by terminate-sessions
        assert slept.status == K.TERMINATED
        assert not process_alive(slept.runtime["pid"])


async def test_terminating_a_long_sleep_stops_the_process(database, tmp_path: Path):
    """drover terminate on a running `sleep 300`: the process group is gone afterwards."""
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        (sid,) = await app.repository.create_sessions(
            [{"kernels": [kernel(["sh", "-c", "sleep 300 & sleep 300; wait"])]}]
        )
        s = await wait_for(lambda: _status(app, sid, S.RUNNING), what="RUNNING")
        pid = s.kernels[0].runtime["pid"]
        assert process_alive(pid)
        await app.repository.request_termination([sid])
        s = await wait_for(lambda: _status(app, sid, S.TERMINATED), what="TERMINATED")
        assert (s.status_info, s.result) == ("USER_REQUESTED", "CANCELLED")
        await wait_for(lambda: _gone(pid), what=f"pid {pid} to exit")
        assert s.kernels[0].status == K.TERMINATED


async def _gone(pid: int) -> bool:
    return not process_alive(pid)


async def test_a_session_too_large_stays_pending_with_its_reason(database, tmp_path: Path):
    """cpu=64 on a 4-cpu agent: PENDING, with the scheduler's SKIPPED reason in history."""
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        (sid,) = await app.repository.create_sessions(
            [{"kernels": [{"command": ["true"], "cpu": 64, "mem": 64}]}]
        )

        async def skipped():
            rows = await app.repository.history(sid)
            return rows if rows and rows[-1].result == R.SKIPPED else None

        created, row = await wait_for(skipped, what="a SKIPPED row")
        assert (created.handler, created.result, created.to_status) == ("api", "CREATED", S.PENDING)
        assert row.error_code == "insufficient-resources"
        assert row.message == (
            "insufficient resources: kernel 1/1 needs cpu=64 mem=64, the largest free agent "
            "test-agent has cpu=4 mem=4096 (no agent is that large even when idle)"
        )
        assert (await app.repository.get_session(sid)).status == S.PENDING


async def test_a_prepare_timeout_sends_the_session_back_to_pending(database, tmp_path: Path):
    """A setup that hangs past prepare-sessions' timeout: EXPIRED, back to PENDING, setup killed."""
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        (sid,) = await app.repository.create_sessions(
            [
                {
                    "kernels": [kernel(["true"], setup="sleep 60")],
                    "spec": {"options": {"prepare-sessions": {"timeout": 1}}},
                }
            ]
        )

        async def expired():
            rows = await app.repository.history(sid)
            return [r for r in rows if r.result == R.EXPIRED] or None

        (row, *_) = await wait_for(expired, what="an EXPIRED row")
        assert (row.handler, row.from_status, row.to_status) == (
            "prepare-sessions",
            S.PREPARING,
            S.PENDING,
        )
        assert "timeout=1s" in (row.message or "")
        await app.repository.request_termination([sid])


async def test_a_start_timeout_sends_the_session_back_to_pending(database, tmp_path: Path):
    """A kernel that never finishes creating: EXPIRED after start-sessions' timeout, PENDING.

    Local processes report RUNNING as soon as they are spawned, so creation
    cannot hang on the local backend; this runs the real daemon on the
    simulated backend with a kernel whose creation hangs.
    """
    async with running_daemon(database, tmp_path / "data", **{"backend.name": "simulated"}) as (
        app,
        _daemon,
    ):
        (sid,) = await app.repository.create_sessions(
            [
                {
                    "kernels": [{"cpu": 1, "mem": 64, "sim": {"create": "hang"}}],
                    "spec": {"options": {"start-sessions": {"timeout": 1}}},
                }
            ]
        )

        async def expired():
            rows = await app.repository.history(sid)
            return [r for r in rows if r.result == R.EXPIRED] or None

        (row, *_) = await wait_for(expired, what="an EXPIRED row")
        assert (row.handler, row.from_status, row.to_status) == (
            "start-sessions",
            S.CREATING,
            S.PENDING,
        )
        assert "timeout=1s" in (row.message or "")
        await app.repository.request_termination([sid])


async def test_many_instant_commands_all_end(database, tmp_path: Path):
    """Kernels that exit before their RUNNING report commits are not lost (60 x `true`)."""
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        ids = await app.repository.create_sessions(
            [{"kernels": [kernel(["true"]), kernel(["true"])]} for _ in range(30)]
        )

        async def all_done():
            counts = await app.repository.count_by_status()
            return counts.get(S.TERMINATED, 0) == len(ids)

        await wait_for(all_done, timeout=60, what="every session TERMINATED")
        results = {s.result for s in await app.repository.list_sessions()}
        assert results == {"SUCCESS"}


async def test_the_daemon_records_ticks_for_stats(database, tmp_path: Path):
    """Ticks that fetched something are stored, so `drover stats` works without the daemon."""
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel(["true"])]}])
        await wait_for(lambda: _status(app, sid, S.TERMINATED), what="TERMINATED")

        async def recorded():
            rows = await app.repository.tick_rows(None)
            # The first and the last handler of every path: a kernel that exits while
            # start-sessions is applying may end the session through
            # detect-start-failure rather than promote-to-running.
            return {handler for handler, _d, _c in rows} >= {
                "schedule-sessions",
                "promote-to-terminated",
            }

        await wait_for(recorded, what="tick records")
        rows = await app.repository.tick_rows(None)
        schedule = [c for h, _d, c in rows if h == "schedule-sessions"]
        assert {"SUCCESS": 1} in schedule


async def test_history_retention_prunes_only_ended_sessions(database, tmp_path: Path):
    """history.retention: ended sessions' old rows go; a live session keeps its history."""
    async with running_daemon(database, tmp_path / "data") as (app, _daemon):
        ended, live = await app.repository.create_sessions(
            [
                {"kernels": [{"cpu": 999, "command": ["true"]}]},
                {"kernels": [kernel(["sleep", "60"])]},
            ]
        )
        await app.repository.request_termination([ended])  # PENDING -> CANCELLED, an api row
        await wait_for(lambda: _status(app, live, S.RUNNING), what="live RUNNING")
        assert await app.repository.history(ended) != []
    # A second daemon on the same database, with a retention of one second.
    async with running_daemon(
        database,
        tmp_path / "data",
        **{"history.retention": "1s", "history.prune_interval": 0.2},
    ) as (app, _daemon):

        async def pruned():
            return await app.repository.history(ended) == []

        await wait_for(pruned, what="the ended session's history to be pruned")
        rows = await app.repository.history(live)
        assert [r.to_status for r in rows][-1] == S.RUNNING  # live rows, latest included
        await app.repository.request_termination([live])
