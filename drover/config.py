"""Configuration: a TOML file, ``DROVER_…`` environment variables and CLI flags.

Precedence is flags > environment > file > defaults, value by value. Every
value remembers where it came from, for ``drover config show``. The merged
mapping is structured with cattrs into frozen attrs classes; an unknown key or
a wrong type is a :class:`ConfigError` naming the key and its source.
"""

from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs

from drover.config_sections import (
    DEFAULT_DATABASE_URL,
    AgentConfig,
    BackendConfig,
    Config,
    HandlerConfig,
    HistoryConfig,
    LimitsConfig,
    LoadedConfig,
    PluginsConfig,
)
from drover.model.checks import MAX_COUNT, MAX_NAME_LENGTH
from drover.model.errors import DroverError

__all__ = [
    "DEFAULT_DATABASE_URL",
    "LOG_LEVELS",
    "RETENTION_KEYS",
    "AgentConfig",
    "BackendConfig",
    "Config",
    "ConfigError",
    "HandlerConfig",
    "HistoryConfig",
    "LimitsConfig",
    "LoadedConfig",
    "PluginsConfig",
    "default_agents",
    "flatten_config",
    "handler_overrides",
    "load_config",
    "parse_toml",
    "retention_seconds",
]

DEFAULT_CONFIG_FILE = "drover.toml"


class ConfigError(DroverError):
    """The configuration is invalid; the message names the key and where it came from."""


#: Deepest nesting of tables and arrays a TOML file may have (configuration, sessions).
MAX_TOML_DEPTH = 32


def parse_toml(text: str, where: str, error: type[Exception]) -> dict[str, Any]:
    """``text`` parsed as TOML, or ``error`` with one line naming ``where`` and the problem.

    Deep nesting is refused: ``tomllib`` parses it by recursion (a few thousand
    ``[`` are a RecursionError) and so would everything that reads the result.
    """
    import tomllib  # only where a file is read: most commands have none

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as problem:
        raise error(f"{where}: not valid TOML: {problem}") from None
    except RecursionError:
        raise error(f"{where}: nested more than {MAX_TOML_DEPTH} levels deep") from None
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_TOML_DEPTH:
            raise error(f"{where}: nested more than {MAX_TOML_DEPTH} levels deep")
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return data


# backend.name is checked against the registered backends when the app starts.
_ENUMS = {"log_format": {"text", "json"}}


