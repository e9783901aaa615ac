"""The ``drover`` command."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click
import pluggy

from drover._version import DISTRIBUTION_NAME, __version__
from drover.cli.db import db
from drover.cli.doctor import doctor
from drover.cli.entity import show, terminate
from drover.cli.inspection import entities, graph, history, stats, why
from drover.cli.kit import CliState
from drover.cli.new_plugin import new_plugin
from drover.cli.plugins import plugins
from drover.cli.pools import pools
from drover.cli.report import report
from drover.cli.run import run
from drover.cli.serve import serve
from drover.cli.status import config, status

if TYPE_CHECKING:
    from drover.app import App
    from drover.config import LoadedConfig

__all__ = ["main"]


def _open_app(loaded: LoadedConfig) -> App:
    """The app a command works on (``with_app``)."""
    # Imported here: the app imports SQLAlchemy, which `drover --help` never needs.
    from drover.app import App

    return App(loaded)


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="Example: drover run   (then, in another shell: drover submit -- echo hello)",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    envvar="DROVER_CONFIG",
    help="TOML configuration file [env DROVER_CONFIG; default ./drover.toml if present].",
)
@click.option(
    "--database",
    "database_url",
    default=None,
    help="Database URL, overriding the configuration and DROVER_DATABASE_URL.",
)
@click.version_option(__version__, package_name=DISTRIBUTION_NAME)
@click.pass_context
def main(ctx: click.Context, config_path: str | None, database_url: str | None) -> None:
    """drover: a plugin-based lifecycle coordinator for compute sessions.

    Sessions move PENDING → SCHEDULED → PREPARING → PREPARED → CREATING →
    RUNNING → TERMINATING → TERMINATED, driven by handler plugins.
    """
    flags = {"database_url": database_url} if database_url else {}
    ctx.obj = CliState(config_path, flags, open_app=_open_app)
    warning = getattr(ctx.command, _DEFERRED_WARNING, None)
    if warning and ctx.invoked_subcommand not in _LOAD_PLUGINS_THEMSELVES:
        click.echo(warning, err=True)


#: Commands that load every plugin and report one that fails to import as their error line.
_LOAD_PLUGINS_THEMSELVES = frozenset({"run", "submit", "plugins", "graph", "why"})
# Attribute of the group holding why plugin commands could not be added.
_DEFERRED_WARNING = "drover_plugin_warning"


for command in (
    run,
    show,
    terminate,
    report,
    status,
    config,
    db,
    plugins,
    pools,
    new_plugin,
    history,
    why,
    stats,
    graph,
    entities,
    serve,
    doctor,
):
    main.add_command(command)


def _add_plugin_commands(cli: click.Group, pm: pluggy.PluginManager | None = None) -> None:
    """Let plugins add commands (``drover_register_commands``): drover's own and installed ones.

    drover's own lifecycles add theirs the same way (``drover deploy`` and
    the other deployment commands come from the plugin
    ``drover.kinds.deployments``, which every plugin manager loads).
    Only the environment's DROVER_LOAD_PLUGINS / DROVER_DISABLE_PLUGINS apply
    here: commands are needed before any --config is parsed. A broken plugin
    must not take the whole command line down, so its error is one line on
    stderr, and drover's own commands are there all the same.
    """
    import os

    from drover.builtin_plugins import make_plugin_manager
    from drover.plugins.manager import PluginLoadError, load_entry_points

    def names(var: str) -> list[str] | None:
        raw = os.environ.get(var)
        return None if raw is None else [n.strip() for n in raw.split(",") if n.strip()]

    try:
        if pm is None:
            pm = make_plugin_manager(include_builtins=False)
            try:
                load_entry_points(
                    pm, names("DROVER_LOAD_PLUGINS"), names("DROVER_DISABLE_PLUGINS") or []
                )
            except PluginLoadError:
                # No installed plugin's commands, but drover's own.
                make_plugin_manager(include_builtins=False).hook.drover_register_commands(cli=cli)
                raise
        pm.hook.drover_register_commands(cli=cli)
    except PluginLoadError as error:
        # Said once the command is known: those that load plugins say it as their error.
        setattr(cli, _DEFERRED_WARNING, f"warning: plugin commands not loaded: {error}")
    except Exception as error:
        click.echo(f"warning: plugin commands not loaded: {error}", err=True)


_add_plugin_commands(main)
