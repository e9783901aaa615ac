"""experimaestro's job lifecycle as a drover plugin pack.

Kinds ``xpm-job`` and ``xpm-token-job`` (:mod:`.kinds`), one handler per
scheduler step (:mod:`.handlers`), a simulated launcher (:mod:`.launcher`) and
experimaestro's ``submit`` with its resubmission rules (:mod:`.submit`).
The entry point ``experimaestro = "drover_experimaestro:plugin"`` loads
:data:`plugin`.
"""

from __future__ import annotations

from drover import HandlerRegistry, KindRegistry, hookimpl

from .handlers import handlers_for
from .kinds import (
    DEPENDS_ON,
    JOB_KIND,
    KINDS,
    TOKEN_JOB_KIND,
    TOKEN_POOL_NAME,
    FailureReason,
    JobState,
    make_kinds,
)
from .launcher import SimulatedLauncher, Start
from .submit import JobRequest, submit

__all__ = [
    "DEPENDS_ON",
    "JOB_KIND",
    "KINDS",
    "TOKEN_JOB_KIND",
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
    """The pack as a plugin object: its kinds and, for each kind, every step's handler.

    ``tokens`` is the counter token's declared capacity (configuration's
    ``[pools] xpm-token`` overrides it in a daemon).
    """

    def __init__(self, launcher: SimulatedLauncher | None = None, tokens: int = 2) -> None:
        self.launcher = launcher or SimulatedLauncher()
        self.kinds = make_kinds(tokens)

    @hookimpl
    def drover_register_kinds(self, register: KindRegistry) -> None:
        """Register ``xpm-job`` and ``xpm-token-job``."""
        register(*self.kinds)

    @hookimpl
    def drover_register_handlers(self, register: HandlerRegistry) -> None:
        """Register the six steps for each kind, all sharing one launcher."""
        for kind in (JOB_KIND, TOKEN_JOB_KIND):
            register(*handlers_for(kind, self.launcher))


#: What the entry point loads.
plugin = ExperimaestroPlugin()
