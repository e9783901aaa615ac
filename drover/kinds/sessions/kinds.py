"""The ``session`` and ``kernel`` kinds, the kernel spec check, and their registration.

A session is the unit drover schedules; its kernels (child kind ``kernel``)
are the processes a backend runs. The statuses are the design card's
(:class:`~drover.kinds.sessions.values.SessionStatus`,
:class:`~drover.kinds.sessions.values.KernelStatus`); what the engine does with them
is derived from the two declarations below (:mod:`drover.model.kinds`).

A kernel's spec is its resource request (every top-level number is a slot:
``cpu``, ``mem``, ``gpu``…) and what to run; :func:`check_kernel_spec` is the
kernel kind's own spec check. A session request (``drover submit``,
``Repository.create_sessions``) becomes a new entity through
:func:`drover.kinds.sessions.requests.new_session`.

The plugin manager always loads this module as the plugin
``drover.kinds.sessions``: its ``drover_register_kinds`` registers both kinds,
as a plugin registers its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from drover.kinds.sessions.defaults import KERNEL_DEFAULTS, with_kernel_defaults
from drover.kinds.sessions.values import (
    KERNEL_KIND,
    SESSION_KIND,
    TERMINAL_KERNEL_STATUSES,
    TERMINAL_SESSION_STATUSES,
    KernelInfo,
    KernelStatus,
    SessionStatus,
    SessionWithKernels,
)
from drover.model.checks import is_finite, is_number
from drover.model.errors import InvalidSpecError
from drover.model.kinds import EntityKind, Kinds, Limit, TerminationRule
from drover.plugins.markers import hookimpl
from drover.plugins.registry import KindRegistry

if TYPE_CHECKING:
    import click

__all__ = [
    "ENGINE_KERNEL_KEYS",
    "KERNEL",
    "KERNEL_DEFAULTS",
    "KERNEL_REPORTED",
    "SESSION",
    "SESSION_KINDS",
    "check_kernel_spec",
    "drover_register_commands",
    "drover_register_kinds",
    "with_kernel_defaults",
]

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
    _check_command(spec, where)
    _check_env(spec.get("env"), where)
    for slot in ("cpu", "mem"):
        value = spec.get(slot)
        if value is not None and not is_number(value):
            raise InvalidSpecError(f"{where}: {slot!r} must be a number >= 0, got {value!r}")
    for slot, value in spec.items():
        if is_number(value) and (value < 0 or not is_finite(value)):
            raise InvalidSpecError(
                f"{where}: resource {slot!r} must be a finite number >= 0, got {value!r}"
            )


def _check_command(spec: Mapping[str, Any], where: str) -> None:
    # A kernel without a command is a backend's business (the simulated one runs none);
    # one that names an empty program could only fail once it is started.
    for key in ("command", "setup"):
        if key not in spec:
            continue
        value = spec[key]
        if key == "setup":
            if value is not None and not isinstance(value, str):
                raise InvalidSpecError(f"{where}: 'setup' must be a shell command, got {value!r}")
            continue
        if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
            raise InvalidSpecError(f"{where}: 'command' must be a non-empty list of strings")
        if not value[0].strip():
            raise InvalidSpecError(
                f"{where}: 'command' must start with a program to run, got {value[0]!r}"
            )


def _check_env(env: Any, where: str) -> None:
    if env is None:
        return
    if not isinstance(env, Mapping):
        raise InvalidSpecError(
            f"{where}: 'env' must be a table of NAME = \"value\", got {type(env).__name__}"
        )
    for name, value in env.items():
        if not isinstance(name, str) or not name or "=" in name:
            raise InvalidSpecError(f"{where}: env name {name!r} must be non-empty text without '='")
        if not isinstance(value, str):
            raise InvalidSpecError(
                f'{where}: env {name} must be text, got {value!r} (quote it: {name} = "...")'
            )


def _read_sessions(*args: Any) -> list[Any]:
    # Imported on first read: the command line loads this module to list its commands.
    from drover.kinds.sessions.reading import read_sessions

    return read_sessions(*args)


def _read_kernels(*args: Any) -> list[Any]:
    from drover.kinds.sessions.reading import read_kernels

    return read_kernels(*args)


_K = KernelStatus
#: What a backend reports a kernel moving to, short of its end: its placement's progress
#: (pulling, prepared) and its start. The only moves into a live status a report from
#: outside drover may make: not TERMINATING (drover's intent to destroy it, recorded
#: before its signal), nor anything from PENDING (no backend holds such a kernel).
KERNEL_REPORTED = frozenset(
    {
        (_K.SCHEDULED, _K.PREPARING),
        (_K.SCHEDULED, _K.PULLING),
        (_K.PREPARING, _K.PULLING),
        (_K.SCHEDULED, _K.PREPARED),
        (_K.PREPARING, _K.PREPARED),
        (_K.PULLING, _K.PREPARED),
        (_K.PREPARED, _K.RUNNING),
        (_K.CREATING, _K.RUNNING),
    }
)

SESSION = EntityKind(
    SESSION_KIND,
    SessionStatus,
    terminal=TERMINAL_SESSION_STATUSES,
    success={SessionStatus.TERMINATED},
    requeue_limit_status=SessionStatus.ERROR,
    created_in={SessionStatus.PENDING},
    # limits.kernels_per_session: a session's kernels (drover submit --kernels, [[kernels]]).
    limits=(Limit("kernels_per_session", 1000),),
    value_type=SessionWithKernels,
    reader=_read_sessions,
    # The design card's handlers name no kind: they act on sessions.
    default=True,
    # No backend reports a session's status: reports from outside may only end one.
    strict_reports=True,
    termination=(
        TerminationRule(
            SessionStatus.CANCELLED,
            {SessionStatus.PENDING},
            children=KernelStatus.CANCELLED,
            message="termination requested: cancelled before it was scheduled",
        ),
        TerminationRule(
            SessionStatus.TERMINATING,
            {s for s in SessionStatus if s not in TERMINAL_SESSION_STATUSES},
            if_childless=SessionStatus.TERMINATED,
        ),
    ),
)
KERNEL = EntityKind(
    KERNEL_KIND,
    KernelStatus,
    terminal=TERMINAL_KERNEL_STATUSES,
    parent=SESSION_KIND,
    success={KernelStatus.TERMINATED},
    exit_codes=True,
    terminable=False,
    check_spec=check_kernel_spec,
    created_in={KernelStatus.PENDING},
    value_type=KernelInfo,
    reader=_read_kernels,
    resource_slots=KERNEL_DEFAULTS,
    reported=KERNEL_REPORTED,
    strict_reports=True,
)
#: The session lifecycle's kinds on their own: what a session another package creates
#: (a deployment's replica) is checked against before anything is written.
SESSION_KINDS = Kinds((SESSION, KERNEL))


@hookimpl
def drover_register_kinds(register: KindRegistry) -> None:
    """Register ``session`` and its child kind ``kernel``."""
    register(SESSION, KERNEL)


# First (tryfirst): drover's own commands are added even when a later plugin's
# hook raises, and a plugin may still replace one by adding a command of that name.
@hookimpl(tryfirst=True)
def drover_register_commands(cli: click.Group) -> None:
    """Add ``submit``, ``sessions`` and ``logs`` to ``drover``."""
    # Imported only now, as the command line is built: every plugin manager, the
    # daemon's and the harness's too, loads this module, and only the command line
    # needs the commands (and click).
    from drover.kinds.sessions.cli import COMMANDS

    for command in COMMANDS:
        cli.add_command(command)
