"""A simulated backend: in-memory agents, and kernels that move on a timetable.

Progress is queued as timed events on the coordinator's clock and delivered
through the repository by :meth:`SimulatedBackend.deliver_due`, so tests are
deterministic (``h.clock.advance(...)`` then tick). With all delays at 0 the
kernels are instant.

Per-kernel behaviour comes from the kernel spec's optional ``"sim"`` table:

``{"prepare": "fail"}``  the kernel goes to ERROR instead of PREPARED;
``{"prepare": "hang"}`` / ``{"create": "hang"}``  the kernel never progresses;
``{"run_for": 5}``      seconds to run before exiting (overrides the backend's);
``{"exit_code": 3}``    exit code (non-zero exits end in ERROR);
``{"port": 8080}``      recorded in the kernel's runtime when it runs, as the
                        local backend records ``$PORT`` (a deployment's replica
                        whose "server" is a test's own).

Under the daemon (``pump_interval`` set) the backend delivers due progress by
itself every ``pump_interval`` seconds; in the test harness (``pump_interval``
``None``) the harness calls :meth:`SimulatedBackend.deliver_due` before each
tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from drover.backends.base import AgentBackend, AgentInfo, BackendError, KernelReporter, Wake
from drover.kinds.sessions.values import (
    TERMINAL_KERNEL_STATUSES,
    KernelReport,
    KernelStatus,
    SessionWithKernels,
)
from drover.model.clock import Clock, SystemClock

__all__ = ["CALLS_KEPT", "SimulatedBackend"]

log = logging.getLogger("drover.backends.simulated")

_K = KernelStatus


# What a report needs; the KernelReport itself is built when it is delivered.
_Report = tuple[str, KernelStatus, frozenset[KernelStatus], int | None, str | None]
# (due, sequence, the reports of one session's kernels): plain tuples keep heap
# comparisons cheap, and one event per session step, not per kernel.
_Event = tuple[float, int, list[_Report]]

_NO_SIM: Mapping[str, Any] = {}
#: Calls :attr:`SimulatedBackend.calls` keeps at least (it holds at most twice as many).
CALLS_KEPT = 10_000
_RUNNING_S, _TERMINATED, _ERROR = _K.RUNNING, _K.TERMINATED, _K.ERROR
_PULLING_S, _PREPARED = _K.PULLING, _K.PREPARED
_BEFORE_PULL = frozenset({_K.SCHEDULED, _K.PREPARING})
_PULLING = frozenset({_K.PREPARING, _K.PULLING})
_STARTING = frozenset({_K.PREPARED, _K.CREATING})
_RUNNING = frozenset({_K.RUNNING})


class SimulatedBackend(AgentBackend):
    """In-memory agents; kernel progress on a timetable; failures injectable.

    ``run_for=None`` keeps kernels RUNNING until destroyed. ``clock``: the
    clock progress is scheduled on (default: the reporter's, from :meth:`start`).
    """

    def __init__(
        self,
        agents: Sequence[AgentInfo] | None = None,
        *,
        pull_delay: float = 0.0,
        create_delay: float = 0.0,
        run_for: float | None = None,
        clock: Clock | None = None,
        pump_interval: float | None = None,
    ) -> None:
        self._agents = list(
            agents
            if agents is not None
            else [AgentInfo(f"sim-{i}", {"cpu": 8.0, "mem": 32768.0}) for i in range(1, 3)]
        )
        self.pull_delay = pull_delay
        self.create_delay = create_delay
        self.run_for = run_for
        self._own_clock = clock
        self.clock: Clock = clock or SystemClock()
        self.pump_interval = pump_interval
        self.reporter: KernelReporter | None = None
        self._wake: Wake = lambda: None
        self._pump: asyncio.Task[None] | None = None
        self._events: list[_Event] = []
        # Kernels destroyed while events were queued: skipped at delivery.
        self._forgotten: set[str] = set()
        # Runtime bookkeeping reported with a kernel's RUNNING (its "sim" port).
        self._runtimes: dict[str, dict[str, Any]] = {}
        self._seq = itertools.count()
        self._failures: dict[str, list[tuple[str | None, str]]] = {}
        #: The operations called, as ``(operation, session_id)``, for tests: the latest
        #: :data:`CALLS_KEPT` at least (a daemon's backend runs for millions).
        self.calls: list[tuple[str, str]] = []

    async def start(self, reporter: KernelReporter, wake: Wake) -> None:
        """Report through ``reporter`` (on its clock, unless given one); pump if configured."""
        self.reporter = reporter
        self.clock = self._own_clock or reporter.clock
        self._wake = wake
        if self.pump_interval is not None and self._pump is None:
            self._pump = asyncio.create_task(self._pump_loop(), name="drover-simulated-pump")

    async def stop(self) -> None:
        """Stop delivering by itself."""
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
            self._pump = None

    async def _pump_loop(self) -> None:
        assert self.pump_interval is not None
        while True:
            try:
                await self.deliver_due()
            except Exception as error:
                log.error("simulated delivery failed: %s: %s", type(error).__name__, error)
                await asyncio.sleep(1.0)
            await asyncio.sleep(self.pump_interval)

    def agents(self) -> Sequence[AgentInfo]:
        """The configured agents."""
        return list(self._agents)

    def set_agents(self, agents: Sequence[AgentInfo]) -> None:
        """Replace the agents (to simulate capacity changing)."""
        self._agents = list(agents)

    def fail_next(
        self,
        operation: str,
        *,
        session_id: str | None = None,
        times: int = 1,
        message: str = "simulated failure",
    ) -> None:
        """Make the next ``times`` calls of ``operation`` (for ``session_id``, or any) raise."""
        if operation not in {"prepare", "create", "destroy"}:
            raise ValueError(f"unknown backend operation {operation!r}")
        self._failures.setdefault(operation, []).extend([(session_id, message)] * times)

    def _maybe_fail(self, operation: str, session: SessionWithKernels) -> None:
        calls = self.calls
        calls.append((operation, session.id))
        if len(calls) > 2 * CALLS_KEPT:
            # Trimmed in halves: amortised O(1) per call, and still a plain list.
            del calls[:-CALLS_KEPT]
        queue = self._failures.get(operation, [])
        for index, (sid, message) in enumerate(queue):
            if sid is None or sid == session.id:
                del queue[index]
                raise BackendError(message)

    def _at(self, delay: float, reports: list[_Report]) -> None:
        if not reports:
            return
        if self._forgotten:
            for report in reports:
                self._forgotten.discard(report[0])
        heapq.heappush(self._events, (self.clock.time() + delay, next(self._seq), reports))

    @staticmethod
    def _sim(spec: Mapping[str, Any]) -> Mapping[str, Any]:
        sim = spec.get("sim")
        if sim is None:
            return _NO_SIM
        return sim if isinstance(sim, Mapping) else _NO_SIM

    async def prepare(self, session: SessionWithKernels) -> None:
        """Queue PULLING now, then PREPARED (or ERROR) after ``pull_delay``."""
        self._maybe_fail("prepare", session)
        pulling: list[_Report] = []
        done: list[_Report] = []
        for kernel in session.kernels:
            if kernel.status in TERMINAL_KERNEL_STATUSES:
                continue
            sim = self._sim(kernel.spec)
            if sim.get("prepare") == "hang":
                continue
            pulling.append((kernel.id, _PULLING_S, _BEFORE_PULL, None, None))
            if sim.get("prepare") == "fail":
                done.append((kernel.id, _ERROR, _PULLING, None, "simulated setup failure"))
            else:
                done.append((kernel.id, _PREPARED, _PULLING, None, None))
        self._at(0.0, pulling)
        self._at(self.pull_delay, done)

    def _exit_plan(self, spec: Mapping[str, Any]) -> tuple[bool, float | None, int]:
        """(hangs at create, seconds it runs or None, exit code) of a kernel spec."""
        sim = self._sim(spec)
        run_for = sim.get("run_for", self.run_for)
        return (
            sim.get("create") == "hang",
            None if run_for is None else float(run_for),
            int(sim.get("exit_code", 0)),
        )

    async def create(self, session: SessionWithKernels) -> None:
        """Queue RUNNING after ``create_delay``, then the exit after ``run_for``."""
        self._maybe_fail("create", session)
        running: list[_Report] = []
        exits: dict[float, list[_Report]] = {}
        # A session's kernels usually share one spec object: read it once.
        plans: dict[int, tuple[bool, float | None, int]] = {}
        for kernel in session.kernels:
            if kernel.status in TERMINAL_KERNEL_STATUSES:
                continue
            plan = plans.get(id(kernel.spec))
            if plan is None:
                plan = plans[id(kernel.spec)] = self._exit_plan(kernel.spec)
            hangs, run_for, code = plan
            if hangs:
                continue
            running.append((kernel.id, _RUNNING_S, _STARTING, None, None))
            port = self._sim(kernel.spec).get("port")
            if isinstance(port, int):
                self._runtimes[kernel.id] = {"port": port}
            if run_for is None:
                continue
            exits.setdefault(run_for, []).append(
                (
                    kernel.id,
                    _TERMINATED if code == 0 else _ERROR,
                    _RUNNING,
                    code,
                    None if code == 0 else f"exited with code {code}",
                )
            )
        self._at(self.create_delay, running)
        for run_for, reports in exits.items():
            self._at(self.create_delay + run_for, reports)

    async def destroy(self, session: SessionWithKernels) -> None:
        """Forget the kernels' queued progress; the handler's transition ends them."""
        self._maybe_fail("destroy", session)
        self._forgotten.update(k.id for k in session.kernels)

    async def deliver_due(self) -> int:
        """Report every event due by now, in one transaction; return how many applied."""
        if self.reporter is None:
            raise RuntimeError("SimulatedBackend.start(reporter, wake) was not called")
        now = self.clock.time()
        due: list[KernelReport] = []
        while self._events and self._events[0][0] <= now:
            for kid, status, expected, exit_code, message in heapq.heappop(self._events)[2]:
                if kid not in self._forgotten:
                    runtime = self._runtimes.pop(kid, None) if status is _RUNNING_S else None
                    due.append(KernelReport(kid, status, expected, exit_code, message, runtime))
        if not self._events:
            # Nothing queued can name a destroyed kernel any more.
            self._forgotten.clear()
        if not due:
            return 0
        applied = sum(await self.reporter.report_kernel_statuses(due))
        if applied:
            self._wake()
        return applied
