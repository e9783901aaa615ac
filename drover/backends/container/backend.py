"""The ``container`` backend: each kernel is one container, through the Docker Engine API.

It runs on Docker and on Podman's Docker-compatible socket (docs/containers.md).

* prepare: the kernel's device ids are taken (under the tick's claim), its
  mounts checked on this host (:mod:`~drover.backends.container._mounts`), and
  the image is pulled (PULLING, the engine's words in ``status_info``) as
  ``pull_policy`` says; PREPARED once the engine has it. A failed pull (no
  such image, registry unreachable) is ERROR with the engine's reason.
* create: the container ``<prefix>-<kernel id>`` is created with labels
  ``<prefix>.kernel`` and ``<prefix>.session``, ``cpu`` as a CPU quota and
  ``mem`` (MiB) as a memory limit, and started; RUNNING with the container's
  id in the kernel's ``runtime``. A container that exists already (a daemon
  died before its RUNNING committed) is adopted, never started twice; one whose
  start failed is removed with its kernel's ERROR.
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

The loop, reports, destroy's steps and file retention are the shared
:class:`~drover.backends.tracking.TrackingBackend`'s.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from drover.backends.base import AgentInfo, BackendError, KernelReporter
from drover.backends.container._engine import ContainerState, Engine, EngineError, Summary
from drover.backends.container._logs import end_followers, follow, keep_logs
from drover.backends.container._mounts import MountPolicy, MountRefused, engine_sockets
from drover.backends.container._reports import (
    AFTER_PULL,
    OWNING,
    RUNNING_EXPECTED,
    end_reports,
    lost,
)
from drover.backends.container._settings import ContainerSettings
from drover.backends.container._spec import (
    container_config,
    free_port,
    image_of,
    port_of,
    spec_problem,
)
from drover.backends.devices import DeviceProblem, devices_of
from drover.backends.fence import Fence
from drover.backends.tracking import Tracked, TrackingBackend
from drover.kinds.sessions.values import (
    TERMINAL_KERNEL_STATUSES,
    KernelInfo,
    KernelReport,
    KernelStatus,
    SessionWithKernels,
)

__all__ = ["ContainerBackend"]

_K = KernelStatus
#: Kernel statuses that still want their container.
_WANTS_CONTAINER = frozenset({_K.PREPARED, _K.CREATING, _K.RUNNING, _K.TERMINATING})
#: Seconds destroy waits for a container to end after SIGKILL.
_KILL_MARGIN = 10.0
#: Seconds between two progress words of a pull written to the kernel.
_PROGRESS_EVERY = 1.0


class _Container(Tracked):
    """A kernel's container this backend watches."""

    def __init__(self, kernel_id: str, container_id: str, runtime: Mapping[str, Any]) -> None:
        super().__init__(kernel_id, runtime)
        self.container_id = container_id
        self.followers: list[asyncio.Task[None]] = []
        #: Set once its end is committed (or refused) and the container is removed.
        self.done = asyncio.Event()
        self.finishing = False


