"""The container backend's calls to the Docker Engine API (Docker, or Podman's socket).

Private to the container backend. One method per call, so that a check before
each side effect (pull, create, start, signal, remove) has one place to go.
Every failure is an :class:`EngineError` with the engine's own words.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiodocker
import aiohttp
import attrs

__all__ = ["ContainerState", "Engine", "EngineError", "Summary"]

_T = TypeVar("_T")


class EngineError(Exception):
    """An Engine API call failed. ``status``: the HTTP status (404: no such object), or 0."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@attrs.frozen
class Summary:
    """One labelled container as ``GET /containers/json`` lists it."""

    id: str
    kernel_id: str
    #: ``created``, ``running``, ``exited``, ``dead``…
    state: str


@attrs.frozen
class ContainerState:
    """What ``GET /containers/{id}/json`` says about a container's run."""

    id: str
    state: str
    exit_code: int | None
    oom_killed: bool
    error: str
    memory: int | None
    labels: Mapping[str, str]
    ports: Mapping[str, Any]

    @property
    def ended(self) -> bool:
        """It ran and stopped (``exited`` or ``dead``)."""
        return self.state in {"exited", "dead", "stopped"}

    @property
    def started(self) -> bool:
        """It was started at least once."""
        return self.state not in {"created", "configured"}


def _message(error: BaseException) -> str:
    if isinstance(error, aiodocker.DockerError):
        detail = error.message
        if isinstance(detail, Mapping):
            detail = detail.get("message", detail)
        return str(detail).strip()
    return f"{type(error).__name__}: {error}".strip()


class Engine:
    """An Engine API client for one backend (its url, its label prefix)."""

    def __init__(self, url: str | None, label_prefix: str, api_timeout: float) -> None:
        self.url = url
        self.label = f"{label_prefix}.kernel"
        self.api_timeout = api_timeout
        self._docker: aiodocker.Docker | None = None

    def _client(self) -> aiodocker.Docker:
        if self._docker is None:
            self._docker = aiodocker.Docker(url=self.url)
        return self._docker

    async def close(self) -> None:
        """Close the connection pool."""
        if self._docker is not None:
            docker, self._docker = self._docker, None
            await docker.close()

    async def _call(self, what: str, call: Callable[[], Awaitable[_T]]) -> _T:
        try:
            async with asyncio.timeout(self.api_timeout):
                return await call()
        except aiodocker.DockerError as error:
            raise EngineError(f"{what}: {_message(error)}", error.status) from None
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            raise EngineError(f"{what}: the engine at {self.url or 'DOCKER_HOST'} "
                              f"does not answer ({_message(error)})") from None  # fmt: skip

    # -- reads -------------------------------------------------------------------------

    async def ping(self) -> None:
        """Raise :class:`EngineError` unless the engine answers."""
        await self._call("ping", lambda: self._client().version())

    async def has_image(self, image: str) -> bool:
        """Whether the engine has ``image`` locally."""
        try:
            await self._call(f"inspect image {image}", lambda: self._client().images.inspect(image))
        except EngineError as error:
            if error.status == 404:
                return False
            raise
        return True

    async def ours(self) -> list[Summary]:
        """Every container carrying this backend's kernel label, ended ones included."""

        async def work() -> list[Summary]:
            listed = await self._client().containers.list(all=True, filters={"label": [self.label]})
            return [
                Summary(c.id, str(c["Labels"][self.label]), str(c["State"]).lower()) for c in listed
            ]

        return await self._call("list containers", work)

    async def inspect(self, container_id: str) -> ContainerState:
        """The container's state; :class:`EngineError` with status 404 if it is gone."""

        async def work() -> ContainerState:
            data = await self._client().containers.container(container_id).show()
            state = data.get("State") or {}
            host = data.get("HostConfig") or {}
            running = state.get("Status", "")
            return ContainerState(
                id=str(data.get("Id", container_id)),
                state=str(running).lower(),
                exit_code=state.get("ExitCode") if not state.get("Running") else None,
                oom_killed=bool(state.get("OOMKilled")),
                error=str(state.get("Error") or ""),
                memory=int(host["Memory"]) if host.get("Memory") else None,
                labels=dict((data.get("Config") or {}).get("Labels") or {}),
                ports=dict((data.get("NetworkSettings") or {}).get("Ports") or {}),
            )

        return await self._call(f"inspect container {container_id[:12]}", work)

    async def logs(self, container_id: str, stream: str) -> str:
        """Everything the container wrote to ``stream`` (``stdout`` or ``stderr``)."""

        async def work() -> str:
            container = self._client().containers.container(container_id)
            lines = await container.log(stdout=stream == "stdout", stderr=stream == "stderr")
            return "".join(lines)

        return await self._call(f"logs of {container_id[:12]}", work)

    async def follow(self, container_id: str, stream: str) -> AsyncIterator[str]:
        """The container's ``stream`` from its start, as it is written, until it ends."""
        container = self._client().containers.container(container_id)
        try:
            chunks = container.log(
                stdout=stream == "stdout", stderr=stream == "stderr", follow=True
            )
            async for chunk in chunks:
                yield chunk
        except aiodocker.DockerError as error:
            raise EngineError(f"logs of {container_id[:12]}: {_message(error)}") from None

    # -- side effects: one method each ------------------------------------------------

    async def pull(self, image: str, progress: Callable[[str], Awaitable[None]]) -> None:
        """Pull ``image``; ``progress`` gets the engine's words as they come."""
        docker = self._client()
        try:
            async for item in docker.images.pull(image, stream=True):
                if "error" in item:
                    raise EngineError(f"pull {image}: {item['error']}")
                status = item.get("status") or item.get("stream")
                if status:
                    words = " ".join(
                        str(p) for p in (status, item.get("id"), item.get("progress")) if p
                    )
                    await progress(words.strip())
        except aiodocker.DockerError as error:
            raise EngineError(f"pull {image}: {_message(error)}", error.status) from None
        except (aiohttp.ClientError, OSError) as error:
            raise EngineError(f"pull {image}: {_message(error)}") from None

    async def create(self, name: str, config: Mapping[str, Any]) -> str:
        """Create a container called ``name``; return its id (status 409: the name is taken)."""

        async def work() -> str:
            container = await self._client().containers.create(config=dict(config), name=name)
            return str(container.id)

        return await self._call(f"create container {name}", work)

    async def start(self, container_id: str) -> None:
        """Start a created container."""
        await self._call(
            f"start container {container_id[:12]}",
            lambda: self._client().containers.container(container_id).start(),
        )

    async def signal(self, container_id: str, signal: str) -> None:
        """Send ``signal`` to the container's main process (nothing if it is not running)."""
        try:
            await self._call(
                f"signal container {container_id[:12]}",
                lambda: self._client().containers.container(container_id).kill(signal=signal),
            )
        except EngineError as error:
            # 409: not running (it ended meanwhile); 404: gone.
            if error.status not in (404, 409, 500):
                raise

    async def remove(self, container_id: str) -> None:
        """Remove the container (killing it if it still runs); gone already is fine."""
        with contextlib.suppress(EngineError):
            await self.signal(container_id, "SIGKILL")
        try:
            await self._call(
                f"remove container {container_id[:12]}",
                lambda: (
                    self._client().containers.container(container_id).delete(force=True, v=True)
                ),
            )
        except EngineError as error:
            if error.status != 404:
                raise
