"""experimaestro's job lifecycle as a drover plugin pack.

The kind ``xpm-job`` with its counter tokens (:mod:`.kinds`), one handler per
scheduler step (:mod:`.handlers`), a simulated launcher (:mod:`.launcher`) and
experimaestro's ``submit`` with its resubmission rules (:mod:`.submit`).
The entry point ``experimaestro = "drover_experimaestro:plugin"`` loads
:data:`plugin`.
"""

from __future__ import annotations

from collections.abc import Mapping

from drover import HandlerRegistry, KindRegistry, hookimpl

from .handlers import handlers_for
from .kinds import (
    DEFAULT_TOKENS,
    DEPENDS_ON,
    JOB_KIND,
    KIND,
    TOKEN_POOL_NAME,
    FailureReason,
    JobState,
    make_kind,
)
from .launcher import SimulatedLauncher, Start
from .submit import JobRequest, submit

__all__ = [
    "DEPENDS_ON",
    "JOB_KIND",
    "KIND",
    "TOKEN_POOL_NAME",
    "ExperimaestroPlugin",
    "FailureReason",
    "JobRequest",
    "JobState",
    "SimulatedLauncher",
    "Start",
    "plugin",
    "submit",
]


class ExperimaestroPlugin:
    """The pack as a plugin object: its kind and every step's handler.

    ``tokens`` is the ``xpm-token`` counter's declared capacity; ``counters``
    (counter name → tokens) declares several counters instead. Configuration's
    ``[pools] <counter> = K`` overrides a capacity in a daemon.
    """

    def __init__(
        self,
        launcher: SimulatedLauncher | None = None,
        tokens: int = DEFAULT_TOKENS,
        counters: Mapping[str, int] | None = None,
    ) -> None:
        self.launcher = launcher or SimulatedLauncher()
        self.kind = make_kind({TOKEN_POOL_NAME: tokens} if counters is None else counters)

    @hookimpl
    def drover_register_kinds(self, register: KindRegistry) -> None:
        """Register ``xpm-job``."""
        register(self.kind)

    @hookimpl
    def drover_register_handlers(self, register: HandlerRegistry) -> None:
        """Register the six steps, all sharing one launcher."""
        register(*handlers_for(JOB_KIND, self.launcher))


#: What the entry point loads.
plugin = ExperimaestroPlugin()
