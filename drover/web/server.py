"""Running the dashboard with uvicorn, alone or inside the daemon's event loop."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import uvicorn

from drover.web.app import create_app
from drover.web.dashboard import DashboardApp

__all__ = ["EmbeddedServer", "make_server"]


class EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signals to its host (``drover run --http``).

    The daemon owns SIGINT and SIGTERM; it stops the server by setting
    ``should_exit`` when it shuts down.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def make_server(
    app: DashboardApp,
    *,
    host: str,
    port: int,
    auth_token: str | None,
    allowed_hosts: Sequence[str] = (),
    embedded: bool = False,
    close_app_on_shutdown: bool = False,
    log_level: str = "info",
) -> uvicorn.Server:
    """A uvicorn server for the dashboard over ``app`` (not started yet).

    Requests must name ``host`` or one of ``allowed_hosts`` in their ``Host``
    header (see :class:`drover.web.security.HostCheck`).
    """
    web = create_app(
        app,
        auth_token=auth_token,
        close_app_on_shutdown=close_app_on_shutdown,
        host=host,
        allowed_hosts=allowed_hosts,
    )
    config = uvicorn.Config(
        web,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        server_header=False,
        log_config=None,
    )
    return EmbeddedServer(config) if embedded else uvicorn.Server(config)
