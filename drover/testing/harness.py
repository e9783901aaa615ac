"""``CoordinatorHarness``: drive handlers tick by tick against a real database."""

from __future__ import annotations

import inspect
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from drover.app import App
from drover.backends.base import AgentBackend
from drover.backends.simulated import SimulatedBackend
from drover.builtin_plugins import make_plugin_manager
from drover.config import Config, HandlerConfig, LimitsConfig
from drover.coordinator.handlers import Handler
from drover.coordinator.observers import Observer, ObserverDispatcher, events_of
from drover.coordinator.tick import Coordinator, TickReport
from drover.kinds.sessions.store import SessionRepository
from drover.kinds.sessions.values import KernelStatus, SessionStatus, SessionWithKernels
from drover.model.clock import ManualClock
from drover.model.promotion import PromotionRule
from drover.model.values import (
    Entity,
    HandlerOptions,
    HistoryRecord,
    KernelHistoryRecord,
    NewEntity,
    TerminationOutcome,
)
from drover.plugins.registry import RegisteredHandler

__all__ = ["CoordinatorHarness"]


class CoordinatorHarness:
    """An async context manager with a migrated database, loaded handlers and a manual clock.

    ``database_url=None`` uses a temporary SQLite file, removed on exit.
    ``plugins`` are objects (or modules) with ``@hookimpl`` functions. The
    backend defaults to a :class:`SimulatedBackend` with instant kernels that
    run until destroyed; its queued progress is delivered before every tick.
    ``database_schema`` selects a PostgreSQL schema (``search_path``).
    ``load_entrypoints`` also loads installed plugins (entry-point group ``drover``).
    ``max_requeues`` is the sessions' requeue budget (``None``: no limit).
    ``handler_settings`` are handlers' own settings by handler name, what
    ``[handlers.<name>.settings]`` gives the daemon (``RuntimeContext.settings_for``).
    ``limits`` is the ``[limits]`` of the configuration.
    """

    def __init__(
        self,
        plugins: Sequence[object] = (),
        include_builtin_handlers: bool = True,
        handler_options: Mapping[str, HandlerOptions | Mapping[str, Any]] | None = None,
        database_url: str | None = None,
        *,
        backend: AgentBackend | None = None,
        database_schema: str | None = None,
        load_entrypoints: bool = False,
        max_requeues: int | None = 3,
        handler_settings: Mapping[str, Mapping[str, Any]] | None = None,
        limits: LimitsConfig | None = None,
    ) -> None:
        self._plugins = list(plugins)
        self._handler_settings = {k: dict(v) for k, v in (handler_settings or {}).items()}
        self._include_builtins = include_builtin_handlers
        self._handler_options = dict(handler_options or {})
        self._database_url = database_url
        self._schema = database_schema
        self._load_entrypoints = load_entrypoints
        self._max_requeues = max_requeues
        self._limits = limits or LimitsConfig()
        self._tmpdir: str | None = None
        self._app: App | None = None
        self.clock = ManualClock()
        self.backend: Any = backend if backend is not None else SimulatedBackend()
        self._dispatcher: ObserverDispatcher | None = None

    async def __aenter__(self) -> CoordinatorHarness:
        url = self._database_url
        if url is None:
            self._tmpdir = tempfile.mkdtemp(prefix="drover-harness-")
            url = f"sqlite+aiosqlite:///{self._tmpdir}/drover.db"
        config = Config(
            database_url=url,
            database_schema=self._schema or "",
            max_requeues=-1 if self._max_requeues is None else self._max_requeues,
            handlers={
                name: HandlerConfig(settings=settings)
                for name, settings in self._handler_settings.items()
            },
            limits=self._limits,
        )
        try:
            pm = make_plugin_manager(
                plugins=self._plugins,
                include_builtins=self._include_builtins,
                load_entrypoints=self._load_entrypoints,
            )
            self._app = App(
                config,
                clock=self.clock,
                backend=self.backend,
                plugin_manager=pm,
                handler_options=self._handler_options,
            )
            await self._app.start(auto_upgrade=True)
            self._dispatcher = ObserverDispatcher(self._app.observers)
            self._dispatcher.start()
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._close()

    async def _close(self) -> None:
        if self._dispatcher is not None:
            await self._dispatcher.close()
            self._dispatcher = None
        if self._app is not None:
            await self._app.close()
            self._app = None
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    @property
    def app(self) -> App:
        """The assembled system under test."""
        if self._app is None:
            raise RuntimeError("use the harness as `async with CoordinatorHarness(...) as h`")
        return self._app

    @property
    def repository(self) -> SessionRepository:
        """The repository on the harness's database."""
        return self.app.repository

    @property
    def coordinator(self) -> Coordinator:
        """The coordinator running the loaded handlers."""
        return self.app.load_handlers()

    @property
    def handlers(self) -> dict[str, Handler]:
        """The loaded handlers (promotions as rules) by name."""
        return self.coordinator.handlers

    @property
    def registered(self) -> list[RegisteredHandler]:
        """Every handler as registered, with the plugin that registered it."""
        return self.app.registered

    @property
    def observers(self) -> list[tuple[str, Observer]]:
        """The observers plugins registered, with their plugin names."""
        return self.app.observers

    async def create_session(
        self,
        kernels: Sequence[Mapping[str, Any]] = ({"cpu": 1, "mem": 1024},),
        priority: int = 0,
        status: SessionStatus = SessionStatus.PENDING,
        name: str | None = None,
        spec: Mapping[str, Any] | None = None,
    ) -> str:
        """Create a session in any status; each kernel dict is its spec.

        A kernel's optional ``"status"`` and ``"agent_id"`` keys start it there
        (see :meth:`~drover.kinds.sessions.store.SessionRepository.seed_sessions`); the checks on
        everything else are those of ``drover submit``.
        """
        (sid,) = await self.repository.seed_sessions(
            [
                {
                    "kernels": kernels,
                    "name": name,
                    "priority": priority,
                    "status": status,
                    "spec": spec,
                }
            ]
        )
        return sid

    async def deliver(self) -> int:
        """Deliver the backend's progress that is due by the clock (simulated backends)."""
        return await self.backend.deliver_due()  # type: ignore[no-any-return]

    async def tick(self, name: str) -> TickReport:
        """Deliver due backend progress, then run exactly one tick of handler ``name``.

        Observers registered by plugins receive the tick's records before this returns.
        """
        await self.deliver()
        report = await self.coordinator.tick(name)
        await self._observe(report)
        return report

    async def _observe(self, report: TickReport) -> None:
        if self._dispatcher is not None and self.observers and report.changes:
            self._dispatcher.publish(events_of(report, self.clock.time()))
            await self._dispatcher.drain()

    async def run_until_settled(
        self,
        *,
        max_rounds: int = 100,
        until: Callable[[CoordinatorHarness], bool | Awaitable[bool]] | None = None,
    ) -> int:
        """Tick every handler in turn until a whole round writes nothing new and no handler
        has a candidate it has not reached; return the rounds.

        A handler with ``order="oldest-seen"`` and a small ``batch_size`` reaches
        its candidates a batch per tick: after a round that wrote nothing, each
        such handler is ticked until it has gone round all of them (a tick
        fetching only entities it fetched already); a write there is a new round.

        "Nothing new" is judged from what was written, not from what the ticks
        reported: no new history row or status change, and no entity row
        changed (status, tries, budgets, data, spec, result…). So writes made
        inside ``execute`` and retry loops that keep the same status are
        seen; a repeated SKIPPED (merged into its row) is not news. Raises
        RuntimeError if things still change after ``max_rounds``.

        ``until(harness)`` (a function or coroutine function) stops as soon as
        it holds after a round, for lifecycles that never settle (heartbeats,
        polling); it is checked before the first round too. If things settle
        and it does not hold, RuntimeError says so.
        """

        async def holds() -> bool:
            if until is None:
                return False
            value = until(self)
            if inspect.isawaitable(value):
                value = await value
            return bool(value)

        if await holds():
            return 0
        before = await self.repository.state_fingerprint()
        for rounds in range(1, max_rounds + 1):
            delivered = await self.deliver()
            for name in self.handlers:
                report = await self.coordinator.tick(name)
                await self._observe(report)
            if await holds():
                return rounds
            after = await self.repository.state_fingerprint()
            if delivered == 0 and after == before and await self._unseen_left(after):
                before = await self.repository.state_fingerprint()
                continue
            if delivered == 0 and after == before:
                if until is not None:
                    raise RuntimeError(
                        f"settled after {rounds} round(s), but until={until!r} never held"
                    )
                return rounds
            before = after
        raise RuntimeError(f"entities still changing after {max_rounds} rounds")

    async def _unseen_left(self, fingerprint: tuple[Any, ...]) -> bool:
        """Whether an ``order="oldest-seen"`` handler still had a candidate it had not
        reached: each such handler is ticked until a tick fetches only entities it already
        fetched in this sweep (it has gone round them all). True as soon as a tick writes."""
        for name, handler in self.handlers.items():
            if isinstance(handler, PromotionRule):
                continue
            if self.coordinator.options(name).order != "oldest-seen":
                continue
            seen: set[str] = set()
            while True:
                report = await self.coordinator.tick(name)
                await self._observe(report)
                if await self.repository.state_fingerprint() != fingerprint:
                    return True
                fresh = set(report.fetched_ids) - seen
                if not fresh:
                    break
                seen |= fresh
        return False

    async def create(
        self,
        kind: str,
        status: str | None = None,
        spec: Mapping[str, Any] | None = None,
        parent: str | None = None,
        priority: int = 0,
        children: Sequence[Mapping[str, Any]] = (),
        *,
        name: str | None = None,
        links: Sequence[tuple[str, str]] = (),
    ) -> str:
        """Create an entity of any kind, in any of its statuses; return its id.

        Each child is a mapping with optional ``kind`` (default: the kind's
        child kind), ``status`` and ``spec``. ``links`` are ``(relation,
        target_id)`` pairs, say ``("depends_on", other)``. The entity is
        checked as every creation is (:meth:`~drover.storage.repository.Repository.seed_entities`).
        """
        _ = self.app.kinds
        new = NewEntity(
            kind,
            dict(spec or {}),
            parent_id=parent,
            status=status,
            name=name,
            priority=priority,
            children=list(children),
            links=list(links),
        )
        (entity_id,) = await self.repository.seed_entities([new])
        return entity_id

    async def get(self, entity_id: str) -> Entity:
        """Read one entity of any kind, with its children."""
        return await self.repository.get_entity(entity_id)

    async def session(self, session_id: str) -> SessionWithKernels:
        """Read one session with its kernels."""
        return await self.repository.get_session(session_id)

    async def history(self, session_id: str) -> list[HistoryRecord]:
        """The entity's scheduling history (any kind), oldest first."""
        return await self.repository.history(session_id)

    async def kernel_history(self, kernel_id: str) -> list[KernelHistoryRecord]:
        """The kernel's history, oldest first."""
        return await self.repository.kernel_history(kernel_id=kernel_id)

    async def set_kernel_status(
        self,
        kernel_id: str,
        status: KernelStatus,
        *,
        expected: Sequence[KernelStatus] | None = None,
        exit_code: int | None = None,
        message: str | None = None,
    ) -> bool:
        """Report a kernel status as a backend would; return whether it applied."""
        return await self.repository.report_kernel_status(
            kernel_id, status, expected=expected, exit_code=exit_code, message=message
        )

    async def request_termination(
        self, session_id: str, mode: str | None = None
    ) -> TerminationOutcome:
        """Ask for a session (any entity) to end, as the API or CLI would (``mode``: a
        named termination mode, ``drover terminate --mode``)."""
        (outcome,) = await self.repository.request_termination([session_id], mode=mode)
        return outcome
