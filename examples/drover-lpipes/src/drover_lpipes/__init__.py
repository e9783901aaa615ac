"""Language Pipes' job FSM (distributed LLM inference) as a drover plugin pack.

Kinds ``lp-job`` and ``lp-hop`` (:mod:`.kinds`), one handler per state of
the seed's ``JobProcessor`` (:mod:`.handlers`), a simulated pipe of nodes
and a deterministic fake model (:mod:`.pipe`), and the client side
(:mod:`.client`). The entry point ``lpipes = "drover_lpipes:plugin"`` loads
:data:`plugin`.
"""

from __future__ import annotations

from drover import HandlerRegistry, KindRegistry, hookimpl

from .client import JobRequest, client_gone, submit
from .handlers import make_handlers
from .kinds import HOP_KIND, JOB_KIND, KINDS, STALE_AFTER, HopState, JobState, Reason
from .pipe import Node, Pipe, reference, three_node_pipe

__all__ = [
    "HOP_KIND",
    "JOB_KIND",
    "KINDS",
    "STALE_AFTER",
    "HopState",
    "JobRequest",
    "JobState",
    "LanguagePipesPlugin",
    "Node",
    "Pipe",
    "Reason",
    "client_gone",
    "plugin",
    "reference",
    "submit",
    "three_node_pipe",
]


class LanguagePipesPlugin:
    """The pack as a plugin object: its two kinds and its handlers, sharing one pipe."""

    def __init__(self, pipe: Pipe | None = None) -> None:
        self.pipe = pipe or three_node_pipe()

    @hookimpl
    def drover_register_kinds(self, register: KindRegistry) -> None:
        """Register ``lp-job`` and ``lp-hop``."""
        register(*KINDS)

    @hookimpl
    def drover_register_handlers(self, register: HandlerRegistry) -> None:
        """Register the five hop states' handlers, ``lp-stale`` and ``lp-finish``."""
        register(*make_handlers(self.pipe))


#: What the entry point loads.
plugin = LanguagePipesPlugin()
