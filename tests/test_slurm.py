"""The slurm backend against a real Slurm (scripts/slurm-up.sh: nodes n1 and n2), on both databases.

Each test uses a job name prefix of its own and cancels its leftover jobs, so
tests never see each other's jobs. The cluster missing is a failure, not a skip.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from pathlib import Path

import attrs
import pytest
from daemon_helpers import (
    LIFECYCLES,
    PRUNING,
    daemon_flags,
    ends_on_word,
    files_of_ended_kernels_go,
    running_daemon,
    wait_for,
)
from slurm_helpers import (  # noqa: F401  (fixtures)
    FINISHED,
    NODE_CPUS,
    NODE_MEM,
    NODES,
    ROOT,
    job_prefix_fixture,
    jobs_named,
    live_job_ids,
    run,
    slurm_cluster_fixture,
    slurm_settings,
)

from drover import InvalidSpecError, KernelStatus, SchedulingResult, SessionStatus
from drover.app import App
from drover.backends.slurm._client import SlurmClient
from drover.backends.slurm._reports import ended, progress
from drover.backends.slurm._script import SpecProblem, job_script, resource_args
from drover.backends.slurm._settings import SlurmSettings, settings_from
from drover.backends.slurm._tools import (
    SlurmJob,
    decode_exit,
    job_from_fields,
    parse_jobcomp,
    parse_key_values,
    parse_sinfo,
    parse_squeue_json,
)
from drover.config import ConfigError, load_config

S = SessionStatus
K = KernelStatus
R = SchedulingResult


async def _status(app, sid, *statuses):
    s = await app.repository.get_session(sid)
    return s if s.status in statuses else None


def _moves(rows):
    return [(r.handler, r.from_status, r.to_status) for r in rows if r.from_status != r.to_status]


async def test_two_kernels_land_on_two_nodes_and_succeed(database, tmp_path: Path, job_prefix):
    """Each kernel takes a whole node, so the two are placed on n1 and n2; both exit 0."""
    flags = slurm_settings(job_prefix)
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        go = tmp_path / "go"
        command = ends_on_word(go, before="echo on $SLURMD_NODENAME")
        kernel = {"command": command, "cpu": NODE_CPUS, "mem": 64}
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel, kernel]}])
        await wait_for(lambda: _status(app, sid, S.RUNNING), timeout=40, what="RUNNING")
        go.touch()
        s = await wait_for(lambda: _status(app, sid, S.TERMINATED), timeout=40, what="TERMINATED")
        assert (s.result, s.status_info) == ("SUCCESS", "KERNEL_EXITED")
        assert sorted(k.agent_id for k in s.kernels) == list(NODES)
        for k in s.kernels:
            assert (k.status, k.exit_code) == (K.TERMINATED, 0)
            assert k.runtime["node"] == k.agent_id
            assert Path(k.runtime["stdout"]).read_text() == f"on {k.agent_id}\n"
            (job,) = await jobs_named(f"{job_prefix}{k.id}")
            assert (job["job_id"], job["job_state"]) == (k.runtime["slurm_job_id"], "COMPLETED")
            assert (job["nodes"], job["cpus"]) == (k.agent_id, NODE_CPUS)
        assert _moves(await app.repository.history(sid)) in LIFECYCLES


async def test_a_submission_is_checked_against_slurms_gres_without_starting_the_backend(
    database, tmp_path: Path, job_prefix
):
    """`drover submit` never starts the backend: the slots come from sinfo all the same.

    The nodes offer gpu:2 (scripts/slurm-up.sh); a gpu kernel used to be refused
    with "the known slots are cpu, mem", since Slurm's nodes were read only in start().
    """
    flags = daemon_flags(database, tmp_path / "data", **slurm_settings(job_prefix))
    app = App(load_config(None, environ={}, flags=flags))
    try:
        await app.upgrade()
        kernel = {"command": ["true"], "cpu": 1, "mem": 64, "gpu": 1}
        (sid,) = await app.submit([{"kernels": [kernel]}])
        assert [k.spec["gpu"] for k in (await app.repository.get_session(sid)).kernels] == [1]
        message = "no agent has the resource slot(s) 'tpu'; the known slots are cpu, gpu, mem"
        with pytest.raises(InvalidSpecError, match=re.escape(message)):
            await app.submit([{"kernels": [{**kernel, "tpu": 1}]}])
        assert [s.id for s in await app.repository.list_sessions()] == [sid]
    finally:
        await app.close()


async def test_exit_3_ends_in_error_with_the_code_and_slurm_reason(
    database, tmp_path: Path, job_prefix
):
    """A job that exits 3: kernel ERROR with code 3 and Slurm's state and reason."""
    flags = slurm_settings(job_prefix)
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        go = tmp_path / "go"
        kernel = {"command": ends_on_word(go, then="echo failing >&2; exit 3"), "cpu": 1, "mem": 64}
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel]}])
        await wait_for(lambda: _status(app, sid, S.RUNNING), timeout=40, what="RUNNING")
        go.touch()
        s = await wait_for(lambda: _status(app, sid, S.TERMINATED), timeout=40, what="TERMINATED")
        (k,) = s.kernels
        job_id = k.runtime["slurm_job_id"]
        assert (s.result, s.status_info) == ("FAILURE", "ABNORMAL_TERMINATION")
        assert (k.status, k.exit_code) == (K.ERROR, 3)
        assert k.status_info == f"exited with code 3; slurm job {job_id} FAILED (NonZeroExitCode)"
        assert Path(k.runtime["stderr"]).read_text() == "failing\n"
        (job,) = await jobs_named(f"{job_prefix}{k.id}")
        assert (job["job_state"], job["exit_code"]) == ("FAILED", 3 << 8)


