"""Device slots: specific device ids for each kernel, never two live kernels' at once.

An agent may declare a slot as a list of ids (``gpu = ["0", "1"]``); the
scheduler counts it like any slot, and the backend, when it prepares a kernel
that asks for it, picks that many ids no other live kernel on the agent holds.
The choice is recorded in the kernel's ``runtime["devices"]`` (``{"gpu": ["1"]}``),
so it survives a restart, and given to the kernel's processes in one variable
per slot (``CUDA_VISIBLE_DEVICES=1`` for ``gpu``; configurable per slot with
``backend.device_variables``). Used by the local and container backends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from drover.backends.base import AgentInfo, KernelReporter
from drover.kinds.sessions.values import KernelInfo, KernelStatus

__all__ = ["DeviceProblem", "Devices", "devices_of", "variable_for"]

_K = KernelStatus
#: Statuses in which a kernel holds the devices recorded in its runtime.
_HOLDING = frozenset(
    {_K.PREPARING, _K.PULLING, _K.PREPARED, _K.CREATING, _K.RUNNING, _K.TERMINATING}
)


class DeviceProblem(Exception):
    """A kernel's request cannot be given devices (the message says why)."""


def variable_for(slot: str, variables: Mapping[str, str]) -> str:
    """The variable naming a slot's devices: configured, else ``CUDA_VISIBLE_DEVICES`` for
    ``gpu``, else ``<SLOT>_VISIBLE_DEVICES``."""
    if slot in variables:
        return variables[slot]
    return "CUDA_VISIBLE_DEVICES" if slot == "gpu" else f"{slot.upper()}_VISIBLE_DEVICES"


def devices_of(runtime: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """The devices recorded in a kernel's runtime (``{}`` if none)."""
    found = (runtime or {}).get("devices")
    if not isinstance(found, Mapping):
        return {}
    return {str(k): [str(d) for d in v] for k, v in found.items() if isinstance(v, list)}


class Devices:
    """Assigns device ids to kernels on one backend's agents."""

    def __init__(self, agents: Sequence[AgentInfo], variables: Mapping[str, str]) -> None:
        self._agents = {a.id: a for a in agents}
        self.variables = dict(variables)
        # kernel id -> devices chosen but not yet seen in the database.
        self._reserved: dict[str, tuple[str | None, dict[str, list[str]]]] = {}
        # One choice at a time: two kernels prepared at once must see each other's.
        self._lock = asyncio.Lock()

    def wanted(self, kernel: KernelInfo) -> bool:
        """Whether the kernel asks for a device slot of its agent."""
        agent = self._agents.get(kernel.agent_id or "")
        return agent is not None and any(
            _amount(kernel.spec.get(slot)) > 0 for slot in agent.devices
        )

    def env(self, devices: Mapping[str, Sequence[str]]) -> dict[str, str]:
        """The variables that name ``devices`` to a kernel's processes."""
        return {variable_for(slot, self.variables): ",".join(ids) for slot, ids in devices.items()}

    async def assign(self, kernel: KernelInfo, reporter: KernelReporter) -> dict[str, list[str]]:
        """Pick the kernel's devices, or raise :class:`DeviceProblem`.

        Ids held by live kernels on the same agent (recorded in their runtime)
        or chosen by this backend for a kernel whose report has not committed
        yet are not given again.
        """
        agent = self._agents.get(kernel.agent_id or "")
        if agent is None or not self.wanted(kernel):
            return {}
        async with self._lock:
            return await self._assign(kernel, agent, reporter)

    async def _assign(
        self, kernel: KernelInfo, agent: AgentInfo, reporter: KernelReporter
    ) -> dict[str, list[str]]:
        # The reservations as they stand before the database is read: a kernel whose
        # report commits while the read is under way is released at once, though the
        # read may not show its devices yet.
        before = dict(self._reserved)
        held: dict[str, set[str]] = {slot: set() for slot in agent.devices}
        recorded: set[str] = set()
        for other in await reporter.kernels_in(_HOLDING):
            if other.id == kernel.id or other.agent_id != agent.id:
                continue
            for slot, ids in devices_of(other.runtime).items():
                recorded.add(other.id)
                held.setdefault(slot, set()).update(ids)
        live = await self._live_reservations(reporter, recorded, before)
        for kernel_id, (agent_id, chosen) in live.items():
            if kernel_id != kernel.id and agent_id == agent.id:
                for slot, ids in chosen.items():
                    held.setdefault(slot, set()).update(ids)
        assigned: dict[str, list[str]] = {}
        for slot, owned in agent.devices.items():
            amount = _amount(kernel.spec.get(slot))
            if amount <= 0:
                continue
            if amount != int(amount):
                raise DeviceProblem(
                    f"{slot} = {amount:g}: a device slot is given whole devices; ask for a "
                    "whole number"
                )
            free = [d for d in owned if d not in held[slot]]
            if len(free) < amount:
                raise DeviceProblem(
                    f"{slot}: {int(amount)} device(s) wanted, {len(free)} free on agent "
                    f"{agent.id} ({', '.join(sorted(held[slot])) or 'none'} held by other kernels)"
                )
            assigned[slot] = free[: int(amount)]
        self._reserved[kernel.id] = (agent.id, assigned)
        return assigned

    async def _live_reservations(
        self,
        reporter: KernelReporter,
        recorded: set[str],
        before: Mapping[str, tuple[str | None, dict[str, list[str]]]],
    ) -> dict[str, tuple[str | None, dict[str, list[str]]]]:
        """The reservations that still hold, of those ``before`` the read and those now.

        Dropped from the book: those the database has taken over (``recorded``: the
        kernel's runtime holds them) and those that no longer hold (the kernel ended,
        or went back to PENDING). One released meanwhile still counts while its
        kernel holds devices: the read may predate its commit.
        """
        for kernel_id in recorded:
            self._reserved.pop(kernel_id, None)
        candidates = {k: v for k, v in {**before, **self._reserved}.items() if k not in recorded}
        if not candidates:
            return {}
        statuses = await reporter.kernel_statuses(list(candidates))
        live: dict[str, tuple[str | None, dict[str, list[str]]]] = {}
        for kernel_id, reservation in candidates.items():
            status = statuses.get(kernel_id)
            if status is not None and (status in _HOLDING or status == _K.SCHEDULED):
                live[kernel_id] = reservation
            else:
                self._reserved.pop(kernel_id, None)
        return live

    def release(self, kernel_id: str) -> None:
        """Forget a reservation: its report committed (the database holds it) or failed."""
        self._reserved.pop(kernel_id, None)


def _amount(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return 0.0
