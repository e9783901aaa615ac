"""The ``container`` backend: each kernel is one container, through the Docker Engine API.

It runs on Docker and on Podman's Docker-compatible socket (docs/containers.md).

* prepare: the image is pulled (PULLING, the engine's words in ``status_info``)
  as ``pull_policy`` says; PREPARED once the engine has it. A failed pull (no
  such image, registry unreachable) is ERROR with the engine's reason.
* create: the container ``<prefix>-<kernel id>`` is created with labels
  ``<prefix>.kernel`` and ``<prefix>.session``, ``cpu`` as a CPU quota and
  ``mem`` (MiB) as a memory limit, and started; RUNNING with the container's
  id in the kernel's ``runtime``. A container that exists already (a daemon
  died before its RUNNING committed) is adopted, never started twice.
* logs: the container's stdout and stderr are copied as they come to files in
  ``<data_dir>/kernels/<id>/`` (``drover logs``), and copied whole once it ended.
* exit: code 0 is TERMINATED; anything else ERROR with the engine's exit code;
  killed at its memory limit is ERROR "out of memory". Once the end and the
  logs are kept the container is removed (``remove = false`` keeps it).
* destroy: SIGTERM, SIGKILL after ``kill_grace``, then the end is reported.

Restarts: containers keep running without drover. At start-up every container
labelled for a live kernel is adopted; one that ended meanwhile is judged like
any end; a RUNNING kernel whose container is gone is ERROR (lost); containers
of kernels that ended are removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_fixed

from drover.backends.base import AgentBackend, AgentInfo, BackendError, KernelReporter, Wake
from drover.backends.container._engine import ContainerState, Engine, EngineError, Summary
from drover.backends.container._reports import (
    AFTER_PULL,
    OWNING,
    RUNNING_EXPECTED,
    ended,
    lost,
)
from drover.backends.container._settings import ContainerSettings
from drover.backends.container._spec import container_config, image_of, spec_problem
from drover.backends.devices import DeviceProblem, Devices, devices_of
from drover.backends.fence import Fence
from drover.backends.logfiles import create_log
from drover.backends.stopping import mark_stopping, seen_end
from drover.kinds.sessions.values import (
    TERMINAL_KERNEL_STATUSES,
    KernelInfo,
    KernelReport,
    KernelStatus,
    SessionWithKernels,
)

__all__ = ["ContainerBackend"]

log = logging.getLogger("drover.backends.container")

_K = KernelStatus
#: Kernel statuses that still want their container.
_WANTS_CONTAINER = frozenset({_K.PREPARED, _K.CREATING, _K.RUNNING, _K.TERMINATING})
#: A tracked container missing from the engine this many polls in a row is lost.
_MISSING_POLLS = 3
#: Seconds destroy waits for a container to end after SIGKILL.
_KILL_MARGIN = 10.0
#: Seconds an ended container's log followers get to finish before they are cancelled.
_FOLLOWERS_GRACE = 2.0
#: Seconds between two progress words of a pull written to the kernel.
_PROGRESS_EVERY = 1.0


class _Tracked:
    """A kernel's container this backend watches."""

    def __init__(self, kernel_id: str, container_id: str, runtime: dict[str, Any]) -> None:
        self.kernel_id = kernel_id
        self.container_id = container_id
        self.runtime = runtime
        #: Its RUNNING report committed (or was refused: the kernel moved on).
        self.confirmed = False
        self.destroying = False
        self.missing = 0
        self.followers: list[asyncio.Task[None]] = []
        #: Set once its end is committed (or refused) and the container is removed.
        self.done = asyncio.Event()
        self.finishing = False


