"""``drover serve``: the read-only web dashboard."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import click

from drover.cli.kit import CliState, database_option, run_async

__all__ = ["allowed_host_option", "serve"]

F = TypeVar("F", bound=Callable[..., Any])

log = logging.getLogger("drover.web")


def _split_hosts(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    # Repeatable, and DROVER_ALLOWED_HOSTS may list several names with commas.
    return tuple(name.strip() for item in value for name in item.split(",") if name.strip())


def allowed_host_option(func: F) -> F:
    """Add ``--allowed-host`` (repeatable; env ``DROVER_ALLOWED_HOSTS``, comma-separated)."""
    return click.option(
        "--allowed-host",
        "allowed_hosts",
        multiple=True,
        envvar="DROVER_ALLOWED_HOSTS",
        callback=_split_hosts,
        help="Another name the dashboard answers to in the Host header, e.g. the DNS name "
        "of a machine it is reached by (repeatable) [env DROVER_ALLOWED_HOSTS, comma-separated].",
    )(func)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option(
    "--auth-token",
    envvar="DROVER_AUTH_TOKEN",
    default=None,
    help="Require this token on every request: Authorization: Bearer T, or a browser logs "
    "in once with a form (an HttpOnly cookie) [env DROVER_AUTH_TOKEN].",
)
@allowed_host_option
@database_option
@click.pass_context
def serve(
    ctx: click.Context,
    host: str,
    port: int,
    auth_token: str | None,
    allowed_hosts: tuple[str, ...],
    database_url: str | None,
) -> None:
    """Serve the read-only web dashboard (pages, /api, /metrics, /healthz).

    It reads the configured database and needs no running daemon (though
    /healthz answers 503 until a daemon's heartbeat is fresh). It binds to
    127.0.0.1 by default; binding elsewhere without --auth-token prints a
    warning. It answers only requests whose Host header names the bound
    address (on loopback also localhost) or an --allowed-host: a DNS-rebinding
    page cannot read it.

    \b
    Example: drover serve --port 8080   (then open http://127.0.0.1:8080/)
    Example: drover serve --host 0.0.0.0 --allowed-host drover.internal --auth-token "$T"
    """
    from drover.app import App
    from drover.logs import setup_logging
    from drover.web.security import public_bind_warning

    state = CliState.of(ctx)
    loaded = state.loaded(database_url=database_url) if database_url else state.loaded()
    setup_logging(loaded.config.log_format, loaded.config.log_level)
    warning = public_bind_warning(host, auth_token)
    if warning:
        click.echo(warning, err=True)

    async def main() -> None:
        from drover.web.server import make_server

        app = App(loaded)
        try:
            await app.check_schema()
            server = make_server(
                app, host=host, port=port, auth_token=auth_token, allowed_hosts=allowed_hosts
            )
            click.echo(f"drover dashboard on http://{host}:{port}/", err=True)
            await server.serve()
        finally:
            await app.close()

    run_async(main)