async def test_terminating_a_running_job_cancels_it(database, tmp_path: Path, job_prefix):
    """`sleep 600` terminated: no job left in squeue, the session TERMINATED, USER_REQUESTED."""
    flags = slurm_settings(job_prefix)
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        kernel = {"command": ["sleep", "600"], "cpu": 1, "mem": 64}
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel]}])
        s = await wait_for(lambda: _status(app, sid, S.RUNNING), timeout=40, what="RUNNING")
        name = f"{job_prefix}{s.kernels[0].id}"
        assert await live_job_ids(name) == [str(s.kernels[0].runtime["slurm_job_id"])]
        await app.repository.request_termination([sid])
        s = await wait_for(lambda: _status(app, sid, S.TERMINATED), timeout=30, what="TERMINATED")
        assert (s.status_info, s.result) == ("USER_REQUESTED", "CANCELLED")
        (k,) = s.kernels
        assert k.status == K.TERMINATED
        assert k.status_info.startswith(f"destroyed: slurm job {k.runtime['slurm_job_id']} ")
        assert await live_job_ids(name) == []
        (job,) = await jobs_named(name)
        assert job["job_state"] in FINISHED


async def test_an_ended_jobs_kernel_files_are_pruned_a_running_ones_never(
    database, tmp_path: Path, job_prefix
):
    """history.kernel_files_retention holds for the slurm backend: `kernels/<id>/` of a
    kernel whose job completed (its output) goes once older than the retention; that of a
    running job stays however old. Before, only the local backend pruned."""
    data = tmp_path / "data"
    flags = {**slurm_settings(job_prefix), **PRUNING}
    async with running_daemon(database, data, **flags) as (app, _daemon):
        done, live = await app.repository.create_sessions(
            [
                {"kernels": [{"command": ["sh", "-c", "echo bye"], "cpu": 1, "mem": 64}]},
                {"kernels": [{"command": ["sleep", "600"], "cpu": 1, "mem": 64}]},
            ]
        )
        ended = await wait_for(
            lambda: _status(app, done, S.TERMINATED), timeout=40, what="TERMINATED"
        )
        assert Path(ended.kernels[0].runtime["stdout"]).read_text() == "bye\n"
        running = await wait_for(lambda: _status(app, live, S.RUNNING), timeout=40, what="RUNNING")
        await files_of_ended_kernels_go(app, data, done, live)
        name = f"{job_prefix}{running.kernels[0].id}"
        assert await live_job_ids(name) == [str(running.kernels[0].runtime["slurm_job_id"])]
        await app.repository.request_termination([live])
        await wait_for(lambda: _status(app, live, S.TERMINATED), timeout=40, what="the end")


