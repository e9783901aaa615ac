"""Commands on an entity of any kind: ``drover show`` and ``drover terminate``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from drover.cli.kit import database_option, emit_json, json_option, print_table, with_app
from drover.kinds.sessions.values import SessionWithKernels
from drover.model.errors import InvalidSpecError
from drover.model.values import Entity, HistoryRecord

if TYPE_CHECKING:
    from drover.app import App

__all__ = ["show", "terminate"]


@click.command()
@click.argument("session_id")
@click.option(
    "--history",
    "history_rows",
    type=int,
    default=10,
    show_default=True,
    help="How many of the latest history rows to show.",
)
@json_option
@database_option
@click.pass_context
def show(
    ctx: click.Context,
    session_id: str,
    history_rows: int,
    as_json: bool,
    database_url: str | None,
) -> None:
    """Show a session, its kernels (agent, pid, exit code, logs) and its last history rows;
    or an entity of any other kind, its children, data and history.

    SESSION_ID may be any unique prefix of the id (a prefix a session shares only with
    its own kernels means the session).

    \b
    Example: drover show 01a2f3
    """
    from drover.inspection.why import describe_exit
    from drover.serialization import history_json, iso, session_json

    async def work(app: App) -> tuple[Any, list[Any]]:
        queries = app.queries
        sid = await queries.resolve_entity_id(session_id)
        entity: Entity | SessionWithKernels = await queries.get_entity(sid)
        if app.kinds[entity.kind].value_type is SessionWithKernels:
            entity = await queries.get_session(sid)
        rows = await queries.history(sid)
        return entity, rows[-history_rows:] if history_rows > 0 else []

    session, rows = with_app(ctx, work, database_url=database_url, reading=True)
    if not isinstance(session, SessionWithKernels):
        _show_entity(session, rows, as_json)
        return
    if as_json:
        data = session_json(session)
        data["history"] = [history_json(r) for r in rows]
        emit_json(data)
        return
    click.echo(f"session      {session.id}  ({session.name})")
    click.echo(f"status       {session.status}  since {iso(session.status_changed_at)}")
    click.echo(f"status_info  {session.status_info or '-'}")
    click.echo(f"result       {session.result or '-'}")
    tries = ", ".join(f"{h} {n}" for h, n in sorted(session.tries.items())) or "none"
    click.echo(f"tries        {tries}  (failures per handler in this status)")
    click.echo(f"requeues     {session.requeues}")
    data = session_json(session)
    kernels = data["kernels"]
    # A container's name and a kernel's devices, when some kernel has them.
    extra = [key for key in ("container", "devices") if any(k[key] for k in kernels)]
    print_table(
        ["#", "kernel", "status", "agent", "pid", "exit", "status_info", "stdout", *extra],
        [
            (
                k["index"],
                k["id"],
                k["status"],
                k["agent_id"],
                k["pid"],
                describe_exit(k["exit_code"]),
                k["status_info"],
                k["stdout"],
                *(_devices_text(k[key]) if key == "devices" else k[key] for key in extra),
            )
            for k in kernels
        ],
        title="kernels",
    )
    _print_history(rows)


def _devices_text(devices: dict[str, list[str]] | None) -> str:
    """``gpu=0,1`` for a kernel's devices."""
    return " ".join(f"{slot}={','.join(ids)}" for slot, ids in sorted((devices or {}).items()))


@click.command()
@click.argument("session_ids", nargs=-1, required=True)
@click.option("--reason", help="Why, added to each history row's message.")
@click.option(
    "--mode",
    metavar="NAME",
    help="A termination mode the entities' kind declares (say abort): its own rules.",
)
@json_option
@database_option
@click.pass_context
def terminate(
    ctx: click.Context,
    session_ids: tuple[str, ...],
    reason: str | None,
    mode: str | None,
    as_json: bool,
    database_url: str | None,
) -> None:
    """Ask for sessions (or entities of any kind) to end, each by its kind's rule:
    PENDING sessions are cancelled, live ones terminated; a plugin's kind goes
    to its own cleanup status. --mode picks the rules of a named mode the kind
    declares; the result is CANCELLED in any mode.

    SESSION_IDS may be unique prefixes. Nothing is changed if any id is unknown
    or its kind has no such mode.

    \b
    Example: drover terminate 01a2f3 01a2f4 --reason "bad input data"
    Example: drover terminate 01b7c9 --mode abort
    """
    from drover.serialization import termination_json

    async def work(app: App) -> list[Any]:
        ids = [await app.repository.resolve_entity_id(s) for s in session_ids]
        return await app.repository.request_termination(ids, reason=reason, mode=mode)

    try:
        outcomes = with_app(ctx, work, database_url=database_url)
    except InvalidSpecError as error:  # pragma: no cover - run_async maps it already
        raise click.ClickException(str(error)) from None
    if as_json:
        emit_json([termination_json(o) for o in outcomes])
        return
    for o in outcomes:
        if o.changed:
            click.echo(f"{o.session_id}: {o.from_status} -> {o.to_status}")
        else:
            click.echo(f"{o.session_id}: already {o.to_status}, nothing to do")


def _show_entity(entity: Entity, rows: list[HistoryRecord], as_json: bool) -> None:
    """``drover show`` of an entity that is not a session."""
    from drover.serialization import entity_json, history_json, iso

    if as_json:
        data = entity_json(entity)
        data["history"] = [history_json(r) for r in rows]
        emit_json(data)
        return
    click.echo(f"{entity.kind:<12} {entity.id}  ({entity.name or '-'})")
    click.echo(f"status       {entity.status}  since {iso(entity.status_changed_at)}")
    click.echo(f"status_info  {entity.status_info or '-'}")
    click.echo(f"result       {entity.result or '-'}")
    if entity.parent_id:
        click.echo(f"parent       {entity.parent_id}")
    tries = ", ".join(f"{h} {n}" for h, n in sorted(entity.tries.items())) or "none"
    click.echo(f"tries        {tries}  (failures per handler in this status)")
    budgets = ", ".join(f"{b} {u}" for b, u in sorted((entity.budgets or {}).items())) or "none"
    click.echo(f"budgets      {budgets}  (used/limit)")
    click.echo(f"spec         {json.dumps(entity.spec, sort_keys=True)}")
    click.echo(f"data         {json.dumps(entity.data, sort_keys=True)}")
    print_table(
        ["#", "child", "kind", "status", "result"],
        [(i, c.id, c.kind, c.status, c.result) for i, c in enumerate(entity.children, start=1)],
        title="children",
    )
    _print_history(rows)


def _print_history(rows: list[HistoryRecord]) -> None:
    """The latest history rows of ``drover show``, oldest first."""
    from drover.serialization import iso

    print_table(
        ["time", "handler", "result", "from → to", "attempts", "error code", "message"],
        [
            (
                iso(r.updated_at),
                r.handler,
                str(r.result),
                f"{r.from_status} → {r.to_status}",
                r.attempts,
                r.error_code,
                r.message,
            )
            for r in rows
        ],
        title="history (latest last)",
    )
