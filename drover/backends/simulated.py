"""A simulated backend: in-memory agents, and kernels that move on a timetable.

Progress is queued as timed events on the coordinator's clock and delivered
through the repository by :meth:`SimulatedBackend.deliver_due`, so tests are
deterministic (``h.clock.advance(...)`` then tick). With all delays at 0 the
kernels are instant.

Per-kernel behaviour comes from the kernel spec's optional ``"sim"`` table:

``{"prepare": "fail"}``  the kernel goes to ERROR instead of PREPARED;
``{"prepare": "hang"}`` / ``{"create": "hang"}``  the kernel never progresses;
``{"run_for": 5}``      seconds to run before exiting (overrides the backend's);
``{"exit_code": 3}``    exit code (non-zero exits end in ERROR).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from drover.backends.base import AgentBackend, AgentInfo, BackendError, KernelReporter
from drover.model.clock import Clock, SystemClock
from drover.model.status import TERMINAL_KERNEL_STATUSES, KernelStatus
from drover.model.values import SessionWithKernels
from drover.storage.repository import KernelReport

__all__ = ["SimulatedBackend"]

_K = KernelStatus
_NON_TERMINAL = frozenset(s for s in KernelStatus if s not in TERMINAL_KERNEL_STATUSES)


# (due, sequence, report): plain tuples keep heap comparisons cheap.
_Event = tuple[float, int, KernelReport]


class SimulatedBackend(AgentBackend):
    """In-memory agents; kernel progress on a timetable; failures injectable.

    ``run_for=None`` keeps kernels RUNNING until destroyed.
    """

    def __init__(
        self,
        agents: Sequence[AgentInfo] | None = None,
        *,
        pull_delay: float = 0.0,
        create_delay: float = 0.0,
        run_for: float | None = None,
        clock: Clock | None = None,
        reporter: KernelReporter | None = None,
    ) -> None:
        self._agents = list(
            agents
            if agents is not None
            else [AgentInfo(f"sim-{i}", {"cpu": 8.0, "mem": 32768.0}) for i in range(1, 3)]
        )
        self.pull_delay = pull_delay
        self.create_delay = create_delay
        self.run_for = run_for
        self.clock: Clock = clock or SystemClock()
        self.reporter = reporter
        self._events: list[_Event] = []
        # Kernels destroyed while events were queued: skipped at delivery.
        self._forgotten: set[str] = set()
        self._seq = itertools.count()
        self._failures: dict[str, list[tuple[str | None, str]]] = {}
        #: Every operation called, as ``(operation, session_id)``, for tests.
        self.calls: list[tuple[str, str]] = []

    def bind(self, reporter: KernelReporter, clock: Clock) -> None:
        """Attach the repository to report through and the clock to schedule on."""
        self.reporter = reporter
        self.clock = clock

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
        self.calls.append((operation, session.id))
        queue = self._failures.get(operation, [])
        for index, (sid, message) in enumerate(queue):
            if sid is None or sid == session.id:
                del queue[index]
                raise BackendError(message)

    def _at(self, delay: float, report: KernelReport) -> None:
        self._forgotten.discard(report.kernel_id)
        heapq.heappush(self._events, (self.clock.time() + delay, next(self._seq), report))

    @staticmethod
    def _sim(spec: Mapping[str, Any]) -> Mapping[str, Any]:
        sim = spec.get("sim")
        return sim if isinstance(sim, Mapping) else {}

    async def prepare(self, session: SessionWithKernels) -> None:
        """Queue PULLING now, then PREPARED (or ERROR) after ``pull_delay``."""
        self._maybe_fail("prepare", session)
        for kernel in session.kernels:
            if kernel.status in TERMINAL_KERNEL_STATUSES:
                continue
            sim = self._sim(kernel.spec)
            if sim.get("prepare") == "hang":
                continue
            self._at(
                0.0,
                KernelReport(
                    kernel.id, _K.PULLING, expected=frozenset({_K.SCHEDULED, _K.PREPARING})
                ),
            )
            if sim.get("prepare") == "fail":
                done = KernelReport(
                    kernel.id,
                    _K.ERROR,
                    expected=frozenset({_K.PREPARING, _K.PULLING}),
                    message="simulated setup failure",
                )
            else:
                done = KernelReport(
                    kernel.id, _K.PREPARED, expected=frozenset({_K.PREPARING, _K.PULLING})
                )
            self._at(self.pull_delay, done)

    async def create(self, session: SessionWithKernels) -> None:
        """Queue RUNNING after ``create_delay``, then the exit after ``run_for``."""
        self._maybe_fail("create", session)
        for kernel in session.kernels:
            if kernel.status in TERMINAL_KERNEL_STATUSES:
                continue
            sim = self._sim(kernel.spec)
            if sim.get("create") == "hang":
                continue
            self._at(
                self.create_delay,
                KernelReport(kernel.id, _K.RUNNING, expected=frozenset({_K.PREPARED, _K.CREATING})),
            )
            run_for = sim.get("run_for", self.run_for)
            if run_for is None:
                continue
            exit_code = int(sim.get("exit_code", 0))
            self._at(
                self.create_delay + float(run_for),
                KernelReport(
                    kernel.id,
                    _K.TERMINATED if exit_code == 0 else _K.ERROR,
                    expected=frozenset({_K.RUNNING}),
                    exit_code=exit_code,
                    message=None if exit_code == 0 else f"exited with code {exit_code}",
                ),
            )

    async def destroy(self, session: SessionWithKernels) -> None:
        """Forget the kernels' queued progress; the handler's transition ends them."""
        self._maybe_fail("destroy", session)
        self._forgotten.update(k.id for k in session.kernels)

    @property
    def pending_events(self) -> int:
        """How many progress events are queued (for kernels not destroyed)."""
        return sum(1 for e in self._events if e[2].kernel_id not in self._forgotten)

    async def deliver_due(self) -> int:
        """Report every event due by now, in one transaction; return how many applied."""
        if self.reporter is None:
            raise RuntimeError("SimulatedBackend.bind(reporter, clock) was not called")
        now = self.clock.time()
        due: list[KernelReport] = []
        while self._events and self._events[0][0] <= now:
            report = heapq.heappop(self._events)[2]
            if report.kernel_id not in self._forgotten:
                due.append(report)
        if not due:
            return 0
        applied = await self.reporter.report_kernel_statuses(due)
        return sum(applied)