class ContainerBackend(AgentBackend):
    """Kernels as containers; see the module docstring and docs/containers.md."""

    def __init__(
        self,
        agents: Sequence[AgentInfo],
        settings: ContainerSettings,
        data_dir: str | os.PathLike[str],
        *,
        kill_grace: float = 10.0,
        device_variables: Mapping[str, str] | None = None,
    ) -> None:
        self._agents = list(agents)
        self.devices = Devices(self._agents, device_variables or {})
        self.settings = settings
        self.data_dir = Path(data_dir).resolve()
        self.kill_grace = settings.kill_grace if settings.kill_grace is not None else kill_grace
        self.engine = Engine(settings.url, settings.label_prefix, settings.api_timeout)
        self.reporter: KernelReporter | None = None
        self._wake: Wake = lambda: None
        self._tracked: dict[str, _Tracked] = {}
        self._pulls: dict[str, asyncio.Task[None]] = {}
        # Reports that must commit (pull results, ends), retried by the monitor.
        self._unsent: list[KernelReport] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._monitor: asyncio.Task[None] | None = None
        self._stopping = False

    def agents(self) -> Sequence[AgentInfo]:
        """The configured agents (by default, this host)."""
        return list(self._agents)

    # -- the backend's own lifecycle -------------------------------------------------

    async def start(self, reporter: KernelReporter, wake: Wake) -> None:
        """Adopt the containers of live kernels, judge those that ended, start watching."""
        self.reporter = reporter
        self._wake = wake
        self._stopping = False
        await asyncio.to_thread(self.data_dir.mkdir, parents=True, exist_ok=True)
        try:
            await self.engine.ping()
            found = {s.kernel_id: s for s in await self.engine.ours()}
        except EngineError as error:
            raise BackendError(f"container backend cannot reach the engine: {error}") from None
        kernels = await reporter.kernels_in(OWNING)
        live = {k.id for k in kernels}
        ours = {a.id for a in self._agents}
        counts = {"adopted": 0, "pulls": 0, "lost": 0}
        for kernel in kernels:
            if kernel.agent_id not in ours:
                continue
            summary = found.get(kernel.id)
            if kernel.status in (_K.PREPARING, _K.PULLING):
                self._spawn_pull(kernel.session_id, kernel)
                counts["pulls"] += 1
            elif kernel.status in (_K.RUNNING, _K.TERMINATING):
                if summary is None:
                    await self._deliver([lost(kernel.id, self._name(kernel.id), destroying=False)])
                    counts["lost"] += 1
                    continue
                tracked = self._track(kernel.id, summary.id, dict(kernel.runtime or {}))
                tracked.confirmed = True
                counts["adopted"] += 1
            # PREPARED and CREATING: create() adopts a container started before the crash.
        strays = [s for kid, s in found.items() if kid not in live]
        await self._remove_strays(strays)
        self._monitor = asyncio.create_task(self._watch(), name="drover-container-monitor")
        log.info(
            "container backend started on %s: adopted=%d pulls restarted=%d lost=%d",
            self.settings.url or "DOCKER_HOST",
            counts["adopted"],
            counts["pulls"],
            counts["lost"],
        )

    async def _remove_strays(self, strays: Sequence[Summary]) -> None:
        """Remove containers of kernels of this database that ended (their logs kept first)."""
        assert self.reporter is not None
        if not strays:
            return
        statuses = await self.reporter.kernel_statuses([s.kernel_id for s in strays])
        for summary in strays:
            status = statuses.get(summary.kernel_id)
            # Unknown: another database's kernel on the same engine. SCHEDULED or
            # PENDING: prepare() of its next attempt removes it.
            if status is None or status not in TERMINAL_KERNEL_STATUSES:
                continue
            log.warning(
                "kernel %s is %s: removing its container %s", summary.kernel_id, status,
                summary.id[:12],
            )  # fmt: skip
            await self._keep_logs(summary.kernel_id, summary.id)
            await self._remove(summary.id)

    async def stop(self) -> None:
        """Stop watching. Containers keep running, to be adopted by the next start."""
        self._stopping = True
        tasks: list[asyncio.Task[None]] = [*self._tasks, *self._pulls.values()]
        for tracked in self._tracked.values():
            tasks += tracked.followers
        if self._monitor is not None:
            tasks.append(self._monitor)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._monitor = None
        if self._unsent and self.reporter is not None:
            with contextlib.suppress(Exception):
                await self.reporter.report_kernel_statuses(self._unsent)
        await self.engine.close()

    # -- helpers ------------------------------------------------------------------

    def _name(self, kernel_id: str) -> str:
        return f"{self.settings.label_prefix}-{kernel_id}"

    def _workdir(self, kernel_id: str) -> Path:
        return self.data_dir / "kernels" / kernel_id

    def _spawn_task(self, coro: Coroutine[Any, Any, None]) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _report(self, reports: Sequence[KernelReport]) -> list[bool]:
        """Report now; the caller handles a failure."""
        assert self.reporter is not None, "ContainerBackend.start() was not called"
        if not reports:
            return []
        applied = await self.reporter.report_kernel_statuses(list(reports))
        self._wake()
        return applied

    async def _deliver(self, reports: Sequence[KernelReport]) -> list[bool] | None:
        """Report now, or keep the reports for the monitor to retry; ``None`` if kept."""
        try:
            return await self._report(reports)
        except Exception as error:
            log.warning("container backend: reports not applied, will retry: %s", error)
            self._unsent.extend(reports)
            return None

    def _track(self, kernel_id: str, container_id: str, runtime: dict[str, Any]) -> _Tracked:
        tracked = self._tracked.get(kernel_id)
        if tracked is not None and tracked.container_id == container_id:
            return tracked
        tracked = self._tracked[kernel_id] = _Tracked(kernel_id, container_id, runtime)
        for stream in ("stdout", "stderr"):
            path = runtime.get(stream)
            if isinstance(path, str):
                tracked.followers.append(
                    asyncio.create_task(self._follow(container_id, stream, Path(path)))
                )
        return tracked

    # -- side effects: one method each (the place for a check before it) --------------

    async def _pull(self, image: str, kernel_id: str) -> None:
        loop = asyncio.get_running_loop()
        last = [0.0]

        async def progress(words: str) -> None:
            # Throttled: a pull says many words a second.
            if loop.time() - last[0] < _PROGRESS_EVERY:
                return
            last[0] = loop.time()
            log.info("kernel %s: pulling %s: %s", kernel_id, image, words)
            assert self.reporter is not None
            try:
                await self.reporter.report_kernel_progress(
                    kernel_id, _K.PULLING, f"pulling image {image}: {words}"
                )
            except Exception as error:  # progress is a courtesy; the pull goes on
                log.warning("kernel %s: pull progress not recorded: %s", kernel_id, error)

        await self.engine.pull(image, progress)

    async def _create(self, name: str, config: Mapping[str, Any], fence: Fence) -> str:
        await fence.check()
        return await self.engine.create(name, config)

    async def _start(self, container_id: str, fence: Fence) -> None:
        await fence.check()
        await self.engine.start(container_id)

    async def _signal(self, container_id: str, signal: str, fence: Fence) -> None:
        await fence.check()
        await self.engine.signal(container_id, signal)

    async def _remove(self, container_id: str, fence: Fence | None = None) -> None:
        if fence is not None:
            await fence.check()
        if self.settings.remove or fence is not None:
            try:
                await self.engine.remove(container_id)
            except EngineError as error:
                log.warning("could not remove container %s: %s", container_id[:12], error)

    async def _keep_logs(self, kernel_id: str, container_id: str) -> None:
        """Copy the container's whole stdout and stderr to the kernel's log files."""
        workdir = self._workdir(kernel_id)
        for stream in ("stdout", "stderr"):
            try:
                text = await self._logs_of(container_id, stream)
            except EngineError as error:
                log.warning("kernel %s: %s not kept: %s", kernel_id, stream, error)
                continue
            try:
                await asyncio.to_thread(_write_whole, workdir / f"{stream}.log", text)
            except OSError as error:  # UnsafeLogError too: a link where the log goes
                log.warning("kernel %s: %s not kept: %s", kernel_id, stream, error)

    async def _logs_of(self, container_id: str, stream: str) -> str:
        # A busy engine can miss api_timeout once; the container is still there (it is
        # removed only after this), so asking again loses nothing. Not for a 4xx.
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(3),
            wait=wait_fixed(0.5),
            retry=retry_if_exception(_transient),
            reraise=True,
        ):
            with attempt:
                return await self.engine.logs(container_id, stream)
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    async def _follow(self, container_id: str, stream: str, path: Path) -> None:
        """Copy a running container's ``stream`` to ``path`` as it comes (``drover logs -f``)."""
        try:
            # Opened here, not in a worker thread: a cancelled to_thread still runs, and an
            # open that truncates after _keep_logs wrote the whole log would empty it.
            handle = _open_log(path)
            try:
                async for chunk in self.engine.follow(container_id, stream):
                    await asyncio.to_thread(_append, handle, chunk)
            finally:
                handle.close()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the whole log is copied at the end anyway
            log.debug("following %s of %s stopped: %s", stream, container_id[:12], error)

    # -- prepare: the image ---------------------------------------------------------

    async def prepare(self, session: SessionWithKernels) -> None:
        """Remove an earlier attempt's container, then pull each kernel's image in the
        background. The removal is fenced by the tick's claim (:mod:`drover.backends.fence`):
        a fenced call removes nothing and raises :class:`~drover.backends.fence.FencedError`."""
        fence = Fence.of(session, self.reporter)
        wanted = [
            k
            for k in session.kernels
            if k.status == _K.SCHEDULED
            or (k.status in (_K.PREPARING, _K.PULLING) and k.id not in self._pulls)
        ]
        for kernel in wanted:
            if kernel.status == _K.SCHEDULED:
                await self._clear_earlier(kernel, fence)
        for kernel in wanted:
            self._spawn_pull(session.id, kernel)

    async def _clear_earlier(self, kernel: KernelInfo, fence: Fence) -> None:
        """Remove the container of an earlier attempt (the kernel was sent back to PENDING)."""
        old = self._tracked.pop(kernel.id, None)
        if old is not None:
            await _end_followers(old.followers, grace=0.0)
        try:
            earlier = await self.engine.inspect(self._name(kernel.id))
        except EngineError:
            return
        log.warning("kernel %s: removing an earlier attempt's container", kernel.id)
        await self._remove(earlier.id, fence)

    def _spawn_pull(self, session_id: str, kernel: KernelInfo) -> None:
        if kernel.id in self._pulls:
            return
        task = asyncio.create_task(self._prepare_kernel(session_id, kernel))
        self._pulls[kernel.id] = task
        task.add_done_callback(lambda _t: self._pulls.pop(kernel.id, None))

    async def _prepare_kernel(self, session_id: str, kernel: KernelInfo) -> None:
        try:
            report = await self._prepare_now(kernel)
        except asyncio.CancelledError:
            self.devices.release(kernel.id)
            raise
        except Exception as error:
            log.exception("preparing kernel %s failed", kernel.id)
            message = f"prepare failed: {type(error).__name__}: {error}"
            report = KernelReport(kernel.id, _K.ERROR, expected=AFTER_PULL, message=message)
        if await self._deliver([report]) is not None:
            # Committed (or refused): the database says who holds which devices.
            self.devices.release(kernel.id)

    async def _prepare_now(self, kernel: KernelInfo) -> KernelReport:
        problem = spec_problem(kernel.spec, self.settings.default_image)
        if problem:
            return KernelReport(kernel.id, _K.ERROR, expected=AFTER_PULL, message=problem)
        image = image_of(kernel.spec, self.settings.default_image)
        assert image is not None
        workdir = self._workdir(kernel.id)
        await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
        runtime: dict[str, Any] = {
            "backend": "container",
            "image": image,
            "container": self._name(kernel.id),
            "workdir": str(workdir),
            "stdout": str(workdir / "stdout.log"),
            "stderr": str(workdir / "stderr.log"),
        }
        if self.devices.wanted(kernel):
            assert self.reporter is not None
            try:
                runtime["devices"] = await self.devices.assign(kernel, self.reporter)
            except DeviceProblem as problem:
                return KernelReport(kernel.id, _K.ERROR, expected=AFTER_PULL, message=str(problem))
        policy = self.settings.pull_policy
        present = policy != "always" and await self.engine.has_image(image)
        if present:
            return KernelReport(kernel.id, _K.PREPARED, expected=AFTER_PULL, runtime=runtime)
        if policy == "never":
            message = f"image {image} is not on the engine and pull_policy is never"
            return KernelReport(kernel.id, _K.ERROR, expected=AFTER_PULL, message=message)
        early = frozenset({_K.SCHEDULED, _K.PREPARING})
        pulling = KernelReport(
            kernel.id, _K.PULLING, expected=early, message=f"pulling image {image}",
            runtime=runtime,
        )  # fmt: skip
        try:
            await self._report([pulling])
        except Exception as error:  # the pull's result is reported with retries anyway
            log.warning("kernel %s: PULLING not reported: %s", kernel.id, error)
        try:
            await self._pull(image, kernel.id)
        except EngineError as error:
            message = f"image pull failed: {error}"
            return KernelReport(kernel.id, _K.ERROR, expected=AFTER_PULL, message=message)
        return KernelReport(kernel.id, _K.PREPARED, expected=AFTER_PULL, runtime=runtime)

    # -- create: the container ---------------------------------------------------------

    async def create(self, session: SessionWithKernels) -> None:
        """Create and start each prepared kernel's container (or adopt it); report RUNNING.

        Each create and start is fenced by the tick's claim: a fenced call starts
        nothing more and raises :class:`~drover.backends.fence.FencedError`.
        """
        fence = Fence.of(session, self.reporter)
        reports: list[KernelReport] = []
        for kernel in session.kernels:
            if kernel.status not in RUNNING_EXPECTED:
                continue
            tracked = self._tracked.get(kernel.id)
            if tracked is None:
                reports += await self._create_kernel(session.id, kernel, fence)
            elif not tracked.confirmed:
                reports.append(self._running(tracked))
        try:
            applied = await self._report(reports)
        except Exception as error:
            raise BackendError(f"could not record the started containers: {error}") from error
        for report, _ok in zip(reports, applied, strict=True):
            tracked = self._tracked.get(report.kernel_id)
            if tracked is not None and report.status == _K.RUNNING:
                # Applied, or refused because the kernel moved on: the sweep removes it.
                tracked.confirmed = True

    def _running(self, tracked: _Tracked) -> KernelReport:
        return KernelReport(
            tracked.kernel_id, _K.RUNNING, expected=RUNNING_EXPECTED, runtime=tracked.runtime
        )

    async def _create_kernel(
        self, session_id: str, kernel: KernelInfo, fence: Fence
    ) -> list[KernelReport]:
        problem = spec_problem(kernel.spec, self.settings.default_image)
        if problem:
            return [KernelReport(kernel.id, _K.ERROR, expected=RUNNING_EXPECTED, message=problem)]
        name = self._name(kernel.id)
        runtime = dict(kernel.runtime or {})
        try:
            state = await self._existing(name)
            if state is None:
                port = await asyncio.to_thread(_free_port)
                config = container_config(
                    kernel,
                    session_id=session_id,
                    image=str(runtime.get("image") or image_of(kernel.spec, None)),
                    labels={
                        self.engine.label: kernel.id,
                        f"{self.settings.label_prefix}.session": session_id,
                    },
                    env=self.devices.env(devices_of(runtime)),
                    network=self.settings.network,
                    port=port,
                )
                container_id = await self._create(name, config, fence)
                runtime["port"] = port
            else:
                log.info("kernel %s: adopting container %s", kernel.id, state.id[:12])
                container_id = state.id
                runtime.update(_port_of(state))
            runtime["container_id"] = container_id
            if state is None or not state.started:
                await self._start(container_id, fence)
        except EngineError as error:
            message = f"failed to start: {error}"
            return [KernelReport(kernel.id, _K.ERROR, expected=RUNNING_EXPECTED, message=message)]
        tracked = self._track(kernel.id, container_id, runtime)
        return [self._running(tracked)]

    async def _existing(self, name: str) -> ContainerState | None:
        try:
            return await self.engine.inspect(name)
        except EngineError as error:
            if error.status == 404:
                return None
            raise

    # -- watching --------------------------------------------------------------------

    async def _watch(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.settings.poll_interval)
            try:
                await self._poll_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("container backend: polling failed; will retry")

    async def _poll_once(self) -> None:
        assert self.reporter is not None
        if self._unsent:
            reports, self._unsent = self._unsent, []
            await self._deliver(reports)
        if not self._tracked:
            return
        states = {s.kernel_id: s for s in await self.engine.ours()}
        tracked = [t for t in self._tracked.values() if not t.finishing]
        statuses = await self.reporter.kernel_statuses([t.kernel_id for t in tracked])
        for item in tracked:
            summary = states.get(item.kernel_id)
            if summary is None or summary.id != item.container_id:
                item.missing += 1
                if item.missing >= _MISSING_POLLS:
                    self._spawn_task(self._finish(item, gone=True))
                continue
            item.missing = 0
            status = statuses.get(item.kernel_id)
            if summary.state in {"exited", "dead", "stopped"}:
                self._spawn_task(self._finish(item))
            elif (status is None or status not in _WANTS_CONTAINER) and item.confirmed:
                # Ended in the database, or sent back to PENDING: it no longer
                # owns the container.
                log.warning("kernel %s is %s: stopping its container", item.kernel_id, status)
                item.destroying = True
                # The backend's own decision, outside any tick: no claim to check.
                self._spawn_task(self._stop_container(item, Fence(item.kernel_id)))

    async def _finish(self, item: _Tracked, *, gone: bool = False) -> None:
        """Keep an ended container's logs, report its end, then remove it."""
        if item.finishing:
            await item.done.wait()
            return
        item.finishing = True
        try:
            state = None if gone else await self.engine.inspect(item.container_id)
        except EngineError as error:
            if error.status != 404:
                item.finishing = False
                raise
            state = None
        await _end_followers(item.followers)
        if state is not None:
            await self._keep_logs(item.kernel_id, item.container_id)
            ends = [
                ended(item.kernel_id, state, destroying=destroying, runtime=item.runtime)
                for destroying in (item.destroying, True)
            ]
        else:
            name = self._name(item.kernel_id)
            ends = [lost(item.kernel_id, name, destroying=d) for d in (item.destroying, True)]
        # Not stopped here: the destroy's verdict applies if another coordinator (or
        # this one before a restart) asked the kernel to stop (drover.backends.stopping).
        ends = [ends[0]] if item.destroying else seen_end(ends[0], ends[1])
        reports = ends if item.confirmed else [self._running(item), *ends]
        if await self._deliver(reports) is None:
            # Not committed: removal waits for the retried report (a restart
            # would read the end again from the container, which is still there).
            item.finishing = False
            return
        if self._tracked.get(item.kernel_id) is item:
            del self._tracked[item.kernel_id]
        await self._remove(item.container_id)
        item.done.set()

    # -- destroy ----------------------------------------------------------------------

    async def destroy(self, session: SessionWithKernels) -> None:
        """SIGTERM each live kernel's container, SIGKILL after ``kill_grace``; report the ends.

        Returns once every container ended and how it ended is committed, so the
        handler's transition never hides an exit code. The kernels are reported
        TERMINATING before any signal (:mod:`drover.backends.stopping`). Every
        signal is fenced by the tick's claim: a fenced call signals nothing more
        and raises :class:`~drover.backends.fence.FencedError`.
        """
        fence = Fence.of(session, self.reporter)
        await fence.check()
        victims: list[_Tracked] = []
        for kernel in session.kernels:
            if kernel.status in TERMINAL_KERNEL_STATUSES:
                continue
            pull = self._pulls.get(kernel.id)
            if pull is not None:
                pull.cancel()
            tracked = self._tracked.get(kernel.id)
            if tracked is None:
                tracked = await self._adopt_for_destroy(kernel)
            if tracked is not None:
                victims.append(tracked)
        # The intent first: whoever sees these containers end calls them destroyed.
        await mark_stopping(self.reporter, [v.kernel_id for v in victims])
        for victim in victims:
            victim.destroying = True
        await asyncio.gather(*(self._stop_container(v, fence) for v in victims))
        if any(not v.done.is_set() for v in victims):
            raise BackendError("could not record how the containers ended; will retry")

    async def _adopt_for_destroy(self, kernel: KernelInfo) -> _Tracked | None:
        try:
            state = await self._existing(self._name(kernel.id))
        except EngineError as error:
            raise BackendError(str(error)) from None
        if state is None or state.labels.get(self.engine.label) != kernel.id:
            return None
        tracked = self._track(kernel.id, state.id, dict(kernel.runtime or {}))
        tracked.confirmed = kernel.status not in RUNNING_EXPECTED
        return tracked

    async def _stop_container(self, item: _Tracked, fence: Fence) -> None:
        """SIGTERM, SIGKILL after the grace, then its end (once, whoever asks)."""
        if item.finishing:
            await item.done.wait()
            return
        await self._signal(item.container_id, "SIGTERM", fence)
        if not await self._wait_ended(item, self.kill_grace):
            log.warning(
                "container %s outlived SIGTERM for %gs: SIGKILL", item.container_id[:12],
                self.kill_grace,
            )  # fmt: skip
            await self._signal(item.container_id, "SIGKILL", fence)
            await self._wait_ended(item, _KILL_MARGIN)
        await self._finish(item)

    async def _wait_ended(self, item: _Tracked, seconds: float) -> bool:
        deadline = asyncio.get_running_loop().time() + seconds
        while True:
            try:
                state = await self.engine.inspect(item.container_id)
            except EngineError as error:
                if error.status == 404:
                    return True
                raise
            if state.ended or not state.started:
                return True
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.1)


