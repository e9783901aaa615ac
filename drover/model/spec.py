"""Checking what users submit, before anything is written.

A request that fails a check raises :class:`InvalidSpecError` naming the
problem; nothing is written. The checks are the same whatever database is used.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from typing import Any

import attrs

from drover.model.errors import InvalidSpecError
from drover.model.status import KernelStatus, SessionStatus

__all__ = [
    "ENGINE_KERNEL_KEYS",
    "KERNEL_DEFAULTS",
    "MAX_NAME_LENGTH",
    "PRIORITY_RANGE",
    "SESSION_OPTION_KEYS",
    "KernelRequest",
    "SessionRequest",
    "check_against_deployment",
    "is_kebab_case",
    "seeded_session_request",
    "session_request",
    "slot_amounts",
    "validate_session_spec",
    "with_kernel_defaults",
]

#: Handler options a session may override in ``spec["options"][handler]``.
SESSION_OPTION_KEYS = frozenset({"max_retries", "timeout"})
_REQUEST_KEYS = {"kernels", "name", "priority", "status", "spec"}
_KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")

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

#: The range of ``priority``: a 32-bit integer, as PostgreSQL stores it.
PRIORITY_RANGE = (-(2**31), 2**31 - 1)
#: Longest session name, in characters (PostgreSQL's ``varchar(255)``).
MAX_NAME_LENGTH = 255
# Deeper JSON than this is refused before Python's recursion limit is near.
_MAX_DEPTH = 64


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


def _text_problem(text: str) -> str | None:
    """Why PostgreSQL would refuse ``text`` where SQLite takes it, or ``None``."""
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates: what Python makes of bytes that are not UTF-8.
        return "is not valid UTF-8 text"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_finite(value: int | float) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an int too large for a float
        return False


def _json_copy(value: Any, what: str, depth: int = 0) -> Any:
    """A JSON-safe copy of ``value`` that both databases store alike, or InvalidSpecError.

    JSON has no NaN or infinity, and PostgreSQL's ``jsonb`` refuses NUL
    characters and lone surrogates that SQLite would store, so those are
    refused here, for both.
    """
    if depth > _MAX_DEPTH:
        raise InvalidSpecError(f"{what} is nested more than {_MAX_DEPTH} levels deep")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        problem = _text_problem(value)
        if problem:
            raise InvalidSpecError(f"{what}: the text {value!r} {problem}")
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidSpecError(f"{what}: {value!r} is not a finite number")
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidSpecError(f"{what}: key {key!r} is not a string")
            problem = _text_problem(key)
            if problem:
                raise InvalidSpecError(f"{what}: the key {key!r} {problem}")
            out[key] = _json_copy(item, what, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [_json_copy(item, what, depth + 1) for item in value]
    raise InvalidSpecError(
        f"{what} is not JSON-serializable: {type(value).__name__} {value!r} is not a JSON value"
    )


def _check_whole(value: Any, where: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InvalidSpecError(f"{where} must be a whole number >= 0 or null, got {value!r}")


def validate_session_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Check a session spec and return a JSON-safe copy, or raise InvalidSpecError."""
    if not isinstance(spec, Mapping):
        raise InvalidSpecError(f"session spec must be a mapping, got {type(spec).__name__}")
    # The specific checks first, so their messages win over _json_copy's general ones.
    _check_whole(spec.get("max_requeues"), "spec['max_requeues']")
    options = spec.get("options")
    if options is not None:
        _check_options(options)
    copy: dict[str, Any] = _json_copy(spec, "session spec")
    return copy


def _check_options(options: Any) -> None:
    if not isinstance(options, Mapping):
        raise InvalidSpecError("spec['options'] must map handler names to option tables")
    for handler, values in options.items():
        if not isinstance(values, Mapping):
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
            if key == "timeout" and (not _is_number(value) or value <= 0 or not _is_finite(value)):
                raise InvalidSpecError(
                    f"spec['options'][{handler!r}]['timeout'] must be a finite number of seconds "
                    f"> 0 or null, got {value!r}"
                )


def slot_amounts(spec: Mapping[str, Any]) -> dict[str, float | int]:
    """The resource slots a kernel spec asks for: every top-level number.

    This is how the scheduler reads a spec, so every one of them must be a
    finite amount >= 0.
    """
    return {key: value for key, value in spec.items() if _is_number(value)}


