"""Backends: where kernels run."""

from drover.backends.base import AgentBackend, AgentInfo, BackendError, KernelReporter, Wake
from drover.backends.fence import Fence, FencedError
from drover.backends.simulated import SimulatedBackend

__all__ = [
    "AgentBackend",
    "AgentInfo",
    "BackendError",
    "Fence",
    "FencedError",
    "KernelReporter",
    "SimulatedBackend",
    "Wake",
]
