"""Checking what users submit, before anything is written.

A request that fails a check raises :class:`InvalidSpecError` naming the
problem; nothing is written. The checks are the same whatever database is used.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

from drover.model.errors import InvalidSpecError
from drover.model.status import KernelStatus, SessionStatus

__all__ = [
    "SESSION_OPTION_KEYS",
    "KernelRequest",
    "SessionRequest",
    "is_kebab_case",
    "session_request",
    "validate_session_spec",
]

#: Handler options a session may override in ``spec["options"][handler]``.
SESSION_OPTION_KEYS = frozenset({"max_retries", "timeout"})
_REQUEST_KEYS = {"kernels", "name", "priority", "status", "spec"}
_KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def is_kebab_case(name: str) -> bool:
    """Tell whether ``name`` is a valid handler name (``kebab-case``)."""
    return bool(_KEBAB.match(name))


@attrs.frozen
class KernelRequest:
    """One kernel to create: its spec, and an initial status and agent (tests set these)."""

    spec: dict[str, Any]
    status: KernelStatus | None = None
    agent_id: str | None = None


@attrs.frozen
class SessionRequest:
    """A checked request to create one session with its kernels."""

    name: str | None
    priority: int
    status: SessionStatus
    spec: dict[str, Any]
    kernels: tuple[KernelRequest, ...]


def _json_copy(value: Any, what: str) -> Any:
    try:
        # NaN and infinities are not JSON: PostgreSQL refuses them and SQLite's
        # JSON functions fail on them, so they are refused on both.
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise InvalidSpecError(f"{what} is not JSON-serializable: {error}") from None


def _check_whole(value: Any, where: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InvalidSpecError(f"{where} must be a whole number >= 0 or null, got {value!r}")


def validate_session_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Check a session spec and return a JSON-safe copy, or raise InvalidSpecError."""
    if not isinstance(spec, Mapping):
        raise InvalidSpecError(f"session spec must be a mapping, got {type(spec).__name__}")
    copy: dict[str, Any] = _json_copy(dict(spec), "session spec")
    _check_whole(copy.get("max_requeues"), "spec['max_requeues']")
    options = copy.get("options")
    if options is None:
        return copy
    if not isinstance(options, dict):
        raise InvalidSpecError("spec['options'] must map handler names to option tables")
    for handler, values in options.items():
        if not isinstance(values, dict):
            raise InvalidSpecError(f"spec['options'][{handler!r}] must be a table of options")
        for key, value in values.items():
            if key not in SESSION_OPTION_KEYS:
                raise InvalidSpecError(
                    f"spec['options'][{handler!r}] has unknown option {key!r}; "
                    f"a session may set {sorted(SESSION_OPTION_KEYS)}"
                )
            if value is None:
                continue
            if key == "max_retries":
                _check_whole(value, f"spec['options'][{handler!r}]['max_retries']")
            if key == "timeout" and (
                isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
            ):
                raise InvalidSpecError(
                    f"spec['options'][{handler!r}]['timeout'] must be a number of seconds > 0 "
                    f"or null, got {value!r}"
                )
    return copy


def _kernel_request(index: int, kspec: Any) -> KernelRequest:
    if not isinstance(kspec, Mapping):
        raise InvalidSpecError(f"kernel {index} must be a mapping, got {kspec!r}")
    body = dict(kspec)
    raw_status = body.pop("status", None)
    try:
        status = KernelStatus(raw_status) if raw_status else None
    except ValueError:
        raise InvalidSpecError(
            f"kernel {index}: unknown kernel status {raw_status!r}; "
            f"expected one of {[s.value for s in KernelStatus]}"
        ) from None
    agent_id = body.pop("agent_id", None)
    for slot in ("cpu", "mem"):
        value = body.get(slot)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or value < 0
        ):
            raise InvalidSpecError(f"kernel {index}: {slot!r} must be a number >= 0, got {value!r}")
    spec = _json_copy(body, f"kernel {index} spec")
    return KernelRequest(spec=spec, status=status, agent_id=agent_id)


def session_request(request: Mapping[str, Any]) -> SessionRequest:
    """Check one request (``kernels``, ``name``, ``priority``, ``status``, ``spec``)."""
    unknown = set(request) - _REQUEST_KEYS
    if unknown:
        raise InvalidSpecError(f"unknown session field(s): {sorted(unknown)}")
    try:
        status = SessionStatus(request.get("status") or SessionStatus.PENDING)
    except ValueError:
        raise InvalidSpecError(
            f"unknown session status {request.get('status')!r}; "
            f"expected one of {[s.value for s in SessionStatus]}"
        ) from None
    priority = request.get("priority", 0) or 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidSpecError(f"priority must be an integer, got {priority!r}")
    spec = validate_session_spec(request.get("spec") or {})
    kernel_specs = request.get("kernels")
    if kernel_specs is None or isinstance(kernel_specs, str | bytes | Mapping):
        raise InvalidSpecError("kernels must be a list of kernel specs (it may be empty)")
    name = request.get("name")
    return SessionRequest(
        name=None if name is None or name == "" else str(name),
        priority=priority,
        status=status,
        spec=spec,
        kernels=tuple(_kernel_request(i, k) for i, k in enumerate(kernel_specs)),
    )
