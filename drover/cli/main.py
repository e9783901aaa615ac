"""The ``drover`` command."""

from __future__ import annotations

import click

__all__ = ["main"]


@click.group()
@click.version_option(package_name="drover")
def main() -> None:
    """drover: a plugin-based lifecycle coordinator for compute sessions."""