async def test_a_request_no_node_can_hold_waits_pending_and_is_never_submitted(
    database, tmp_path: Path, job_prefix
):
    """cpu=3 on 2-cpu nodes: PENDING with the scheduler's reason; Slurm never sees a job."""
    flags = slurm_settings(job_prefix)
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        kernel = {"command": ["true"], "cpu": NODE_CPUS + 1, "mem": 64}
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel]}])

        async def skipped_twice():
            rows = await app.repository.history(sid)
            return rows if rows and rows[-1].attempts >= 2 else None

        created, row = await wait_for(skipped_twice, what="two SKIPPED ticks")
        assert (created.handler, created.result, created.to_status) == ("api", "CREATED", S.PENDING)
        assert (row.result, row.error_code) == (R.SKIPPED, "insufficient-resources")
        assert row.message == (
            f"insufficient resources: kernel 1/1 needs cpu={NODE_CPUS + 1} mem=64, the largest "
            f"free agent n2 has cpu={NODE_CPUS} mem={NODE_MEM} "
            "(no agent is that large even when idle)"
        )
        s = await app.repository.get_session(sid)
        assert s.status == S.PENDING
        assert await jobs_named(f"{job_prefix}{s.kernels[0].id}") == []


async def test_drover_logs_shows_output_with_setup_env_cwd_and_slurm_placement(
    database, tmp_path: Path, job_prefix
):
    """placement=false: Slurm picks the node (recorded); `drover logs` prints the job's output."""
    flags = slurm_settings(job_prefix, placement=False)
    workdir = tmp_path / "work"
    workdir.mkdir()
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        kernel = {
            "command": ["sh", "-c", 'echo "$GREETING from $(pwd)"; cat made-by-setup'],
            "setup": "echo set up > made-by-setup",
            "env": {"GREETING": "hello world"},
            "cwd": str(workdir),
            "cpu": 1,
            "mem": 64,
        }
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel]}])
        s = await wait_for(lambda: _status(app, sid, S.TERMINATED), timeout=40, what="TERMINATED")
        (k,) = s.kernels
        assert (s.result, k.exit_code) == ("SUCCESS", 0)
        assert k.runtime["node"] in NODES
        env = {
            **{n: v for n, v in os.environ.items() if not n.startswith("DROVER_")},
            "DROVER_DATABASE_URL": database.url,
            "DROVER_DATABASE_SCHEMA": database.schema or "",
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "drover",
            "logs",
            sid,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=tmp_path,
        )
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        assert out.decode() == f"hello world from {workdir}\nset up\n"


async def test_a_job_submitted_just_before_a_crash_is_adopted_not_submitted_again(
    database, tmp_path: Path, job_prefix
):
    """The coordinator died after sbatch, before recording the job: the job is adopted."""
    data = tmp_path / "data"
    flags = slurm_settings(job_prefix)
    loaded = load_config(
        None,
        environ={},
        flags={"database_url": database.url, "database_schema": database.schema or ""},
    )
    app = App(loaded)
    await app.check_schema(auto_upgrade=True)
    try:
        (sid,) = await app.repository.seed_sessions(
            [
                {
                    "status": "SCHEDULED",
                    "kernels": [
                        {"command": ["true"], "cpu": 1, "status": "SCHEDULED", "agent_id": "n1"}
                    ],
                }
            ]
        )
        kid = (await app.repository.get_session(sid)).kernels[0].id
    finally:
        await app.close()
    out = data / "kernels" / kid / "stdout.log"
    out.parent.mkdir(parents=True)
    name = f"{job_prefix}{kid}"
    submitted = await run(
        "sbatch",
        "--parsable",
        f"--job-name={name}",
        f"--output={out}",
        "--nodelist=n1",
        "--mem=64M",
        stdin="#!/bin/sh\necho the job from before the crash\n",
    )
    async with running_daemon(database, data, **flags) as (app, _daemon):
        s = await wait_for(lambda: _status(app, sid, S.TERMINATED), timeout=40, what="TERMINATED")
        (k,) = s.kernels
        assert (s.result, k.runtime["slurm_job_id"]) == ("SUCCESS", int(submitted))
        assert [j["job_id"] for j in await jobs_named(name)] == [int(submitted)]
        assert out.read_text() == "the job from before the crash\n"


