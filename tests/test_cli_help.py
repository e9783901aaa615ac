"""Every command's ``--help`` shows its examples verbatim: never wrapped, never run together."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from drover.cli import main


def _commands(group: click.Group, ctx: click.Context, path: tuple[str, ...] = ()):
    """``(argv, command)`` of every command under ``group``, nested groups included."""
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, ctx, (*path, name))


def _all_commands():
    ctx = click.Context(main, info_name="drover")
    return [((), main), *_commands(main, ctx)]


def _example_lines(command: click.Command) -> list[str]:
    """The lines of the command's help text that show a command: ``Example: drover …``,
    or ``drover …`` under ``Examples:``."""
    text = "\n".join(filter(None, [command.help, command.epilog]))
    lines = [line.strip() for line in text.splitlines()]
    return [line for line in lines if line.startswith(("Example: ", "drover ", "DROVER_"))]


_ALL = _all_commands()


@pytest.mark.parametrize(
    ("argv", "command"), _ALL, ids=[" ".join(argv) or "drover" for argv, _ in _ALL]
)
def test_every_help_shows_its_examples_verbatim(argv, command):
    """Each example of a command's help is one line of its rendered --help, as written."""
    examples = _example_lines(command)
    assert examples, f"drover {' '.join(argv)} --help has no example"
    result = CliRunner().invoke(main, [*argv, "--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    shown = [line.strip() for line in result.output.splitlines()]
    for example in examples:
        assert example in shown, f"{example!r} is not a line of:\n{result.output}"


def test_logs_help_does_not_say_local_backend_only():
    """``drover logs`` reads a kernel's log on every backend that records one."""
    result = CliRunner().invoke(main, ["logs", "--help"])
    assert result.exit_code == 0
    assert "local backend" not in result.output
