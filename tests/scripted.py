"""A lifecycle handler whose outcomes the test scripts, and a plugin that registers it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from drover import (
    HandlerOptions,
    HandlerResult,
    KernelStatus,
    LifecycleHandler,
    SessionStatus,
    SessionWithKernels,
    StatusTransitions,
    TransitionStatus,
    hookimpl,
)

Script = Callable[[Sequence[SessionWithKernels]], HandlerResult]


class Scripted(LifecycleHandler):
    """Targets PENDING sessions; does whatever ``script`` says; records its calls."""

    transitions = StatusTransitions(
        success=TransitionStatus(SessionStatus.SCHEDULED, KernelStatus.SCHEDULED),
        need_retry=None,
        expired=TransitionStatus(SessionStatus.CANCELLED, KernelStatus.CANCELLED),
        give_up=TransitionStatus(SessionStatus.ERROR, KernelStatus.ERROR),
    )
    options = HandlerOptions(max_retries=2, timeout=60.0)

    def __init__(self) -> None:
        self.script: Script = lambda targets: HandlerResult()
        self.calls: list[list[str]] = []

    @classmethod
    def name(cls) -> str:
        return "scripted"

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        return frozenset({SessionStatus.PENDING})

    @property
    def target_kernel_statuses(self) -> list[KernelStatus] | None:
        return None

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        return cls.transitions

    @classmethod
    def default_options(cls) -> HandlerOptions:
        return cls.options

    async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult:
        self.calls.append([t.id for t in targets])
        return self.script(targets)


class ScriptedPlugin:
    """Registers one :class:`Scripted` handler, reachable as ``.handler``."""

    def __init__(
        self,
        transitions: StatusTransitions | None = None,
        options: HandlerOptions | None = None,
    ) -> None:
        cls: type[Scripted] = Scripted
        if transitions is not None or options is not None:
            cls = type(
                "CustomScripted",
                (Scripted,),
                {
                    "transitions": transitions or Scripted.transitions,
                    "options": options or Scripted.options,
                },
            )
        self.handler = cls()

    @hookimpl
    def drover_register_handlers(self, register: Callable[..., None]) -> None:
        register(self.handler)


def fail(*ids: str, message: str = "boom", code: str | None = None) -> HandlerResult:
    """A result failing ``ids``."""
    return HandlerResult(
        failures=list(ids),
        messages=dict.fromkeys(ids, message),
        error_codes=dict.fromkeys(ids, code) if code else {},
    )