async def test_a_transient_sbatch_failure_is_retried_without_a_second_job(
    database, tmp_path: Path, job_prefix
):
    """sbatch submits but reports a timeout: drover finds the job instead of submitting again."""
    marker = tmp_path / "failed-once"
    fake = tmp_path / "flaky-sbatch"
    fake.write_text(
        "#!/bin/sh\n"
        'out=$(sbatch "$@") || exit $?\n'
        f"if [ ! -e {marker} ]; then touch {marker}; "
        'echo "sbatch: error: Socket timed out on send/recv operation" >&2; exit 1; fi\n'
        'echo "$out"\n'
    )
    fake.chmod(0o755)
    flags = slurm_settings(job_prefix, sbatch=str(fake))
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        kernel = {"command": ["true"], "cpu": 1, "mem": 64}
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel]}])
        s = await wait_for(lambda: _status(app, sid, S.TERMINATED), timeout=40, what="TERMINATED")
        assert marker.exists()
        (k,) = s.kernels
        assert s.result == "SUCCESS"
        assert [j["job_id"] for j in await jobs_named(f"{job_prefix}{k.id}")] == [
            k.runtime["slurm_job_id"]
        ]


async def test_jobs_that_left_the_controller_are_read_from_the_jobcomp_file(
    database, tmp_path: Path, job_prefix
):
    """squeue and scontrol no longer know a finished job: its end comes from jobcomp."""
    squeue = tmp_path / "squeue-without-finished"
    finished = json.dumps(sorted(FINISHED))
    squeue.write_text(
        "#!/bin/sh\n"
        "squeue --json | python3 -c 'import json, sys; d = json.load(sys.stdin); "
        f'd["jobs"] = [j for j in d["jobs"] if j["job_state"] not in {finished}]; '
        "json.dump(d, sys.stdout)'\n"
    )
    scontrol = tmp_path / "scontrol-forgetful"
    scontrol.write_text(
        "#!/bin/sh\n"
        'if [ "$2" = show ] && [ "$3" = job ]; then '
        'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1; fi\n'
        'exec scontrol "$@"\n'
    )
    for tool in (squeue, scontrol):
        tool.chmod(0o755)
    flags = slurm_settings(job_prefix, squeue=str(squeue), scontrol=str(scontrol))
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        go = tmp_path / "go"
        kernel = {"command": ends_on_word(go, then="exit 4"), "cpu": 1, "mem": 64}
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel]}])
        await wait_for(lambda: _status(app, sid, S.RUNNING), timeout=40, what="RUNNING")
        go.touch()
        s = await wait_for(lambda: _status(app, sid, S.TERMINATED), timeout=40, what="TERMINATED")
        (k,) = s.kernels
        assert (k.status, k.exit_code) == (K.ERROR, 4)
        assert k.status_info == f"exited with code 4; slurm job {k.runtime['slurm_job_id']} FAILED"


def _write_config(path: Path, database, data_dir: Path, prefix: str) -> None:
    path.write_text(
        f'database_url = "{database.url}"\n'
        f'database_schema = "{database.schema or ""}"\n'
        f'data_dir = "{data_dir}"\n'
        "heartbeat_interval = 0.5\n"
        "safety_interval = 2.0\n"
        'log_format = "json"\n'
        "[backend]\n"
        'name = "slurm"\n'
        "kill_grace = 3\n"
        "[backend.settings]\n"
        "poll_interval = 0.2\n"
        f'job_name_prefix = "{prefix}"\n'
    )


async def _start(config: Path, log: Path) -> asyncio.subprocess.Process:
    with open(log, "ab") as handle:  # the child keeps its own copy of the descriptor
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "drover",
            "--config",
            str(config),
            "run",
            stdout=handle,
            stderr=handle,
            env={k: v for k, v in os.environ.items() if not k.startswith("DROVER_")},
        )


