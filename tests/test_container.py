"""The container backend against a real Podman (scripts/podman-up.sh), on both databases.

Each test uses a label prefix of its own and removes its leftover containers.
Podman missing is a failure, not a skip.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import attrs
import pytest
from conftest import Database
from container_helpers import (
    IMAGE,
    REGISTRY_IMAGE,
    Podman,
    container_flags,
)
from daemon_helpers import (
    LIFECYCLES,
    PRUNING,
    daemon_flags,
    ends_on_word,
    files_of_ended_kernels_go,
    running_daemon,
    wait_for,
)

from drover import KernelStatus, SessionStatus
from drover.app import App
from drover.backends.base import AgentInfo
from drover.backends.container import ContainerBackend
from drover.backends.container._settings import settings_from
from drover.backends.fence import FencedError
from drover.config import load_config
from drover.kinds.deployments import deployments, routes
from drover.model.values import Claim

S = SessionStatus
K = KernelStatus


async def _status(app, sid, *statuses):
    s = await app.repository.get_session(sid)
    return s if s.status in statuses else None


def _moves(rows):
    return [(r.handler, r.from_status, r.to_status) for r in rows if r.from_status != r.to_status]


async def test_a_container_kernel_succeeds_with_its_logs_kept_and_its_container_removed(
    database, tmp_path: Path, podman: Podman, label_prefix: str
):
    """exit 0: TERMINATED with code 0, stdout/stderr in the kernel's log files, the
    CPU quota (cpu = 0.5) visible inside, and no container left once it ended."""
    flags = container_flags(podman, label_prefix, mount_roots=[str(tmp_path / "host")])
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        command = ends_on_word(
            Path("/host/go"),
            before="cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us; echo to-stderr >&2; "
            "echo $DROVER_KERNEL_ID",
        )
        tmp_path.joinpath("host").mkdir()
        kernel = {
            "image": IMAGE,
            "command": command,
            "cpu": 0.5,
            "mem": 64,
            "mounts": [{"source": str(tmp_path / "host"), "target": "/host", "read_only": True}],
        }
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel]}])
        s = await wait_for(lambda: _status(app, sid, S.RUNNING), timeout=60, what="RUNNING")
        (k,) = s.kernels
        assert k.runtime["backend"] == "container"
        assert k.runtime["container"] == f"{label_prefix}-{k.id}"
        assert [c["Id"] for c in podman.containers(label_prefix)] == [k.runtime["container_id"]]
        (tmp_path / "host" / "go").touch()
        s = await wait_for(lambda: _status(app, sid, S.TERMINATED), timeout=60, what="TERMINATED")
        assert (s.result, s.status_info) == ("SUCCESS", "KERNEL_EXITED")
        (k,) = s.kernels
        assert (k.status, k.exit_code) == (K.TERMINATED, 0)
        assert Path(k.runtime["stdout"]).read_text() == f"50000\n{k.id}\n"
        assert Path(k.runtime["stderr"]).read_text() == "to-stderr\n"
        assert _moves(await app.repository.history(sid)) in LIFECYCLES
        await wait_for(lambda: _none_left(podman, label_prefix), timeout=20, what="removal")


async def _none_left(podman: Podman, prefix: str) -> bool:
    return podman.containers(prefix) == []


async def test_exit_3_and_out_of_memory_end_in_error_with_the_code_and_reason(
    database, tmp_path: Path, podman: Podman, label_prefix: str
):
    """A container exiting 3 is ERROR with code 3; one over its 16 MiB memory limit
    is killed by the engine: ERROR, code 137, "out of memory" in status_info."""
    flags = container_flags(podman, label_prefix)
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        failing = {"command": ["sh", "-c", "sleep 1; echo failing >&2; exit 3"], "mem": 64}
        # A shell variable growing past the limit: the OOM killer ends it.
        hog = "sleep 1; x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived"
        oom = {"command": ["sh", "-c", hog], "mem": 16}
        sids = await app.repository.create_sessions([{"kernels": [failing]}, {"kernels": [oom]}])
        ended = [
            await wait_for(lambda sid=sid: _status(app, sid, S.TERMINATED), timeout=60, what="end")
            for sid in sids
        ]
        (k3,), (k_oom,) = (s.kernels for s in ended)
        assert (k3.status, k3.exit_code, k3.status_info) == (K.ERROR, 3, "exited with code 3")
        assert Path(k3.runtime["stderr"]).read_text() == "failing\n"
        assert (k_oom.status, k_oom.exit_code) == (K.ERROR, 137)
        assert k_oom.status_info.startswith("out of memory: killed at its memory limit of 16 MiB")
        assert Path(k_oom.runtime["stdout"]).read_text() == ""
        assert [s.result for s in ended] == ["FAILURE", "FAILURE"]
        await wait_for(lambda: _none_left(podman, label_prefix), timeout=20, what="removal")


async def test_a_pull_of_an_image_that_does_not_exist_ends_in_error_with_the_reason(
    database, tmp_path: Path, podman: Podman, label_prefix: str
):
    """The kernel goes PULLING (with the image in status_info), then ERROR with the
    engine's reason, `drover why` shows it: a registry that is unreachable, and an
    image the (reachable) test registry does not have."""
    flags = container_flags(podman, label_prefix)
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        unreachable = "127.0.0.1:9/drover/no-such-image:1"
        missing = f"{podman.registry}/drover/no-such-image:1"
        sids = await app.repository.create_sessions(
            [
                {"kernels": [{"image": image, "command": ["true"]}]}
                for image in (unreachable, missing)
            ]
        )
        for sid, image, reason in zip(
            sids, (unreachable, missing), ("connection refused", "manifest unknown"), strict=True
        ):
            s = await wait_for(
                lambda sid=sid: _status(app, sid, S.TERMINATED, S.ERROR), timeout=60, what="end"
            )
            (k,) = s.kernels
            assert k.status == K.ERROR
            assert k.status_info.startswith(f"image pull failed: pull {image}: ")
            assert reason in k.status_info.lower(), k.status_info
            # From PREPARING, or from SCHEDULED when the backend's report came first.
            rows = [
                (r.to_status, r.message)
                for r in await app.repository.kernel_history(kernel_id=k.id)
            ]
            assert (K.PULLING, f"pulling image {image}") in rows
            why = await _cli_why(database, sid)
            assert f"image pull failed: pull {image}: " in why, why
            # Ended by detect-start-failure alone: never PREPARED (issue 35).
            moves = _moves(await app.repository.history(sid))
            assert S.PREPARED not in [to for _handler, _from, to in moves], moves
            assert moves[-2][0] == "detect-start-failure", moves
        assert podman.containers(label_prefix) == []


async def _cli_why(database, sid: str) -> str:
    """`drover why SID` on the test's database."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drover", "--database", database.url, "why", sid,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**_env(), "DROVER_DATABASE_SCHEMA": database.schema or ""},
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