def _kernel_request(index: int, kspec: Any, *, seeding: bool) -> KernelRequest:
    if not isinstance(kspec, Mapping):
        raise InvalidSpecError(f"kernel {index} must be a mapping, got {kspec!r}")
    body = dict(kspec)
    if not seeding:
        owned = sorted(k for k in body if k in ENGINE_KERNEL_KEYS)
        if owned:
            raise InvalidSpecError(
                f"kernel {index}: {', '.join(repr(k) for k in owned)} "
                f"{'is' if len(owned) == 1 else 'are'} set by drover, not by a kernel spec"
            )
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
        if value is not None and not _is_number(value):
            raise InvalidSpecError(f"kernel {index}: {slot!r} must be a number >= 0, got {value!r}")
    for slot, value in slot_amounts(body).items():
        if value < 0 or not _is_finite(value):
            raise InvalidSpecError(
                f"kernel {index}: resource {slot!r} must be a finite number >= 0, got {value!r}"
            )
    spec = _json_copy(body, f"kernel {index} spec")
    return KernelRequest(spec=spec, status=status, agent_id=agent_id)


def _name(raw: Any) -> str | None:
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str):
        raise InvalidSpecError(f"name must be text, got {raw!r}")
    if len(raw) > MAX_NAME_LENGTH:
        raise InvalidSpecError(
            f"name is {len(raw)} characters long; at most {MAX_NAME_LENGTH} are allowed"
        )
    problem = _text_problem(raw)
    if problem:
        raise InvalidSpecError(f"name {raw!r} {problem}")
    return raw


def _request(request: Mapping[str, Any], *, seeding: bool) -> SessionRequest:
    if not isinstance(request, Mapping):
        raise InvalidSpecError(f"a session request must be a mapping, got {request!r}")
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
    if status is not SessionStatus.PENDING and not seeding:
        raise InvalidSpecError(
            f"a new session is PENDING; its status ({status.value}) is set by drover"
        )
    priority = request.get("priority", 0) or 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidSpecError(f"priority must be an integer, got {priority!r}")
    low, high = PRIORITY_RANGE
    if not low <= priority <= high:
        raise InvalidSpecError(
            f"priority {priority} is out of range: it must be between {low} and {high}"
        )
    name = _name(request.get("name"))
    spec = validate_session_spec(request.get("spec") or {})
    kernel_specs = request.get("kernels")
    if kernel_specs is None or isinstance(kernel_specs, str | bytes | Mapping):
        raise InvalidSpecError("kernels must be a list of kernel specs (it may be empty)")
    return SessionRequest(
        name=name,
        priority=priority,
        status=status,
        spec=spec,
        kernels=tuple(
            _kernel_request(i, k, seeding=seeding) for i, k in enumerate(kernel_specs, start=1)
        ),
    )


def session_request(request: Mapping[str, Any]) -> SessionRequest:
    """Check one request to create a session (``kernels``, ``name``, ``priority``, ``spec``).

    This is what a user may ask for: a session starts PENDING, and kernel
    specs may not name the fields drover owns (:data:`ENGINE_KERNEL_KEYS`).
    Every limit either database has holds for both, so SQLite and PostgreSQL
    accept exactly the same requests.
    """
    return _request(request, seeding=False)


def seeded_session_request(request: Mapping[str, Any]) -> SessionRequest:
    """Like :func:`session_request`, but a test may start anywhere.

    ``status`` sets the session's initial status, and a kernel's ``"status"``
    and ``"agent_id"`` keys its own (they are taken out of its spec). For
    tests and benchmarks that need sessions midway through their lifecycle.
    """
    return _request(request, seeding=True)


def with_kernel_defaults(kernel: Mapping[str, Any]) -> dict[str, Any]:
    """``kernel`` with :data:`KERNEL_DEFAULTS` for the slots it does not name."""
    return {**KERNEL_DEFAULTS, **kernel}


def check_against_deployment(
    request: SessionRequest, *, handlers: Collection[str], slots: Collection[str]
) -> None:
    """Refuse what no part of this deployment could act on.

    ``handlers`` are the loaded handler names and ``slots`` every slot some
    agent offers: options for a handler that is not loaded would be silently
    ignored, and a kernel asking for a slot no agent has would wait PENDING
    forever.
    """
    options = request.spec.get("options") or {}
    unknown = sorted(set(options) - set(handlers))
    if unknown:
        raise InvalidSpecError(
            f"options for unknown handler(s) {', '.join(repr(u) for u in unknown)}; "
            f"the loaded handlers are {', '.join(sorted(handlers))}"
        )
    known = set(slots) | set(KERNEL_DEFAULTS)
    for index, kernel in enumerate(request.kernels, start=1):
        strange = sorted(set(slot_amounts(kernel.spec)) - known)
        if strange:
            raise InvalidSpecError(
                f"kernel {index}: no agent has the resource slot(s) "
                f"{', '.join(repr(s) for s in strange)}; the known slots are "
                f"{', '.join(sorted(known))}"
            )
