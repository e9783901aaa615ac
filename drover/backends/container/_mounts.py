"""Which host paths a kernel may mount into its container: the mount policy.

Private to the container backend (docs/containers.md, "Mounts"). A bind mount
gives the container the host path itself: ``/`` read-write, or the engine's
socket (root on the host, as Docker's and Podman's own documentation warn),
would hand the host to whoever submits. So:

* a ``target`` is an absolute path inside the container, not ``/``, without
  ``:``, ``,`` or ``..`` (a ``:`` once injected bind options: ``/m:ro``,
  ``/m:noexec,nosuid``);
* an absolute ``source`` must lie under one of ``backend.settings.mount_roots``
  (none by default), must exist (the engine would create a missing one on the
  host: drover never does), is not a socket, and holds neither the engine's
  socket nor drover's own data directory;
* a relative ``source`` names a directory inside the kernel's own directory
  (``<data_dir>/kernels/<kernel id>/<source>``, where its logs are kept and
  which retention deletes): always allowed, and created by drover, as that
  directory is drover's own; it may not be one of drover's files there.

:meth:`MountPolicy.problem` reads only the spec and the settings: it runs at
submit (``drover submit`` may run on another host) and again at preparation.
:meth:`MountPolicy.resolve` runs in the daemon, right before the container is
created: every source is resolved (symbolic links followed) and checked again,
and the engine is given the resolved paths.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["LOG_FILES", "MAX_MOUNTS", "MountPolicy", "MountRefused", "engine_sockets"]

#: Most mounts one kernel may ask for.
MAX_MOUNTS = 64
#: The files drover keeps in a kernel's own directory: no relative source may name them.
LOG_FILES = frozenset({"stdout.log", "stderr.log"})
_MAX_PATH = 4096
#: Where the engines listen by default: never mountable, whatever the roots say.
_KNOWN_SOCKETS = (
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/podman/podman.sock",
    "/var/run/podman/podman.sock",
    "/run/containerd/containerd.sock",
)


class MountRefused(Exception):
    """A mount the policy refuses once the host's paths are looked at (the message says why)."""