# -- through the CLI, with the daemon as its own process --------------------------------


def _write_config(path: Path, database, data_dir: Path, podman: Podman, prefix: str) -> None:
    path.write_text(
        f'database_url = "{database.url}"\n'
        f'database_schema = "{database.schema or ""}"\n'
        f'data_dir = "{data_dir}"\n'
        "heartbeat_interval = 0.5\n"
        "safety_interval = 2.0\n"
        "claim_ttl = 3.0\n"
        'log_format = "json"\n'
        "[backend]\n"
        'name = "container"\n'
        "kill_grace = 2\n"
        'agents = [{id = "test-agent", cpu = 4, mem = 4096}]\n'
        "[backend.settings]\n"
        f'url = "{podman.url}"\n'
        f'label_prefix = "{prefix}"\n'
        "poll_interval = 0.2\n"
        f'default_image = "{IMAGE}"\n'
        # The tests' host directories, which kernels mount (docs/containers.md, "Mounts").
        f'mount_roots = ["{path.parent / "host"}"]\n'
    )
    # The CLI refuses an empty database: migrate before the daemon would.
    subprocess.run(
        [sys.executable, "-m", "drover", "--config", str(path), "db", "upgrade"],
        env=_env(), check=True, capture_output=True, timeout=60,
    )  # fmt: skip


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DROVER_")}