@pytest.mark.slow
async def test_a_coordinator_killed_with_sigkill_is_restarted_and_adopts_its_jobs(
    database, tmp_path: Path, job_prefix
):
    """kill -9 while jobs run; on restart live jobs are adopted, finished ones reported.

    No kernel ever has a second job: squeue (which keeps finished jobs for an
    hour here) lists exactly one job per kernel name.
    """
    config, log = tmp_path / "drover.toml", tmp_path / "daemon.log"
    _write_config(config, database, tmp_path / "data", job_prefix)
    app = App(load_config(config, environ={}))
    await app.check_schema(auto_upgrade=True)
    repo = app.repository
    first = await _start(config, log)
    second: asyncio.subprocess.Process | None = None
    try:
        go, quick_go = tmp_path / "go", tmp_path / "quick-go"
        sleeper = {"command": ends_on_word(go), "cpu": 1, "mem": 64}
        # Ends on the test's word, not after a fixed delay: a job that ends before
        # its session is RUNNING is a start failure, which a loaded machine can cause.
        quick = {"command": ends_on_word(quick_go, before="echo done"), "cpu": 1, "mem": 64}
        long_one, short_one = await repo.create_sessions(
            [{"kernels": [sleeper, sleeper]}, {"kernels": [quick]}]
        )

        async def all_running():
            found = [await repo.get_session(s) for s in (long_one, short_one)]
            return found if all(s.status == S.RUNNING for s in found) else None

        running = await wait_for(all_running, timeout=40, what="both sessions RUNNING")
        kernels = [k for s in running for k in s.kernels]
        first.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(first.wait(), timeout=10) == -signal.SIGKILL
        for k in kernels[:2]:
            assert await live_job_ids(f"{job_prefix}{k.id}"), "jobs outlive the coordinator"
        # While no coordinator runs, the quick job ends.
        quick_go.touch()
        quick_name = f"{job_prefix}{kernels[2].id}"
        await wait_for(lambda: _no_live(quick_name), timeout=20, what="the quick job to end")

        second = await _start(config, log)
        await wait_for(lambda: _adopted(log), timeout=20, what="the restarted coordinator")
        go.touch()
        for sid in (long_one, short_one):
            s = await wait_for(lambda sid=sid: _in(repo, sid), timeout=40, what="TERMINATED")
            changes = [
                (r.source, r.from_status, r.to_status, r.message)
                for k in s.kernels
                for r in await repo.kernel_history(kernel_id=k.id)
            ]
            assert s.result == "SUCCESS", (s, changes, await repo.history(sid))
            assert all((k.status, k.exit_code) == (K.TERMINATED, 0) for k in s.kernels)
        for k in kernels:
            jobs = await jobs_named(f"{job_prefix}{k.id}")
            assert [(j["job_id"], j["job_state"]) for j in jobs] == [
                (k.runtime["slurm_job_id"], "COMPLETED")
            ]
        assert await _adopted(log) == [
            "slurm backend started: 2 node(s) offered, 3 job(s) "
            "adopted, jobcomp file /var/log/slurm/jobcomp.log"
        ]
    finally:
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), timeout=30)
        await app.close()


async def _adopted(log: Path) -> list[str]:
    """The restarted coordinator's start-up line (the first says 0 jobs adopted)."""
    messages = [json.loads(x)["message"] for x in log.read_text().splitlines() if x[:1] == "{"]
    return [m for m in messages if "job(s) adopted" in m and "0 job(s)" not in m]


async def _no_live(name: str) -> bool:
    return await live_job_ids(name) == []


async def _in(repo, sid):
    s = await repo.get_session(sid)
    return s if s.status == S.TERMINATED else None


async def test_drained_nodes_are_not_offered(job_prefix):
    """A drained node disappears from the agents; resumed, it comes back."""
    client = SlurmClient(SlurmSettings())
    assert sorted(n.name for n in await client.nodes() if n.usable) == list(NODES)
    await run("scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=drover-test")
    try:
        nodes = {n.name: n for n in await client.nodes()}
        assert not nodes["n1"].usable
        assert nodes["n2"].usable
        assert (nodes["n2"].cpus, nodes["n2"].mem) == (NODE_CPUS, NODE_MEM)
    finally:
        await run("scontrol", "update", "NodeName=n1", "State=RESUME")
    await wait_for(lambda: _usable(client), what="n1 back")


