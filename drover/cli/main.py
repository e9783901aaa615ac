"""The ``drover`` command."""

from __future__ import annotations

import click

from drover.cli.db import db

__all__ = ["main"]


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Example: drover db upgrade --database sqlite+aiosqlite:///./drover.db",
)
@click.version_option(package_name="drover")
def main() -> None:
    """drover: a plugin-based lifecycle coordinator for compute sessions."""


main.add_command(db)
