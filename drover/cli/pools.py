"""``drover pools``: how full each pool is, and ``drover pools set``: change a capacity."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from drover.cli.kit import database_option, emit_json, json_option, print_table, with_app

if TYPE_CHECKING:
    from drover.app import App

__all__ = ["pools"]


def _usage_json(usage: Any) -> dict[str, Any]:
    # A family row gives its members' default capacity: nothing is held of the family itself.
    family = usage.name.endswith("*")
    return {
        "name": usage.name,
        "family": family,
        "capacity": usage.capacity,
        "held": None if family else usage.held,
        "free": None if family else usage.free,
        "holders": [
            {"id": h.entity_id, "kind": h.kind, "status": h.status, "units": h.units}
            for h in usage.holders
        ],
    }


@click.group(invoke_without_command=True)
@json_option
@database_option
@click.pass_context
def pools(ctx: click.Context, as_json: bool, database_url: str | None) -> None:
    """List the pools the kinds declare: capacity now, units held and free.

    A capacity changed with `drover pools set` is the one shown (and the one
    every coordinator enforces). A pool family (gpu-node-*) is listed with its
    members' default capacity, then each member known now: claimed by an
    entity holding it, or given a capacity with `drover pools set`.

    Example: drover pools --json
    """
    if ctx.invoked_subcommand is not None:
        return

    async def work(app: App) -> list[Any]:
        found = []
        for name in sorted(app.kinds.pools):
            found.append(await app.queries.pool_usage(name))
            if name.endswith("*"):
                # A family: its default capacity, then each member known now.
                for member in await app.queries.pool_members(name):
                    found.append(await app.queries.pool_usage(member))
        return found

    found = with_app(ctx, work, database_url=database_url)
    if as_json:
        emit_json([_usage_json(u) for u in found])
        return
    if not found:
        click.echo("no pools: no registered kind declares one")
        return
    print_table(
        ["pool", "capacity", "held", "free"],
        [
            (u.name, str(u.capacity), "-", "-")
            if u.name.endswith("*")
            else (u.name, str(u.capacity), str(u.held), str(u.free))
            for u in found
        ],
    )


@pools.command("set")
@click.argument("name")
@click.argument("capacity", type=int)
@database_option
@click.pass_context
def set_capacity(ctx: click.Context, name: str, capacity: int, database_url: str | None) -> None:
    """Change pool NAME's capacity to CAPACITY while drover runs (every coordinator
    enforces it from its next apply; entities holding it keep it). The configuration's
    [pools] sets it again when a daemon starts. NAME may be a member of a pool
    family (gpu-node-n7 of gpu-node-*), declared or not, or the family itself
    (the default of its members given no capacity of their own).

    Example: drover pools set xpm-token 4
    """

    async def work(app: App) -> Any:
        await app.repository.set_pool_capacities({name: capacity})
        return await app.queries.pool_usage(name)

    usage = with_app(ctx, work, database_url=database_url)
    click.echo(f"pool {usage.name}: capacity {usage.capacity} ({usage.held} held)")