class ContainerBackend(TrackingBackend[_Container]):
    """Kernels as containers; see the module docstring and docs/containers.md."""

    name = "container"

    def __init__(
        self,
        agents: Sequence[AgentInfo],
        settings: ContainerSettings,
        data_dir: str | os.PathLike[str],
        *,
        kill_grace: float = 10.0,
        device_variables: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            agents, data_dir,
            kill_grace=settings.kill_grace if settings.kill_grace is not None else kill_grace,
            kill_margin=_KILL_MARGIN, poll_interval=settings.poll_interval,
            sweep_interval=settings.poll_interval, device_variables=device_variables,
        )  # fmt: skip
        self.settings = settings
        self.engine = Engine(settings.url, settings.label_prefix, settings.api_timeout)
        #: What kernels may mount (docs/containers.md, "Mounts").
        self.mounts = MountPolicy(
            settings.mount_roots, self.data_dir, engine_sockets(settings.url, os.environ)
        )
        self._pulls: dict[str, asyncio.Task[None]] = {}

    def kernel_spec_problem(self, spec: Mapping[str, Any]) -> str | None:
        """Why a container could not run this kernel spec (no image, a mount the policy
        refuses…), from the spec and the settings alone; ``None``: it could."""
        return spec_problem(spec, self.settings.default_image, self.mounts)

    # -- adopting what runs at start-up ----------------------------------------------------

    async def _adopt(self, reporter: KernelReporter) -> None:
        """Adopt the containers of live kernels, judge those that ended, remove strays."""
        try:
            await self.engine.ping()
            found = {s.kernel_id: s for s in await self.engine.ours()}
        except EngineError as error:
            raise BackendError(f"container backend cannot reach the engine: {error}") from None
        kernels = await reporter.kernels_in(OWNING)
        live = {k.id for k in kernels}
        counts = {"adopted": 0, "pulls": 0, "lost": 0}
        for kernel in self._ours(kernels):
            summary = found.get(kernel.id)
            if kernel.status in (_K.PREPARING, _K.PULLING):
                # Its devices were taken (and recorded) when it was first prepared.
                self._spawn_pull(kernel, devices_of(kernel.runtime))
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
        self.log.info(
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
            self.log.warning(
                "kernel %s is %s: removing its container %s", summary.kernel_id, status,
                summary.id[:12],
            )  # fmt: skip
            await keep_logs(
                self.engine, self.kernel_dir(summary.kernel_id), summary.kernel_id, summary.id
            )
            await self._remove(summary.id)

    async def _close(self) -> None:
        await self.engine.close()

    # -- helpers ------------------------------------------------------------------

    def _name(self, kernel_id: str) -> str:
        return f"{self.settings.label_prefix}-{kernel_id}"

    def _track(self, kernel_id: str, container_id: str, runtime: dict[str, Any]) -> _Container:
        tracked = self._tracked.get(kernel_id)
        if tracked is not None and tracked.container_id == container_id:
            return tracked
        tracked = self._tracked[kernel_id] = _Container(kernel_id, container_id, runtime)
        for stream in ("stdout", "stderr"):
            path = runtime.get(stream)
            if isinstance(path, str):
                tracked.followers.append(
                    self._spawn_task(follow(self.engine, container_id, stream, Path(path)))
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
            self.log.info("kernel %s: pulling %s: %s", kernel_id, image, words)
            assert self.reporter is not None
            try:
                await self.reporter.report_kernel_progress(
                    kernel_id, _K.PULLING, f"pulling image {image}: {words}"
                )
            except Exception as error:  # progress is a courtesy; the pull goes on
                self.log.warning("kernel %s: pull progress not recorded: %s", kernel_id, error)

        await self.engine.pull(image, progress)

    async def _create(self, name: str, config: Mapping[str, Any], fence: Fence) -> str:
        await fence.check()
        return await self.engine.create(name, config)

    async def _start_container(self, container_id: str, fence: Fence) -> None:
        await fence.check()
        await self.engine.start(container_id)

    async def _remove(self, container_id: str, fence: Fence | None = None) -> None:
        if fence is not None:
            await fence.check()
        if self.settings.remove or fence is not None:
            try:
                await self.engine.remove(container_id)
            except EngineError as error:
                self.log.warning("could not remove container %s: %s", container_id[:12], error)

    # -- prepare: the image ---------------------------------------------------------

    async def prepare(self, session: SessionWithKernels) -> None:
        """Remove an earlier attempt's container, take each kernel's devices, then pull its
        image in the background. The removal and the devices are fenced by the tick's claim
        (:mod:`drover.backends.fence`): a fenced call removes and takes nothing and raises
        :class:`~drover.backends.fence.FencedError`."""
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
            try:
                # Under the tick's claim, before prepare returns: the pull runs after it.
                devices = await self._assign_devices(kernel, fence)
            except DeviceProblem as problem:
                error = KernelReport(kernel.id, _K.ERROR, expected=AFTER_PULL, message=str(problem))
                await self._deliver([error])
                continue
            self._spawn_pull(kernel, devices)

    async def _clear_earlier(self, kernel: KernelInfo, fence: Fence) -> None:
        """Remove the container of an earlier attempt (the kernel was sent back to PENDING)."""
        old = self._tracked.pop(kernel.id, None)
        if old is not None:
            await end_followers(old.followers, grace=0.0)
        try:
            earlier = await self.engine.inspect(self._name(kernel.id))
        except EngineError:
            return
        self.log.warning("kernel %s: removing an earlier attempt's container", kernel.id)
        await self._remove(earlier.id, fence)

    def _spawn_pull(self, kernel: KernelInfo, devices: dict[str, list[str]]) -> None:
        """Pull the kernel's image in the background (``devices``: those it took)."""
        if kernel.id in self._pulls:
            return
        task = self._spawn_task(self._prepare_kernel(kernel, devices))
        self._pulls[kernel.id] = task
        task.add_done_callback(lambda _t: self._pulls.pop(kernel.id, None))

    async def _prepare_kernel(self, kernel: KernelInfo, devices: dict[str, list[str]]) -> None:
        try:
            report = await self._prepare_now(kernel, devices)
        except Exception as error:
            self.log.exception("preparing kernel %s failed", kernel.id)
            message = f"prepare failed: {type(error).__name__}: {error}"
            report = KernelReport(kernel.id, _K.ERROR, expected=AFTER_PULL, message=message)
        await self._deliver([report])

    async def _prepare_now(self, kernel: KernelInfo, devices: dict[str, list[str]]) -> KernelReport:
        problem = self.kernel_spec_problem(kernel.spec)
        if problem:
            return KernelReport(kernel.id, _K.ERROR, expected=AFTER_PULL, message=problem)
        image = image_of(kernel.spec, self.settings.default_image)
        assert image is not None
        workdir = self.kernel_dir(kernel.id)
        await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
        try:
            # Checked on this host now, so a refused mount fails before any pull.
            await asyncio.to_thread(self.mounts.resolve, kernel.spec.get("mounts"), workdir)
        except MountRefused as refused:
            message = f"invalid kernel spec: {refused}"
            return KernelReport(kernel.id, _K.ERROR, expected=AFTER_PULL, message=message)
        runtime: dict[str, Any] = {
            "backend": "container",
            "image": image,
            "container": self._name(kernel.id),
            "workdir": str(workdir),
            "stdout": str(workdir / "stdout.log"),
            "stderr": str(workdir / "stderr.log"),
        }
        if devices:
            runtime["devices"] = devices
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
            self.log.warning("kernel %s: PULLING not reported: %s", kernel.id, error)
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

    def _running(self, tracked: _Container) -> KernelReport:
        return KernelReport(
            tracked.kernel_id, _K.RUNNING, expected=RUNNING_EXPECTED, runtime=tracked.runtime
        )

    async def _create_kernel(
        self, session_id: str, kernel: KernelInfo, fence: Fence
    ) -> list[KernelReport]:
        problem = self.kernel_spec_problem(kernel.spec)
        if problem:
            return [KernelReport(kernel.id, _K.ERROR, expected=RUNNING_EXPECTED, message=problem)]
        name = self._name(kernel.id)
        runtime = dict(kernel.runtime or {})
        container_id: str | None = None
        try:
            state = await self._existing(name)
            if state is None:
                mounts = await asyncio.to_thread(
                    self.mounts.resolve, kernel.spec.get("mounts"), self.kernel_dir(kernel.id)
                )
                port = await asyncio.to_thread(free_port)
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
                    mounts=mounts,
                )
                container_id = await self._create(name, config, fence)
                runtime["port"] = port
            else:
                self.log.info("kernel %s: adopting container %s", kernel.id, state.id[:12])
                container_id = state.id
                runtime.update(port_of(state.ports))
            runtime["container_id"] = container_id
            if state is None or not state.started:
                await self._start_container(container_id, fence)
        except MountRefused as refused:
            message = f"failed to start: {refused}"
            return [KernelReport(kernel.id, _K.ERROR, expected=RUNNING_EXPECTED, message=message)]
        except EngineError as error:
            if container_id is not None:
                # Created, never started: it would stay "Created" until the next daemon
                # start. Its kernel ends now, and so does it.
                await self._remove(container_id)
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

    async def _poll(self) -> None:
        """One list of the labelled containers: an ended one is finished (its logs kept,
        its end reported, then removed); one missing ``MISSING_POLLS`` polls in a row is
        lost."""
        if not self._tracked:
            return
        states = {s.kernel_id: s for s in await self.engine.ours()}
        for item in [t for t in self._tracked.values() if not t.finishing]:
            summary = states.get(item.kernel_id)
            seen = summary is not None and summary.id == item.container_id
            if item.missed(seen):
                self._spawn_task(self._finish(item, gone=True))
            elif summary is not None and seen and summary.state in {"exited", "dead", "stopped"}:
                self._spawn_task(self._finish(item))

    def _wants(self, item: _Container, status: KernelStatus | None) -> bool:
        # Not confirmed: being started (its kernel is PREPARED or CREATING).
        return (
            item.finishing
            or not item.confirmed
            or (status is not None and status in _WANTS_CONTAINER)
        )

    async def _abandon(self, item: _Container) -> None:
        # Ended in the database, or sent back to PENDING: it no longer owns the container.
        self._spawn_task(self._retire(item))

    async def _retire(self, item: _Container) -> None:
        """Stop an abandoned container, then finish it. The backend's own decision, outside
        any tick: its fence has no claim to check."""
        try:
            await self._stop([item], Fence(item.kernel_id))
            await self._finish(item)
        except Exception as error:
            self.log.warning("kernel %s: its container not stopped: %s", item.kernel_id, error)
            item.abandoned = False  # the next sweep tries again

    async def _finish(self, item: _Container, *, gone: bool = False) -> None:
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
        await end_followers(item.followers)
        if state is not None:
            workdir = self.kernel_dir(item.kernel_id)
            await keep_logs(self.engine, workdir, item.kernel_id, item.container_id)
        ends = end_reports(
            item.kernel_id, state, self._name(item.kernel_id),
            stopped=item.destroying or item.abandoned, runtime=item.runtime,
        )  # fmt: skip
        reports = ends if item.confirmed else [self._running(item), *ends]
        if not await self._deliver(reports):
            # Not committed: removal waits for the retried report (a restart
            # would read the end again from the container, which is still there).
            item.finishing = False
            return
        if self._tracked.get(item.kernel_id) is item:
            del self._tracked[item.kernel_id]
        await self._remove(item.container_id)
        item.done.set()

    # -- destroy ----------------------------------------------------------------------

    async def _victims(self, session: SessionWithKernels, fence: Fence) -> list[_Container]:
        """Each live kernel's container (its pull cancelled), adopting one not watched."""
        victims: list[_Container] = []
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
        return victims

    async def _adopt_for_destroy(self, kernel: KernelInfo) -> _Container | None:
        try:
            state = await self._existing(self._name(kernel.id))
        except EngineError as error:
            raise BackendError(str(error)) from None
        if state is None or state.labels.get(self.engine.label) != kernel.id:
            return None
        tracked = self._track(kernel.id, state.id, dict(kernel.runtime or {}))
        tracked.confirmed = kernel.status not in RUNNING_EXPECTED
        return tracked

    async def _signal(self, items: Sequence[_Container], fence: Fence, *, kill: bool) -> None:
        """SIGTERM each container's main process, or ``kill``: SIGKILL."""
        if not kill:
            for item in items:
                item.destroying = True
        for item in items:
            if item.finishing:
                continue  # it ended; its end is being reported
            if kill:
                self.log.warning(
                    "container %s outlived SIGTERM for %gs: SIGKILL", item.container_id[:12],
                    self.kill_grace,
                )  # fmt: skip
            fence.check_clock()
            await self.engine.signal(item.container_id, "SIGKILL" if kill else "SIGTERM")

    async def _still_live(self, items: Sequence[_Container]) -> list[_Container]:
        live = await asyncio.gather(*(self._runs(item) for item in items))
        return [item for item, runs in zip(items, live, strict=True) if runs]

    async def _runs(self, item: _Container) -> bool:
        if item.finishing:
            return False
        try:
            state = await self.engine.inspect(item.container_id)
        except EngineError as error:
            if error.status == 404:
                return False
            raise
        return state.started and not state.ended

    async def _destroyed(self, session: SessionWithKernels, victims: Sequence[_Container]) -> None:
        """Finish each container (its end reported, then removed, once whoever asks)."""
        await asyncio.gather(*(self._finish(v) for v in victims))
        if any(not v.done.is_set() for v in victims):
            raise BackendError("could not record how the containers ended; will retry")
