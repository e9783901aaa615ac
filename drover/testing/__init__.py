"""Testing support for drover and for plugin authors."""

from drover.testing.harness import CoordinatorHarness

__all__ = ["CoordinatorHarness"]