async def _usable(client: SlurmClient) -> bool:
    return sorted(n.name for n in await client.nodes() if n.usable) == list(NODES)


# -- the pure parts, without a cluster ------------------------------------------------


def test_exit_codes_are_decoded_from_raw_wait_statuses():
    """22.05's squeue gives wait statuses; later releases give return codes and signals."""
    assert [decode_exit(raw) for raw in (0, 768, 15, 143 << 8, None)] == [0, 3, -15, 143, None]
    assert decode_exit({"return_code": 3, "signal": {"signal_id": 0}}) == 3
    assert decode_exit({"return_code": 0, "signal": {"signal_id": {"number": 9}}}) == -9
    assert decode_exit({"set": True, "number": 512}) == 2


def test_squeue_json_scontrol_and_jobcomp_lines_are_read():
    """The same job, as squeue --json, scontrol -o and the jobcomp file show it."""
    squeue = {
        "jobs": [
            {
                "job_id": 7,
                "name": "drover-k1",
                "job_state": "FAILED",
                "exit_code": 768,
                "state_reason": "NonZeroExitCode",
                "nodes": "n2",
            },
            {
                "job_id": 8,
                "name": "other",
                "job_state": ["PENDING"],
                "exit_code": 0,
                "state_reason": "Resources",
                "nodes": "",
            },
        ]
    }
    jobs = parse_squeue_json(json.dumps(squeue))
    assert jobs[7] == SlurmJob(7, "drover-k1", "FAILED", "NonZeroExitCode", 3, "n2")
    assert (jobs[8].state, jobs[8].node, jobs[8].allocated, jobs[8].finished) == (
        "PENDING",
        None,
        False,
        False,
    )
    assert (jobs[7].allocated, jobs[7].finished) == (True, True)
    assert jobs[7].describe() == "slurm job 7 FAILED (NonZeroExitCode)"
    line = (
        "JobId=7 JobName=drover-k1 UserId=root(0) JobState=CANCELLED Reason=None "
        "Dependency=(null) ExitCode=0:15 RunTime=00:00:01 NodeList=n2 BatchHost=n2 "
        "Command=(null) WorkDir=/tmp/a dir with spaces StdOut=/tmp/o"
    )
    fields = parse_key_values(line)
    assert fields["WorkDir"] == "/tmp/a dir with spaces"
    assert job_from_fields(fields) == SlurmJob(7, "drover-k1", "CANCELLED", None, -15, "n2")
    jobcomp = (
        "JobId=9 UserId=root(0) GroupId=root(0) Name=drover-k2 JobState=TIMEOUT "
        "Partition=main NodeList=n1 DerivedExitCode=0:0 ExitCode=0:0\n"
        "JobId=10 UserId=root(0) Name=someone-else JobState=COMPLETED NodeList=n1 ExitCode=0:0\n"
    )
    assert parse_jobcomp(jobcomp, "drover-") == {
        9: SlurmJob(9, "drover-k2", "TIMEOUT", None, 0, "n1")
    }


def test_nodes_drained_down_or_not_responding_are_not_usable():
    """sinfo lines: GRES are counted per name; only nodes that take jobs are usable."""
    text = "\n".join(
        [
            "a|4|8000|gpu:tesla:2(S:0-1),mps:100|idle|main*",
            "a|4|8000|gpu:tesla:2(S:0-1),mps:100|idle|other",
            "b|8|16000|(null)|mixed|main*",
            "c|8|16000|(null)|drained|main*",
            "d|8|16000|(null)|draining|main*",
            "e|8|16000|(null)|down*|main*",
            "f|8|16000|(null)|idle*|main*",
            "g|8|16000|(null)|idle~|main*",
            "h|8|16000|(null)|mixed+drain|main*",
            "i|8|16000|gpu:1,gpu:v100:2|allocated|main*",
        ]
    )
    nodes = {n.name: n for n in parse_sinfo(text)}
    assert nodes["a"].gres == {"gpu": 2, "mps": 100}
    assert nodes["a"].partitions == ("main*", "other")
    assert nodes["i"].gres == {"gpu": 3}
    assert sorted(n for n, node in nodes.items() if node.usable) == ["a", "b", "g", "i"]


