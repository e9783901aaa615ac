"""One replica's health check as HTTP: the client, a probe with a total deadline, and the
checks that outlive their tick (what ``health-check-route`` runs, see
:mod:`drover.kinds.deployments.routes`).

httpx's ``timeout`` bounds each read, not a request: a replica answering
``200`` with a huge ``Content-Length`` at one byte a second never trips it.
So each probe runs under :func:`asyncio.timeout` for the whole request
(connecting, the answer's head and at most :data:`MAX_CHECK_BODY` bytes of
its body, as Kubernetes reads at most 10 KiB of a probe's answer), each as
its own task; a tick waits for its probes at most :data:`TICK_WAIT` seconds,
and a probe still running then is judged by a later tick. One replica's slow
answer never holds another route's verdict past that wait.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    import httpx2

__all__ = ["MAX_CHECK_BODY", "TICK_WAIT", "Probe", "Probes"]

#: Bytes of an answer's body a check reads at most; the rest is never waited for.
MAX_CHECK_BODY = 4096
#: Seconds one tick waits for its probes: the default ``check_timeout`` (2 s) and a
#: margin, so a probe with the default deadline is judged in the tick that started it.
TICK_WAIT = 2.5


@attrs.frozen
class Probe:
    """What one health check found: the answer's status code, or why there is none."""

    code: int | None = None
    text: str = ""
    #: The URL cannot be requested at all: the route's fault, not a silent replica.
    broken: bool = False


class Probes:
    """The probes of one handler: its one HTTP client, and the probes still running.

    The client ignores proxy variables (a replica is on this host) and keeps
    no idle connection, so nothing is left open between ticks or bound to one
    event loop; its own line per request is silenced (a check's outcome is in
    the route's history).
    """

    def __init__(self) -> None:
        self._client: httpx2.AsyncClient | None = None
        # Probes by route id, with the URL they GET: those still running when their
        # tick ended are taken up by the next tick instead of starting another.
        self._running: dict[str, tuple[str, asyncio.Task[Probe]]] = {}

    @property
    def client(self) -> httpx2.AsyncClient:
        """The one HTTP client, built on first use."""
        # httpx2 is imported by the first check, not by every command loading the handlers.
        import httpx2

        if self._client is None:
            logging.getLogger(httpx2.__name__).setLevel(logging.WARNING)
            self._client = httpx2.AsyncClient(
                trust_env=False,
                follow_redirects=False,
                limits=httpx2.Limits(max_keepalive_connections=0),
            )
        return self._client

    async def run(self, wanted: dict[str, tuple[str, float]]) -> dict[str, Probe | None]:
        """Probe each route id's ``(url, deadline)``; what each found (``None``: still running).

        A probe started by an earlier tick for the same URL is taken up, not
        started again; probes of routes not asked for any more are cancelled.
        Waits at most :data:`TICK_WAIT` seconds for all of them.
        """
        for route_id in [r for r in self._running if r not in wanted]:
            self._running.pop(route_id)[1].cancel()
        tasks: dict[str, asyncio.Task[Probe]] = {}
        for route_id, (url, limit) in wanted.items():
            running = self._running.get(route_id)
            if running is None or running[0] != url:
                if running is not None:
                    running[1].cancel()  # the route's URL changed: that answer no longer counts
                task = asyncio.get_running_loop().create_task(self._probe(url, limit))
                running = self._running[route_id] = (url, task)
            tasks[route_id] = running[1]
        pending = [task for task in tasks.values() if not task.done()]
        if pending:
            await asyncio.wait(pending, timeout=TICK_WAIT)
        found: dict[str, Probe | None] = {}
        for route_id, task in tasks.items():
            if task.done():
                del self._running[route_id]
                found[route_id] = task.result()
            else:
                found[route_id] = None
        return found

    async def _probe(self, url: str, limit: float) -> Probe:
        """GET ``url`` within ``limit`` seconds in all. Never raises: what failed is in the
        probe."""
        import httpx2

        try:
            async with asyncio.timeout(limit):
                async with self.client.stream("GET", url, timeout=limit) as response:
                    read = 0
                    async for chunk in response.aiter_raw():
                        read += len(chunk)
                        if read >= MAX_CHECK_BODY:
                            break
                    return Probe(code=response.status_code)
        except TimeoutError:
            return Probe(text=f"no complete answer within {limit:g}s (check_timeout)")
        except httpx2.TransportError as error:
            return Probe(text=f"no answer ({type(error).__name__})")
        except (httpx2.InvalidURL, httpx2.HTTPError) as error:
            return Probe(text=str(error), broken=True)
