"""``drover report``: push an outside event's news about one entity, as a script would."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from drover.cli.kit import database_option, emit_json, json_option, with_app
from drover.model.checks import parse_json
from drover.model.errors import InvalidSpecError
from drover.model.plan import REPORT_SOURCE
from drover.model.reporting import outside_source

if TYPE_CHECKING:
    from drover.app import App
    from drover.model.kinds import EntityKind

__all__ = ["report"]


def _data(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = parse_json(raw, "the JSON")
    except InvalidSpecError as error:
        raise click.BadParameter(str(error), param_hint="--data") from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--data")
    return value


def _source(name: str) -> str:
    try:
        return outside_source(name)
    except InvalidSpecError as error:
        raise click.BadParameter(str(error), param_hint="--source") from None


def _why(kind: EntityKind, now: str, wanted: str) -> str:
    """Why a report to ``wanted`` did not apply, beyond the entity's status ``now``:
    the statuses its kind lets a report move it there from."""
    if now in {wanted, *kind.terminal} or kind.takes_report(now, wanted):
        return ""
    froms = sorted(kind.reported_from(wanted))
    return f" (a report moves it to {wanted} only from {', '.join(froms)})"


@click.command()
@click.argument("entity_id")
@click.argument("status")
@click.option(
    "--expected",
    multiple=True,
    help="Apply only if the entity is in this status (repeatable): compare-and-set.",
)
@click.option("--info", "status_info", help="The entity's new status_info.")
@click.option("--data", "raw_data", help="A JSON object merge-patched into the entity's data.")
@click.option("--message", help="Why, for the history row.")
@click.option(
    "--source",
    default=REPORT_SOURCE,
    show_default=True,
    help="Who reports: NAME is recorded as the history row's handler api:NAME "
    "(never a handler's name).",
)
@json_option
@database_option
@click.pass_context
def report(
    ctx: click.Context,
    entity_id: str,
    status: str,
    expected: tuple[str, ...],
    status_info: str | None,
    raw_data: str | None,
    message: str | None,
    source: str,
    as_json: bool,
    database_url: str | None,
) -> None:
    """Move an entity of any kind to STATUS, as an outside event says (a worker's heartbeat,
    a webhook, an agent).

    Compare-and-set: nothing happens if the entity has ended or, with --expected,
    is in none of those statuses; the command then exits 1. A report of the
    status the entity has with --data only patches its data. The change is
    recorded in the entity's history (result MOVED, handler api:SOURCE); an
    entity it ends gets its result and ends its children. A kind may let reports
    make only some moves (a session: only its end; a kernel: what backends
    report). ENTITY_ID may be a unique prefix. What is refused, and why:
    docs/operations.md.

    \b
    Example: drover report 01a2f3 DONE --expected RUNNING --info EXIT_0 --data '{"worker": "w1"}'
    """
    data = _data(raw_data)
    source = _source(source)

    async def work(app: App) -> tuple[bool, Any, str]:
        eid = await app.repository.resolve_entity_id(entity_id)
        kind = app.kinds[(await app.repository.get_entity(eid)).kind]
        # Statuses in any case, as the other commands take them.
        named = {s.upper(): s for s in kind.status_names}
        ok = await app.repository.report(
            eid,
            named.get(status.upper(), status),
            expected=[named.get(s.upper(), s) for s in expected] or None,
            status_info=status_info,
            data=data,
            message=message,
            source=source,
        )
        entity = await app.repository.get_entity(eid)
        return ok, entity, _why(kind, str(entity.status), named.get(status.upper(), status))

    ok, entity, why = with_app(ctx, work, database_url=database_url)
    if expected and not why:
        why = f" (expected {', '.join(s.upper() for s in expected)})"
    if as_json:
        emit_json(
            {
                "entity_id": entity.id,
                "kind": entity.kind,
                "applied": ok,
                "status": str(entity.status),
                "status_info": entity.status_info,
                "result": entity.result,
            }
        )
    elif ok:
        click.echo(f"{entity.id}: {entity.kind} now {entity.status}")
    else:
        click.echo(f"{entity.id}: not applied: the {entity.kind} is {entity.status}{why}")
    if not ok:
        ctx.exit(1)
