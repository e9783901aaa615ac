"""The one place a running drover is assembled: database, repository, plugins, backend, coordinator.

The daemon (``drover run``), the dashboard (``drover serve``), every CLI
command, the test harness and the benchmarks all build an :class:`App`; what
differs is only what they pass in (a configuration, or a manual clock, a
backend instance and explicit plugins for tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import pluggy

from drover._gc import GC_THRESHOLD
from drover._version import __version__
from drover.builtin_plugins import make_plugin_manager
from drover.config import Config, LoadedConfig, handler_overrides, retention_seconds
from drover.model.clock import Clock, SystemClock
from drover.model.errors import DroverError
from drover.model.ids import new_id
from drover.plugins.manager import collect_kinds, load_entry_points
from drover.storage.connect import (
    async_database_url,
    create_engine,
    display_url,
    sqlite_file_engine,
)

if TYPE_CHECKING:
    from drover.backends.base import AgentBackend
    from drover.coordinator.daemon import Daemon
    from drover.coordinator.handlers import Handler
    from drover.coordinator.observers import Observer
    from drover.coordinator.tick import Coordinator
    from drover.kinds.sessions.store import SessionQueries, SessionRepository
    from drover.model.kinds import Kinds
    from drover.model.values import HandlerOptions, NewEntity
    from drover.plugins.registry import RegisteredHandler
    from drover.storage.connect import Engine, SyncEngine

# What only the daemon, writes or handlers need is imported where it is used: a read
# command of the CLI builds an App too, and pays only for what it reads with.

__all__ = [
    "GC_THRESHOLD",
    "SHUTDOWN_MARGIN",
    "App",
    "SchemaNotReadyError",
    "UnknownBackendError",
    "handler_overrides",
    "tune_gc",
]

log = logging.getLogger("drover.daemon")


def tune_gc() -> None:
    """Process settings for a long-running coordinator, applied once it is assembled.

    Everything alive at that point (modules, plugins, the engine, compiled
    statements) lives as long as the process: ``gc.freeze()`` keeps it out of
    the collector's full passes, which would otherwise stall ticks for tens of
    milliseconds. A tick allocates its values by the ten thousand, nearly all
    freed by reference counting; a higher young-generation threshold runs the
    cycle collector a few times per tick instead of a hundred.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


#: Seconds past ``shutdown_grace`` a signalled daemon gets before it is ended at once.
SHUTDOWN_MARGIN = 5.0


def _watchdog(seconds: float, code: int) -> None:
    """End the process with ``code`` in ``seconds`` unless it has ended by then."""

    def expire() -> None:
        log.error("still running %.0fs after the signal: exiting at once", seconds)
        os._exit(code)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()


class SchemaNotReadyError(DroverError):
    """The database is not at drover's schema head."""


class UnknownBackendError(DroverError):
    """``backend.name`` names no registered backend."""


