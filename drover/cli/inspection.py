"""Inspection commands: history (and prune), why, stats, graph."""

from __future__ import annotations

import asyncio
import csv
import json
import sys
import time
from typing import Any

import click

from drover.app import App
from drover.cli._common import (
    CliState,
    database_option,
    emit_json,
    json_option,
    print_table,
    with_app,
)
from drover.inspection._format import duration, parse_duration, parse_time
from drover.inspection.history import search_history
from drover.inspection.stats import collect_stats
from drover.inspection.why import diagnose_session
from drover.model.errors import DroverError
from drover.model.status import SchedulingResult
from drover.plugins.graph import edges_of, render_dot, render_mermaid, render_text
from drover.serialization import (
    diagnosis_json,
    graph_json,
    history_json,
    kernel_history_json,
    stats_json,
)

__all__ = ["graph", "history", "stats", "why"]

_COLUMNS = [
    "time",
    "session",
    "handler",
    "result",
    "from → to",
    "attempts",
    "error code",
    "message",
]


def _when(text: str | None, option: str) -> float | None:
    if text is None:
        return None
    try:
        return parse_time(text, time.time())
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint=option) from None


def _row(data: dict[str, Any]) -> list[Any]:
    return [
        data["updated_at"],
        data["session_id"],
        data["handler"],
        data["result"],
        f"{data['from_status']} → {data['to_status']}",
        data["attempts"],
        data["error_code"],
        data["message"],
    ]


class _DefaultGroup(click.Group):
    """`drover history [SESSION]` lists; `drover history prune …` prunes."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or args[0] not in self.commands:
            args = ["list", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_DefaultGroup)
def history() -> None:
    """Show scheduling history, or prune old history.

    Examples: drover history 01a2f3 --since 1h;  drover history prune --older-than 30d --dry-run
    """


@history.command("list", hidden=True)
@click.argument("session_id", required=False)
@click.option("--kernel", "kernel_id", default=None, help="A kernel: its own status changes.")
@click.option("--handler", default=None, help="Only rows written by this handler.")
@click.option(
    "--result",
    type=click.Choice([r.value for r in SchedulingResult], case_sensitive=False),
    default=None,
    help="Only rows with this result.",
)
@click.option("--since", default=None, help="1h, 30m, 2d… ago, or an ISO time.")
@click.option("--until", default=None, help="1h, 30m, 2d… ago, or an ISO time.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new rows as they are written.")
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
    since: str | None,
    until: str | None,
    limit: int,
    follow: bool,
    as_csv: bool,
    as_json: bool,
    database_url: str | None,
) -> None:
    """History rows, newest first: time, session, handler, result, from → to, attempts,
    error code, message. SESSION may be a unique id prefix.

    Example: drover history 01a2f3 --result SKIPPED --since 1h --json
    """
    since_t, until_t = _when(since, "--since"), _when(until, "--until")
    wanted = SchedulingResult(result.upper()) if result else None

    async def work(app: App) -> list[dict[str, Any]]:
        repo = app.repository
        sid = await repo.resolve_session_id(session_id) if session_id else None
        if kernel_id is not None:
            krows = await repo.search_kernel_history(
                kernel_id=kernel_id, since=since_t, until=until_t, limit=limit
            )
            return [kernel_history_json(r) for r in krows]
        rows = await search_history(
            repo,
            session_id=sid,
            handler=handler,
            result=wanted,
            since=since_t,
            until=until_t,
            limit=limit,
        )
        data = [history_json(r) for r in rows]
        if not follow:
            return data
        _print_history(data, as_json=as_json, as_csv=as_csv, kernel=False)
        last = max((r["id"] for r in data), default=0)
        while True:
            await asyncio.sleep(1.0)
            new = await repo.search_history(
                session_id=sid, handler=handler, result=wanted, after_id=last,
                limit=1000, newest_first=False,
            )  # fmt: skip
            for row in new:
                item = history_json(row)
                last = max(last, row.id)
                if as_json:
                    click.echo(json.dumps(item))
                else:
                    click.echo("\t".join("" if v is None else str(v) for v in _row(item)))
                sys.stdout.flush()

    try:
        data = with_app(ctx, work, database_url=database_url)
    except KeyboardInterrupt:
        return
    _print_history(data, as_json=as_json, as_csv=as_csv, kernel=kernel_id is not None)


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
@click.option("--older-than", required=True, help="30d, 12h, 90m…: delete what is older.")
@click.option("--dry-run", is_flag=True, help="Only count what would be deleted.")
@json_option
@database_option
@click.pass_context
def prune(
    ctx: click.Context, older_than: str, dry_run: bool, as_json: bool, database_url: str | None
) -> None:
    """Delete old history of sessions that have ended, in batches; report what went.

    Rows of sessions that are still live are never deleted, so the latest row
    of a live session always stays. Old tick records (for `drover stats`) go too.

    Example: drover history prune --older-than 30d --dry-run
    """
    try:
        age = parse_duration(older_than)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--older-than") from None

    async def work(app: App) -> dict[str, int]:
        return await app.repository.prune_history(older_than=time.time() - age, dry_run=dry_run)

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
    """Explain, in plain words, why a session is where it is and what would move it next.

    Example: drover why 01a2f3
    """

    async def work(app: App) -> Any:
        coordinator = app.load_handlers()
        sid = await app.repository.resolve_session_id(session_id)
        return await diagnose_session(app.repository, coordinator, sid, time.time())

    try:
        diagnosis = with_app(ctx, work, database_url=database_url)
    except (TypeError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        emit_json(diagnosis_json(diagnosis))
        return
    for line in diagnosis.lines:
        click.echo(line)


@click.command()
@click.option("--since", default=None, help="Only ticks since: 1h, 30m, 2d… ago, or an ISO time.")
@json_option
@database_option
@click.pass_context
def stats(ctx: click.Context, since: str | None, as_json: bool, database_url: str | None) -> None:
    """Per handler: ticks, sessions per result, p50/p95 tick duration. Per status: sessions
    and p50/p95 of the time they have held it.

    Ticks are recorded by `drover run` (those that fetched something).

    Example: drover stats --since 1h
    """
    since_t = _when(since, "--since")

    async def work(app: App) -> Any:
        return await collect_stats(app.repository, since=since_t, now=time.time())

    result = with_app(ctx, work, database_url=database_url)
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
        ["status", "sessions", "p50 time in status", "p95 time in status"],
        [
            (s["status"], s["sessions"], duration(s["p50_age_s"]), duration(s["p95_age_s"]))
            for s in data["statuses"]
            if s["sessions"]
        ],
        title="sessions",
    )


@click.command()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["mermaid", "dot", "text", "json"]),
    default="text",
    show_default=True,
)
@click.pass_context
def graph(ctx: click.Context, fmt: str) -> None:
    """Draw the session state machine of the handlers actually loaded, plugins included.

    Each edge is labelled with its handler and outcome (success, need_retry,
    expired, give_up, promotion; `api: terminate` for termination requests).

    Example: drover graph --format mermaid > docs/state-machine.mmd
    """
    state: CliState = ctx.find_object(CliState)  # type: ignore[assignment]
    try:
        app = App(state.loaded())
        coordinator = app.load_handlers()
        asyncio.run(app.close())
    except (DroverError, TypeError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    edges = edges_of(coordinator.handlers)
    if fmt == "json":
        emit_json(graph_json(edges))
    else:
        renderer = {"mermaid": render_mermaid, "dot": render_dot, "text": render_text}[fmt]
        click.echo(renderer(edges))
