"""What a session request is made of, and the checks its kernels' specs get.

A session request (``drover submit``, ``Repository.create_sessions``) is a
mapping with ``kernels``, ``name``, ``priority``, ``status`` and ``spec``;
:func:`new_session` turns it into the :class:`~drover.model.values.NewEntity`
every creation goes through, and :func:`check_kernel_spec` is the kernel
kind's own spec check (:attr:`~drover.model.kinds.EntityKind.check_spec`).
Everything else is checked once, for every kind, by
:func:`drover.model.creation.check_new_entities`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drover.model.checks import (
    MAX_NAME_LENGTH,
    PRIORITY_RANGE,
    is_finite,
    is_kebab_case,
    is_number,
)
from drover.model.errors import InvalidSpecError
from drover.model.values import NewEntity

__all__ = [
    "ENGINE_KERNEL_KEYS",
    "KERNEL_DEFAULTS",
    "MAX_NAME_LENGTH",
    "PRIORITY_RANGE",
    "check_kernel_spec",
    "is_kebab_case",
    "new_session",
    "with_kernel_defaults",
]

_REQUEST_KEYS = {"kernels", "name", "priority", "status", "spec"}

#: Kernel fields drover itself sets (statuses, placement, how it ran). A kernel
#: spec naming one is refused: the engine would otherwise take it for its own,
#: as a ``status``/``agent_id`` once made a kernel RUNNING that held an agent's
#: capacity without ever having run.
ENGINE_KERNEL_KEYS = frozenset(
    {
        "id",
        "index",
        "kind",
        "parent_id",
        "session_id",
        "status",
        "status_info",
        "status_changed_at",
        "created_at",
        "result",
        "agent_id",
        "pid",
        "exit_code",
        "runtime",
        "stdout",
        "stderr",
        "data",
        "tries",
        "requeues",
        "budgets",
    }
)

#: What a kernel asks for when it does not say (``drover submit`` flags and files alike).
KERNEL_DEFAULTS: Mapping[str, float] = {"cpu": 1.0, "mem": 256.0}


def check_kernel_spec(spec: Mapping[str, Any], where: str) -> None:
    """The kernel kind's spec check: no engine-owned keys, resource amounts finite and >= 0.

    Every top-level number of a kernel spec is a resource slot the scheduler
    counts, so each must be an amount.
    """
    owned = sorted(k for k in spec if k in ENGINE_KERNEL_KEYS)
    if owned:
        raise InvalidSpecError(
            f"{where}: {', '.join(repr(k) for k in owned)} "
            f"{'is' if len(owned) == 1 else 'are'} set by drover, not by a kernel spec"
        )
    for slot in ("cpu", "mem"):
        value = spec.get(slot)
        if value is not None and not is_number(value):
            raise InvalidSpecError(f"{where}: {slot!r} must be a number >= 0, got {value!r}")
    for slot, value in spec.items():
        if is_number(value) and (value < 0 or not is_finite(value)):
            raise InvalidSpecError(
                f"{where}: resource {slot!r} must be a finite number >= 0, got {value!r}"
            )


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
        "session",
        spec if spec is not None else {},
        status=None if status is None else str(status),
        name=request.get("name"),
        priority=request.get("priority", 0),
        children=[_kernel(i, k, seeding=seeding) for i, k in enumerate(kernels, start=1)],
    )


def with_kernel_defaults(kernel: Mapping[str, Any]) -> dict[str, Any]:
    """``kernel`` with :data:`KERNEL_DEFAULTS` for the slots it does not name."""
    return {**KERNEL_DEFAULTS, **kernel}
