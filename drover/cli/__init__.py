"""drover's command line."""

from drover.cli.main import main

__all__ = ["main"]
