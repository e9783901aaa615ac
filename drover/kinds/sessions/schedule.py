"""``schedule-sessions``: a resource-fitting scheduler for PENDING sessions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from drover.backends.base import AgentBackend
from drover.coordinator.handlers import LifecycleHandler
from drover.kinds.sessions.values import (
    KernelInfo,
    KernelStatus,
    SessionStatus,
    SessionWithKernels,
    TransitionStatus,
)
from drover.model.creation import amounts_text, fits_some_agent
from drover.model.values import HandlerOptions, HandlerResult, StatusTransitions
from drover.plugins.markers import hookimpl
from drover.plugins.registry import HandlerRegistry

__all__ = ["INSUFFICIENT_RESOURCES", "AgentUsage", "ScheduleSessions", "drover_register_handlers"]

_PENDING = KernelStatus.PENDING

#: Error code of the SKIPPED row of a session that does not fit.
INSUFFICIENT_RESOURCES = "insufficient-resources"


class AgentUsage(Protocol):
    """What the scheduler reads from storage (:class:`drover.storage.Repository` has it)."""

    async def agent_usage(self, slots: Iterable[str]) -> dict[str, dict[str, float]]:
        """Resources held per agent: the sum of each slot over its placed, live kernels."""
        ...


_fmt = amounts_text


class ScheduleSessions(LifecycleHandler):
    """Place PENDING sessions' kernels on agents with enough free capacity.

    Sessions are placed in fetch order (priority, then age), each kernel on the
    agent with the most free ``cpu`` that fits it. A session that does not fit
    is SKIPPED with a message naming what it needs and what is free; later,
    smaller sessions may still be placed (backfilling).
    """

    def __init__(self, backend: AgentBackend, repository: AgentUsage) -> None:
        self.backend = backend
        self.repository = repository

    @classmethod
    def name(cls) -> str:
        """``schedule-sessions``."""
        return "schedule-sessions"

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        """PENDING."""
        return frozenset({SessionStatus.PENDING})

    @property
    def target_kernel_statuses(self) -> list[KernelStatus] | None:
        """PENDING."""
        return [KernelStatus.PENDING]

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """SCHEDULED on success; CANCELLED on expiry or give-up."""
        return StatusTransitions(
            success=TransitionStatus(SessionStatus.SCHEDULED, KernelStatus.SCHEDULED),
            need_retry=None,
            expired=TransitionStatus(SessionStatus.CANCELLED, KernelStatus.CANCELLED),
            give_up=TransitionStatus(SessionStatus.CANCELLED, KernelStatus.CANCELLED),
        )

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """No timeout: a session waits for capacity as long as it takes."""
        return HandlerOptions(max_retries=5, timeout=None)

    async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult:
        """Fit sessions onto agents; skip what does not fit.

        The placements travel in the result and are written by the apply, in
        the same transaction as the sessions' move to SCHEDULED.
        """
        agents = list(self.backend.agents())
        agent_slots = sorted({slot for agent in agents for slot in agent.capacity})
        used = await self.repository.agent_usage(agent_slots)
        # A kernel asks for every slot it names with a number, so a request for
        # a slot no agent offers (say gpu) cannot be placed anywhere.
        # Kernels read together with identical specs share one spec object.
        specs = {id(k.spec): k.spec for s in targets for k in s.kernels}
        slots = sorted(
            set(agent_slots)
            | {"cpu", "mem"}
            | {k for spec in specs.values() for k, v in spec.items() if _is_amount(v)}
        )
        free = {
            a.id: {s: float(a.capacity.get(s, 0.0)) - used.get(a.id, {}).get(s, 0.0) for s in slots}
            for a in agents
        }
        capacity = {a.id: {s: float(a.capacity.get(s, 0.0)) for s in slots} for a in agents}
        order = sorted(free)
        # The fitting runs on vectors in slot order: per agent what is free, per
        # distinct spec what a kernel needs (a tick's thousand sessions share a few).
        free_vectors = [[free[a][s] for s in slots] for a in order]
        positions = range(len(slots))
        cpu = slots.index("cpu")
        needs: dict[int, dict[str, float]] = {}
        need_vectors: dict[int, list[float]] = {}
        placements: dict[str, str] = {}
        successes: list[str] = []
        skipped: list[str] = []
        messages: dict[str, str] = {}
        codes: dict[str, str] = {}
        for session in targets:
            # What this session's kernels take, per agent (by position), until it fits whole.
            taken: dict[int, list[float]] = {}
            tentative: dict[str, int] = {}
            pending = [k for k in session.kernels if k.status is _PENDING]
            problem: str | None = None
            for index, kernel in enumerate(pending, start=1):
                vector = need_vectors.get(id(kernel.spec))
                if vector is None:
                    need = needs[id(kernel.spec)] = {s: _request(kernel.spec, s) for s in slots}
                    vector = need_vectors[id(kernel.spec)] = [need[s] for s in slots]
                chosen = _most_free_fitting(free_vectors, taken, vector, positions, cpu)
                if chosen is None:
                    # Explained with the named amounts, as free as before this session.
                    free = {
                        a: dict(zip(slots, free_vectors[i], strict=True))
                        for i, a in enumerate(order)
                    }
                    need = needs[id(kernel.spec)]
                    if len(pending) == 1:
                        asked = [s for s in slots if need[s] or s in ("cpu", "mem")]
                        problem = self._explain(index, 1, need, free, capacity, asked)
                    else:
                        problem = self._explain_session(
                            index, pending, needs, slots, free, capacity
                        )
                    break
                used_here = taken.get(chosen)
                if used_here is None:
                    used_here = taken[chosen] = [0.0] * len(slots)
                for i in positions:
                    used_here[i] += vector[i]
                tentative[kernel.id] = chosen
            if problem is None:
                for agent, amounts in taken.items():
                    have = free_vectors[agent]
                    for i in positions:
                        have[i] -= amounts[i]
                for kernel_id, agent in tentative.items():
                    placements[kernel_id] = order[agent]
                successes.append(session.id)
            else:
                skipped.append(session.id)
                messages[session.id] = problem
                codes[session.id] = INSUFFICIENT_RESOURCES
        return HandlerResult(
            successes=successes,
            skipped=skipped,
            messages=messages,
            error_codes=codes,
            placements=placements,
        )

    @staticmethod
    def _explain(
        index: int,
        total: int,
        need: Mapping[str, float],
        free: Mapping[str, Mapping[str, float]],
        capacity: Mapping[str, Mapping[str, float]],
        slots: Sequence[str],
    ) -> str:
        wanted = _fmt(need, slots)
        if not free:
            return f"insufficient resources: kernel {index}/{total} needs {wanted}; no agents"
        best = max(sorted(free), key=lambda a: (free[a].get("cpu", 0.0), a))
        text = (
            f"insufficient resources: kernel {index}/{total} needs {wanted}, "
            f"the largest free agent {best} has {_fmt(free[best], slots)}"
        )
        if not fits_some_agent({s: need[s] for s in slots}, capacity.values()):
            text += " (no agent is that large even when idle)"
        return text

    @staticmethod
    def _explain_session(
        index: int,
        pending: Sequence[KernelInfo],
        needs: Mapping[int, Mapping[str, float]],
        slots: Sequence[str],
        free: Mapping[str, Mapping[str, float]],
        capacity: Mapping[str, Mapping[str, float]],
    ) -> str:
        """A session of several kernels that does not fit: what it needs in all against what
        is free now (nothing counted for its own kernels), and the first kernel that fails."""
        total = dict.fromkeys(slots, 0.0)
        for kernel in pending:
            for s in slots:
                total[s] += _request(kernel.spec, s)
        need = needs[id(pending[index - 1].spec)]
        asked = [s for s in slots if total[s] or s in ("cpu", "mem")]
        text = f"insufficient resources: the session needs {_fmt(total, asked)} for its "
        text += f"{len(pending)} kernels; "
        if not free:
            return text + "there are no agents"
        in_all = {s: sum(max(0.0, f[s]) for f in free.values()) for s in slots}
        best = max(sorted(free), key=lambda a: (free[a].get("cpu", 0.0), a))
        text += (
            f"free now: {_fmt(in_all, asked)} in all, the largest free agent {best} has "
            f"{_fmt(free[best], asked)}; kernel {index}/{len(pending)} "
            f"({_fmt(need, asked)}) is the first that does not fit"
        )
        if not fits_some_agent({s: need[s] for s in slots}, capacity.values()):
            text += " (no agent is that large even when idle)"
        return text


def _most_free_fitting(
    free: Sequence[Sequence[float]],
    taken: Mapping[int, Sequence[float]],
    need: Sequence[float],
    positions: range,
    cpu: int,
) -> int | None:
    """The position of the agent that fits ``need`` with the most free cpu (ties: the last,
    agents being in id order: the greatest id).

    ``free`` and ``need`` are vectors in slot order; ``taken`` what the session being
    placed already holds on an agent (free minus taken is what is left).
    """
    # The agent with the most cpu left is the answer whenever it fits, and with room
    # to spare it nearly always does: one fit check per kernel instead of one per agent.
    top, top_cpu = -1, 0.0
    for agent, have in enumerate(free):
        used = taken.get(agent)
        left = have[cpu] - used[cpu] if used is not None else have[cpu]
        if top < 0 or left >= top_cpu:
            top, top_cpu = agent, left
    if top >= 0:
        have, used = free[top], taken.get(top)
        for i in positions:
            if have[i] - (used[i] if used is not None else 0.0) < need[i]:
                break
        else:
            return top
    best: int | None = None
    best_cpu = 0.0
    for agent, have in enumerate(free):
        used = taken.get(agent)
        if used is None:
            for i in positions:
                if have[i] < need[i]:
                    break
            else:
                if best is None or have[cpu] >= best_cpu:
                    best, best_cpu = agent, have[cpu]
        else:
            for i in positions:
                if have[i] - used[i] < need[i]:
                    break
            else:
                left = have[cpu] - used[cpu]
                if best is None or left >= best_cpu:
                    best, best_cpu = agent, left
    return best


def _is_amount(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _request(spec: Mapping[str, object], slot: str) -> float:
    value = spec.get(slot, 0)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return 0.0


@hookimpl
def drover_register_handlers(register: HandlerRegistry) -> None:
    """Register ``schedule-sessions``."""
    register(ScheduleSessions(register.context.backend, register.context.queries))
