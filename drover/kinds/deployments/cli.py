"""``drover deploy / deployments / scale / destroy / routes``: services of N replicas.

They reach ``drover`` through ``drover_register_commands``, as a plugin's
commands do: the plugin ``drover.kinds.deployments``
(:mod:`drover.kinds.deployments.kinds`) adds :data:`COMMANDS`.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from drover.cli.kit import (
    CommandApp,
    count_range,
    database_option,
    emit_json,
    json_option,
    parse_env,
    print_table,
    with_app,
)
from drover.kinds.deployments.checks import check_health_path, check_served
from drover.kinds.deployments.status import EndpointLifecycle, RouteStatus
from drover.kinds.sessions.kinds import SESSION_KINDS
from drover.model.errors import DroverError, InvalidSpecError
from drover.model.values import Entity, NewEntity

__all__ = [
    "COMMANDS",
    "deploy",
    "deployments",
    "destroy",
    "find_deployment",
    "routes",
    "scale",
]

_E = EndpointLifecycle


async def find_deployment(app: CommandApp, ref: str) -> Entity:
    """The deployment ``ref`` names: its id, its name (the live one, else the newest), or
    an id prefix (the repository's one resolver)."""
    queries = app.queries
    return await queries.get_entity(await queries.resolve_entity_id(ref, "deployment"))


def _positive(value: float | None, flag: str) -> float | None:
    if value is not None and value <= 0:
        raise click.BadParameter(f"must be > 0, got {value}", param_hint=flag)
    return value


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option(
    "--replicas",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Replicas to keep running (at most limits.replicas, 1000 unless configured).",
)
@click.option("--health-path", default="/", show_default=True, help="Path each replica answers.")
@click.option("--cpu", type=click.FloatRange(min=0), default=0.5, show_default=True)
@click.option("--mem", type=click.FloatRange(min=0), default=128.0, show_default=True, help="MiB.")
@click.option("--env", "env_pairs", multiple=True, help="NAME=VALUE for the replicas (repeatable).")
@click.option(
    "--start-timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds a replica may take to answer its first health check, from when its "
    "session is RUNNING.",
)
@click.option(
    "--evict-after",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds a replica may stay UNHEALTHY before it is replaced.",
)
@click.option(
    "--stale-after",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds without any answer before a replica counts as stale (DEGRADED).",
)
@click.option(
    "--check-timeout", type=float, default=2.0, show_default=True, help="Seconds per check."
)
@click.option(
    "--max-replacements",
    type=count_range(0),
    default=None,
    help="Replicas that may be replaced over the deployment's life [default: no limit: "
    "a crash loop backs off, 10 s doubling to 300 s].",
)
@click.option(
    "--wait",
    is_flag=True,
    help="Wait until every wanted replica is HEALTHY and of this revision and the replicas "
    "it replaced have ended, with a progress line (a daemon must be running).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=300.0,
    show_default=True,
    help="Seconds --wait waits before it gives up (exit 1).",
)
@json_option
@database_option
@click.pass_context
def deploy(
    ctx: click.Context,
    name: str,
    command: tuple[str, ...],
    replicas: int,
    health_path: str,
    cpu: float,
    mem: float,
    env_pairs: tuple[str, ...],
    start_timeout: float,
    evict_after: float,
    stale_after: float,
    check_timeout: float,
    max_replacements: int | None,
    wait: bool,
    timeout: float,
    as_json: bool,
    database_url: str | None,
) -> None:
    """Deploy NAME: keep N replicas of COMMAND running and healthy (each replica a session).

    Each replica gets a free port in $PORT; drover GETs
    http://127.0.0.1:$PORT<health-path> and replaces replicas that stop
    answering.

    Deploying a live NAME again updates it in place: a new replica count
    scales it; a new command, env or any replica setting rolls out a new
    revision, one replica at a time (at most one unavailable).

    The command is run as given (no shell): use sh -c to expand $PORT.

    \b
    Example: drover deploy web --replicas 2 --wait -- sh -c 'exec python3 -m http.server $PORT'
    """
    from drover.kinds.sessions.requests import new_session
    from drover.model.creation import check_new_entities

    if not name.strip():
        # Deployments are found by name: an empty one could never be scaled or destroyed.
        raise click.BadParameter("a deployment needs a name", param_hint="NAME")
    for flag, seconds in (
        ("--start-timeout", start_timeout),
        ("--evict-after", evict_after),
        ("--stale-after", stale_after),
        ("--check-timeout", check_timeout),
    ):
        _positive(seconds, flag)
    try:
        check_health_path(health_path)
    except InvalidSpecError as error:
        raise click.BadParameter(str(error), param_hint="--health-path") from None
    env = parse_env(env_pairs)
    kernel: dict[str, Any] = {"command": list(command), "cpu": cpu, "mem": mem}
    if env:
        kernel["env"] = env
    try:
        check_new_entities([new_session({"kernels": [kernel]})], SESSION_KINDS)
    except InvalidSpecError as error:
        raise click.ClickException(str(error)) from None
    spec: dict[str, Any] = {
        "replicas": replicas,
        "kernel": kernel,
        "health_path": health_path,
        "check_timeout": check_timeout,
        "stale_after": stale_after,
        "evict_after": evict_after,
        "start_timeout": start_timeout,
    }
    spec["max_replacements"] = max_replacements

    async def work(app: CommandApp) -> tuple[str, str]:
        _ = app.kinds
        # Updating one in place too: on a backend that records no port (Slurm) no
        # replica of it could ever be healthy.
        check_served([NewEntity("deployment", name=name)], app.backend)
        for existing in await app.queries.find_by_name("deployment", name):
            if existing.status in (_E.DESTROYING, _E.DESTROYED):
                if existing.status == _E.DESTROYING:
                    raise DroverError(
                        f"deployment {name!r} ({existing.id}) is being destroyed; "
                        "wait for it (drover destroy --wait) and deploy again"
                    )
                continue
            return existing.id, await _update(app, existing, spec)
        created = {k: v for k, v in spec.items() if v is not None}
        # Every creation check, the backend's too (Slurm records no port: refused).
        (new_id,) = await app.create([NewEntity("deployment", spec=created, name=name)])
        return new_id, "created"

    deployment_id, what = with_app(ctx, work, database_url=database_url)
    if as_json:
        emit_json({"id": deployment_id, "name": name, "replicas": replicas, "change": what})
    else:
        click.echo(deployment_id)
        if what != "created":
            click.echo(f"{name}: {what}", err=True)
    if wait:
        _wait(ctx, database_url, name, timeout, _deployed)


async def _update(app: CommandApp, existing: Entity, spec: dict[str, Any]) -> str:
    """Change a live deployment's spec to ``spec``; say what that does."""
    from drover.kinds.deployments.deployments import ROUTE_KEYS, revision

    patch = {k: v for k, v in spec.items() if existing.spec.get(k) != v}
    if not patch:
        return f"unchanged (revision {revision(existing)})"
    rolls = sorted(k for k in patch if k in ROUTE_KEYS)
    if rolls:
        patch["revision"] = revision(existing) + 1
    await app.repository.update_spec(existing.id, patch)
    if rolls:
        return f"revision {patch['revision']} rolling out ({', '.join(rolls)} changed)"
    return f"updated ({', '.join(sorted(patch))} changed)"


def _deployed(deployment: Entity) -> tuple[bool, str]:
    """``--wait`` of deploy: every wanted replica HEALTHY and of the current revision, and no
    replaced one still ending (as ``kubectl rollout status`` waits for old replicas)."""
    from drover.kinds.deployments.deployments import desired_replicas, live_routes, revision

    wanted = desired_replicas(deployment)
    current = [r for r in live_routes(deployment) if revision(r) == revision(deployment)]
    healthy = sum(1 for r in current if r.status == RouteStatus.HEALTHY)
    done = (
        deployment.status == _E.READY
        and healthy == wanted
        and len(live_routes(deployment)) == wanted
        and not any(r.status == RouteStatus.TERMINATING for r in deployment.children)
    )
    text = f"{deployment.status}: {healthy}/{wanted} healthy"
    info = deployment.status_info
    # "n of m healthy" says what the line says already; a back-off or a limit does not.
    if info and deployment.status == _E.DEGRADED and not info.endswith(" healthy"):
        text += f" ({info})"
    return done, text


def _destroyed(deployment: Entity) -> tuple[bool, str]:
    """``--wait`` of destroy: DESTROYED."""
    left = sum(1 for r in deployment.children if r.status != RouteStatus.TERMINATED)
    return deployment.status == _E.DESTROYED, f"{deployment.status}: {left} route(s) left"


def _wait(
    ctx: click.Context,
    database_url: str | None,
    ref: str,
    timeout: float,
    judge: Callable[[Entity], tuple[bool, str]],
) -> None:
    """Poll the deployment until ``judge`` says done, with a progress line on stderr."""

    async def work(app: CommandApp) -> tuple[bool, str]:
        deployment = await find_deployment(app, ref)
        progress = _Progress(ref)
        deadline = time.monotonic() + timeout
        while True:
            deployment = await app.queries.get_entity(deployment.id)
            done, text = judge(deployment)
            progress.show(text)
            if done or time.monotonic() >= deadline:
                progress.end()
                return done, text
            await asyncio.sleep(0.5)

    done, text = with_app(ctx, work, database_url=database_url)
    if not done:
        raise click.ClickException(
            f"{ref}: not done after {timeout:g}s ({text}); see drover why {ref}"
        )


class _Progress:
    """One progress line on stderr: rewritten in place on a terminal, else a line per change."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.last = ""
        self.tty = sys.stderr.isatty()

    def show(self, text: str) -> None:
        if text == self.last:
            return
        self.last = text
        if self.tty:
            click.echo(f"\r\033[K{self.name}: {text}", nl=False, err=True)
        else:
            click.echo(f"{self.name}: {text}", err=True)

    def end(self) -> None:
        if self.tty:
            click.echo("", err=True)


@click.command()
@click.option("--all", "show_all", is_flag=True, help="Include DESTROYED deployments.")
@json_option
@database_option
@click.pass_context
def deployments(
    ctx: click.Context, show_all: bool, as_json: bool, database_url: str | None
) -> None:
    """List deployments: status, desired and healthy replicas, replicas replaced, and why a
    DEGRADED one is (a crash-loop back-off and when it ends, or its replacement limit).

    \b
    Example: drover deployments --json
    """
    from drover.kinds.deployments.serialization import deployment_json

    async def work(app: CommandApp) -> list[Entity]:
        found = await app.queries.list_entities("deployment", limit=None)
        return [d for d in found if show_all or d.status != _E.DESTROYED]

    found = with_app(ctx, work, database_url=database_url)
    if as_json:
        emit_json([deployment_json(d) for d in found])
        return
    rows = [deployment_json(d) for d in found]
    print_table(
        ["name", "id", "status", "replicas", "healthy", "live routes", "replaced", "why"],
        [
            (
                r["name"],
                r["id"],
                r["status"],
                r["replicas"],
                r["healthy"],
                r["live_routes"],
                r["replaced"],
                _why(r),
            )
            for r in rows
        ],
        title="deployments",
    )


def _why(row: dict[str, Any]) -> str:
    """What a DEGRADED deployment waits for (its status_info, and when the back-off ends)."""
    if not row["degraded"]:
        return ""
    if row["backoff_until"]:
        return f"{row['status_info']} until {row['backoff_until']} ({row['restarts']} rounds)"
    return str(row["status_info"] or "")


@click.command()
@click.argument("name")
@click.argument("replicas", type=click.IntRange(min=0))
@database_option
@click.pass_context
def scale(ctx: click.Context, name: str, replicas: int, database_url: str | None) -> None:
    """Set the desired replicas of deployment NAME (recorded in its history as `api`).

    REPLICAS is at most limits.replicas (1000 unless configured).

    \b
    Example: drover scale web 3
    """

    async def work(app: CommandApp) -> Entity:
        deployment = await find_deployment(app, name)
        if deployment.status in (_E.DESTROYING, _E.DESTROYED):
            raise DroverError(f"deployment {name!r} is {deployment.status}: it cannot be scaled")
        return await app.repository.update_spec(deployment.id, {"replicas": replicas})

    deployment = with_app(ctx, work, database_url=database_url)
    click.echo(f"{deployment.name}: {replicas} replica(s) wanted")


@click.command()
@click.argument("name")
@click.option("--wait", is_flag=True, help="Wait until it is DESTROYED, with a progress line.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=120.0,
    show_default=True,
    help="Seconds --wait waits before it gives up (exit 1).",
)
@database_option
@click.pass_context
def destroy(
    ctx: click.Context, name: str, wait: bool, timeout: float, database_url: str | None
) -> None:
    """Destroy deployment NAME: its routes and replica sessions end, then it is DESTROYED.

    \b
    Example: drover destroy web --wait
    """

    async def work(app: CommandApp) -> Any:
        deployment = await find_deployment(app, name)
        (outcome,) = await app.repository.request_termination([deployment.id])
        return outcome

    outcome = with_app(ctx, work, database_url=database_url)
    if outcome.changed:
        click.echo(f"{name}: {outcome.from_status} -> {outcome.to_status}")
    else:
        click.echo(f"{name}: already {outcome.to_status}, nothing to do")
    if wait:
        # By id: once DESTROYED, the name may be taken by a new deployment.
        _wait(ctx, database_url, outcome.session_id, timeout, _destroyed)


@click.command()
@click.argument("name")
@click.option("--all", "show_all", is_flag=True, help="Include TERMINATED routes.")
@json_option
@database_option
@click.pass_context
def routes(
    ctx: click.Context, name: str, show_all: bool, as_json: bool, database_url: str | None
) -> None:
    """List the routes (replicas) of deployment NAME: status, session, URL.

    \b
    Example: drover routes web --json
    """
    from drover.kinds.deployments.serialization import route_json

    async def work(app: CommandApp) -> Entity:
        return await find_deployment(app, name)

    deployment = with_app(ctx, work, database_url=database_url)
    rows = [
        route_json(r) for r in deployment.children if show_all or r.status != RouteStatus.TERMINATED
    ]
    if as_json:
        emit_json(rows)
        return
    print_table(
        ["route", "status", "session", "url", "since"],
        [(r["id"], r["status"], r["session_id"], r["url"], r["status_changed_at"]) for r in rows],
        title=f"routes of {deployment.name}",
    )


#: The commands the plugin ``drover.kinds.deployments`` adds to ``drover``.
COMMANDS: tuple[click.Command, ...] = (deploy, deployments, scale, destroy, routes)
