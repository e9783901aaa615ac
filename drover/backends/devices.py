"""Device slots: specific device ids for each kernel, never two live kernels' at once.

An agent may declare a slot as a list of ids (``gpu = ["0", "1"]``); the
scheduler counts it like any slot, and the backend, when it prepares a kernel
that asks for it, picks that many ids no other live kernel on the agent holds.
The database says who holds what: the choice is made and recorded in the
kernel's ``runtime["devices"]`` (``{"gpu": ["1"]}``) in one transaction, one
at a time per agent (:meth:`~drover.backends.base.KernelReporter.take_kernel_devices`),
under the claim of the tick that prepares it. So it holds across coordinators
(several daemons on PostgreSQL) and across restarts, and is given back when the
kernel ends or goes back to PENDING. The ids reach the kernel's processes in one
variable per slot (``CUDA_VISIBLE_DEVICES=1`` for ``gpu``; configurable per slot
with ``backend.device_variables``). Used by the local and container backends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from drover.backends.base import AgentInfo, KernelReporter
from drover.backends.fence import Fence
from drover.kinds.sessions.values import KernelInfo, devices_of

__all__ = ["DeviceProblem", "Devices", "devices_of", "variable_for"]


class DeviceProblem(Exception):
    """A kernel's request cannot be given devices (the message says why)."""


def variable_for(slot: str, variables: Mapping[str, str]) -> str:
    """The variable naming a slot's devices: configured, else ``CUDA_VISIBLE_DEVICES`` for
    ``gpu``, else ``<SLOT>_VISIBLE_DEVICES``."""
    if slot in variables:
        return variables[slot]
    return "CUDA_VISIBLE_DEVICES" if slot == "gpu" else f"{slot.upper()}_VISIBLE_DEVICES"


class Devices:
    """Assigns device ids to kernels on one backend's agents."""

    def __init__(self, agents: Sequence[AgentInfo], variables: Mapping[str, str]) -> None:
        self._agents = {a.id: a for a in agents}
        self.variables = dict(variables)

    def wanted(self, kernel: KernelInfo) -> bool:
        """Whether the kernel asks for a device slot of its agent."""
        agent = self._agents.get(kernel.agent_id or "")
        return agent is not None and any(
            _amount(kernel.spec.get(slot)) > 0 for slot in agent.devices
        )

    def env(self, devices: Mapping[str, Sequence[str]]) -> dict[str, str]:
        """The variables that name ``devices`` to a kernel's processes."""
        return {variable_for(slot, self.variables): ",".join(ids) for slot, ids in devices.items()}

    async def assign(
        self, kernel: KernelInfo, reporter: KernelReporter, fence: Fence | None = None
    ) -> dict[str, list[str]]:
        """Take the kernel's devices in the database, or raise :class:`DeviceProblem`.

        Ids held by other live kernels on the same agent are never given; ids the
        kernel holds already (a preparation tried again) are kept while they are
        free. ``fence``: the claim of the tick that prepares it, checked in the
        same transaction; a claim that no longer holds raises
        :class:`~drover.backends.fence.FencedError`, nothing taken.
        """
        agent = self._agents.get(kernel.agent_id or "")
        if agent is None or not self.wanted(kernel):
            return {}

        def choose(own: dict[str, list[str]], held: dict[str, set[str]]) -> dict[str, list[str]]:
            return _choose(kernel, agent, own, held)

        claim = fence.claim if fence is not None else None
        taken = await reporter.take_kernel_devices(
            kernel.id, choose, claim=claim, session_id=kernel.session_id
        )
        if taken is None:
            if fence is not None:
                await fence.check()  # a lapsed claim is FencedError: not the kernel's failure
            raise DeviceProblem(
                f"kernel {kernel.id} is no longer being prepared on agent {agent.id}: "
                "no device was taken"
            )
        return taken


def _choose(
    kernel: KernelInfo,
    agent: AgentInfo,
    own: Mapping[str, list[str]],
    held: Mapping[str, set[str]],
) -> dict[str, list[str]]:
    """The kernel's ids per device slot it asks for: those it holds if still free and
    enough, else the first free ones; :class:`DeviceProblem` if too few are free."""
    chosen: dict[str, list[str]] = {}
    for slot, offered in agent.devices.items():
        amount = _amount(kernel.spec.get(slot))
        if amount <= 0:
            continue
        if amount != int(amount):
            raise DeviceProblem(
                f"{slot} = {amount:g}: a device slot is given whole devices; ask for a whole number"
            )
        taken = held.get(slot, set()) & set(offered)
        free = [d for d in offered if d not in taken]
        if len(free) < amount:
            raise DeviceProblem(
                f"{slot}: {int(amount)} device(s) wanted, {len(free)} free on agent "
                f"{agent.id} ({', '.join(sorted(taken)) or 'none'} held by other kernels)"
            )
        kept = [d for d in own.get(slot, []) if d in free]
        chosen[slot] = kept if len(kept) == int(amount) else free[: int(amount)]
    return chosen


def _amount(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return 0.0