class App:
    """The pieces of a running drover.

    ``config`` is the effective configuration (a :class:`LoadedConfig` keeps
    where each value came from, for error messages). Tests and benchmarks pass
    the rest: a ``clock``, a ``backend`` instance, a ``plugin_manager`` with
    explicit plugins, and ``handler_options`` on top of the configuration's.
    ``claims`` (the daemon): every lifecycle tick claims its targets under
    :attr:`coordinator_id`, so several daemons can share a PostgreSQL database.
    Nothing is set on an App after it is built: :meth:`run_daemon` is the
    daemon, and the harness, the CLI and the benchmarks use the same pieces.
    ``reading`` (the command line's reads): on a SQLite file, the database is
    opened on a synchronous engine only, which spares the import of
    SQLAlchemy's asyncio extension and its ORM (:attr:`engine`, the asyncio
    engine, is still made if something asks for it).
    """

    def __init__(
        self,
        config: LoadedConfig | Config,
        *,
        clock: Clock | None = None,
        backend: AgentBackend | None = None,
        plugin_manager: pluggy.PluginManager | None = None,
        handler_options: Mapping[str, HandlerOptions | Mapping[str, Any]] | None = None,
        claims: bool = False,
        reading: bool = False,
    ) -> None:
        if isinstance(config, Config):
            config = LoadedConfig(config=config, sources={}, file=None)
        self.loaded = config
        self.config = config.config
        # A database_url drover cannot use is refused here, before any engine is made.
        async_database_url(self.config.database_url)
        self._engine: Engine | None = None
        self._file_engine: SyncEngine | None = (
            sqlite_file_engine(self.config.database_url) if reading else None
        )
        self.clock: Clock = clock or SystemClock()
        self._reading = reading
        self._repository: SessionRepository | None = None
        # A reading app's queries, built without the write side.
        self._queries: SessionQueries | None = None
        self._backend = backend
        self._plugin_manager = plugin_manager
        self._handler_options: dict[str, Any] = {
            **handler_overrides(self.config),
            **dict(handler_options or {}),
        }
        self.coordinator: Coordinator | None = None
        self._kinds: Kinds | None = None
        # Set by read_kinds when it left out the installed plugins and the handlers.
        self._reads_only = False
        self.registered: list[RegisteredHandler] = []
        self.observers: list[tuple[str, Observer]] = []
        self._backend_started = False
        #: The name this process's coordinator claims entities under, and its heartbeat row's.
        self.coordinator_id: str | None = new_id() if claims else None
        # The running daemon (run_daemon), woken when the backend reports kernel changes.
        self._daemon: Daemon | None = None

    @property
    def engine(self) -> Engine:
        """The asyncio engine on the configured database (made on first use)."""
        if self._engine is None:
            self._engine = create_engine(
                self.config.database_url, schema=self.config.database_schema or None
            )
        return self._engine

    @property
    def _database(self) -> Engine | SyncEngine:
        # What storage opens the database on: a reading app's SQLite file engine, if any.
        return self._file_engine if self._file_engine is not None else self.engine

    @property
    def queries(self) -> SessionQueries:
        """Read-only queries on the database: what the CLI's reads and the dashboard use.

        A reading app builds them alone (the write side's modules are never
        imported) until it has a repository; any other app's are its repository's.
        """
        if self._reading and self._repository is None:
            if self._queries is None:
                from drover.kinds.sessions.queries import SessionQueries

                self._queries = SessionQueries(self._database, clock=self.clock, kinds=self.kinds)
            return self._queries
        return self.repository.queries

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        """Built-in and installed plugins, honouring ``plugins.load`` and ``plugins.block``."""
        if self._plugin_manager is None:
            plugins = self.config.plugins
            pm = make_plugin_manager(include_builtins=True, block=plugins.block)
            load_entry_points(pm, plugins.load, plugins.block)
            self._plugin_manager = pm
        return self._plugin_manager

    @property
    def kinds(self) -> Kinds:
        """The registered entity kinds: drover's own (``drover.kinds``) and plugins'."""
        if self._kinds is None:
            self._kinds = self._configured(collect_kinds(self.plugin_manager))
        return self._kinds

    def _configured(self, kinds: Kinds) -> Kinds:
        # Configured budget limits ride on the kinds: what a handler sees of a
        # budget (Entity.budgets) and what the coordinator judges agree; so do
        # the configured bounds of their counts ([limits]).
        limits = attrs.asdict(self.config.limits)
        return kinds.configured(self.config.budgets, self.config.pools).with_limits(limits)

    async def read_kinds(self) -> Kinds:
        """The kinds a read of the database needs (the CLI's reads): :attr:`kinds`, without
        loading what the database does not need.

        drover's own kinds are always known. An installed plugin's kind is needed
        only to read its entities (their statuses and budgets) or to check its
        configured budgets and pools: when the database holds no entity of a kind
        drover's own plugins do not declare, and the configuration names none,
        neither the installed plugins (an entry-point scan and their imports) nor
        any handler is loaded. Such an app is for reading: it loads no handlers.
        """
        if self._kinds is None and self._plugin_manager is None:
            from drover.model.errors import InvalidHandlerError
            from drover.storage.migrate import kinds_present

            pm = make_plugin_manager(include_builtins=False, block=self.config.plugins.block)
            own = collect_kinds(pm)
            try:
                configured = self._configured(own)
            except InvalidHandlerError:
                return self.kinds  # the configuration names a plugin's kind or pool
            if await kinds_present(self._database) <= set(own):
                self._kinds = configured
                self._plugin_manager = pm
                self._reads_only = True
        return self.kinds

    @property
    def repository(self) -> SessionRepository:
        """The repository on this app's engine; it knows :attr:`kinds` (the plugins load first)."""
        if self._repository is None:
            from drover.kinds.sessions.store import SessionRepository

            self._repository = SessionRepository(self._database, clock=self.clock, kinds=self.kinds)
        return self._repository

    @property
    def backend(self) -> AgentBackend:
        """The backend: the one given, or the configured one built by its registered factory."""
        if self._backend is None:
            from drover.plugins.manager import collect_backends

            registry = collect_backends(self.plugin_manager)
            name = self.config.backend.name
            if name not in registry.factories:
                raise UnknownBackendError(
                    f"backend.name = {name!r} ({self.loaded.source('backend.name')}): no such "
                    f"backend; registered: {sorted(registry.factories)}"
                )
            self._backend = registry.factories[name](self.config)
        return self._backend

    @property
    def handlers(self) -> dict[str, Handler]:
        """The loaded handlers by name (loading them first if needed)."""
        return self.load_handlers().handlers

    async def check_schema(self, *, auto_upgrade: bool = False) -> None:
        """Upgrade (``auto_upgrade``) or insist that the database is at head."""
        from drover.storage.migrate import current_revision, head_revision, schema_exists
        from drover.storage.retry import run_transaction

        if auto_upgrade:
            # Another process (a CLI call) may hold the new file for a moment.
            await run_transaction(self.upgrade)
            return
        schema = self.config.database_schema
        if schema and not await schema_exists(self._database, schema):
            raise SchemaNotReadyError(
                f"the PostgreSQL schema {schema!r} (database_schema, "
                f"{self.loaded.source('database_schema')}) does not exist: "
                "`drover db upgrade` creates it"
            )
        revision = await current_revision(self._database)
        if revision != head_revision():
            state = "empty (not upgraded)" if revision is None else f"at {revision}"
            raise SchemaNotReadyError(
                f"the database is {state}, drover needs {head_revision()}: "
                "run `drover db upgrade` first"
            )

    async def upgrade(self) -> None:
        """Bring the database to drover's schema head, creating the PostgreSQL schema if needed."""
        from drover.storage.migrate import upgrade

        await upgrade(self.engine, schema=self.config.database_schema or None)

    def load_handlers(self) -> Coordinator:
        """Validate the plugins' handlers, collect observers, build the coordinator (once)."""
        if self._reads_only:
            # A read that turns out to need the handlers (drover history checking a
            # handler's name no row holds): load every plugin after all.
            self._reads_only = False
            self._plugin_manager = self._kinds = self._repository = None
        if self.coordinator is None:
            from drover.backends.deferred import built_on_first_use
            from drover.coordinator.tick import Coordinator
            from drover.plugins.manager import collect_handlers, collect_observers
            from drover.plugins.registry import RuntimeContext

            kinds = self.kinds
            per_tick = self.config.limits.creations_per_tick
            # A reading app's handlers are read, never run (drover why).
            lazy = self._reading and self._backend is None
            backend = built_on_first_use(lambda: self.backend) if lazy else self.backend
            context = RuntimeContext(
                self.repository.queries,
                backend,
                self.clock,
                reporter=self.repository,
                settings={n: h.settings for n, h in self.config.handlers.items() if h.settings},
                creations_per_tick=per_tick,
            )
            handlers, self.registered = collect_handlers(self.plugin_manager, context, kinds)
            self.observers = collect_observers(self.plugin_manager)
            max_requeues = self.config.max_requeues
            self.coordinator = Coordinator(
                self.repository,
                handlers,
                options=self._handler_options,
                clock=self.clock,
                max_requeues=None if max_requeues < 0 else max_requeues,
                kinds=kinds,
                budgets=self.config.budgets,
                claim_owner=self.coordinator_id,
                claim_ttl=self.config.claim_ttl,
                max_creations=per_tick,
                renew_claims=True,
            )
        return self.coordinator

    async def create(self, news: Sequence[NewEntity]) -> list[str]:
        """Create entities as the CLI does (``drover submit``, ``drover deploy``); return their ids.

        The one creation check (:func:`~drover.model.creation.check_new_entities`),
        then against what this drover runs: options only for loaded handlers,
        children only asking for resource slots some agent offers, and no more
        than some agent holds even when idle, and nothing the backend would
        refuse (``backend.kernel_spec_problem``: the container backend's mount
        policy), each asked of the backend without starting it, and no
        deployment on a backend that records no port (``backend.records_ports``:
        Slurm). One bad entity raises InvalidSpecError and nothing is written.
        """
        from drover.kinds.deployments.checks import check_served
        from drover.model.creation import check_against_deployment, check_new_entities

        checked = check_new_entities(news, self.kinds)
        # Before anything asks the backend (Slurm's slots come from sinfo).
        check_served(checked, self.backend, self.config.backend.name)
        slots = await self.backend.offered_slots()
        # Known once the slots are (a backend that learns its agents reads them there).
        capacities = {a.id: a.capacity for a in self.backend.agents()} if slots else None
        check_against_deployment(
            checked, self.kinds, handlers=self.handlers, slots=slots, capacities=capacities,
            child_problem=self.backend.kernel_spec_problem,
        )  # fmt: skip
        return await self.repository.create_entities(checked)

    async def submit(self, requests: Sequence[Mapping[str, Any]]) -> list[str]:
        """Create sessions from ``drover submit``'s requests (see :meth:`create`)."""
        from drover.kinds.sessions.requests import new_session

        return await self.create([new_session(r) for r in requests])

    async def start(self, *, auto_upgrade: bool = True) -> Coordinator:
        """Ready to tick: schema checked (or upgraded), handlers loaded, backend started."""
        await self.check_schema(auto_upgrade=auto_upgrade)
        coordinator = self.load_handlers()
        if not self._backend_started:
            await self.backend.start(self.repository, self._backend_reported)
            self._backend_started = True
        return coordinator

    def _backend_reported(self) -> None:
        # Statuses changed: the handlers and promotions those statuses can make match
        # decide what that means (a kernel becoming RUNNING does not wake
        # detect-start-failure).
        if self._daemon is None or self._repository is None:
            return
        entered: dict[str, set[str]] = {}
        for kind, status in self._repository.take_entered():
            entered.setdefault(kind, set()).add(status)
        for kind, statuses in entered.items():
            self._daemon.entered(kind, statuses)
        if not entered:
            self._daemon.wake_promotions()

    async def reload_pools(self) -> dict[str, int]:
        """Read the configuration file's ``[pools]`` again and write those capacities
        (``drover run`` does on SIGHUP); return them. A file that no longer loads, or a
        capacity refused, is logged and changes nothing."""
        from drover.config import load_config

        if self.loaded.file is None:
            return {}
        try:
            pools = dict(load_config(self.loaded.file).config.pools)
            if pools:
                await self.repository.set_pool_capacities(pools)
        except DroverError as error:
            log.warning("reloading [pools] from %s failed: %s", self.loaded.file, error)
            return {}
        log.info("reloaded [pools] from %s: %s", self.loaded.file, pools)
        return pools

    async def run_daemon(
        self,
        *,
        auto_upgrade: bool = True,
        install_signals: bool = True,
        on_ready: Callable[[Daemon], None] | None = None,
        http: tuple[str, int, str | None] | None = None,
        allowed_hosts: tuple[str, ...] = (),
    ) -> int:
        """Run the coordinator daemon until SIGINT/SIGTERM (``drover run``); return the exit code.

        The first signal stops new ticks and lets in-flight ones finish within
        ``shutdown_grace``; a second signal exits at once, and so does a daemon
        still running ``shutdown_grace`` + :data:`SHUTDOWN_MARGIN` seconds after
        the first (whatever it is busy with). ``on_ready`` receives
        the :class:`Daemon` (to stop it without a signal, as tests do). ``http``
        is ``(host, port, auth_token)``: the web dashboard then runs in this
        event loop and stops with the daemon, answering ``host`` and
        ``allowed_hosts``.
        """
        from drover.coordinator.observers import ObserverDispatcher, events_of

        config = self.config
        await self.check_schema(auto_upgrade=auto_upgrade)
        daemon = self.daemon()
        # Before the backend starts: a daemon refused on SQLite (another one runs)
        # must not adopt, report or kill any kernel.
        await daemon.register()
        if config.pools:
            # The configuration's capacities win when a daemon (re)starts; `drover pools
            # set` changes them while it runs.
            await self.repository.set_pool_capacities(config.pools)
        try:
            await self.start(auto_upgrade=False)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.repository.coordinator_stopped(daemon.id)
            raise
        tune_gc()
        log.info("%s", self._startup_line(), extra=self._startup_fields())
        dispatcher = ObserverDispatcher(self.observers)
        if self.observers:
            dispatcher.start()
            daemon.on_tick = lambda report: dispatcher.publish(events_of(report, time.time()))
        loop = asyncio.get_running_loop()
        received: list[int] = []

        def on_signal(signum: int, _frame: Any = None) -> None:
            # A plain signal handler, not the loop's: Python runs it between two
            # bytecodes of whatever the main thread is doing, even a handler that
            # never gives the loop back; the watchdog then ends the process.
            received.append(signum)
            if len(received) == 1:
                log.info("received %s: shutting down", signal.Signals(signum).name)
                loop.call_soon_threadsafe(daemon.stop)
                _watchdog(config.shutdown_grace + SHUTDOWN_MARGIN, 128 + signum)
            else:
                log.warning("second signal: exiting at once")
                # Whatever is in flight is an open transaction: the database rolls it back.
                os._exit(128 + signum)

        previous: dict[int, Any] = {}
        reloads: set[asyncio.Task[Any]] = set()
        if install_signals:
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous[signum] = signal.signal(signum, on_signal)
            # SIGHUP: the configuration file's [pools] again (kept until it is done).
            loop.add_signal_handler(
                signal.SIGHUP,
                lambda: reloads.add(loop.create_task(self.reload_pools(), name="drover-reload")),
            )
        web_task, web_server = self._start_web(http, allowed_hosts)
        if on_ready is not None:
            on_ready(daemon)
        try:
            await daemon.run()
        finally:
            if web_task is not None:
                web_server.should_exit = True
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(web_task, timeout=config.shutdown_grace)
            for number, handler in previous.items():
                signal.signal(number, handler)
            if install_signals:
                loop.remove_signal_handler(signal.SIGHUP)
            await dispatcher.close(grace=config.shutdown_grace)
        return 0

    def _start_web(
        self, http: tuple[str, int, str | None] | None, allowed_hosts: tuple[str, ...]
    ) -> tuple[asyncio.Task[None] | None, Any]:
        """The dashboard served in this event loop (``drover run --http``), or nothing."""
        if http is None:
            return None, None
        from drover.web.security import public_bind_warning
        from drover.web.server import make_server

        host, port, token = http
        warning = public_bind_warning(host, token)
        if warning:
            log.warning("%s", warning)
        server = make_server(
            self, host=host, port=port, auth_token=token, allowed_hosts=allowed_hosts,
            embedded=True,
        )  # fmt: skip
        task = asyncio.create_task(server.serve(), name="drover-http")
        log.info("dashboard on http://%s:%d/", host, port)
        return task, server

    def _startup_fields(self) -> dict[str, Any]:
        config = self.config
        return {
            "database": display_url(self.engine),
            "database_schema": config.database_schema or None,
            "backend": config.backend.name,
            "agents": {a.id: dict(a.capacity) for a in self.backend.agents()},
            "data_dir": os.path.abspath(config.data_dir),
            "version": __version__,
        }

    def _startup_line(self) -> str:
        """What this daemon runs on: database, backend and its capacity, data directory."""
        fields = self._startup_fields()
        agents: dict[str, dict[str, float]] = fields["agents"]
        total: dict[str, float] = {}
        for capacity in agents.values():
            for slot, amount in capacity.items():
                total[slot] = total.get(slot, 0) + amount
        offered = " ".join(f"{slot}={amount:g}" for slot, amount in total.items()) or "nothing"
        named = f" ({', '.join(agents)})" if 0 < len(agents) <= 3 else ""
        schema = f" schema {fields['database_schema']}" if fields["database_schema"] else ""
        return (
            f"drover {__version__}: database {fields['database']}{schema}; "
            f"backend {fields['backend']} with {len(agents)} agent(s){named}, {offered}; "
            f"data dir {fields['data_dir']}"
        )

    def daemon(self) -> Daemon:
        """The daemon of this app's coordinator, built from the configuration (once)."""
        if self._daemon is None:
            from drover.coordinator.daemon import Daemon

            config = self.config
            history = config.history
            self._daemon = Daemon(
                self.load_handlers(),
                self.repository,
                intervals={n: h.interval for n, h in config.handlers.items()},
                enabled={n: h.enabled for n, h in config.handlers.items()},
                safety_interval=config.safety_interval,
                heartbeat_interval=config.heartbeat_interval,
                shutdown_grace=config.shutdown_grace,
                version=__version__,
                retention=retention_seconds(history.retention),
                ticks_retention=retention_seconds(history.ticks_retention),
                prune_files=self.backend.prune_files,
                files_retention=retention_seconds(history.kernel_files_retention),
                prune_interval=history.prune_interval,
            )
        return self._daemon

    async def close(self) -> None:
        """Stop the backend (its kernels keep running) and dispose of the database engine."""
        if self._backend_started and self._backend is not None:
            self._backend_started = False
            await self._backend.stop()
        if self._repository is not None:
            await self._repository.close()
        if self._queries is not None:
            await self._queries.close()
        if self._engine is not None:
            await self._engine.dispose()
        if self._file_engine is not None:
            self._file_engine.dispose()
