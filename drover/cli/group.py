"""The ``drover`` command."""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import os
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click
import pluggy

from drover._gc import GC_THRESHOLD
from drover._version import DISTRIBUTION_NAME, __version__
from drover.cli.kit import CliState

if TYPE_CHECKING:
    from drover.app import App
    from drover.config import LoadedConfig

__all__ = ["main"]


def _open_app(loaded: LoadedConfig, *, reading: bool = False) -> App:
    """The app a command works on (``with_app``); ``reading``: the command only reads."""
    # Imported here: the app imports SQLAlchemy, which `drover --help` never needs.
    from drover.app import App

    return App(loaded, reading=reading)


#: drover's own commands, each imported when it is used: a command imports only what it
#: needs (``drover sessions`` neither Alembic, the daemon nor the dashboard).
_OWN_COMMANDS = {
    "run": "drover.cli.run:run",
    "show": "drover.cli.entity:show",
    "terminate": "drover.cli.entity:terminate",
    "report": "drover.cli.report:report",
    "status": "drover.cli.status:status",
    "config": "drover.cli.status:config",
    "db": "drover.cli.db:db",
    "plugins": "drover.cli.plugins:plugins",
    "pools": "drover.cli.pools:pools",
    "new-plugin": "drover.cli.new_plugin:new_plugin",
    "history": "drover.cli.inspection:history",
    "why": "drover.cli.inspection:why",
    "stats": "drover.cli.inspection:stats",
    "graph": "drover.cli.inspection:graph",
    "entities": "drover.cli.inspection:entities",
    "serve": "drover.cli.serve:serve",
    "doctor": "drover.cli.doctor:doctor",
}


class _DroverGroup(click.Group):
    """``drover``: its commands are found by name, each imported only when it is used.

    drover's own are in :data:`_OWN_COMMANDS`; the kind packages' (``submit``,
    ``deploy``…) and installed plugins' come from ``drover_register_commands``,
    the installed plugins (an entry-point scan) only for a name drover's own
    plugins do not add, or to list every command (``drover --help``). Every
    command takes the group's options after its name too
    (``drover run --config c.toml``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # How far the plugin commands are loaded: 0 none, 1 drover's own, 2 installed ones too.
        self._plugin_commands = 0

    def main(self, args: Sequence[str] | None = None, *rest: Any, **kwargs: Any) -> Any:
        """Run the command line. A process of its own (``args`` from ``sys.argv``) takes
        the daemon's collector thresholds (drover._gc), which spare a read a hundred
        collections, and ends without the interpreter's teardown
        (:func:`_exit_without_teardown`). Called with ``args`` (a test's CliRunner) it
        changes no process setting and returns as click does."""
        if args is not None:
            return super().main(args, *rest, **kwargs)
        gc.set_threshold(*GC_THRESHOLD)
        try:
            return super().main(args, *rest, **kwargs)
        except SystemExit as done:
            _exit_without_teardown(done.code)
            raise

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if command is None and cmd_name in _OWN_COMMANDS:
            module, _, attribute = _OWN_COMMANDS[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            self.add_command(command, cmd_name)
        while command is None and self._plugin_commands < 2:
            self._load_plugin_commands(installed=self._plugin_commands == 1)
            command = self.commands.get(cmd_name)
        return None if command is None else with_group_options(command)

    def list_commands(self, ctx: click.Context) -> list[str]:
        while self._plugin_commands < 2:
            self._load_plugin_commands(installed=self._plugin_commands == 1)
        return sorted({*self.commands, *_OWN_COMMANDS})

    def _load_plugin_commands(self, *, installed: bool) -> None:
        if installed:
            _add_plugin_commands(self)
            self._plugin_commands = 2
            return
        from drover.builtin_plugins import make_plugin_manager

        # drover's own lifecycles' commands: no installed plugin is looked for.
        _add_plugin_commands(self, make_plugin_manager(include_builtins=False))
        self._plugin_commands = 1


def _exit_without_teardown(code: object) -> None:
    """End the process now with ``code`` (a ``SystemExit``'s), as Python would, but
    without freeing every module and object first; return if that is not safe.

    A read's process spends a sixth of its CPU (50-80 ms) in the interpreter's
    teardown, freeing SQLAlchemy, click and drover object by object just before
    the operating system reclaims the memory anyway (bench/cli_startup.py). The
    output is flushed and the ``atexit`` callbacks run (logging's flush among
    them), as at a normal exit. Only when no other thread runs: a normal exit
    waits for them, and so must this one. A failing flush (a closed pipe) leaves
    the exit to Python, which reports it as it always does; a standard stream
    that is closed or missing is skipped, as Python skips it.
    """
    if threading.active_count() != 1:
        return
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        return  # sys.exit("message"): Python prints it
    try:
        _flush_standard_streams()
    except (OSError, ValueError):
        return
    atexit._run_exitfuncs()
    with contextlib.suppress(OSError, ValueError):  # what the callbacks printed
        _flush_standard_streams()
    os._exit(status)


def _flush_standard_streams() -> None:
    # A stream closed when the process started (`>&-`) is None; one closed since raises
    # ValueError on flush: Python's own exit skips both, and so does this one.
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and not stream.closed:
            stream.flush()


def _set_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        CliState.of(ctx).use(config_path=value)


def _set_database(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        CliState.of(ctx).use(database_url=value)


def _group_option(name: str) -> click.Option:
    """The group's option ``name`` as a command takes it after its name (``expose_value=False``)."""
    if name == "config_path":
        return click.Option(
            ["--config", "config_path"],
            type=click.Path(dir_okay=False),
            expose_value=False,
            callback=_set_config,
            help="TOML configuration file (as `drover --config`).",
        )
    return click.Option(
        ["--database", "database_url"],
        expose_value=False,
        callback=_set_database,
        help="Database URL (as `drover --database`).",
    )


def with_group_options(command: click.Command) -> click.Command:
    """``command`` (and a group's subcommands) taking ``--config`` and ``--database`` too."""
    names = {p.name for p in command.params}
    flags = {o for p in command.params for o in p.opts}
    for name in ("config_path", "database_url"):
        option = _group_option(name)
        if name not in names and not set(option.opts) & flags:
            command.params.append(option)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            with_group_options(sub)
    return command


@click.group(
    cls=_DroverGroup,
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
