"""A plugin's own job -> task lifecycle, defined only in tests, and handlers scripted by tests.

Shared by the tests of filters, fairness, budgets and pools: if the engine
had a session-only path, these kinds would find it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any, ClassVar

from drover import (
    DeclaredHandler,
    EntityKind,
    HandlerOptions,
    HandlerResult,
    StatusTransitions,
    hookimpl,
)


class Job(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    CANCELLING = "CANCELLING"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class Task(StrEnum):
    PENDING = "PENDING"
    WORKING = "WORKING"
    DONE = "DONE"
    FAILED = "FAILED"


JOB = EntityKind("job", Job, terminal={Job.DONE, Job.FAILED, Job.CANCELLED}, success={Job.DONE})
TASK = EntityKind("task", Task, terminal={Task.DONE, Task.FAILED}, parent="job")

Script = Callable[[Sequence[Any]], HandlerResult]


def succeed(targets: Sequence[Any]) -> HandlerResult:
    """Every target succeeds."""
    return HandlerResult(successes=[t.id for t in targets])


def skip(targets: Sequence[Any]) -> HandlerResult:
    """Every target is skipped."""
    return HandlerResult(skipped=[t.id for t in targets])


class Scripted(DeclaredHandler):
    """A handler whose result the test scripts; it keeps every batch it was given."""

    kind: ClassVar[str] = "job"
    handler: ClassVar[str] = "scripted"
    statuses: ClassVar[frozenset[str]] = frozenset({Job.QUEUED})
    transitions: ClassVar[StatusTransitions] = StatusTransitions()
    filters: ClassVar[tuple[Any, ...]] = ()
    options: ClassVar[HandlerOptions] = HandlerOptions(max_retries=1)

    def __init__(self, script: Script = skip) -> None:
        self.script = script
        self.seen: list[list[Any]] = []

    async def execute(self, targets: Sequence[Any]) -> HandlerResult:
        self.seen.append(list(targets))
        return self.script(targets)


def plugin(*handlers: object, kinds: Sequence[EntityKind] = (JOB, TASK)) -> object:
    """A plugin registering ``kinds`` and ``handlers``."""

    class _Plugin:
        @hookimpl
        def drover_register_kinds(self, register: Any) -> None:
            register(*kinds)

        @hookimpl
        def drover_register_handlers(self, register: Any) -> None:
            register(*handlers)

    return _Plugin()


def harness(make_harness: Any, *handlers: object, **kwargs: Any) -> Any:
    """A harness running only ``handlers`` (and the peer kinds, or ``kinds=``)."""
    kinds = kwargs.pop("kinds", (JOB, TASK))
    return make_harness(
        plugins=[plugin(*handlers, kinds=kinds)], include_builtin_handlers=False, **kwargs
    )
