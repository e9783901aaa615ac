"""dstack's runs and jobs as a drover plugin pack.

Kinds ``dstack-run`` and ``dstack-job`` (:mod:`.kinds`), one handler per step
of dstack's background processing (:mod:`.handlers`), a simulated cloud
(:mod:`.cloud`) and ``submit_run`` (:mod:`.submit`). The entry point
``dstack = "drover_dstack:plugin"`` loads :data:`plugin`.
"""

from __future__ import annotations

from drover import HandlerRegistry, KindRegistry, hookimpl

from .cloud import CLOUD_SOURCE, Offer, SimulatedCloud
from .handlers import make_handlers
from .kinds import (
    JOB_KIND,
    KINDS,
    RESUBMISSIONS,
    RUN_KIND,
    JobStatus,
    JobTerminationReason,
    RetryEvent,
    RunStatus,
    RunTerminationReason,
    retry_delay,
)
from .submit import RunRequest, abort_run, submit_run

__all__ = [
    "CLOUD_SOURCE",
    "JOB_KIND",
    "KINDS",
    "RESUBMISSIONS",
    "RUN_KIND",
    "DstackPlugin",
    "JobStatus",
    "JobTerminationReason",
    "Offer",
    "RetryEvent",
    "RunRequest",
    "RunStatus",
    "RunTerminationReason",
    "SimulatedCloud",
    "abort_run",
    "plugin",
    "retry_delay",
    "submit_run",
]


class DstackPlugin:
    """The pack as a plugin object: its two kinds, its steps, and the cloud they share.

    The cloud reads the coordinator's clock and pushes its interruptions
    through the coordinator's reporter; both are bound when the handlers are
    registered.
    """

    def __init__(self, cloud: SimulatedCloud | None = None) -> None:
        self.cloud = cloud or SimulatedCloud()

    @hookimpl
    def drover_register_kinds(self, register: KindRegistry) -> None:
        """Register ``dstack-run`` and ``dstack-job``."""
        register(*KINDS)

    @hookimpl
    def drover_register_handlers(self, register: HandlerRegistry) -> None:
        """Register every step; bind the cloud to the coordinator's clock and reporter."""
        context = register.context
        self.cloud.bind(context.clock, context.reporter)
        register(*make_handlers(self.cloud, context.clock))


#: What the entry point loads.
plugin = DstackPlugin()
