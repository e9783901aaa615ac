"""``drover run``: the coordinator daemon."""

from __future__ import annotations

import logging
from typing import Any

import click

from drover.cli.kit import CliState, database_option, run_async
from drover.cli.serve import allowed_host_option

__all__ = ["run"]

log = logging.getLogger("drover.daemon")


@click.command()
@database_option
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default=None,
    help="Log line format [env DROVER_LOG_FORMAT; default text].",
)
@click.option("--log-level", default=None, help="DEBUG, INFO, WARNING… [default INFO].")
@click.option(
    "--backend",
    "backend_name",
    default=None,
    help="Where kernels run: local, simulated, or a plugin's backend "
    "[env DROVER_BACKEND; default local].",
)
@click.option("--data-dir", default=None, help="Kernel working directories and logs.")
@click.option(
    "--http",
    "http_port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Also serve the read-only web dashboard on this port (see `drover serve`).",
)
@click.option(
    "--http-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the dashboard listens on (with --http).",
)
@click.option(
    "--auth-token",
    envvar="DROVER_AUTH_TOKEN",
    default=None,
    help="Token every dashboard request needs (with --http) [env DROVER_AUTH_TOKEN].",
)
@allowed_host_option
@click.option(
    "--no-upgrade",
    is_flag=True,
    help="Refuse to start on an old schema instead of upgrading it.",
)
@click.pass_context
def run(
    ctx: click.Context,
    database_url: str | None,
    log_format: str | None,
    log_level: str | None,
    backend_name: str | None,
    data_dir: str | None,
    http_port: int | None,
    http_host: str,
    auth_token: str | None,
    allowed_hosts: tuple[str, ...],
    no_upgrade: bool,
) -> None:
    """Run the coordinator daemon until SIGINT or SIGTERM.

    Every enabled handler ticks on its interval and whenever a session moves
    into a status it targets. The database schema is upgraded on start-up
    unless --no-upgrade is given.

    \b
    Example: drover run --log-format json --data-dir /var/lib/drover
    Example: drover run --http 8080   (the daemon plus the dashboard)
    """
    from drover.app import App
    from drover.logs import setup_logging

    state = CliState.of(ctx)
    flags: dict[str, Any] = {
        "database_url": database_url,
        "log_format": log_format,
        "log_level": log_level,
        "backend.name": backend_name,
        "data_dir": data_dir,
    }
    loaded = state.loaded(**{k: v for k, v in flags.items() if v is not None})
    setup_logging(loaded.config.log_format, loaded.config.log_level)
    if loaded.file is not None:
        log.info("configuration from %s", loaded.file)

    async def main() -> int:
        app = App(loaded, claims=True)
        try:
            http = (http_host, http_port, auth_token) if http_port is not None else None
            return await app.run_daemon(
                auto_upgrade=not no_upgrade, http=http, allowed_hosts=allowed_hosts
            )
        finally:
            await app.close()

    ctx.exit(run_async(main))
