"""``drover run``: the coordinator daemon."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import click

from drover import __version__
from drover.app import App
from drover.backends.local import LocalBackend
from drover.backends.simulated import SimulatedBackend
from drover.cli._common import CliState, database_option, run_async
from drover.coordinator.loop import Daemon
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
) -> int:
    """Run the daemon for ``app`` until SIGINT/SIGTERM; return the exit code.

    The first signal stops new ticks and lets in-flight ones finish within
    ``shutdown_grace``; a second signal exits at once. ``on_ready`` receives the
    :class:`Daemon` (to stop it without a signal, as tests do).
    """
    config = app.config
    await app.check_schema(auto_upgrade=auto_upgrade)
    coordinator = app.load_handlers()
    backend = app.backend
    pump = None
    if isinstance(backend, SimulatedBackend):
        backend.bind(app.repository, app.clock)
        pump = backend.deliver_due
    elif isinstance(backend, LocalBackend):
        await backend.start(app.repository)
    daemon = Daemon(
        coordinator,
        intervals={n: h.interval for n, h in config.handlers.items()},
        enabled={n: h.enabled for n, h in config.handlers.items()},
        safety_interval=config.safety_interval,
        heartbeat_interval=config.heartbeat_interval,
        shutdown_grace=config.shutdown_grace,
        version=__version__,
        pump=pump,
        retention=(parse_duration(config.history.retention) if config.history.retention else None),
        prune_interval=config.history.prune_interval,
    )
    if isinstance(backend, LocalBackend):
        backend.on_change = daemon.wake_promotions
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
    if on_ready is not None:
        on_ready(daemon)
    try:
        await daemon.run()
    finally:
        if install_signals:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
        if isinstance(backend, LocalBackend):
            await backend.stop()
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
    no_upgrade: bool,
) -> None:
    """Run the coordinator daemon until SIGINT or SIGTERM.

    Every enabled handler ticks on its interval and whenever a session moves
    into a status it targets. The database schema is upgraded on start-up
    unless --no-upgrade is given.

    Example: drover run --log-format json --data-dir /var/lib/drover
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
            return await serve_daemon(app, auto_upgrade=not no_upgrade)
        finally:
            await app.close()

    ctx.exit(run_async(main))
