"""What a session request is made of: the session design card's way in.

A session request (``drover submit``, ``Repository.create_sessions``) is a
mapping with ``kernels``, ``name``, ``priority``, ``status`` and ``spec``;
:func:`new_session` turns it into the :class:`~drover.model.values.NewEntity`
every creation goes through. Its content is checked once, for every kind, by
:func:`drover.model.creation.check_new_entities` (the kernels' specs by the
kernel kind's own check, :func:`drover.kinds.sessions.kinds.check_kernel_spec`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drover.kinds.sessions.values import SESSION_KIND
from drover.model.errors import InvalidSpecError
from drover.model.values import NewEntity

__all__ = ["new_session"]

_REQUEST_KEYS = {"kernels", "name", "priority", "status", "spec"}


def _kernel(index: int, raw: Any, *, seeding: bool) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise InvalidSpecError(f"kernel {index} must be a mapping, got {raw!r}")
    spec = dict(raw)
    child: dict[str, Any] = {}
    if seeding:
        # A test's kernel may start anywhere, on an agent: taken out of its spec.
        for key in ("status", "agent_id"):
            if spec.get(key) is not None:
                child[key] = spec.pop(key)
            else:
                spec.pop(key, None)
    child["spec"] = spec
    return child


def new_session(request: Mapping[str, Any], *, seeding: bool = False) -> NewEntity:
    """The new session a request asks for (its shape checked; its content is checked later).

    ``seeding`` (tests and benchmarks): a kernel's ``"status"`` and
    ``"agent_id"`` keys set its own status and agent instead of being refused.
    """
    if not isinstance(request, Mapping):
        raise InvalidSpecError(f"a session request must be a mapping, got {request!r}")
    unknown = set(request) - _REQUEST_KEYS
    if unknown:
        raise InvalidSpecError(f"unknown session field(s): {sorted(unknown)}")
    kernels = request.get("kernels")
    if kernels is None or isinstance(kernels, str | bytes | Mapping):
        raise InvalidSpecError("kernels must be a list of kernel specs (it may be empty)")
    status = request.get("status")
    spec = request.get("spec")
    return NewEntity(
        SESSION_KIND,
        spec if spec is not None else {},
        status=None if status is None else str(status),
        name=request.get("name"),
        priority=request.get("priority", 0),
        children=[_kernel(i, k, seeding=seeding) for i, k in enumerate(kernels, start=1)],
    )
