"""Inspection commands: history (and prune), why, stats, graph."""

from __future__ import annotations

import asyncio
import csv
import json
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from drover.cli.kit import (
    CliState,
    count_range,
    database_option,
    emit_json,
    json_option,
    print_table,
    with_app,
)
from drover.kinds.sessions.values import SessionWithKernels
from drover.model.errors import DroverError
from drover.model.status import SchedulingResult

if TYPE_CHECKING:
    from drover.app import App

__all__ = ["entities", "graph", "history", "stats", "why"]

_COLUMNS = [
    "time",
    "kind",
    "entity",
    "handler",
    "result",
    "from → to",
    "attempts",
    "error code",
    "message",
]


class _Refused(click.ClickException):
    """A refused option, in one line (``Error: …``), with the usage error's exit status."""

    exit_code = 2


def _when(text: str | None, option: str) -> float | None:
    from drover.inspection._format import parse_time

    if text is None:
        return None
    try:
        return parse_time(text, time.time())
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint=option) from None


def _row(data: dict[str, Any]) -> list[Any]:
    # The time a row was written: rows are in that order (a repeat's newer time is
    # updated_at, in the JSON).
    return [
        data["created_at"],
        data["kind"],
        data["entity_id"],
        data["handler"],
        data["result"],
        f"{data['from_status']} → {data['to_status']}",
        data["attempts"],
        data["error_code"],
        data["message"],
    ]


