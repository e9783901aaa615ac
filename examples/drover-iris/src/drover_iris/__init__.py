"""Iris's job → task → attempt lifecycle as a drover plugin pack.

Kinds ``iris-job``, ``iris-task`` and ``iris-attempt`` (:mod:`.kinds`), the
controller's decisions as handlers (:mod:`.handlers`), a simulated cluster of
workers (:mod:`.cluster`, :mod:`.workers`) and Iris's job submission
(:mod:`.submit`). The entry point ``iris = "drover_iris:plugin"`` loads
:data:`plugin`.
"""

from __future__ import annotations

from drover import HandlerRegistry, KindRegistry, hookimpl

from .cluster import HEARTBEAT, SimulatedCluster, heartbeat
from .handlers import make_handlers
from .kinds import (
    ATTEMPT_KIND,
    FAILURE,
    JOB_KIND,
    PREEMPTION,
    TASK_KIND,
    WORKERS_POOL,
    AttemptState,
    Band,
    JobState,
    TaskState,
    make_kinds,
)
from .submit import JobRequest, submit_job

__all__ = [
    "ATTEMPT_KIND",
    "FAILURE",
    "HEARTBEAT",
    "JOB_KIND",
    "PREEMPTION",
    "TASK_KIND",
    "WORKERS_POOL",
    "AttemptState",
    "Band",
    "IrisPlugin",
    "JobRequest",
    "JobState",
    "SimulatedCluster",
    "TaskState",
    "heartbeat",
    "plugin",
    "submit_job",
]


class IrisPlugin:
    """The pack as a plugin object: its three kinds and the controller's handlers.

    The pool ``iris-workers`` is declared with the cluster's slots
    (configuration's ``[pools] iris-workers = N`` overrides it in a daemon),
    and the family of claimed pools ``iris-worker-*``, one per worker
    (``iris-worker-w1``): a worker that joins while drover runs
    (``SimulatedCluster.worker_joined``) needs no declaration.
    """

    def __init__(self, cluster: SimulatedCluster | None = None) -> None:
        self.cluster = cluster or SimulatedCluster()
        self.kinds = make_kinds(self.cluster.workers)

    @hookimpl
    def drover_register_kinds(self, register: KindRegistry) -> None:
        """Register ``iris-job``, ``iris-task`` and ``iris-attempt``."""
        register(*self.kinds)

    @hookimpl
    def drover_register_handlers(self, register: HandlerRegistry) -> None:
        """Register every handler, sharing the plugin's cluster."""
        context = register.context
        register(*make_handlers(self.cluster, context.queries, context.clock))


#: What the entry point loads.
plugin = IrisPlugin()