async def _daemon(config: Path, log: Path) -> asyncio.subprocess.Process:
    with open(log, "ab") as handle:  # the child keeps its own copy of the descriptor
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "drover", "--config", str(config), "run",
            stdout=handle, stderr=handle, env=_env(),
        )  # fmt: skip


async def _drover(config: Path, *argv: str, code: int = 0) -> str:
    """Run ``drover --config CONFIG ARGV…``; return its stdout (fail on another exit code)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drover", "--config", str(config), *argv,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env(),
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == code, f"drover {argv}: exit {proc.returncode}: {err.decode()}"
    return out.decode()


async def _stop(*procs: asyncio.subprocess.Process | None) -> None:
    for proc in procs:
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), timeout=30)


async def _show(config: Path, sid: str) -> dict:
    return json.loads(await _drover(config, "show", sid, "--json"))


def _started_events(podman: Podman, name: str) -> list[str]:
    out = podman.cli(
        "events", "--stream=false", "--since", "10m", "--filter", f"container={name}",
        "--filter", "event=start", "--format", "{{.Name}}",
    )  # fmt: skip
    return [line for line in out.splitlines() if line.strip()]


async def test_an_ended_container_kernels_files_are_pruned_a_running_ones_never(
    database, tmp_path: Path, podman: Podman, label_prefix: str
):
    """history.kernel_files_retention holds for the container backend: `kernels/<id>/` of a
    kernel that ended (its kept logs) goes once older than the retention; that of a running
    container stays however old. Before, only the local backend pruned."""
    data = tmp_path / "data"
    flags = {**container_flags(podman, label_prefix), **PRUNING}
    async with running_daemon(database, data, **flags) as (app, _daemon):
        done, live = await app.repository.create_sessions(
            [
                {"kernels": [{"command": ["sh", "-c", "echo bye"], "mem": 32}]},
                {"kernels": [{"command": ["sleep", "600"], "mem": 32}]},
            ]
        )
        ended = await wait_for(
            lambda: _status(app, done, S.TERMINATED), timeout=60, what="TERMINATED"
        )
        assert Path(ended.kernels[0].runtime["stdout"]).read_text() == "bye\n"
        await wait_for(lambda: _status(app, live, S.RUNNING), timeout=60, what="RUNNING")
        await files_of_ended_kernels_go(app, data, done, live)
        assert [c["State"] for c in podman.containers(label_prefix)] == ["running"]
        await app.repository.request_termination([live])
        await wait_for(lambda: _status(app, live, S.TERMINATED), timeout=60, what="the end")


async def test_terminate_from_the_cli_kills_a_container_that_ignores_sigterm_after_the_grace(
    database, tmp_path: Path, podman: Podman, label_prefix: str
):
    """`drover terminate`: SIGTERM, ignored by the kernel's trap; SIGKILL after
    kill_grace (2 s); the kernel TERMINATED with code 137; `drover logs` shows its output."""
    config, log = tmp_path / "drover.toml", tmp_path / "daemon.log"
    _write_config(config, database, tmp_path / "data", podman, label_prefix)
    daemon = await _daemon(config, log)
    try:
        stubborn = "trap 'echo got TERM' TERM; echo up; while true; do sleep 0.1; done"
        sid = (
            await _drover(config, "submit", "--image", IMAGE, "--cpu", "0.5", "--mem", "32",
                          "--", "sh", "-c", stubborn)
        ).strip()  # fmt: skip

        async def running():
            shown = await _show(config, sid)
            return shown if shown["status"] == "RUNNING" else None

        await wait_for(running, timeout=60, what="RUNNING")
        await wait_for(
            lambda: _says(config, sid, "up\n"), timeout=20, what="`drover logs` of a running one"
        )
        loop = asyncio.get_running_loop()
        began = loop.time()
        await _drover(config, "terminate", sid)

        async def ended():
            shown = await _show(config, sid)
            return shown if shown["status"] == "TERMINATED" else None

        shown = await wait_for(ended, timeout=60, what="TERMINATED")
        assert loop.time() - began >= 2.0
        (k,) = shown["kernels"]
        assert (k["status"], k["exit_code"]) == ("TERMINATED", 137)
        assert k["status_info"] == "destroyed; exited with code 137 (killed by SIGKILL)"
        assert await _drover(config, "logs", sid) == "up\ngot TERM\n"
        assert _started_events(podman, f"{label_prefix}-{k['id']}") == [f"{label_prefix}-{k['id']}"]
        await wait_for(lambda: _none_left(podman, label_prefix), timeout=20, what="removal")
    finally:
        await _stop(daemon)


async def _says(config: Path, sid: str, text: str) -> bool:
    return await _drover(config, "logs", sid) == text


async def test_after_kill_9_of_the_daemon_containers_are_adopted_never_started_twice(
    database, tmp_path: Path, podman: Podman, label_prefix: str
):
    """kill -9 with three containers running; one ends while no daemon runs. The
    restarted daemon adopts the two live ones and judges the ended one; every
    container was started once, and printed once."""
    config, log = tmp_path / "drover.toml", tmp_path / "daemon.log"
    _write_config(config, database, tmp_path / "data", podman, label_prefix)
    tmp_path.joinpath("host").mkdir()
    mount = f"{tmp_path / 'host'}:/host"
    first = await _daemon(config, log)
    second = None
    try:
        session_file = tmp_path / "session.toml"

        def kernel(word: str, code: int) -> str:
            command = ends_on_word(Path(f"/host/{word}"), before="echo started",
                                   then=f"exit {code}")  # fmt: skip
            return (
                "[[kernels]]\n"
                f"command = {json.dumps(command)}\n"
                f'image = "{IMAGE}"\n'
                f'mounts = [{{source = "{mount.split(":")[0]}", target = "/host"}}]\n'
            )

        session_file.write_text(kernel("go", 0) + kernel("go", 0))
        long_one = (await _drover(config, "submit", "--file", str(session_file))).strip()
        session_file.write_text(kernel("quick", 4))
        short_one = (await _drover(config, "submit", "--file", str(session_file))).strip()

        async def both_running():
            shown = [await _show(config, s) for s in (long_one, short_one)]
            return shown if all(s["status"] == "RUNNING" for s in shown) else None

        shown = await wait_for(both_running, timeout=90, what="both RUNNING")
        kernels = [k for s in shown for k in s["kernels"]]
        first.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(first.wait(), timeout=10) == -signal.SIGKILL
        names = [f"{label_prefix}-{k['id']}" for k in kernels]
        # While no daemon runs, the quick one exits 4.
        (tmp_path / "host" / "quick").touch()

        async def quick_exited():
            found = {c["Names"][0]: c["State"] for c in podman.containers(label_prefix)}
            return found.get(names[2]) == "exited"

        await wait_for(quick_exited, timeout=30, what="the quick container to exit")
        assert {c["Names"][0]: c["State"] for c in podman.containers(label_prefix)} == {
            names[0]: "running",
            names[1]: "running",
            names[2]: "exited",
        }
        second = await _daemon(config, log)
        await wait_for(lambda: _adopted(log), timeout=30, what="the restarted daemon")
        (tmp_path / "host" / "go").touch()

        async def over(sid):
            s = await _show(config, sid)
            return s if s["status"] == "TERMINATED" else None

        long_shown = await wait_for(lambda: over(long_one), timeout=60, what="long TERMINATED")
        short_shown = await wait_for(lambda: over(short_one), timeout=60, what="short TERMINATED")
        assert long_shown["result"] == "SUCCESS"
        assert [(k["status"], k["exit_code"]) for k in long_shown["kernels"]] == [
            ("TERMINATED", 0),
            ("TERMINATED", 0),
        ]
        (quick,) = short_shown["kernels"]
        assert (quick["status"], quick["exit_code"]) == ("ERROR", 4)
        for k, name in zip(kernels, names, strict=True):
            assert _started_events(podman, name) == [name]
            assert Path(k["stdout"]).read_text() == "started\n"
        started = f"container backend started on {podman.url}: adopted=3 pulls restarted=0 lost=0"
        assert await _adopted(log) == [started]
        await wait_for(lambda: _none_left(podman, label_prefix), timeout=20, what="removal")
    finally:
        await _stop(first, second)


async def _adopted(log: Path) -> list[str]:
    """The restarted daemon's start-up line (the first one adopted nothing)."""
    messages = [json.loads(x)["message"] for x in log.read_text().splitlines() if x[:1] == "{"]
    return [m for m in messages if "container backend started" in m and "adopted=0" not in m]


