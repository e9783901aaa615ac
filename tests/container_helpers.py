"""A real Podman (scripts/podman-up.sh) for the container backend's tests.

The service runs on a socket under this test run's own temporary directory,
with its own configuration and image store, and is stopped at the end of the
run. The tests FAIL, never skip, when podman cannot start. Each test uses a
label prefix of its own and removes its leftover containers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

ROOT = Path(__file__).resolve().parent.parent
PODMAN_UP = ROOT / "scripts" / "podman-up.sh"
#: Built by scripts/podman-up.sh from Debian's busybox-static.
IMAGE = "localhost/drover-test:latest"


@attrs.frozen
class Podman:
    """A running ``podman system service``: its socket URL and the environment of its CLI."""

    url: str
    env: dict[str, str]

    def cli(self, *argv: str) -> str:
        """Run the podman CLI on the same configuration and store; return its stdout."""
        done = subprocess.run(
            ["podman", *argv], capture_output=True, text=True, env=self.env, timeout=120,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"podman {' '.join(argv)}: {done.stderr}"
        return done.stdout

    def containers(self, prefix: str) -> list[dict[str, Any]]:
        """Every container (ended ones too) labelled ``<prefix>.kernel``."""
        out = self.cli("ps", "-a", "--format", "json", "--filter", f"label={prefix}.kernel")
        return list(json.loads(out or "[]"))


@pytest.fixture(name="podman", scope="session")
def podman_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    """Podman's Docker-compatible API on a socket of this test run, with the test image."""
    where = tmp_path_factory.mktemp("podman")
    done = subprocess.run(
        ["bash", str(PODMAN_UP), str(where)], capture_output=True, text=True, timeout=900,
        check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(
            f"podman cannot start (scripts/podman-up.sh exited {done.returncode}):\n"
            f"{done.stdout}\n{done.stderr}",
            pytrace=False,
        )
    env = {
        **os.environ,
        "CONTAINERS_CONF": str(where / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(where / "storage.conf"),
    }
    podman = Podman(done.stdout.strip().splitlines()[-1], env)
    try:
        yield podman
    finally:
        subprocess.run(
            ["podman", "rm", "-af", "-t", "0"], capture_output=True, env=env, timeout=120,
            check=False,
        )  # fmt: skip
        pid = int((where / "service.pid").read_text())
        os.kill(pid, signal.SIGTERM)


@pytest.fixture(name="label_prefix")
def label_prefix_fixture(podman: Podman) -> Iterator[str]:
    """A label prefix of this test's own; its containers are removed afterwards."""
    prefix = f"drovert{uuid.uuid4().hex[:8]}"
    yield prefix
    left = [c["Id"] for c in podman.containers(prefix)]
    if left:
        podman.cli("rm", "-f", "-t", "0", *left)


def container_flags(podman: Podman, prefix: str, **extra: Any) -> dict[str, Any]:
    """Backend flags for a fast-polling container backend on ``podman`` using ``prefix``."""
    return {
        "backend.name": "container",
        "backend.kill_grace": 3.0,
        "backend.settings": {
            "url": podman.url,
            "label_prefix": prefix,
            "poll_interval": 0.2,
            "default_image": IMAGE,
            **extra,
        },
    }