def _converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)

    def _bool(value: Any, _type: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"1", "true", "yes", "on"}:
            return True
        if isinstance(value, str) and value.lower() in {"0", "false", "no", "off"}:
            return False
        raise ValueError(f"expected true or false, got {value!r}")

    def _number(kind: type) -> Any:
        def structure(value: Any, _type: Any) -> Any:
            if isinstance(value, bool):
                raise ValueError(f"expected a number, got {value!r}")
            if kind is int:
                return _whole(value)
            if isinstance(value, int | float | str):
                return kind(value)
            raise ValueError(f"expected a number, got {value!r}")

        return structure

    def _whole(value: Any) -> int:
        # int(1e30) or int(2.5) would silently become some other number.
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise ValueError(f"expected a whole number, got {value!r}")

    def _strings(value: Any, _type: Any) -> list[str]:
        # cattrs would make ['a', 'b', 'c'] of the string 'abc'.
        if not isinstance(value, list | tuple):
            raise ValueError(f"expected a list of strings, got {value!r}")
        return [_string(item, str) for item in value]

    def _string(value: Any, _type: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {value!r}")
        return value

    conv.register_structure_hook(bool, _bool)
    conv.register_structure_hook(int, _number(int))
    conv.register_structure_hook(float, _number(float))
    conv.register_structure_hook(str, _string)
    conv.register_structure_hook_func(lambda t: t == list[str], _strings)

    def _agent(value: Any, _type: Any) -> AgentConfig:
        if not isinstance(value, Mapping):
            raise ValueError(f"an agent must be a table, got {value!r}")
        known = {"id", "cpu", "mem"}
        extra: dict[str, float] = {}
        devices: dict[str, tuple[str, ...]] = {}
        for k, v in value.items():
            if k in known:
                continue
            if isinstance(v, list):
                # A slot as device ids: its capacity is how many.
                # Checked with the other values (_problems): distinct, non-empty.
                ids = tuple(str(d) for d in v)
                devices[k] = ids
                extra[k] = float(len(ids))
            else:
                extra[k] = float(v)
        return AgentConfig(
            id=_string(value.get("id"), str),
            cpu=_number(float)(value.get("cpu"), float),
            mem=_number(float)(value.get("mem"), float),
            extra=extra,
            devices=devices,
        )

    conv.register_structure_hook(AgentConfig, _agent)
    # The sections' hooks are generated when first used (forbid_extra_keys applies to
    # them): a configuration without a [backend] table, say, never compiles its hook,
    # and most commands' configuration is a database URL and nothing else.
    return conv


_CONVERTER = _converter()


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        # handlers.<name> tables hold per-handler keys; agents are one list value.
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for dotted, value in flat.items():
        parts = dotted.split(".")
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return tree


_ENV_SCALARS = {
    "DROVER_DATABASE_URL": "database_url",
    "DROVER_DATABASE_SCHEMA": "database_schema",
    "DROVER_DATA_DIR": "data_dir",
    "DROVER_LOG_FORMAT": "log_format",
    "DROVER_LOG_LEVEL": "log_level",
    "DROVER_SAFETY_INTERVAL": "safety_interval",
    "DROVER_SHUTDOWN_GRACE": "shutdown_grace",
    "DROVER_HEARTBEAT_INTERVAL": "heartbeat_interval",
    "DROVER_CLAIM_TTL": "claim_ttl",
    "DROVER_MAX_REQUEUES": "max_requeues",
    "DROVER_BACKEND": "backend.name",
}


def _from_env(environ: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    found: dict[str, tuple[Any, str]] = {}
    for var, key in _ENV_SCALARS.items():
        if var in environ:
            found[key] = (environ[var], f"env {var}")
    if "DROVER_LOAD_PLUGINS" in environ:
        raw = environ["DROVER_LOAD_PLUGINS"]
        names = [n.strip() for n in raw.split(",") if n.strip()]
        found["plugins.load"] = (names, "env DROVER_LOAD_PLUGINS")
    if "DROVER_DISABLE_PLUGINS" in environ:
        raw = environ["DROVER_DISABLE_PLUGINS"]
        names = [n.strip() for n in raw.split(",") if n.strip()]
        found["plugins.block"] = (names, "env DROVER_DISABLE_PLUGINS")
    # DROVER_HANDLERS__<NAME>__<KEY>, NAME with "_" for "-": per-handler settings.
    for var, value in environ.items():
        if var.startswith("DROVER_HANDLERS__"):
            parts = var.split("__")
            if len(parts) != 3:
                raise ConfigError(
                    f"environment variable {var}: expected DROVER_HANDLERS__<NAME>__<KEY>"
                )
            name = parts[1].lower().replace("_", "-")
            found[f"handlers.{name}.{parts[2].lower()}"] = (value, f"env {var}")
    return found


def _check_enums(flat: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    for key, allowed in _ENUMS.items():
        if key in flat and flat[key] not in allowed:
            raise ConfigError(
                f"{key} = {flat[key]!r} (from {sources.get(key, 'default')}): "
                f"expected one of {sorted(allowed)}"
            )


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> LoadedConfig:
    """Load the effective configuration.

    ``path`` is the TOML file (``None``: ``./drover.toml`` if it exists). ``flags``
    maps dotted keys to values given on the command line (``None`` values are
    ignored, meaning "not given").
    """
    environ = os.environ if environ is None else environ
    file: Path | None = None
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"configuration file {file} does not exist")
    elif Path(DEFAULT_CONFIG_FILE).is_file():
        file = Path(DEFAULT_CONFIG_FILE)
    flat: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if file is not None:
        data = parse_toml(file.read_text(), str(file), ConfigError)
        for key, value in _flatten(data).items():
            flat[key] = value
            sources[key] = f"file {file}"
    for key, (value, source) in _from_env(environ).items():
        flat[key] = value
        sources[key] = source
    for key, value in (flags or {}).items():
        if value is not None:
            flat[key] = value
            sources[key] = f"flag {key}"
    _check_enums(flat, sources)
    for key in RETENTION_KEYS:
        retention = flat.get(key)
        if retention is not None and retention != "":
            from drover.inspection._format import parse_duration

            try:
                parse_duration(str(retention))
            except ValueError as error:
                raise ConfigError(f"{key} (from {sources.get(key, 'default')}): {error}") from None
    try:
        config = _CONVERTER.structure(_unflatten(flat), Config)
    except cattrs.BaseValidationError as error:
        problems = cattrs.transform_error(error, path="")
        lines = []
        for problem in problems:
            text, _, where = problem.rpartition(" @ ")
            key = where.replace("['", ".").replace("']", "").replace("[", ".").replace("]", "")
            key = key.strip(".")
            if text.startswith("extra fields found (") and text.endswith(")"):
                for name in text[len("extra fields found (") : -1].split(", "):
                    unknown = f"{key}.{name}" if key else name
                    lines.append(f"unknown key {unknown!r} ({_origin(unknown, sources)})")
                continue
            value = flat.get(key, "<missing>")
            lines.append(f"{key}: {text}, got {value!r} ({_origin(key, sources)})")
        raise ConfigError("invalid configuration: " + "; ".join(lines)) from None
    except (ValueError, TypeError) as error:
        raise ConfigError(f"invalid configuration: {error}") from None
    problems = _value_problems(config, sources)
    if problems:
        raise ConfigError("invalid configuration: " + "; ".join(problems))
    return LoadedConfig(config=config, sources=sources, file=file)


#: The durations of ``[history]`` (a string like ``30d`` or ``1h30m``; ``""`` for "keep all").
RETENTION_KEYS = ("history.retention", "history.ticks_retention", "history.kernel_files_retention")


def retention_seconds(value: str | None) -> float | None:
    """A retention setting in seconds, ``None`` when unset or ``""`` (keep everything)."""
    from drover.inspection._format import parse_duration

    return parse_duration(value) if value else None


#: Log levels ``log_level`` may name (any case).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# An agent or device id: at most the width of the agent_id column, no control character.
_ID = re.compile(rf"[^\x00-\x1f\x7f]{{1,{MAX_NAME_LENGTH}}}")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")  # a device slot's variable


def _shown(value: object) -> str:
    """``repr(value)``, cut after 42 characters (a value a megabyte long is not echoed)."""
    text = repr(value)
    return text if len(text) <= 42 else f"{text[:42]}… ({len(text)} characters)"


def _value_problems(config: Config, sources: Mapping[str, str]) -> list[str]:
    """Values of the right type that still make no sense (a zero interval spins the daemon)."""
    problems: list[str] = []

    def check(key: str, value: float, *, zero_ok: bool = False, most: float = math.inf) -> None:
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok) or value > most:
            wanted = (">= 0" if zero_ok else "> 0") if most == math.inf else f"from 0 to {most:g}"
            problems.append(
                f"{key} = {value!r} ({_origin(key, sources)}): must be a finite number of "
                f"seconds {wanted}"
            )

    def count(key: str, value: int | None, low: int, meaning: str = "") -> None:
        if value is not None and not low <= value <= MAX_COUNT:
            problems.append(
                f"{key} = {value!r} ({_origin(key, sources)}): must be a whole number from "
                f"{low} to {MAX_COUNT}{meaning}"
            )

    check("safety_interval", config.safety_interval)
    check("heartbeat_interval", config.heartbeat_interval)
    check("claim_ttl", config.claim_ttl)
    count("max_requeues", config.max_requeues, -1, " (-1: no limit)")
    for key, limit in sorted(attrs.asdict(config.limits).items()):
        count(f"limits.{key}", limit, 1)
    for kind, budgets in sorted(config.budgets.items()):
        for name, limit in sorted(budgets.items()):
            count(f"budgets.{kind}.{name}", limit, 0)
    check("shutdown_grace", config.shutdown_grace, zero_ok=True)
    check("history.prune_interval", config.history.prune_interval)
    # A day at most: a grace or a simulated delay beyond it is a mistake, not a wish.
    check("backend.kill_grace", config.backend.kill_grace, zero_ok=True, most=86400.0)
    for key in ("pull_delay", "create_delay", "run_for"):
        if getattr(config.backend, key) is not None:
            check(f"backend.{key}", getattr(config.backend, key), zero_ok=True, most=86400.0)
    for name, handler in sorted(config.handlers.items()):
        check(f"handlers.{name}.interval", handler.interval)
        count(f"handlers.{name}.max_retries", handler.max_retries, -1, " (-1: no limit)")
        count(f"handlers.{name}.batch_size", handler.batch_size, 1)
        if handler.timeout is not None:
            check(f"handlers.{name}.timeout", handler.timeout, zero_ok=True)
    seen: set[str] = set()
    for agent in config.backend.agents:
        if agent.id and not _ID.fullmatch(agent.id):
            problems.append(
                f"backend.agents: agent {_shown(agent.id)} ({_origin('backend.agents', sources)})"
                f": an agent id is at most {MAX_NAME_LENGTH} characters, without control characters"
            )
            continue
        if not agent.id or agent.id in seen:
            what = "an empty id" if not agent.id else f"the id {agent.id!r} twice"
            problems.append(
                f"backend.agents ({_origin('backend.agents', sources)}): {what}; every agent "
                "needs an id of its own"
            )
        seen.add(agent.id)
        for slot, amount in agent.capacity().items():
            if not math.isfinite(amount) or amount < 0:
                problems.append(
                    f"backend.agents: agent {agent.id!r} offers {slot} = {amount!r} "
                    f"({_origin('backend.agents', sources)}): must be a finite number >= 0"
                )
    for agent in config.backend.agents:
        for slot, ids in agent.devices.items():
            if len(set(ids)) != len(ids) or not all(_ID.fullmatch(d) for d in ids):
                problems.append(
                    f"backend.agents: agent {_shown(agent.id)} {slot} = {_shown(list(ids))} "
                    f"({_origin('backend.agents', sources)}): device ids must be distinct, "
                    f"non-empty, at most {MAX_NAME_LENGTH} characters, no control character"
                )
    for slot, variable in sorted(config.backend.device_variables.items()):
        if not isinstance(variable, str) or not _VARIABLE.fullmatch(variable):
            problems.append(
                f"backend.device_variables.{slot} = {_shown(variable)} "
                f"({_origin('backend.device_variables', sources)}): must be an environment "
                "variable's name (letters, digits, '_'; at most 255)"
            )
    if config.log_level.upper() not in LOG_LEVELS:
        problems.append(
            f"log_level = {config.log_level!r} ({_origin('log_level', sources)}): "
            f"expected one of {', '.join(LOG_LEVELS)}"
        )
    return problems


def _origin(key: str, sources: Mapping[str, str]) -> str:
    if key in sources:
        return f"from {sources[key]}"
    for dotted, source in sources.items():
        if dotted.startswith(f"{key}.") or key.startswith(f"{dotted}."):
            return f"from {source}"
    return "from defaults"


def default_agents() -> list[AgentConfig]:
    """One agent named after the host, with every core and all physical memory (MiB)."""
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError, AttributeError):
        mem = 1024
    return [AgentConfig(id=socket.gethostname(), cpu=float(os.cpu_count() or 1), mem=float(mem))]


def flatten_config(config: Config) -> dict[str, Any]:
    """Every effective value as dotted keys (for ``drover config show``)."""
    data = _CONVERTER.unstructure(config)
    agents = data["backend"].pop("agents")
    flat = _flatten(data)
    flat["backend.agents"] = agents
    return flat


def handler_overrides(config: Config) -> dict[str, dict[str, Any]]:
    """``[handlers.<name>]`` option fields that were set, as coordinator overrides.

    ``timeout = 0`` means no timeout and ``max_retries = -1`` means no limit.
    """
    out: dict[str, dict[str, Any]] = {}
    for name, hc in config.handlers.items():
        layer: dict[str, Any] = {}
        if hc.max_retries is not None:
            layer["max_retries"] = None if hc.max_retries < 0 else hc.max_retries
        if hc.timeout is not None:
            layer["timeout"] = None if hc.timeout <= 0 else hc.timeout
        if hc.batch_size is not None:
            layer["batch_size"] = hc.batch_size
        if hc.order is not None:
            layer["order"] = hc.order
        out[name] = layer
    return out
