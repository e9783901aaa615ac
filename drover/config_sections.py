"""The configuration's sections as frozen values: what :func:`drover.config.load_config`
builds from a TOML file, ``DROVER_…`` variables and flags (and re-exports).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

__all__ = [
    "DEFAULT_DATABASE_URL",
    "AgentConfig",
    "BackendConfig",
    "Config",
    "HandlerConfig",
    "HistoryConfig",
    "LimitsConfig",
    "LoadedConfig",
    "PluginsConfig",
]

#: The embedded SQLite database in the working directory.
DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./drover.db"


@attrs.frozen
class AgentConfig:
    """One agent: an id and its resource capacity (``cpu`` cores, ``mem`` MiB, others)."""

    id: str
    cpu: float
    mem: float
    extra: dict[str, float] = attrs.field(factory=dict)
    #: Slots declared as device ids (``gpu = ["0", "1"]``); each also counts in ``extra``.
    devices: dict[str, tuple[str, ...]] = attrs.field(factory=dict)

    def capacity(self) -> dict[str, float]:
        """Every slot this agent offers."""
        return {"cpu": self.cpu, "mem": self.mem, **self.extra}


@attrs.frozen
class HandlerConfig:
    """``[handlers.<name>]``: option overrides and scheduling of one handler."""

    max_retries: int | None = None
    timeout: float | None = None
    batch_size: int | None = None
    #: ``priority`` or ``oldest-seen`` (see ``HandlerOptions.order``).
    order: str | None = None
    interval: float = 2.0
    enabled: bool = True
    #: The handler's own settings (``[handlers.<name>.settings]``), read by its plugin
    #: through ``RuntimeContext.settings_for(name)``; drover does not interpret them.
    settings: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class PluginsConfig:
    """``[plugins]``: which plugins load."""

    #: Allowlist of external plugin names; ``None`` loads every installed one.
    load: list[str] | None = None
    #: Plugin names (built-in or external) that must not load.
    block: list[str] = attrs.field(factory=list)


@attrs.frozen
class BackendConfig:
    """``[backend]``: where kernels run."""

    #: ``local`` (real processes) or ``simulated``.
    name: str = "local"
    #: Agents; empty means one agent named after the host with all its cores and memory.
    agents: list[AgentConfig] = attrs.field(factory=list)
    #: local: seconds between SIGTERM and SIGKILL when destroying a kernel.
    kill_grace: float = 10.0
    #: Per device slot, the variable that names a kernel's devices; unset slots:
    #: ``CUDA_VISIBLE_DEVICES`` for ``gpu``, ``<SLOT>_VISIBLE_DEVICES`` otherwise.
    device_variables: dict[str, str] = attrs.field(factory=dict)
    #: simulated: seconds from PULLING to PREPARED.
    pull_delay: float = 0.0
    #: simulated: seconds from CREATING to RUNNING.
    create_delay: float = 0.0
    #: simulated: seconds a kernel runs before exiting 0 (``None``: until destroyed).
    run_for: float | None = None
    #: Free-form settings for a backend registered by a plugin.
    settings: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class HistoryConfig:
    """``[history]``: retention of scheduling and kernel history."""

    #: Delete history of ended sessions older than this (``30d``, ``12h``); unset: keep all.
    retention: str | None = None
    #: Delete tick records (``handler_ticks``, what ``drover stats`` reads) older than this;
    #: ``""``: keep all. A busy daemon writes about 100 a minute.
    ticks_retention: str = "3d"
    #: Delete an ended kernel's files under ``data_dir`` (its logs and working directory)
    #: once they have not changed for this long; ``""``: keep all.
    kernel_files_retention: str = "7d"
    #: Seconds between the daemon's pruning passes.
    prune_interval: float = 3600.0


@attrs.frozen
class LimitsConfig:
    """``[limits]``: the upper bound of every count one request can ask for.

    Checked where the count enters (CLI flags, session files, the API, the
    creation check), so that one command cannot make drover build millions of
    rows; each is a whole number from 1 to :data:`~drover.model.checks.MAX_COUNT`.
    """

    #: Kernels one session may have (``drover submit --kernels``, a session file's
    #: ``[[kernels]]``, the API).
    kernels_per_session: int = 1000
    #: Replicas one deployment may want (``drover deploy --replicas``, ``drover scale``).
    replicas: int = 1000
    #: Entities one handler tick may create (a deployment scaling up creates its
    #: routes this many at a time; a handler asking for more is an invalid result).
    creations_per_tick: int = 1000


@attrs.frozen
class Config:
    """The whole effective configuration."""

    database_url: str = DEFAULT_DATABASE_URL
    #: PostgreSQL schema (search_path) to use; empty for the default.
    database_schema: str = ""
    #: Where the local backend keeps kernel working directories and logs.
    data_dir: str = "./drover-data"
    log_format: str = "text"
    log_level: str = "INFO"
    #: Seconds between unconditional ticks of every handler (the safety net).
    safety_interval: float = 30.0
    #: Seconds in-flight ticks get to finish on SIGINT/SIGTERM.
    shutdown_grace: float = 10.0
    #: Seconds between coordinator heartbeats.
    heartbeat_interval: float = 5.0
    #: Seconds a tick's claim on its targets lasts (PostgreSQL, several coordinators):
    #: after it, another coordinator may take them over and the late tick is fenced.
    claim_ttl: float = 60.0
    #: Times a session may be sent back to an earlier status by expiry or give-up
    #: before it ends in ERROR (status_info REQUEUE_LIMIT); -1: no limit. A
    #: session's spec["max_requeues"] overrides it.
    max_requeues: int = 3
    handlers: dict[str, HandlerConfig] = attrs.field(factory=dict)
    #: ``[budgets.<kind>]``: limits of a kind's named budgets (an entity's
    #: spec["budgets"] overrides them).
    budgets: dict[str, dict[str, int]] = attrs.field(factory=dict)
    #: ``[pools]``: capacities of pools the kinds declare, by pool name.
    pools: dict[str, int] = attrs.field(factory=dict)
    plugins: PluginsConfig = attrs.field(factory=PluginsConfig)
    backend: BackendConfig = attrs.field(factory=BackendConfig)
    history: HistoryConfig = attrs.field(factory=HistoryConfig)
    limits: LimitsConfig = attrs.field(factory=LimitsConfig)


@attrs.frozen
class LoadedConfig:
    """A configuration and, for each dotted key that was set, where it came from."""

    config: Config
    sources: dict[str, str]
    file: Path | None

    def source(self, key: str) -> str:
        """Where ``key`` (dotted) came from: ``default``, ``file …``, ``env …`` or ``flag …``."""
        return self.sources.get(key, "default")
