"""The container backend against a real Podman (scripts/podman-up.sh), on both databases.

Each test uses a label prefix of its own and removes its leftover containers.
Podman missing is a failure, not a skip.
"""

from __future__ import annotations

from pathlib import Path

from container_helpers import (  # noqa: F401  (fixtures)
    IMAGE,
    Podman,
    container_flags,
    label_prefix_fixture,
    podman_fixture,
)
from daemon_helpers import LIFECYCLE, ends_on_word, running_daemon, wait_for

from drover import KernelStatus, SessionStatus

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
    flags = container_flags(podman, label_prefix)
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
        assert _moves(await app.repository.history(sid)) == LIFECYCLE
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
    engine's reason; `drover why` shows it. pull_policy never: ERROR at once."""
    flags = container_flags(podman, label_prefix)
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        image = "127.0.0.1:9/drover/no-such-image:1"
        (sid,) = await app.repository.create_sessions(
            [{"kernels": [{"image": image, "command": ["true"]}]}]
        )
        s = await wait_for(lambda: _status(app, sid, S.TERMINATED, S.ERROR), timeout=60, what="end")
        (k,) = s.kernels
        assert k.status == K.ERROR
        assert k.status_info.startswith(f"image pull failed: pull {image}: ")
        assert "connection refused" in k.status_info
        rows = [
            (r.from_status, r.to_status, r.message)
            for r in await app.repository.kernel_history(kernel_id=k.id)
        ]
        assert (K.PREPARING, K.PULLING, f"pulling image {image}") in rows
        assert podman.containers(label_prefix) == []
