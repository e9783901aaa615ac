"""The container backend refuses what makes no sense (issue 36), on a real Podman and both
databases: mounts outside the operator's roots, the engine's socket, option injection
through a target, a missing source (never created on the host), a link out of a root; and a
container whose start failed is removed when its kernel ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from container_helpers import IMAGE, Podman, container_flags
from daemon_helpers import running_daemon, wait_for

from drover import KernelStatus, SessionStatus
from drover.app import App
from drover.config import load_config
from drover.model.errors import InvalidSpecError

S = SessionStatus
K = KernelStatus


async def _ended(app, sid):
    s = await app.repository.get_session(sid)
    return s if s.status in (S.TERMINATED, S.ERROR) else None


def _refused_mounts(tmp_path: Path, podman: Podman) -> list[tuple[dict, str]]:
    allowed = tmp_path / "allowed"
    socket_dir = podman.url.removeprefix("unix://").rsplit("/", 1)[0]
    return [
        # Any submitter could mount the host's root read-write.
        ({"source": "/", "target": "/host"}, "source '/' is or holds the container engine's"),
        # The engine's socket: root on the host.
        (
            {"source": podman.url.removeprefix("unix://"), "target": "/var/run/docker.sock"},
            "is or holds the container engine's socket",
        ),
        ({"source": socket_dir, "target": "/p"}, "is or holds the container engine's socket"),
        ({"source": "/etc", "target": "/etc2"}, "source '/etc' is not under a directory"),
        # Bind options injected through the target.
        ({"source": str(allowed), "target": "/m:ro"}, "target '/m:ro' must be a path"),
        (
            {"source": str(allowed), "target": "/m:noexec,nosuid"},
            "target '/m:noexec,nosuid' must be a path",
        ),
        ({"source": f"{allowed}:/x", "target": "/m"}, "without ':', ',' or NUL"),
        ({"source": f"{allowed}/../../etc", "target": "/m"}, "may not hold '.' or '..'"),
        ({"source": str(allowed), "target": "relative"}, "must be an absolute path inside"),
        ({"source": str(allowed), "target": "/"}, "must be an absolute path inside the"),
        ({"source": str(tmp_path / "data"), "target": "/d"}, "drover's data directory"),
        ({"source": "stdout.log", "target": "/log"}, "names drover's own log file"),
        ({"source": str(allowed), "target": "/m", "options": "rw"}, "and nothing else"),
    ]


async def test_mounts_the_policy_refuses_are_refused_at_submit_in_one_line(
    database, tmp_path: Path, podman: Podman, label_prefix: str
):
    """mount_roots = [allowed, the socket's directory's parent]: the host's root, the engine's
    socket (and its directory), a path outside the roots, a target injecting bind options,
    '..', drover's own data are each refused by App.submit (what `drover submit` calls) in
    one line naming the kernel and the mount; nothing is written. An allowed one passes."""
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    socket_parent = str(Path(podman.url.removeprefix("unix://")).parent.parent)
    flags = container_flags(podman, label_prefix, mount_roots=[str(allowed), socket_parent])
    flags.update(
        database_url=database.url, database_schema=database.schema or "",
        data_dir=str(tmp_path / "data"),
    )  # fmt: skip
    app = App(load_config(None, environ={}, flags=flags))
    await app.upgrade()
    try:
        for mount, problem in _refused_mounts(tmp_path, podman):
            request = {"kernels": [{"command": ["true"], "mounts": [{"source": str(allowed),
                                    "target": "/ok"}, mount]}]}  # fmt: skip
            with pytest.raises(InvalidSpecError) as refused:
                await app.submit([request])
            message = str(refused.value)
            assert message.startswith("kernel 1: invalid kernel spec: mount 2: "), message
            assert problem in message, (mount, message)
            assert "\n" not in message
        assert await app.repository.list_sessions() == []
        ok = {"command": ["true"], "mounts": [
            {"source": str(allowed), "target": "/in", "read_only": True},
            {"source": "out", "target": "/out"},
        ]}  # fmt: skip
        assert len(await app.submit([{"kernels": [ok]}])) == 1
    finally:
        await app.close()


def test_drover_submit_refuses_a_mount_of_the_root_in_one_line(
    tmp_path: Path, podman: Podman, label_prefix: str
):
    """`drover submit --file` with a mount of '/' and no mount_roots: exit 1, one line."""
    config = tmp_path / "drover.toml"
    config.write_text(
        f'database_url = "sqlite+aiosqlite:///{tmp_path}/d.db"\n'
        f'data_dir = "{tmp_path}/data"\n'
        '[backend]\nname = "container"\n'
        f'[backend.settings]\nurl = "{podman.url}"\nlabel_prefix = "{label_prefix}"\n'
        f'default_image = "{IMAGE}"\n'
    )
    session = tmp_path / "session.toml"
    session.write_text(
        '[[kernels]]\ncommand = ["sh", "-c", "rm -rf /host/etc"]\n'
        'mounts = [{source = "/", target = "/host"}]\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DROVER_")}
    base = [sys.executable, "-m", "drover", "--config", str(config)]
    subprocess.run([*base, "db", "upgrade"], env=env, check=True, capture_output=True, timeout=60)
    done = subprocess.run(
        [*base, "submit", "--file", str(session)], capture_output=True, text=True, timeout=60,
        env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "Error: kernel 1: invalid kernel spec: mount 1: source '/' is or holds the container "
        f"engine's socket {podman.url.removeprefix('unix://')}: whoever reaches it is root on "
        "the host"
    ], done.stderr


async def test_a_missing_source_is_never_created_and_a_link_out_of_a_root_is_refused(
    database, tmp_path: Path, podman: Podman, label_prefix: str
):
    """Sessions written straight to the database (as a deployment's replicas are, past the
    submit check): a source under a root that does not exist is ERROR "does not exist on
    the host", and stays missing (the engine would have created it); a link under a root
    that leads out of it is ERROR naming where it leads. No container is created."""
    allowed, secret = tmp_path / "allowed", tmp_path / "secret"
    allowed.mkdir()
    secret.mkdir()
    (allowed / "link").symlink_to(secret)
    flags = container_flags(podman, label_prefix, mount_roots=[str(allowed)])
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        missing, linked = await app.repository.create_sessions(
            [
                {"kernels": [{"command": ["true"], "mem": 32,
                              "mounts": [{"source": str(allowed / "missing"), "target": "/m"}]}]},
                {"kernels": [{"command": ["true"], "mem": 32,
                              "mounts": [{"source": str(allowed / "link"), "target": "/m"}]}]},
            ]
        )  # fmt: skip
        s = await wait_for(lambda: _ended(app, missing), timeout=60, what="the end")
        (k,) = s.kernels
        assert (k.status, k.status_info) == (
            K.ERROR,
            f"invalid kernel spec: mount 1: source '{allowed / 'missing'}' does not exist on "
            "the host",
        )
        assert not (allowed / "missing").exists()
        s = await wait_for(lambda: _ended(app, linked), timeout=60, what="the end")
        (k,) = s.kernels
        assert k.status == K.ERROR
        assert k.status_info.startswith(
            f"invalid kernel spec: mount 1: source '{allowed / 'link'}' (resolved to "
            f"'{secret}') is not under a directory backend.settings.mount_roots allows"
        ), k.status_info
        assert podman.containers(label_prefix) == []


async def test_a_relative_source_is_the_kernels_own_directory_and_read_only_holds(
    database, tmp_path: Path, podman: Podman, label_prefix: str
):
    """A relative source is a directory drover makes in the kernel's own directory: what
    the container writes there is kept beside its logs. A read-only mount under a root
    cannot be written to."""
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "input").write_text("from the host\n")
    flags = container_flags(podman, label_prefix, mount_roots=[str(allowed)])
    script = "cat /in/input; echo result > /out/result; touch /in/x 2>/dev/null || echo ro"
    kernel = {
        "command": ["sh", "-c", script],
        "mem": 32,
        "mounts": [
            {"source": str(allowed), "target": "/in", "read_only": True},
            {"source": "out", "target": "/out"},
        ],
    }
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        (sid,) = await app.repository.create_sessions([{"kernels": [kernel]}])
        s = await wait_for(lambda: _ended(app, sid), timeout=60, what="the end")
        (k,) = s.kernels
        assert (k.status, k.exit_code) == (K.TERMINATED, 0), k.status_info
        own = tmp_path / "data" / "kernels" / k.id
        assert (own / "out" / "result").read_text() == "result\n"
        assert Path(k.runtime["stdout"]).read_text() == "from the host\nro\n"
        assert sorted(p.name for p in allowed.iterdir()) == ["input"]


async def test_a_container_whose_start_failed_is_removed_when_its_kernel_ends(
    database, tmp_path: Path, podman: Podman, label_prefix: str
):
    """A command the image does not have: the engine creates the container, its start fails;
    the kernel is ERROR with the engine's reason and the container is gone at once (it
    stayed "Created" until the next daemon start)."""
    flags = container_flags(podman, label_prefix)
    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        (sid,) = await app.repository.create_sessions(
            [{"kernels": [{"image": IMAGE, "command": ["/no/such/program"], "mem": 32}]}]
        )
        s = await wait_for(lambda: _ended(app, sid), timeout=60, what="the end")
        (k,) = s.kernels
        assert k.status == K.ERROR
        assert k.status_info.startswith("failed to start: start container "), k.status_info
        assert "/no/such/program" in k.status_info

        async def none_left() -> bool:
            return podman.containers(label_prefix) == []

        await wait_for(none_left, timeout=10, what="the created container removed")
