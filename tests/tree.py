"""Three kinds defined only for tests: job -> task -> attempt (Iris's hierarchy).

Each retry of a task is a new attempt, so a task's attempts are superseded
one by one; a job's tasks are its slots. Handlers are scripted by the test.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any, ClassVar

from drover import (
    DeclaredHandler,
    Entity,
    EntityKind,
    HandlerOptions,
    HandlerResult,
    StatusTransitions,
    TerminationRule,
    Transition,
    hookimpl,
)


class Job(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class Task(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class Attempt(StrEnum):
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PREEMPTED = "PREEMPTED"


JOB = EntityKind(
    "job",
    Job,
    terminal={Job.DONE, Job.FAILED, Job.CANCELLED},
    termination=(TerminationRule(Job.CANCELLED),),
)
TASK = EntityKind(
    "task",
    Task,
    terminal={Task.DONE, Task.FAILED, Task.CANCELLED},
    parent="job",
    # Each retry is a new attempt: only the latest one counts.
    result_from="latest-child",
)
ATTEMPT = EntityKind(
    "attempt",
    Attempt,
    terminal={Attempt.SUCCEEDED, Attempt.FAILED, Attempt.PREEMPTED},
    parent="task",
)
KINDS = (JOB, TASK, ATTEMPT)

Script = Callable[[Sequence[Entity]], HandlerResult]


class Scripted(DeclaredHandler):
    """A handler of one of the kinds above whose result the test scripts."""

    handler: ClassVar[str]
    statuses: ClassVar[frozenset[str]]
    transitions: ClassVar[StatusTransitions]
    filters: ClassVar[tuple[Any, ...]] = ()
    options: ClassVar[HandlerOptions] = HandlerOptions(max_retries=1)

    def __init__(self, script: Script | None = None) -> None:
        self.script: Script = script or (lambda targets: HandlerResult())
        self.seen: list[list[Entity]] = []

    async def execute(self, targets: Sequence[Any]) -> HandlerResult:
        self.seen.append(list(targets))
        return self.script(targets)


class RunJobs(Scripted):
    kind = "job"
    handler = "run-jobs"
    statuses = frozenset({Job.RUNNING})
    transitions = StatusTransitions(
        success=Transition(Job.DONE),
        give_up=Transition(Job.FAILED, children_info="JOB_FAILED"),
        outcomes={"stop-tasks": Transition(children=Task.STOPPING, children_info="STOP_ASKED")},
    )


class RunTasks(Scripted):
    kind = "task"
    handler = "run-tasks"
    statuses = frozenset({Task.RUNNING, Task.STOPPING})
    transitions = StatusTransitions(success=Transition(Task.DONE), give_up=Transition(Task.FAILED))


class RunAttempts(Scripted):
    kind = "attempt"
    handler = "run-attempts"
    statuses = frozenset({Attempt.RUNNING})
    transitions = StatusTransitions(
        success=Transition(Attempt.SUCCEEDED), give_up=Transition(Attempt.FAILED)
    )


def plugin(*handlers: object, kinds: Sequence[EntityKind] = KINDS) -> object:
    """A plugin registering the three kinds (or ``kinds``) and ``handlers``."""

    class _Plugin:
        @hookimpl
        def drover_register_kinds(self, register: Any) -> None:
            register(*kinds)

        @hookimpl
        def drover_register_handlers(self, register: Any) -> None:
            register(*handlers)

    return _Plugin()


def harness(make_harness: Any, *handlers: object, **kwargs: Any) -> Any:
    """A harness with the tree kinds and ``handlers`` only."""
    kinds = kwargs.pop("kinds", KINDS)
    return make_harness(
        plugins=[plugin(*handlers, kinds=kinds)], include_builtin_handlers=False, **kwargs
    )


async def tree(h: Any, job: str = Job.RUNNING, tasks: int = 2) -> tuple[str, list[str], list[str]]:
    """A job with ``tasks`` RUNNING tasks of one RUNNING attempt each: (job, tasks, attempts)."""
    job_id = await h.create("job", status=job)
    task_ids, attempt_ids = [], []
    for _ in range(tasks):
        task = await h.create("task", status=Task.RUNNING, parent=job_id)
        attempt = await h.create("attempt", status=Attempt.RUNNING, parent=task)
        task_ids.append(task)
        attempt_ids.append(attempt)
    return job_id, task_ids, attempt_ids


def ids(targets: Sequence[Entity]) -> list[str]:
    """The targets' ids."""
    return [t.id for t in targets]


class StartJobs(Scripted):
    kind = "job"
    handler = "start-jobs"
    statuses = frozenset({Job.QUEUED})
    transitions = StatusTransitions(success=Transition(Job.RUNNING))


class StartTasks(Scripted):
    kind = "task"
    handler = "start-tasks"
    statuses = frozenset({Task.PENDING})
    transitions = StatusTransitions(success=Transition(Task.RUNNING))


def sound_handlers() -> list[Scripted]:
    """A handler set for the three kinds that ``drover plugins check --strict`` accepts."""
    return [StartJobs(), RunJobs(), StartTasks(), RunTasks(), RunAttempts()]


def tree_cli(
    database: Any,
    monkeypatch: Any,
    tmp_path: Any,
    *handlers: object,
    kinds: Sequence[EntityKind] = KINDS,
) -> Any:
    """``drover`` with the tree kinds (or ``kinds``) on this test's database, and a job with
    one task."""
    import asyncio

    from click.testing import CliRunner

    import drover.app
    from drover.cli.group import main
    from drover.testing import CoordinatorHarness

    the_plugin = plugin(*handlers, kinds=kinds)
    real = drover.app.make_plugin_manager
    monkeypatch.setattr(
        drover.app, "make_plugin_manager", lambda **kw: real(**kw, plugins=[the_plugin])
    )

    async def setup() -> tuple[str, str]:
        async with CoordinatorHarness(
            plugins=[the_plugin],
            include_builtin_handlers=False,
            database_url=database.url,
            database_schema=database.schema,
        ) as h:
            job = await h.create("job", status=Job.RUNNING)
            return job, await h.create("task", status=Task.RUNNING, parent=job)

    job, task = asyncio.run(setup())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DROVER_DATABASE_URL", database.url)
    monkeypatch.setenv("DROVER_LOAD_PLUGINS", "")
    if database.schema:
        monkeypatch.setenv("DROVER_DATABASE_SCHEMA", database.schema)
    runner = CliRunner()
    return job, task, lambda *args: runner.invoke(main, list(args), catch_exceptions=False)