class _DefaultGroup(click.Group):
    """`drover history [ENTITY]` lists; `drover history prune …` prunes."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or args[0] not in self.commands:
            args = ["list", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_DefaultGroup)
def history() -> None:
    """Show scheduling history (oldest first, latest last), or prune old history.

    \b
    Examples:
      drover history 01a2f3 --since 1h
      drover history --kind route --result stale
      drover history --follow
      drover history prune --older-than 30d --dry-run
    """


@history.command("list", hidden=True)
@click.argument("session_id", metavar="[ENTITY]", required=False)
@click.option("--kernel", "kernel_id", default=None, help="A kernel: its own status changes.")
@click.option("--handler", default=None, help="Only rows written by this handler (or api).")
@click.option(
    "--result",
    default=None,
    help="Only rows with this result: SUCCESS, NEED_RETRY, EXPIRED, GIVE_UP, SKIPPED, "
    "CREATED, or a named outcome such as stale.",
)
@click.option(
    "--kind",
    "kind_name",
    default=None,
    help="Only rows about entities of this kind (session, kernel, or a plugin's kind).",
)
@click.option("--since", default=None, help="1h, 30m, 2d… ago, or an ISO time.")
@click.option("--until", default=None, help="1h, 30m, 2d… ago, or an ISO time.")
@click.option("--limit", type=count_range(1), default=50, show_default=True)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new rows as they are written.")
@click.option("--reverse", is_flag=True, help="Newest first (the latest rows still).")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV.")
@json_option
@database_option
@click.pass_context
def history_list(
    ctx: click.Context,
    session_id: str | None,
    kernel_id: str | None,
    handler: str | None,
    result: str | None,
    kind_name: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    follow: bool,
    reverse: bool,
    as_csv: bool,
    as_json: bool,
    database_url: str | None,
) -> None:
    """The latest history rows, in the order they were written (latest last, as journalctl
    and tail print; --reverse for newest first): time written, kind, entity, handler,
    result, from → to, attempts, error code, message. ENTITY may be a unique id prefix.
    --follow then prints each new row as it is written. An unknown --result, --handler
    or --kind is refused.

    `drover history prune` deletes old history (see `drover history prune --help`).

    \b
    Examples:
      drover history 01a2f3 --since 1h
      drover history 01a2f3 --result SKIPPED --since 1h --json
      drover history --kind route --result stale
      drover history --follow
      drover history --reverse --limit 20
      drover history prune --older-than 30d --dry-run
    """
    from drover.inspection.history import (
        UnknownFilterError,
        check_history_filters,
        search_history,
    )
    from drover.serialization import history_json, kernel_history_json

    if follow and reverse:
        raise _Refused("--follow prints rows as they are written, latest last: not --reverse")
    since_t, until_t = _when(since, "--since"), _when(until, "--until")
    wanted = result
    if result and result.upper() in SchedulingResult.__members__:
        wanted = SchedulingResult(result.upper()).value

    async def work(app: App) -> list[dict[str, Any]]:
        repo = app.queries
        try:
            await check_history_filters(
                repo, kinds=list(app.kinds), handlers=lambda: app.load_handlers().handlers,
                handler=handler, result=wanted, kind=kind_name,
            )  # fmt: skip
        except UnknownFilterError as error:
            raise _Refused(f"--{error}") from None
        sid = await repo.resolve_entity_id(session_id) if session_id else None
        if kernel_id is not None:
            krows = await repo.search_kernel_history(
                kernel_id=kernel_id, since=since_t, until=until_t, limit=limit
            )
            return [kernel_history_json(r) for r in reversed(krows)]
        rows = await search_history(
            repo, kind=kind_name, session_id=sid, handler=handler, result=wanted,
            since=since_t, until=until_t, limit=limit,
        )  # fmt: skip
        data = [history_json(r) for r in rows]
        if not follow:
            return data
        _print_history(data, as_json=as_json, as_csv=as_csv, kernel=False)
        await _follow(repo, max((r["id"] for r in data), default=0), as_json,
                      session_id=sid, handler=handler, result=wanted, kind=kind_name)  # fmt: skip
        return []

    try:
        data = with_app(ctx, work, database_url=database_url, reading=True)
    except KeyboardInterrupt:
        return
    if reverse:
        data.reverse()
    _print_history(data, as_json=as_json, as_csv=as_csv, kernel=kernel_id is not None)


async def _follow(repo: Any, last: int, as_json: bool, **filters: Any) -> None:
    """Print every row written after the row ``last``, as it is written, until interrupted."""
    from drover.serialization import history_json

    while True:
        await asyncio.sleep(1.0)
        new = await repo.search_history(after_id=last, limit=1000, newest_first=False, **filters)
        for row in new:
            item = history_json(row)
            last = max(last, row.id)
            if as_json:
                click.echo(json.dumps(item))
            else:
                click.echo("\t".join("" if v is None else str(v) for v in _row(item)))
            sys.stdout.flush()


def _print_history(
    data: list[dict[str, Any]], *, as_json: bool, as_csv: bool, kernel: bool
) -> None:
    if as_json:
        emit_json(data)
        return
    if kernel:
        columns = ["time", "kernel", "source", "from → to", "message"]
        rows = [
            [d["created_at"], d["kernel_id"], d["source"], f"{d['from_status']} → {d['to_status']}",
             d["message"]]
            for d in data
        ]  # fmt: skip
    else:
        columns, rows = _COLUMNS, [_row(d) for d in data]
    if as_csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
        return
    print_table(columns, rows)


@history.command("prune")
@click.option("--older-than", required=True, help="30d, 12h, 1h30m…: delete what is older.")
@click.option("--dry-run", is_flag=True, help="Only count what would be deleted.")
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=5000,
    show_default=True,
    help="Rows deleted per transaction; a progress line on stderr after each.",
)
@json_option
@database_option
@click.pass_context
def prune(
    ctx: click.Context,
    older_than: str,
    dry_run: bool,
    batch_size: int,
    as_json: bool,
    database_url: str | None,
) -> None:
    """Delete old history of sessions that have ended, in batches; report what went.

    Rows of sessions that are still live are never deleted, so the latest row
    of a live session always stays. Old tick records (for `drover stats`) go
    too. Each batch is its own transaction and prints a progress line on
    stderr, so a long prune can be watched and interrupted.

    \b
    Example: drover history prune --older-than 30d --dry-run
    """
    from drover.inspection._format import parse_duration

    try:
        age = parse_duration(older_than)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--older-than") from None

    def progress(table: str, deleted: int) -> None:
        click.echo(f"{table}: {deleted} row(s) deleted so far", err=True)

    async def work(app: App) -> dict[str, int]:
        cutoff = time.time() - age
        return await app.repository.prune_history(
            older_than=cutoff,
            ticks_older_than=cutoff,
            dry_run=dry_run,
            batch=batch_size,
            on_batch=progress,
        )

    report = with_app(ctx, work, database_url=database_url)
    if as_json:
        emit_json({"dry_run": dry_run, "older_than_s": age, "deleted": report})
        return
    verb = "would delete" if dry_run else "deleted"
    for table, count in report.items():
        click.echo(f"{verb} {count} row(s) of {table}")


@click.command()
@click.argument("session_id")
@json_option
@database_option
@click.pass_context
def why(ctx: click.Context, session_id: str, as_json: bool, database_url: str | None) -> None:
    """Explain, in plain words, why a session (or an entity of any kind) is where it is
    and what would move it next.

    \b
    Example: drover why 01a2f3
    """
    from drover.inspection.why import diagnose_entity, diagnose_session
    from drover.serialization import diagnosis_json

    async def work(app: App) -> Any:
        coordinator = app.load_handlers()
        repo = app.repository
        sid = await repo.resolve_entity_id(session_id)
        entity = await repo.get_entity(sid)
        if app.kinds[entity.kind].value_type is SessionWithKernels:
            return await diagnose_session(repo, coordinator, sid, time.time())
        rows = await repo.history(sid)
        kind = app.kinds[entity.kind]
        return diagnose_entity(entity, rows, coordinator.handlers, kind, time.time())

    try:
        diagnosis = with_app(ctx, work, database_url=database_url, reading=True, plugins=True)
    except (TypeError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        emit_json(diagnosis_json(diagnosis))
        return
    for line in diagnosis.lines:
        click.echo(line)


@click.command()
@click.option("--since", default=None, help="Only ticks since: 1h, 30m, 2d… ago, or an ISO time.")
@click.option(
    "--kind",
    "kind_name",
    default="session",
    show_default=True,
    help="Whose statuses to count (session, kernel, or a plugin's kind).",
)
@json_option
@database_option
@click.pass_context
def stats(
    ctx: click.Context, since: str | None, kind_name: str, as_json: bool, database_url: str | None
) -> None:
    """Per handler: ticks, sessions per result, p50/p95 tick duration. Per status: sessions
    and p50/p95 of the time they have held it.

    Ticks are recorded by `drover run` (those that fetched something).

    \b
    Example: drover stats --since 1h
    Example: drover stats --kind job --json
    """
    from drover.inspection._format import duration
    from drover.inspection.stats import collect_stats
    from drover.serialization import stats_json

    since_t = _when(since, "--since")

    async def work(app: App) -> Any:
        _ = app.kinds[kind_name]
        return await collect_stats(app.queries, since=since_t, now=time.time(), kind=kind_name)

    result = with_app(ctx, work, database_url=database_url, reading=True)
    data = stats_json(result)
    if as_json:
        emit_json(data)
        return
    print_table(
        ["handler", "ticks", "results", "p50 tick", "p95 tick"],
        [
            (
                h["handler"],
                h["ticks"],
                " ".join(f"{k}={v}" for k, v in h["results"].items()),
                f"{h['p50_tick_s'] * 1000:.1f}ms",
                f"{h['p95_tick_s'] * 1000:.1f}ms",
            )
            for h in data["handlers"]
        ],
        title="handlers",
    )
    print_table(
        ["status", f"{kind_name}s", "p50 time in status", "p95 time in status"],
        [
            (s["status"], s["sessions"], duration(s["p50_age_s"]), duration(s["p95_age_s"]))
            for s in data["statuses"]
            if s["sessions"]
        ],
        title=f"{kind_name}s",
    )


@click.command()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["mermaid", "dot", "text", "json"]),
    default="text",
    show_default=True,
)
@click.option(
    "--kind",
    "kind_name",
    default="session",
    show_default=True,
    help="Which kind's state machine (session, kernel, or a plugin's kind).",
)
@click.pass_context
def graph(ctx: click.Context, fmt: str, kind_name: str) -> None:
    """Draw the state machine of one kind, from the handlers actually loaded, plugins included.

    Each edge is labelled with its handler and outcome (success, need_retry,
    expired, give_up, a named outcome, promotion; `api: terminate` for
    termination requests).

    \b
    Example: drover graph --format mermaid > docs/state-machine.mmd
    Example: drover graph --kind deployment --format dot | dot -Tsvg > deployment.svg
    """
    from drover.app import App
    from drover.plugins.graph import edges_of, render_dot, render_mermaid, render_text
    from drover.serialization import graph_json

    state = CliState.of(ctx)
    try:
        app = App(state.loaded())
        coordinator = app.load_handlers()
        kind = app.kinds[kind_name]
        asyncio.run(app.close())
    except (DroverError, TypeError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    edges = edges_of(coordinator.handlers, kind=kind)
    if fmt == "json":
        emit_json(graph_json(edges, kind))
    else:
        renderer = {"mermaid": render_mermaid, "dot": render_dot, "text": render_text}[fmt]
        click.echo(renderer(edges, kind))


@click.command()
@click.argument("kind_name", metavar="KIND")
@click.option("--status", "statuses", multiple=True, help="Only entities in this status.")
@click.option("--limit", type=count_range(1), default=100, show_default=True)
@json_option
@database_option
@click.pass_context
def entities(
    ctx: click.Context,
    kind_name: str,
    statuses: tuple[str, ...],
    limit: int,
    as_json: bool,
    database_url: str | None,
) -> None:
    """List entities of any kind (a plugin's, or session/kernel), newest first.

    \b
    Example: drover entities job --status RUNNING --json
    """
    from drover.serialization import entity_json, iso

    async def work(app: App) -> list[Any]:
        kind = app.kinds[kind_name]
        wanted = [s.upper() for s in statuses]
        unknown = sorted(set(wanted) - set(kind.status_names))
        if unknown:
            raise click.ClickException(
                f"--status {', '.join(unknown)}: not a status of kind {kind.name!r}; "
                f"its statuses are {', '.join(kind.status_names)}"
            )
        return await app.queries.list_entities(kind.name, statuses=wanted or None, limit=limit)

    try:
        found = with_app(ctx, work, database_url=database_url, reading=True)
    except (DroverError, TypeError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        emit_json([entity_json(x) for x in found])
        return
    print_table(
        ["id", "name", "status", "result", "children", "created"],
        [
            (x.id, x.name or "", str(x.status), x.result or "", len(x.children), iso(x.created_at))
            for x in found
        ],
        title=f"{kind_name} entities",
    )
