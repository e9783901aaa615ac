"""``drover run``: the coordinator daemon."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import click

from drover import __version__
from drover.app import App, tune_gc
from drover.cli._common import CliState, database_option, run_async
from drover.cli.serve import allowed_host_option
from drover.coordinator.daemon import Daemon
from drover.coordinator.observers import ObserverDispatcher, events_of
from drover.inspection._format import parse_duration
from drover.logs import setup_logging

__all__ = ["run", "serve_daemon"]

log = logging.getLogger("drover.daemon")


async def serve_daemon(
    app: App,
    *,
    auto_upgrade: bool = True,
    install_signals: bool = True,
    on_ready: Callable[[Daemon], None] | None = None,
    http: tuple[str, int, str | None] | None = None,
    allowed_hosts: tuple[str, ...] = (),
) -> int:
    """Run the daemon for ``app`` until SIGINT/SIGTERM; return the exit code.

    The first signal stops new ticks and lets in-flight ones finish within
    ``shutdown_grace``; a second signal exits at once. ``on_ready`` receives the
    :class:`Daemon` (to stop it without a signal, as tests do). ``http`` is
    ``(host, port, auth_token)``: the web dashboard then runs in this event loop
    and stops with the daemon, answering ``host`` and ``allowed_hosts``.
    """
    config = app.config
    await app.check_schema(auto_upgrade=auto_upgrade)
    coordinator = app.load_handlers()
    daemon = Daemon(
        coordinator,
        app.repository,
        intervals={n: h.interval for n, h in config.handlers.items()},
        enabled={n: h.enabled for n, h in config.handlers.items()},
        safety_interval=config.safety_interval,
        heartbeat_interval=config.heartbeat_interval,
        shutdown_grace=config.shutdown_grace,
        version=__version__,
        retention=(parse_duration(config.history.retention) if config.history.retention else None),
        prune_interval=config.history.prune_interval,
    )
    coordinator.claim_ttl = config.claim_ttl
    # Before the backend starts: a daemon refused on SQLite (another one runs)
    # must not adopt, report or kill any kernel.
    await daemon.register()
    try:
        await app.start(auto_upgrade=False)
    except BaseException:
        with contextlib.suppress(Exception):
            await app.repository.coordinator_stopped(daemon.id)
        raise
    tune_gc()
    app.on_backend_change = daemon.wake_promotions
    dispatcher = ObserverDispatcher(app.observers)
    if app.observers:
        dispatcher.start()
        daemon.on_tick = lambda report: dispatcher.publish(events_of(report, time.time()))
    loop = asyncio.get_running_loop()
    received: list[int] = []

    def on_signal(signum: int) -> None:
        received.append(signum)
        if len(received) == 1:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            daemon.stop()
        else:
            log.warning("second signal: exiting at once")
            # Whatever is in flight is an open transaction: the database rolls it back.
            os._exit(128 + signum)

    if install_signals:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, signum)
    web_task: asyncio.Task[None] | None = None
    web_server: Any = None
    if http is not None:
        from drover.cli.serve import public_bind_warning
        from drover.web.server import make_server

        host, port, token = http
        warning = public_bind_warning(host, token)
        if warning:
            log.warning("%s", warning)
        web_server = make_server(
            app,
            host=host,
            port=port,
            auth_token=token,
            allowed_hosts=allowed_hosts,
            embedded=True,
        )
        web_task = asyncio.create_task(web_server.serve(), name="drover-http")
        log.info("dashboard on http://%s:%d/", host, port)
    if on_ready is not None:
        on_ready(daemon)
    try:
        await daemon.run()
    finally:
        if web_task is not None:
            web_server.should_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(web_task, timeout=config.shutdown_grace)
        if install_signals:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
        await dispatcher.close(grace=config.shutdown_grace)
    return 0


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

    Example: drover run --log-format json --data-dir /var/lib/drover

    Example: drover run --http 8080   (the daemon plus the dashboard)
    """
    state: CliState = ctx.find_object(CliState)  # type: ignore[assignment]
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
        app = App(loaded)
        try:
            http = (http_host, http_port, auth_token) if http_port is not None else None
            return await serve_daemon(
                app, auto_upgrade=not no_upgrade, http=http, allowed_hosts=allowed_hosts
            )
        finally:
            await app.close()

    ctx.exit(run_async(main))