# -- a deployment's replicas as containers ------------------------------------------------


def test_a_service_of_httpd_containers_is_health_checked_replaced_scaled_and_destroyed(
    database, tmp_path: Path, podman: Podman, label_prefix: str
):
    """Two replicas of busybox httpd, each on its published $PORT: HEALTHY over HTTP;
    one container killed, its replica replaced; scaled to 1; destroyed: no container left."""
    config = tmp_path / "drover.toml"
    _write_config(config, database, tmp_path / "data", podman, label_prefix)
    handlers = (*deployments.HANDLERS, *(h.name() for h in routes.ROUTE_HANDLERS))
    with config.open("a") as handle:
        handle.write("".join(f"[handlers.{name}]\ninterval = 0.3\n" for name in handlers))
    base = [sys.executable, "-m", "drover", "--config", str(config)]

    def drover(*args: str):
        done = subprocess.run([*base, *args], env=_env(), capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if "--json" in args else done.stdout

    def until(check, what: str, timeout: float = 90.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what}")

    def answers(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return b"drover test image" in response.read()
        except OSError:
            return False

    def running() -> list[str]:
        return sorted(c["Names"][0] for c in podman.containers(label_prefix)
                      if c["State"] == "running")  # fmt: skip

    with (tmp_path / "daemon.log").open("w") as log:
        daemon = subprocess.Popen([*base, "run"], env=_env(), stdout=log, stderr=log)
    try:
        drover("deploy", "web", "--replicas", "2", "--evict-after", "1", "--mem", "32",
               "--", "sh", "-c", "exec httpd -f -p $PORT -h /www")  # fmt: skip

        def healthy(count: int):
            rows = drover("routes", "web", "--json")
            good = [r for r in rows if r["status"] == "HEALTHY"]
            return good if len(good) == count == len(rows) else None

        first = until(lambda: healthy(2), "2 HEALTHY routes")
        assert all(answers(r["url"]) for r in first)
        assert len(running()) == 2
        victim = first[0]
        (kernel,) = drover("show", victim["session_id"], "--json")["kernels"]
        podman.cli("kill", kernel["container"])

        def replaced():
            good = healthy(2)
            return good if good and victim["id"] not in {r["id"] for r in good} else None

        now = until(replaced, "the killed replica replaced")
        assert all(answers(r["url"]) for r in now)
        (victim_kernel,) = drover("show", victim["session_id"], "--json")["kernels"]
        assert victim_kernel["status"] == "ERROR"
        until(lambda: len(running()) == 2, "two containers running")

        drover("scale", "web", "1")
        (kept,) = until(lambda: healthy(1), "one route left")
        assert answers(kept["url"])
        until(lambda: len(running()) == 1, "one container running")

        assert "READY -> DESTROYING" in drover("destroy", "web")

        def destroyed() -> bool:
            listed = drover("deployments", "--all", "--json")
            return any(d["name"] == "web" and d["status"] == "DESTROYED" for d in listed)

        until(destroyed, "the deployment DESTROYED")
        until(lambda: podman.containers(label_prefix) == [], "no container left")
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


async def test_a_pull_from_a_registry_shows_its_progress_then_the_kernel_runs(
    database, tmp_path: Path, podman: Podman, label_prefix: str
):
    """pull_policy always, from the test registry (about 3 s a layer): the kernel is
    PULLING with the engine's progress words in status_info, then PREPARED and runs."""
    flags = container_flags(podman, label_prefix, pull_policy="always")
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        image = f"{podman.registry}/{REGISTRY_IMAGE}"
        # Pulled by the other database's variant: its layer must be downloaded again.
        podman.cli("rmi", "-f", image)
        kernel = {"image": image, "command": ["cat", "/registry-image"], "mem": 32}
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel]}])

        async def progress():
            (k,) = (await app.repository.get_session(sid)).kernels
            info = k.status_info or ""
            return (
                k if k.status == K.PULLING and info.startswith(f"pulling image {image}: ") else None
            )

        pulling = await wait_for(progress, timeout=60, what="a pull's progress in status_info")
        assert pulling.status_info != f"pulling image {image}: "
        s = await wait_for(lambda: _status(app, sid, S.TERMINATED), timeout=90, what="the end")
        (k,) = s.kernels
        assert (k.status, k.exit_code) == (K.TERMINATED, 0)
        assert Path(k.runtime["stdout"]).read_text() == "served by the test registry\n"
        moves = [
            (r.from_status, r.to_status)
            for r in await app.repository.kernel_history(kernel_id=k.id)
        ]
        assert K.PULLING in [to for _from, to in moves]
        assert (K.PULLING, K.PREPARED) in moves
        # The pull's words went with PULLING: `drover why` of a kernel that ran and
        # succeeded says nothing of a pull (issue 35).
        assert k.status_info is None
        why = await _cli_why(database, sid)
        assert "pulling" not in why, why


