"""``drover doctor``: check a live database's invariants, each a named rule."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from drover.cli.kit import CliState, database_option, emit_json, json_option, with_app

if TYPE_CHECKING:
    from drover.app import App

__all__ = ["doctor"]


@click.command()
@json_option
@database_option
@click.pass_context
def doctor(ctx: click.Context, as_json: bool, database_url: str | None) -> None:
    """Check that the database holds what drover's lifecycle promises; exit 0 if it does.

    Read-only, on a live database, for every kind by its own declaration: no
    ended entity with a live child; each entity's recorded status changes chain
    from its first status to the one it has; every ended kernel says how it
    ended; no pool held past its capacity, no claim on a pool larger than the
    pool; ticks' claims whole and within claim_ttl; no coordinator left
    unstopped without a heartbeat. Each broken rule is one line naming the rule
    and the entity (pool, coordinator); the command then exits 1. The rules:
    docs/operations.md.

    \b
    Example: drover doctor --json
    """
    from drover.inspection.doctor import RULES, examine

    state = CliState.of(ctx)
    config = (state.loaded(database_url=database_url) if database_url else state.loaded()).config

    async def work(app: App) -> list[Any]:
        return await examine(
            app.queries,
            now=time.time(),
            claim_ttl=config.claim_ttl,
            heartbeat_interval=config.heartbeat_interval,
        )

    problems = with_app(ctx, work, database_url=database_url)
    if as_json:
        emit_json(
            {
                "ok": not problems,
                "rules": sorted(RULES),
                "problems": [
                    {"rule": p.rule, "kind": p.kind, "subject": p.subject, "message": p.message}
                    for p in problems
                ],
            }
        )
    elif problems:
        for p in problems:
            click.echo(f"{p.rule}: {p.kind} {p.subject}: {p.message}")
        click.echo(f"{len(problems)} problem(s); every other rule holds")
    else:
        click.echo(f"ok: all {len(RULES)} rules hold ({', '.join(sorted(RULES))})")
    if problems:
        ctx.exit(1)
