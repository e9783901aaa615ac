"""``drover status`` and ``drover config show``."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import click

from drover.cli.kit import (
    CliState,
    database_option,
    emit_json,
    json_option,
    print_table,
    with_app,
)
from drover.kinds.sessions.values import SESSION_KIND, SessionStatus

if TYPE_CHECKING:
    from drover.app import App

__all__ = ["config", "status"]


@click.command()
@json_option
@database_option
@click.pass_context
def status(ctx: click.Context, as_json: bool, database_url: str | None) -> None:
    """Show the live coordinators, the handlers each runs, failing handlers and session counts
    by status and, for ended sessions, by result (TERMINATED: 12 SUCCESS, 5 FAILURE, ...).

    A coordinator is live if it has not stopped and its heartbeat is younger
    than three heartbeat intervals. Each records the handlers it loaded and
    runs (after installing a plugin, its handler shows here once the daemon
    was restarted). "claims" is how many entities each one
    holds claimed right now (PostgreSQL, several coordinators). A handler is
    failing if its execute() raised in the last 10 minutes (its targets are
    skipped and its ticks backed off until it stops failing).

    \b
    Example: drover status --json
    """
    from drover.inspection._format import ordered_results, results_text
    from drover.inspection.health import recent_handler_errors
    from drover.serialization import coordinator_json, handler_errors_json, iso

    state = CliState.of(ctx)
    loaded = state.loaded(database_url=database_url) if database_url else state.loaded()
    window = 3 * loaded.config.heartbeat_interval

    async def work(
        app: App,
    ) -> tuple[list[Any], dict[str, int], list[Any], dict[Any, int], dict[str, dict[str, int]]]:
        repo = app.queries
        alive = await repo.coordinators(alive_within=window)
        claims = await repo.claims_by_owner()
        errors = await recent_handler_errors(repo, time.time())
        ended = await repo.count_by_status_and_result(SESSION_KIND)
        return alive, claims, errors, await repo.count_by_status(), ended

    alive, claims, errors, counts, ended = with_app(
        ctx, work, database_url=database_url, reading=True
    )
    by_status = {s.value: counts.get(s, 0) for s in SessionStatus}
    if as_json:
        emit_json(
            {
                "coordinators": [
                    {**coordinator_json(c), "claims": claims.get(c.id, 0)} for c in alive
                ],
                "handler_errors": handler_errors_json(errors),
                "sessions": by_status,
                "session_results": {
                    status: dict(ordered_results(ended[status]))
                    for status in by_status
                    if ended.get(status)
                },
            }
        )
        return
    if alive:
        print_table(
            ["coordinator", "host", "pid", "version", "started", "heartbeat", "claims"],
            [
                (
                    c.id,
                    c.host,
                    c.pid,
                    c.version,
                    iso(c.started_at),
                    iso(c.heartbeat_at),
                    claims.get(c.id, 0),
                )
                for c in alive
            ],
            title="live coordinators",
        )
        print_table(
            ["coordinator", "handlers"],
            [
                (
                    c.id,
                    "(not recorded)" if c.handlers is None else " ".join(c.handlers) or "(none)",
                )
                for c in alive
            ],
            title="handlers each runs",
        )
    else:
        click.echo(
            f"no live coordinator (no heartbeat in the last {window:g}s): start `drover run`"
        )
    if errors:
        print_table(
            ["handler", "errors", "last", "last error"],
            [
                (e["handler"], e["errors"], e["last_at"], e["last_error"])
                for e in handler_errors_json(errors)
            ],
            title="failing handlers (execute() raised in the last 10 minutes)",
        )
    print_table(
        ["status", "sessions", "results"],
        [(s, n, results_text(ended.get(s, {}))) for s, n in by_status.items()],
        title="sessions by status and result",
    )


@click.group()
def config() -> None:
    """Inspect the configuration.

    \b
    Example: drover --config drover.toml config show
    """


@config.command("show")
@json_option
@click.pass_context
def config_show(ctx: click.Context, as_json: bool) -> None:
    """Print the effective configuration and where each value came from.

    Sources, strongest first: flag, env (DROVER_…), file, default.

    \b
    Example: DROVER_LOG_FORMAT=json drover config show
    """
    from drover.config import flatten_config

    state = CliState.of(ctx)
    loaded = state.loaded()
    flat = flatten_config(loaded.config)
    if as_json:
        emit_json(
            {
                "file": str(loaded.file) if loaded.file else None,
                "values": {k: {"value": v, "source": loaded.source(k)} for k, v in flat.items()},
            }
        )
        return
    click.echo(f"# configuration file: {loaded.file or 'none (./drover.toml not found)'}")
    print_table(
        ["key", "value", "source"],
        [(k, json.dumps(v), loaded.source(k)) for k, v in flat.items()],
    )