def test_resource_slots_map_to_sbatch_arguments_and_unknown_ones_are_refused():
    """cpu -> --cpus-per-task, mem -> --mem, GRES by name -> --gres; others name the known."""
    spec = {"command": ["x"], "cpu": 1.5, "mem": 100.5, "gpu": 2, "tpu": 0, "env": {}}
    assert resource_args(spec, ["gpu", "mps"]) == [
        "--nodes=1",
        "--ntasks=1",
        "--cpus-per-task=2",
        "--mem=101M",
        "--gres=gpu:2",
    ]
    assert resource_args({"command": ["x"]}, []) == ["--nodes=1", "--ntasks=1", "--cpus-per-task=1"]
    with pytest.raises(SpecProblem) as refused:
        resource_args({"cpu": 1, "tpu": 1}, ["gpu"])
    assert str(refused.value) == (
        "resource slot 'tpu' (= 1) has no Slurm equivalent; "
        "the slots Slurm offers here are: cpu, mem, gpu"
    )
    with pytest.raises(SpecProblem, match="whole number"):
        resource_args({"gpu": 0.5}, ["gpu"])


def test_the_job_script_quotes_env_runs_setup_and_execs_the_command():
    """Values are shell-quoted; a failed setup ends the job with its own exit code."""
    spec = {"command": ["echo", "it's"], "env": {"A": "x y$z"}, "setup": "make it"}
    script = job_script(spec, cwd="/w d", session_id="s1", kernel_id="k1")
    assert script.splitlines() == [
        "#!/bin/sh",
        "export A='x y$z'",
        "export DROVER_SESSION_ID=s1",
        "export DROVER_KERNEL_ID=k1",
        "mkdir -p -- '/w d'; cd '/w d' || exit 126",
        "/bin/sh -c 'make it' || { code=$?; "
        'echo "drover: setup failed with exit code $code" >&2; exit $code; }',
        "exec echo 'it'\"'\"'s'",
    ]
    with pytest.raises(SpecProblem, match="not an environment variable name"):
        job_script({"command": ["x"], "env": {"A-B": "1"}}, cwd="/", session_id="s", kernel_id="k")
    with pytest.raises(SpecProblem, match="'command' must be a non-empty list"):
        job_script({"command": "x"}, cwd="/", session_id="s", kernel_id="k")


def _job(state: str, code: int | None = 0, node: str | None = "n1", reason: str | None = None):
    return SlurmJob(5, "drover-k", state, reason, code, node)


@pytest.mark.parametrize(
    ("job", "destroying", "status", "code", "message"),
    [
        (_job("COMPLETED"), False, K.TERMINATED, 0, None),
        (
            _job("FAILED", 3, reason="NonZeroExitCode"),
            False,
            K.ERROR,
            3,
            "exited with code 3; slurm job 5 FAILED (NonZeroExitCode)",
        ),
        (
            _job("OUT_OF_MEMORY", -9, reason="OutOfMemory"),
            False,
            K.ERROR,
            -9,
            "killed by signal 9; slurm job 5 OUT_OF_MEMORY (OutOfMemory)",
        ),
        (
            _job("TIMEOUT", -15, reason="TimeLimit"),
            False,
            K.ERROR,
            -15,
            "killed by signal 15; slurm job 5 TIMEOUT (TimeLimit)",
        ),
        (
            _job("NODE_FAIL", None, reason="NodeDown"),
            False,
            K.ERROR,
            None,
            "slurm job 5 NODE_FAIL (NodeDown)",
        ),
        (_job("CANCELLED", -15), False, K.TERMINATED, -15, "slurm job 5 CANCELLED"),
        (_job("CANCELLED", 0, node=None), False, K.CANCELLED, 0, "slurm job 5 CANCELLED"),
        (
            _job("FAILED", -15, reason="JobLaunchFailure"),
            True,
            K.TERMINATED,
            -15,
            "destroyed: slurm job 5 FAILED (JobLaunchFailure)",
        ),
        (_job("CANCELLED", 0, node=None), True, K.CANCELLED, 0, "destroyed: slurm job 5 CANCELLED"),
    ],
)
def test_how_a_finished_job_ends_its_kernel(job, destroying, status, code, message):
    """COMPLETED, FAILED/OOM/TIMEOUT/NODE_FAIL, CANCELLED before or after it ran, destroyed."""
    report = ended("k", job, frozenset({K.RUNNING}), destroying=destroying)
    assert (report.status, report.exit_code, report.message) == (status, code, message)