async def _end_followers(
    followers: Sequence[asyncio.Task[None]], grace: float = _FOLLOWERS_GRACE
) -> None:
    """Let log followers of an ended container finish on their own, cancel stragglers.

    A follower ends when the engine closes its stream; one cancelled in the
    middle of the stream leaves its connection to the garbage collector
    (aiodocker does not release it), so cancelling is the last resort.
    """
    if not followers:
        return
    _done, pending = (
        await asyncio.wait(followers, timeout=grace) if grace > 0 else (set(), set(followers))
    )
    for task in pending:
        task.cancel()
    await asyncio.gather(*followers, return_exceptions=True)


def _port_of(state: ContainerState) -> dict[str, Any]:
    """The ``$PORT`` an adopted container was given (its published port)."""
    for key in state.ports:
        number = key.split("/", 1)[0]
        if number.isdigit():
            return {"port": int(number)}
    return {}


def _free_port() -> int:
    """A port nothing listens on now, for a kernel's ``$PORT``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _transient(error: BaseException) -> bool:
    """An engine error worth asking again: no answer, or the engine's own failure."""
    return isinstance(error, EngineError) and (error.status == 0 or error.status >= 500)


def _open_log(path: Path) -> Any:
    # Never through a link planted where the log goes (drover.backends.logfiles).
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = create_log(path)
    os.ftruncate(fd, 0)
    return os.fdopen(fd, "w", encoding="utf-8")  # closed by the follower


def _append(handle: Any, chunk: str) -> None:
    handle.write(chunk)
    handle.flush()


def _write_whole(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    # Never through a link (drover.backends.logfiles); the rename replaces a link itself.
    fd = create_log(partial)
    os.ftruncate(fd, 0)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    partial.replace(path)
