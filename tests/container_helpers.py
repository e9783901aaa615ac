"""A real Podman (scripts/podman-up.sh) for the container backend's tests.

The service runs on a socket under this test run's own temporary directory,
with its own configuration and image store, and is stopped at the end of the
run. The tests FAIL, never skip, when podman cannot start. Each test uses a
label prefix of its own and removes its leftover containers.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import attrs
import pytest

ROOT = Path(__file__).resolve().parent.parent
PODMAN_UP = ROOT / "scripts" / "podman-up.sh"
#: Built by scripts/podman-up.sh from Debian's busybox-static.
IMAGE = "localhost/drover-test:latest"


#: The test image as the test registry serves it (pulled slowly: a progress to see).
REGISTRY_IMAGE = "drover/busybox:1"


@attrs.frozen
class Podman:
    """A running ``podman system service``: its socket URL and the environment of its CLI;
    ``registry``: host:port of the plain-HTTP test registry it may pull from."""

    url: str
    env: dict[str, str]
    registry: str

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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _registry(image_dir: Path, port: int) -> ThreadingHTTPServer:
    """A read-only registry (Docker Registry HTTP API v2) serving ``REGISTRY_IMAGE`` from
    a ``podman save --format docker-dir`` directory; each blob takes about 3 s to send."""
    manifest = (image_dir / "manifest.json").read_bytes()
    name, tag = REGISTRY_IMAGE.split(":")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, body: bytes, kind: str, slow: bool = False) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            if kind.endswith("manifest.v2+json"):
                digest = "sha256:" + hashlib.sha256(body).hexdigest()
                self.send_header("Docker-Content-Digest", digest)
            self.end_headers()
            if self.command == "HEAD":
                return
            step = max(len(body) // 30, 1) if slow else len(body) or 1
            for start in range(0, len(body), step):
                self.wfile.write(body[start : start + step])
                if slow:
                    time.sleep(0.1)

        def _unknown(self, code: str, what: str) -> None:
            # A registry's own 404: JSON errors, as the Registry API v2 says.
            body = json.dumps({"errors": [{"code": code, "message": f"{what} unknown"}]})
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body.encode())

        def do_GET(self) -> None:
            if self.path == "/v2/":
                self._send(b"{}", "application/json")
            elif self.path == f"/v2/{name}/manifests/{tag}":
                self._send(manifest, "application/vnd.docker.distribution.manifest.v2+json")
            elif self.path.startswith(f"/v2/{name}/blobs/sha256:"):
                blob = image_dir / self.path.rsplit(":", 1)[1]
                if not blob.name.isalnum() or not blob.exists():
                    self._unknown("BLOB_UNKNOWN", "blob")
                    return
                body = blob.read_bytes()
                self._send(body, "application/octet-stream", slow=len(body) > 100_000)
            elif "/manifests/" in self.path:
                self._unknown("MANIFEST_UNKNOWN", "manifest")
            else:
                self._unknown("NAME_UNKNOWN", "repository name")

        do_HEAD = do_GET

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _registry_image(podman: Podman, where: Path) -> None:
    """The test image plus one file, saved to ``where/image`` for the registry and removed
    from the engine: its layer is one the engine does not have, so a pull downloads it."""
    container = podman.cli("create", IMAGE, "true").strip()
    rootfs = where / "rootfs.tar"
    podman.cli("export", "-o", str(rootfs), container)
    podman.cli("rm", container)
    marker = where / "registry-image"
    marker.write_text("served by the test registry\n")
    with tarfile.open(rootfs, "a") as archive:
        archive.add(marker, arcname="registry-image")
    name = "localhost/drover-registry-image:1"
    podman.cli("import", "--change", "ENV PATH=/bin", str(rootfs), name)
    podman.cli("save", "--format", "docker-dir", "-o", str(where / "image"), name)
    podman.cli("rmi", name)


@pytest.fixture(name="podman", scope="session")
def podman_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    """Podman's Docker-compatible API on a socket of this test run, with the test image
    and a test registry on 127.0.0.1 that serves it."""
    where = tmp_path_factory.mktemp("podman")
    registry = f"127.0.0.1:{_free_port()}"
    done = subprocess.run(
        ["bash", str(PODMAN_UP), str(where)], capture_output=True, text=True, timeout=900,
        check=False, env={**os.environ, "DROVER_PODMAN_REGISTRY": registry},
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
        "CONTAINERS_REGISTRIES_CONF": str(where / "registries.conf"),
    }
    podman = Podman(done.stdout.strip().splitlines()[-1], env, registry)
    _registry_image(podman, where)
    server = _registry(where / "image", int(registry.rsplit(":", 1)[1]))
    try:
        yield podman
    finally:
        server.shutdown()
        server.server_close()
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