def test_a_kernel_walks_the_lifecycle_in_order_whatever_slurm_shows():
    """A job already over when first seen still goes PREPARED, RUNNING, then its end."""
    done = _job("FAILED", 3, reason="NonZeroExitCode")
    step = progress("k", done, K.PREPARING, destroying=False, runtime={"slurm_job_id": 5})
    assert [(r.status, r.runtime) for r in step] == [
        (K.PREPARED, {"slurm_job_id": 5, "node": "n1"})
    ]
    assert progress("k", done, K.PREPARED, destroying=False, runtime={}) == []
    # An end comes as the kernel's own verdict, then the destroy's: the second applies only
    # to a kernel a destroy marked TERMINATING (drover.backends.stopping).
    step = progress("k", done, K.CREATING, destroying=False, runtime={})
    assert [(r.status, r.expected) for r in step] == [
        (K.RUNNING, {K.PREPARED, K.CREATING}),
        (K.ERROR, {K.RUNNING}),
        (K.TERMINATED, {K.TERMINATING}),
    ]
    step = progress("k", done, K.RUNNING, destroying=False, runtime={})
    assert [(r.status, r.expected, r.message) for r in step] == [
        (K.ERROR, {K.RUNNING}, "exited with code 3; slurm job 5 FAILED (NonZeroExitCode)"),
        (K.TERMINATED, {K.TERMINATING}, "destroyed: slurm job 5 FAILED (NonZeroExitCode)"),
    ]
    step = progress("k", done, K.TERMINATING, destroying=True, runtime={})
    assert [(r.status, r.message) for r in step] == [
        (K.TERMINATED, "destroyed: slurm job 5 FAILED (NonZeroExitCode)")
    ]
    configuring = _job("CONFIGURING", node="n1")
    assert [
        r.status for r in progress("k", configuring, K.PREPARING, destroying=False, runtime={})
    ] == [K.PULLING]
    waiting = _job("PENDING", node=None, reason="Resources")
    assert progress("k", waiting, K.PREPARING, destroying=False, runtime={}) == []
    refused = _job("FAILED", 1, node=None, reason="BadConstraints")
    report, _if_destroyed = progress("k", refused, K.PREPARING, destroying=False, runtime={})
    assert (report.status, report.message) == (
        K.ERROR,
        "exited with code 1; slurm job 5 FAILED (BadConstraints)",
    )


async def test_wrong_settings_are_configuration_errors(tmp_path: Path):
    """An unknown key or a wrong type under [backend.settings] names the key."""
    for settings, problem in [
        ({"partitoin": "main"}, "partitoin"),
        ({"poll_interval": "soon"}, "backend.settings.poll_interval"),
        ({"sbatch_args": [1]}, "backend.settings.sbatch_args"),
    ]:
        flags = {
            "database_url": f"sqlite+aiosqlite:///{tmp_path}/d.db",
            "backend.name": "slurm",
            "backend.settings": settings,
        }
        app = App(load_config(None, environ={}, flags=flags))
        try:
            with pytest.raises(ConfigError, match=problem):
                _ = app.backend
        finally:
            await app.close()
    assert settings_from({"sbatch_args": "--time=1:00 --qos='a b'"}).sbatch_args == [
        "--time=1:00",
        "--qos=a b",
    ]


def test_every_slurm_setting_is_documented():
    """Each field of SlurmSettings has a row in docs/slurm.md and in docs/configuration.md."""
    docs = ROOT / "docs"
    fields = {f.name for f in attrs.fields(SlurmSettings)}
    for page in ("slurm.md", "configuration.md"):
        text = (docs / page).read_text()
        rows = [line for line in text.splitlines() if line.startswith("| **`")]
        documented = {name for row in rows for name in re.findall(r"\*\*`([a-z_]+)`\*\*", row)}
        assert documented == fields, page
