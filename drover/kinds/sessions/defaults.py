"""What a kernel asks for when its request does not say.

Here, not in :mod:`~drover.kinds.sessions.kinds` (which re-exports both): the
commands (:mod:`~drover.kinds.sessions.cli`) read them, and ``kinds`` imports
the commands to add them to ``drover``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["KERNEL_DEFAULTS", "with_kernel_defaults"]

#: What a kernel asks for when it does not say (``drover submit`` flags and files alike).
KERNEL_DEFAULTS: Mapping[str, float] = {"cpu": 1.0, "mem": 256.0}


def with_kernel_defaults(kernel: Mapping[str, Any]) -> dict[str, Any]:
    """``kernel`` with :data:`KERNEL_DEFAULTS` for the slots it does not name."""
    return {**KERNEL_DEFAULTS, **kernel}
