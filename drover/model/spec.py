"""Moved: a session request is the session kind's (:mod:`drover.kinds.sessions.requests`).

The kernel kind's spec rules moved to :mod:`drover.kinds.sessions` and the
name and priority checks to :mod:`drover.model.checks` during 0.1; their old
spellings here are back, deprecated, in 0.2.
"""

from __future__ import annotations

from drover.model.deprecation import moved_names

__all__: list[str] = []

__getattr__ = moved_names(
    __name__,
    {
        "new_session": "drover.kinds.sessions.requests",
        "ENGINE_KERNEL_KEYS": "drover.kinds.sessions.kinds",
        "check_kernel_spec": "drover.kinds.sessions.kinds",
        "KERNEL_DEFAULTS": "drover.kinds.sessions.defaults",
        "with_kernel_defaults": "drover.kinds.sessions.defaults",
        "MAX_NAME_LENGTH": "drover.model.checks",
        "PRIORITY_RANGE": "drover.model.checks",
        "is_kebab_case": "drover.model.checks",
    },
)
