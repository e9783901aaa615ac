"""The deployment kind's checks at creation: every part of a replica's health-check URL,
and a backend that records the replicas' ports.

A replica is checked at ``http://127.0.0.1:$PORT<health_path>``; the host is
fixed and the port is an integer the backend records, so the health path is
the one part a user gives. It is checked when the deployment is created or
its spec changed, so a bad path is refused in one line there instead of
failing every check later.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from drover.model.errors import InvalidSpecError
from drover.model.values import NewEntity

if TYPE_CHECKING:
    from drover.backends.base import AgentBackend

__all__ = ["check_deployment_spec", "check_health_path", "check_served"]

# RFC 3986 path and query characters, and percent-escapes: no spaces, no control
# characters (CR/LF), no fragment.
_PATH = re.compile(r"/[A-Za-z0-9\-._~!$&'()*+,;=:@/?%]*")
_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def check_health_path(path: Any) -> None:
    """Refuse a health path that is not an absolute URL path (with an optional query)."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidSpecError(f"health path must start with '/', got {path!r}")
    if not _PATH.fullmatch(path) or _ESCAPE.search(path):
        raise InvalidSpecError(
            f"health path {path!r} is not a URL path: use printable characters "
            "without spaces or '#' (percent-escape others, e.g. %20)"
        )


def check_deployment_spec(spec: Mapping[str, Any], where: str) -> None:
    """The deployment kind's spec check (see the module's docstring)."""
    if "health_path" in spec:
        try:
            check_health_path(spec["health_path"])
        except InvalidSpecError as error:
            raise InvalidSpecError(f"{where}: {error}") from None


def check_served(
    news: Sequence[NewEntity], backend: AgentBackend, configured: str | None = None
) -> None:
    """Refuse new deployments on a backend that records no replica's port (Slurm's).

    A replica is checked on the port its backend records (``runtime["port"]``);
    on a backend that records none (``records_ports``), every check would wait
    for a port forever, so the deployment could never become healthy. The
    refusal names the backend (its ``name``, else ``configured``).
    """
    if backend.records_ports:
        return
    name = getattr(backend, "name", None) or configured or type(backend).__name__
    for new in news:
        if new.kind == "deployment":
            raise InvalidSpecError(
                f"deployment {new.name!r}: the {name} backend records no port for a "
                "replica, so its health checks could never pass; deploy on a backend that "
                "does (local, container)"
            )
