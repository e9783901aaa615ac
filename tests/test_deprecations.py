"""Public names that moved keep working, warning with the name that replaces them."""

from __future__ import annotations

import importlib

import pytest

import drover

#: (old module, name, new module) of every name that moved.
MOVED = [
    ("drover.model.status", "SessionStatus", "drover.kinds.sessions.values"),
    ("drover.model.status", "KernelStatus", "drover.kinds.sessions.values"),
    ("drover.model.status", "TERMINAL_SESSION_STATUSES", "drover.kinds.sessions.values"),
    ("drover.model.status", "TERMINAL_KERNEL_STATUSES", "drover.kinds.sessions.values"),
    ("drover.model.values", "KernelInfo", "drover.kinds.sessions.values"),
    ("drover.model.values", "KernelReport", "drover.kinds.sessions.values"),
    ("drover.model.values", "SessionWithKernels", "drover.kinds.sessions.values"),
    ("drover.model.values", "TransitionStatus", "drover.kinds.sessions.values"),
    ("drover.model.errors", "UnknownSessionError", "drover.kinds.sessions.values"),
    ("drover.model.errors", "UnknownKernelError", "drover.kinds.sessions.values"),
    ("drover.model.rules", "HOLDING_KERNEL_STATUSES", "drover.kinds.sessions.values"),
    ("drover.model.rules", "NON_TERMINAL_KERNEL_STATUSES", "drover.kinds.sessions.values"),
    ("drover.model.spec", "new_session", "drover.kinds.sessions.requests"),
]


@pytest.mark.parametrize(("old", "name", "new"), MOVED)
def test_a_moved_name_warns_and_is_the_same_object(old, name, new):
    """The old spelling returns the very object of the new one, with a DeprecationWarning
    that names the new spelling."""
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=rf"{old}\.{name} is deprecated: use {new}\.{name}"):
        value = getattr(module, name)
    assert value is getattr(importlib.import_module(new), name)


def test_the_top_level_names_did_not_move():
    """drover.SessionStatus and the like are where they were: no warning at all."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert drover.SessionStatus.PENDING == "PENDING"
        assert drover.KernelInfo.__name__ == "KernelInfo"


def test_an_unknown_name_is_still_an_attribute_error():
    """Only moved names resolve: a typo is an AttributeError, not a warning."""
    module = importlib.import_module("drover.model.status")
    with pytest.raises(AttributeError, match="SessionStatuss"):
        module.SessionStatuss  # noqa: B018


def test_a_record_built_without_its_kind_warns():
    """HistoryEvent, HistoryRecord and TerminationOutcome defaulted to the session kind; built
    without ``kind=`` they warn (the engine names no kind) and carry kind ``""``."""
    from datetime import UTC, datetime

    from drover import HistoryRecord, SchedulingResult, TerminationOutcome
    from drover.coordinator.observers import HistoryEvent

    now = datetime.now(UTC)
    with pytest.warns(DeprecationWarning, match=r"HistoryEvent\(\) without kind= is deprecated"):
        event = HistoryEvent("h", "e1", SchedulingResult.SUCCESS, "A", "B", None, None, now)
    assert event.kind == ""
    with pytest.warns(DeprecationWarning, match=r"HistoryRecord\(\) without kind="):
        HistoryRecord(1, "e1", "h", SchedulingResult.SUCCESS, "A", "B", None, None, 1, now, now)
    with pytest.warns(DeprecationWarning, match=r"TerminationOutcome\(\) without kind="):
        TerminationOutcome("e1", "A", "B", True)
    assert TerminationOutcome("e1", "A", "B", True, kind="job").kind == "job"