def engine_sockets(url: str | None, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The engine's socket (``url``, else ``DOCKER_HOST``, when ``unix://``) and the engines'
    default sockets."""
    found = [url or environ.get("DOCKER_HOST") or ""]
    return tuple(
        dict.fromkeys(
            [u.removeprefix("unix://") for u in found if u.startswith("unix://")]
            + list(_KNOWN_SOCKETS)
        )
    )


def _within(path: str, root: str) -> bool:
    """``path`` is ``root`` or below it (both normalised, absolute)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _plain(path: str) -> bool:
    """No empty, ``.`` or ``..`` component (a doubled or trailing slash aside)."""
    return all(part not in (".", "..") for part in PurePosixPath(path).parts)


class MountPolicy:
    """The mounts kernels of one container backend may ask for.

    ``roots``: ``backend.settings.mount_roots``; ``data_dir``: drover's data
    directory (kernels' own directories are under it); ``sockets``: host paths
    no mount may reach (:func:`engine_sockets`).
    """

    def __init__(self, roots: Sequence[str], data_dir: Path, sockets: Sequence[str]) -> None:
        self.roots = tuple(os.path.normpath(r) for r in roots)
        self.data_dir = os.path.normpath(data_dir)
        self.sockets = tuple(os.path.normpath(s) for s in sockets)

    def problem(self, mounts: Any) -> str | None:
        """Why a kernel spec's ``mounts`` are refused, from the spec alone; ``None``: allowed."""
        if mounts is None:
            return None
        if not isinstance(mounts, list):
            return "invalid kernel spec: 'mounts' must be a list of {source, target, read_only}"
        if len(mounts) > MAX_MOUNTS:
            return f"invalid kernel spec: {len(mounts)} mounts, at most {MAX_MOUNTS}"
        for index, mount in enumerate(mounts, start=1):
            problem = self._mount_problem(mount)
            if problem:
                return f"invalid kernel spec: mount {index}: {problem}"
        return None

    def _mount_problem(self, mount: Any) -> str | None:
        if not (
            isinstance(mount, Mapping)
            and isinstance(mount.get("source"), str)
            and isinstance(mount.get("target"), str)
            and isinstance(mount.get("read_only", False), bool)
            and set(mount) <= {"source", "target", "read_only"}
        ):
            return (
                "needs a 'source' (a host path) and a 'target' (a path in the container), "
                "'read_only' true or false, and nothing else"
            )
        source, target = str(mount["source"]), str(mount["target"])
        for name, path in (("target", target), ("source", source)):
            if not path or len(path) > _MAX_PATH or any(c in path for c in ":,\0"):
                return (
                    f"{name} {path[:80]!r} must be a path of at most {_MAX_PATH} characters "
                    "without ':', ',' or NUL (they would be read as mount options)"
                )
            if not _plain(path):
                return f"{name} {path!r} may not hold '.' or '..' components"
        if not target.startswith("/") or os.path.normpath(target) == "/":
            return f"target {target!r} must be an absolute path inside the container, not '/'"
        if not source.startswith("/"):
            top = PurePosixPath(source).parts[0]
            if top in LOG_FILES:
                return f"source {source!r} names drover's own log file in the kernel's directory"
            return None
        return self._host_problem(os.path.normpath(source))

    def _host_problem(self, source: str, shown: str | None = None) -> str | None:
        """Why the absolute host path ``source`` (normalised) may not be mounted; ``shown``:
        how the message names it (default: ``repr(source)``)."""
        shown = shown or repr(source)
        for socket in self.sockets:
            if _within(socket, source):
                return (
                    f"source {shown} is or holds the container engine's socket {socket}: "
                    "whoever reaches it is root on the host"
                )
        if _within(self.data_dir, source) or _within(source, self.data_dir):
            return (
                f"source {shown} is, holds or lies in drover's data directory {self.data_dir} "
                "(a relative source names a directory in the kernel's own)"
            )
        if not any(_within(source, root) for root in self.roots):
            allowed = ", ".join(self.roots) if self.roots else "none are configured"
            return (
                f"source {shown} is not under a directory backend.settings.mount_roots "
                f"allows ({allowed}); a relative source names a directory in the kernel's own "
                "directory"
            )
        return None

    def resolve(self, mounts: Any, kernel_dir: Path) -> list[dict[str, Any]]:
        """(worker thread) The Engine API ``Mounts`` of a kernel whose ``mounts`` passed
        :meth:`problem`: each source resolved on this host and checked again; a relative
        one created in ``kernel_dir``. Raises :class:`MountRefused`."""
        found: list[dict[str, Any]] = []
        own = os.path.realpath(kernel_dir)
        for index, mount in enumerate(mounts or [], start=1):
            source = str(mount["source"])
            try:
                path = self._resolved(source, kernel_dir, own)
            except MountRefused as refused:
                raise MountRefused(f"mount {index}: {refused}") from None
            found.append(
                {
                    "Type": "bind",
                    "Source": path,
                    "Target": os.path.normpath(str(mount["target"])),
                    "ReadOnly": bool(mount.get("read_only", False)),
                }
            )
        return found

    def _resolved(self, source: str, kernel_dir: Path, own: str) -> str:
        if not source.startswith("/"):
            wanted = kernel_dir / source
            try:
                wanted.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise MountRefused(f"source {source!r}: {error.strerror}") from None
            path = os.path.realpath(wanted)
            if not _within(path, own) or not os.path.isdir(path):
                raise MountRefused(
                    f"source {source!r} leads out of the kernel's own directory (to {path})"
                )
            return path
        path = os.path.realpath(source)
        try:
            mode = os.stat(path).st_mode
        except OSError:
            # The engine would create it on the host; drover never does.
            raise MountRefused(f"source {source!r} does not exist on the host") from None
        if stat.S_ISSOCK(mode):
            raise MountRefused(f"source {source!r} is a socket")
        # The same rules on the resolved paths: a link under a root may lead anywhere.
        real = MountPolicy(
            [os.path.realpath(r) for r in self.roots],
            Path(os.path.realpath(self.data_dir)),
            [os.path.realpath(s) for s in self.sockets],
        )
        shown = f"{source!r} (resolved to {path!r})" if path != source else repr(source)
        problem = real._host_problem(path, shown)
        if problem:
            raise MountRefused(problem)
        return path
