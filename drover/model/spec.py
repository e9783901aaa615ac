"""Moved: a session request is the session kind's (:mod:`drover.kinds.sessions.requests`)."""

from __future__ import annotations

from drover.model.deprecation import moved_names

__all__: list[str] = []

__getattr__ = moved_names(__name__, {"new_session": "drover.kinds.sessions.requests"})
