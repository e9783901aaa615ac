"""``drover plugins``: what is installed, what it registers, and whether it is sound."""

from __future__ import annotations

import importlib.util
import sys
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import click

from drover._version import DISTRIBUTION_NAME, __version__
from drover.cli.kit import CliState, emit_json, json_option, print_table
from drover.model.errors import DroverError
from drover.model.promotion import PromotionRule

if TYPE_CHECKING:
    from drover.app import App

__all__ = ["plugins"]


def _builtin(name: str) -> bool:
    from drover.plugins.manager import BUILTIN_PREFIX

    return name.startswith(BUILTIN_PREFIX) or name == "drover.backends"


def _describe(app: App) -> list[dict[str, Any]]:
    from drover.coordinator.handlers import target_statuses
    from drover.plugins.manager import ENTRY_POINT_GROUP, collect_backends

    pm = app.plugin_manager
    dists = {
        ep.name: (ep.dist.metadata["Name"], ep.dist.version)
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)
        if ep.dist is not None
    }
    backends = collect_backends(pm)
    rows: list[dict[str, Any]] = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        dist = dists.get(name)
        handlers = [
            {
                "name": e.name,
                "kind": "promotion" if isinstance(e.handler, PromotionRule) else "lifecycle",
                "targets": sorted(str(s) for s in target_statuses(e.handler)),
            }
            for e in app.registered
            if e.plugin == name
        ]
        rows.append(
            {
                "name": name,
                "builtin": _builtin(name),
                "distribution": dist[0] if dist else DISTRIBUTION_NAME,
                "version": dist[1] if dist else __version__,
                "hooks": sorted(hc.name for hc in pm.get_hookcallers(plugin) or []),
                "handlers": handlers,
                "backends": sorted(b for b, owner in backends.owners.items() if owner == name),
                "observers": sum(1 for owner, _o in app.observers if owner == name),
            }
        )
    return rows


def _load(ctx: click.Context, path: Path | None = None) -> App:
    from drover.app import App
    from drover.builtin_plugins import make_plugin_manager
    from drover.plugins.manager import load_entry_points

    state = CliState.of(ctx)
    config = state.loaded()
    pm = None
    if path is not None:
        chosen = config.config.plugins
        pm = make_plugin_manager(include_builtins=True, block=chosen.block)
        load_entry_points(pm, chosen.load, chosen.block)
        for number, plugin in enumerate(_plugins_in(_import_path(path))):
            pm.register(plugin, name=f"path:{path}" + (f"#{number}" if number else ""))
    app = App(config, plugin_manager=pm)
    app.load_handlers()
    return app


def _import_path(path: Path) -> ModuleType:
    """The plugin module (a ``.py`` file, or a package directory) at ``path``, imported."""
    init = path / "__init__.py" if path.is_dir() else path
    if not init.is_file() or init.suffix != ".py":
        raise PluginPathError(f"{path}: not a Python file or a package directory")
    name = f"drover_checked_{path.stem.replace('-', '_')}"
    locations = [str(path)] if path.is_dir() else None
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=locations)
    if spec is None or spec.loader is None:
        raise PluginPathError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its own relative imports find it
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        raise PluginPathError(f"cannot import {path}: {type(error).__name__}: {error}") from None
    return module


def _plugins_in(module: ModuleType) -> list[object]:
    """The plugins a module at PATH holds: the module (its hook functions) and each
    module-level plugin object (``plugin = MyPlugin()``, as ``docs/plugins/testing.md``
    writes them), whose hooks are methods pluggy does not find on the module."""
    from drover.plugins.markers import PROJECT

    marker = f"{PROJECT}_impl"
    found: list[object] = [module]
    for value in vars(module).values():
        if isinstance(value, type | ModuleType) or callable(value):
            continue
        hooked = any(hasattr(getattr(type(value), a, None), marker) for a in dir(type(value)))
        if hooked and all(value is not seen for seen in found):
            found.append(value)
    return found


class PluginPathError(DroverError):
    """The plugin module given to ``drover plugins check PATH`` cannot be imported."""


@click.group(invoke_without_command=True)
@click.option("--all", "show_all", is_flag=True, help="Include drover's built-in plugins.")
@json_option
@click.pass_context
def plugins(ctx: click.Context, show_all: bool, as_json: bool) -> None:
    """List installed plugins, their hooks and the handlers they register.

    Built-in plugins are shown with --all. Plugins come from the entry-point
    group `drover`, filtered by plugins.load / plugins.block
    (DROVER_LOAD_PLUGINS / DROVER_DISABLE_PLUGINS).

    \b
    Example: drover plugins --all --json
    """
    if ctx.invoked_subcommand is not None:
        return
    try:
        app = _load(ctx)
    except (DroverError, TypeError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    rows = [r for r in _describe(app) if show_all or not r["builtin"]]
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no plugins installed (drover plugins --all shows the built-in ones)")
        return
    print_table(
        ["plugin", "distribution", "version", "hooks", "handlers (targets)"],
        [
            (
                r["name"],
                r["distribution"],
                r["version"],
                ", ".join(r["hooks"]),
                "; ".join(f"{h['name']} ({', '.join(h['targets'])})" for h in r["handlers"])
                or ", ".join(f"backend {b}" for b in r["backends"]),
            )
            for r in rows
        ],
    )


@plugins.command("check")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--strict", is_flag=True, help="Exit non-zero on warnings too.")
@json_option
@click.pass_context
def check(ctx: click.Context, path: Path | None, strict: bool, as_json: bool) -> None:
    """Load every plugin and validate the handler set and the state machine of every kind.

    PATH (optional) is a plugin module not yet installed, a .py file or a
    package directory with its hook implementations: it is checked together
    with the installed plugins, as if it were one of them.

    Errors (the daemon refuses to start): duplicate handler or kind names,
    statuses that are not members of the handler's kind, a promotion into its
    own target, an empty target set, invalid options, a transition or
    promotion out of a terminal status (reopen does that). Warnings, per kind: a
    status no handler targets, a status with no way to a terminal one, a
    status nothing can reach.

    \b
    Example: drover plugins check --strict ./my_plugin.py
    """
    from drover.plugins.graph import check_graph

    errors: list[str] = []
    warnings: list[dict[str, str]] = []
    count = 0
    try:
        app = _load(ctx, path)
        _ = app.backend
        assert app.coordinator is not None
        count = len(app.coordinator.handlers)
        warnings = [
            {
                "kind": w.kind,
                "entity_kind": kind.name,
                "status": str(w.status),
                "message": w.message,
            }
            for kind in app.kinds.values()
            for w in check_graph(
                app.coordinator.handlers,
                kind,
                parent=app.kinds[kind.parent] if kind.parent is not None else None,
            )
        ]
    except (DroverError, TypeError, ValueError) as error:
        errors.append(str(error))
    if as_json:
        emit_json({"errors": errors, "warnings": warnings, "handlers": count})
    else:
        for text in errors:
            click.echo(f"error: {text}", err=True)
        for warning in warnings:
            click.echo(
                f"warning: [{warning['entity_kind']}: {warning['kind']}] {warning['message']}",
                err=True,
            )
        if not errors:
            click.echo(f"{count} handlers loaded; {len(warnings)} warning(s)")
    if errors or (strict and warnings):
        sys.exit(1)
