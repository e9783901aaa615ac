"""Issue 24, point 6: a full filesystem holding the data directory costs no exit code.

The data directory is a small tmpfs (the tests run as root, as `make test`
does; without the right to mount, this test fails rather than skips). It is
filled to the last byte while the kernel runs: the kernel's exit code must
still be recorded (no ``lost:`` verdict) and no empty temporary record left.
Real daemon, local backend, both databases.
"""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_helpers import ends_on_word, running_daemon, wait_for

from drover.kinds.sessions.values import KernelStatus, SessionStatus


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted at ``tmp_path/data``, unmounted afterwards."""
    mount = tmp_path / "data"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> None:
    """Write zeros to ``disk`` until the filesystem has no byte left."""
    with open(disk / "filler", "wb", buffering=0) as handle:
        block = b"\0" * 4096
        while True:
            try:
                handle.write(block)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                break
        while True:  # the last partial block
            try:
                handle.write(b"\0")
            except OSError:
                break


async def test_a_kernel_that_exits_on_a_full_disk_keeps_its_exit_code(
    database, tmp_path, small_disk
):
    """exit 1 while the data directory's filesystem is full: ERROR, exit code 1, nothing lost."""
    go = tmp_path / "go"
    async with running_daemon(database, small_disk) as (app, _daemon):
        kernel = {"command": ends_on_word(go, then="exit 1"), "cpu": 1, "mem": 64}
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel]}])

        async def running():
            s = await app.repository.get_session(sid)
            return s.status == SessionStatus.RUNNING

        await wait_for(running, what="RUNNING")
        _fill(small_disk)
        go.touch()

        async def ended():
            s = await app.repository.get_session(sid)
            return s if s.status == SessionStatus.TERMINATED else None

        session = await wait_for(ended, timeout=60, what="TERMINATED")
        (k,) = session.kernels
        assert (k.status, k.exit_code, k.status_info) == (
            KernelStatus.ERROR,
            1,
            "exited with code 1",
        )
        leftovers = sorted(p.name for p in small_disk.rglob("*.tmp"))
        assert leftovers == []
        (small_disk / "filler").unlink()
