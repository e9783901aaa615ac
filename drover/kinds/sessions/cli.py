"""The session lifecycle's commands: ``drover submit``, ``drover sessions``, ``drover logs``.

Added to ``drover`` by the sessions package's ``drover_register_commands``
(:mod:`drover.kinds.sessions.kinds`), as a plugin adds its own. ``show``,
``why``, ``history`` and ``terminate`` work on every kind and stay in
:mod:`drover.cli`.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import click

from drover.backends.logfiles import read_log
from drover.cli.kit import (
    CliState,
    CommandApp,
    count_range,
    database_option,
    emit_json,
    json_option,
    parse_env,
    print_table,
    with_app,
)
from drover.kinds.sessions.defaults import KERNEL_DEFAULTS, with_kernel_defaults
from drover.kinds.sessions.values import TERMINAL_KERNEL_STATUSES, SessionStatus
from drover.model.checks import PRIORITY_RANGE
from drover.model.errors import DroverError

__all__ = ["COMMANDS", "logs", "sessions", "submit"]


def _parse_options(items: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    options: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        handler, dot, field = key.rpartition(".")
        if not sep or not dot or not handler or not field:
            raise click.BadParameter(
                f"{item!r} is not HANDLER.FIELD=VALUE (e.g. prepare-sessions.timeout=60)",
                param_hint="--option",
            )
        value: Any
        if raw.lower() in {"none", "null"}:
            value = None
        else:
            try:
                value = int(raw)
            except ValueError:
                try:
                    value = float(raw)
                except ValueError:
                    raise click.BadParameter(
                        f"{item!r}: {raw!r} is not a number", param_hint="--option"
                    ) from None
        options.setdefault(handler, {})[field] = value
    return options


#: Keys of a kernel's spec that are not resource slots (so ``--resource`` cannot name them).
_NOT_SLOTS = frozenset({"command", "env", "setup", "cwd", "image", "mounts", "agent_id"})
#: A resource slot's name: ``gpu``, ``cuda.device``, ``cuda.shares``…
_SLOT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


def parse_resources(items: tuple[str, ...]) -> dict[str, float]:
    """The ``--resource SLOT=AMOUNT`` flags as ``{slot: amount}``; a bad one is refused."""
    slots: dict[str, float] = {}
    for item in items:
        slot, sep, raw = item.partition("=")
        if not sep or not _SLOT_NAME.fullmatch(slot) or not raw:
            raise click.BadParameter(
                f"{item!r} is not SLOT=AMOUNT (e.g. gpu=1 or cuda.device=1)",
                param_hint="--resource",
            )
        if slot in _NOT_SLOTS:
            raise click.BadParameter(
                f"{item!r}: {slot!r} is a kernel setting, not a resource slot",
                param_hint="--resource",
            )
        if slot in slots:
            raise click.BadParameter(f"{item!r}: {slot} is given twice", param_hint="--resource")
        try:
            amount = float(raw)
        except ValueError:
            amount = math.nan
        if not math.isfinite(amount) or amount < 0:
            raise click.BadParameter(
                f"{item!r}: {raw!r} is not a finite number >= 0", param_hint="--resource"
            )
        slots[slot] = amount
    return slots


def _request_from_file(path: str) -> dict[str, Any]:
    from drover.config import parse_toml

    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise click.ClickException(f"cannot read {path}: {error.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise click.ClickException(
            f"{path}: not a UTF-8 text file (byte 0x{raw[error.start]:02x} at offset "
            f"{error.start}); a session file is TOML"
        ) from None
    data = parse_toml(text, path, click.ClickException)
    unknown = set(data) - {"name", "priority", "kernels", "options", "spec"}
    if unknown:
        raise click.ClickException(
            f"{path}: unknown key(s) {sorted(unknown)}; "
            "allowed: name, priority, kernels, options, spec"
        )
    spec = data.get("spec") or {}
    if not isinstance(spec, dict):
        raise click.ClickException(f"{path}: 'spec' must be a table, got {spec!r}")
    spec = dict(spec)
    if "options" in data:
        spec["options"] = data["options"]
    kernels = data.get("kernels")
    if isinstance(kernels, list):
        # The same defaults as the command-line flags.
        kernels = [with_kernel_defaults(k) if isinstance(k, dict) else k for k in kernels]
    return {
        "name": data.get("name"),
        "priority": data.get("priority", 0),
        "kernels": kernels,
        "spec": spec,
    }


def _check_kernels(kernels: Any, where: str) -> None:
    if not isinstance(kernels, list) or not kernels:
        raise click.ClickException(f"{where}: a session needs at least one kernel")
    for index, kernel in enumerate(kernels, start=1):
        command = kernel.get("command") if isinstance(kernel, dict) else None
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(a, str) for a in command)
        ):
            raise click.ClickException(
                f"{where}: kernel {index} needs 'command', a non-empty list of strings"
            )


@click.command()
@click.option("--name", default=None, help="A name to recognise the session by.")
@click.option(
    "--kernels",
    "count",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Kernels of the session, each running the command (at most "
    "limits.kernels_per_session, 1000 unless configured).",
)
@click.option(
    "--cpu",
    type=click.FloatRange(min=0),
    default=KERNEL_DEFAULTS["cpu"],
    show_default=True,
    help="Cores per kernel (a --file kernel without cpu gets the same).",
)
@click.option(
    "--mem",
    type=click.FloatRange(min=0),
    default=KERNEL_DEFAULTS["mem"],
    show_default=True,
    help="MiB per kernel (a --file kernel without mem gets the same).",
)
@click.option(
    "--priority",
    type=click.IntRange(*PRIORITY_RANGE),
    default=0,
    show_default=True,
    help="Higher goes first (a 32-bit integer).",
)
@click.option(
    "--setup",
    default=None,
    help="Shell command run while preparing each kernel, in its working directory.",
)
@click.option(
    "--cwd",
    default=None,
    help="Working directory of each kernel, relative to the kernel's own directory; "
    "created if missing, before the setup runs.",
)
@click.option(
    "--image",
    default=None,
    help="The image each kernel runs in (container backend, docs/containers.md).",
)
@click.option(
    "--resource",
    "-r",
    "resource_items",
    multiple=True,
    metavar="SLOT=AMOUNT",
    help="Any resource slot per kernel, e.g. -r gpu=1 or -r cuda.device=1 (repeatable); "
    "the slot must be one some agent has. -r cpu=2 is --cpu 2. With --file, the "
    "default of the file's kernels that do not name the slot.",
)
@click.option("--env", "env_pairs", multiple=True, help="NAME=VALUE for the kernels (repeatable).")
@click.option(
    "--option",
    "option_items",
    multiple=True,
    help="HANDLER.FIELD=VALUE for this session only, e.g. prepare-sessions.timeout=60; "
    "HANDLER must be a loaded handler.",
)
@click.option(
    "--max-requeues",
    type=count_range(0),
    default=None,
    help="Times this session may be sent back to PENDING before it ends in ERROR "
    "[default: the configuration's max_requeues, 3].",
)
@click.option(
    "--file",
    "file_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="A session TOML file (kernels may differ from each other).",
)
@json_option
@database_option
@click.argument("command", nargs=-1)
@click.pass_context
def submit(
    ctx: click.Context,
    name: str | None,
    count: int,
    cpu: float,
    mem: float,
    priority: int,
    setup: str | None,
    image: str | None,
    cwd: str | None,
    resource_items: tuple[str, ...],
    env_pairs: tuple[str, ...],
    option_items: tuple[str, ...],
    max_requeues: int | None,
    file_path: str | None,
    as_json: bool,
    database_url: str | None,
    command: tuple[str, ...],
) -> None:
    """Create a PENDING session and print its id.

    Everything after -- is the command each kernel runs. The request is
    checked before anything is written: resource amounts are finite and >= 0,
    every resource slot is one some agent has, options name loaded handlers.

    \b
    Examples:
      drover submit --name hello --cpu 1 --mem 256 -- echo hello
      drover submit --kernels 2 --env MODE=fast --option prepare-sessions.timeout=60 -- sleep 30
      drover submit --cwd build --setup 'git clone https://example.org/app .' -- make test
      drover submit --file session.toml
      drover submit --image docker.io/library/busybox:latest --cpu 0.5 --mem 64 -- echo hi
      drover submit -r gpu=1 --name train -- python3 train.py
    """
    resources = parse_resources(resource_items)
    if file_path:
        if command:
            raise click.UsageError("give either --file or a command after --, not both")
        request = _request_from_file(file_path)
        if name:
            request["name"] = name
        if max_requeues is not None:
            request["spec"]["max_requeues"] = max_requeues
        _check_kernels(request["kernels"], file_path)
        if cwd:
            # The flag is the default of the file's kernels that do not name their own.
            request["kernels"] = [{"cwd": cwd, **k} for k in request["kernels"]]
        if resources:
            # Defaults too: a slot the file's kernel names is its own.
            request["kernels"] = [{**resources, **k} for k in request["kernels"]]
    else:
        if not command:
            raise click.UsageError("nothing to run: add -- COMMAND ARGS… (or --file)")
        # Before the kernels are built: a count past the bound must not fill the memory.
        bound = CliState.of(ctx).loaded().config.limits.kernels_per_session
        if count > bound:
            raise click.BadParameter(
                f"{count} kernels: a session may have at most {bound} (limits.kernels_per_session)",
                param_hint="--kernels",
            )
        kernel: dict[str, Any] = with_kernel_defaults(
            {"command": list(command), "cpu": cpu, "mem": mem, **resources}
        )
        if setup:
            kernel["setup"] = setup
        if image:
            kernel["image"] = image
        if cwd:
            kernel["cwd"] = cwd
        env = parse_env(env_pairs)
        if env:
            kernel["env"] = env
        spec: dict[str, Any] = {}
        options = _parse_options(option_items)
        if options:
            spec["options"] = options
        if max_requeues is not None:
            spec["max_requeues"] = max_requeues
        request = {
            "name": name,
            "priority": priority,
            "kernels": [dict(kernel) for _ in range(count)],
            "spec": spec,
        }

    async def work(app: CommandApp) -> str:
        (sid,) = await app.submit([request])
        return sid

    sid = with_app(ctx, work, database_url=database_url)
    if as_json:
        emit_json({"id": sid})
    else:
        click.echo(sid)


@click.command()
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([s.value for s in SessionStatus], case_sensitive=False),
    help="Only sessions in this status (repeatable).",
)
@click.option(
    "--name",
    "name_pattern",
    default=None,
    metavar="PATTERN",
    help="Only sessions whose name matches: shell-style with * and ? (whole name), "
    "else a substring; case-insensitive.",
)
@click.option("--limit", type=count_range(1), default=100, show_default=True)
@click.option(
    "--sort",
    type=click.Choice(["newest", "oldest", "priority"]),
    default="newest",
    show_default=True,
    help="newest or oldest first by creation, or priority: the order handlers take them "
    "(highest priority, then oldest).",
)
@json_option
@database_option
@click.pass_context
def sessions(
    ctx: click.Context,
    statuses: tuple[str, ...],
    name_pattern: str | None,
    limit: int,
    sort: str,
    as_json: bool,
    database_url: str | None,
) -> None:
    """List sessions, newest first (or --sort oldest, --sort priority).

    \b
    Example: drover sessions --status PENDING --status RUNNING --sort priority --json
    Example: drover sessions --name 'web-*'
    """
    from drover.serialization import iso, session_json

    wanted = [SessionStatus(s.upper()) for s in statuses] or None

    async def work(app: CommandApp) -> list[Any]:
        return await app.queries.list_sessions(
            statuses=wanted, limit=limit, order=sort, name=name_pattern
        )

    found = with_app(ctx, work, database_url=database_url, reading=True)
    if as_json:
        emit_json([session_json(s) for s in found])
        return
    print_table(
        ["id", "name", "status", "kernels", "result", "status_info", "since"],
        [
            (
                s.id,
                s.name,
                s.status.value,
                len(s.kernels),
                s.result,
                s.status_info,
                iso(s.status_changed_at),
            )
            for s in found
        ],
    )


@click.command()
@click.argument("session_id")
@click.option(
    "--kernel",
    "kernel_index",
    type=count_range(1),
    default=1,
    show_default=True,
    help="Which kernel (1-based, as in `drover show`).",
)
@click.option("--stderr", "use_stderr", is_flag=True, help="Show stderr instead of stdout.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing output until the kernel ends.")
@database_option
@click.pass_context
def logs(
    ctx: click.Context,
    session_id: str,
    kernel_index: int,
    use_stderr: bool,
    follow: bool,
    database_url: str | None,
) -> None:
    """Print a kernel's output (its stdout, or its stderr), on any backend that records it.

    \b
    Example: drover logs 01a2f3 --kernel 2 --stderr --follow
    """
    stream = "stderr" if use_stderr else "stdout"

    async def work(app: CommandApp) -> None:
        queries = app.queries
        sid = await queries.resolve_session_id(session_id)
        session = await queries.get_session(sid)
        if kernel_index > len(session.kernels):
            raise DroverError(
                f"session {sid} has {len(session.kernels)} kernel(s); no kernel {kernel_index}"
            )
        kernel = session.kernels[kernel_index - 1]
        path = (kernel.runtime or {}).get(stream)
        if not path:
            raise DroverError(
                f"kernel {kernel_index} of {sid} has no {stream} log yet "
                f"(status {kernel.status}; a kernel has logs once its backend prepared it)"
            )
        if kernel.status in TERMINAL_KERNEL_STATUSES and not await asyncio.to_thread(
            os.path.exists, path
        ):
            raise DroverError(
                f"kernel {kernel_index} of {sid} ended and its {stream} log {path} is gone "
                "(the daemon deletes an ended kernel's files after "
                "history.kernel_files_retention, 7d by default)"
            )
        offset = 0
        keep_following = follow
        while True:
            # Never through a link: a kernel may have replaced its log (UnsafeLogError, one line).
            chunk = await asyncio.to_thread(read_log, path, offset)
            if chunk:
                offset += len(chunk)
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
            if not keep_following:
                return
            kernel = await queries.get_kernel(kernel.id)
            if kernel.status in TERMINAL_KERNEL_STATUSES:
                # one last read for output written just before the exit
                keep_following = False
                continue
            await asyncio.sleep(0.5)

    with_app(ctx, work, database_url=database_url, reading=True)


#: What the sessions package adds to ``drover``.
COMMANDS = (submit, sessions, logs)