# -- fencing: a call whose claim no longer holds does nothing ------------------------------


async def test_a_fenced_create_or_destroy_starts_and_signals_nothing(
    pg: Database, tmp_path: Path, podman: Podman, label_prefix: str
):
    """PostgreSQL only (SQLite runs one coordinator). A create whose tick's claim is not
    on the session (lapsed, taken over) raises FencedError with no container created; a
    fenced destroy leaves the running container alone; unfenced calls then work."""
    flags = daemon_flags(pg, tmp_path / "data", **container_flags(podman, label_prefix))
    app = App(load_config(None, environ={}, flags=flags))
    await app.upgrade()
    repo = app.repository
    settings = settings_from(flags["backend.settings"])
    backend = ContainerBackend(
        [AgentInfo("test-agent", {"cpu": 4, "mem": 4096})], settings, tmp_path / "data",
        kill_grace=1.0,
    )  # fmt: skip
    await backend.start(repo, lambda: None)
    try:
        (sid,) = await repo.create_sessions(
            [{"kernels": [{"image": IMAGE, "command": ["sleep", "60"], "cpu": 0.5}]}]
        )
        (kernel,) = (await repo.get_session(sid)).kernels
        assert await repo.report_kernel_status(kernel.id, K.PREPARED)
        session = await repo.get_session(sid)
        lost = Claim("coordinator-gone", "token-gone", repo.clock.time() + 10, ttl=10)
        with pytest.raises(FencedError, match="fenced: the claim of coordinator coordinator-gone"):
            await backend.create(attrs.evolve(session, claim=lost))
        assert podman.containers(label_prefix) == []
        await backend.create(session)
        (container,) = podman.containers(label_prefix)
        assert container["State"] == "running"
        running = await repo.get_session(sid)
        assert running.kernels[0].status == K.RUNNING
        with pytest.raises(FencedError):
            await backend.destroy(attrs.evolve(running, claim=lost))
        assert [c["State"] for c in podman.containers(label_prefix)] == ["running"]
        await backend.destroy(running)
        (k,) = (await repo.get_session(sid)).kernels
        assert (k.status, k.exit_code) == (K.TERMINATED, 137)
        await wait_for(lambda: _none_left(podman, label_prefix), timeout=20, what="removal")
    finally:
        await backend.stop()
        await app.close()
