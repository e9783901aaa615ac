"""The one check of a pushed report, whoever pushes it.

``drover report``, ``POST /api/report`` and a plugin's
``Repository.report`` all hand their values to :func:`check_report`
(storage's :meth:`~drover.storage.reports.ReportSink.report` calls it), so
the same input is refused everywhere with one line naming the field, before
anything is written. A backend's kernel reports are drover's own values and
skip it (``report_kernel_statuses``: thousands at once).

What it checks: each field's type; each text's length and that both
databases store it alike (no NUL); ``data`` as JSON both databases store alike
(depth, 64-bit integers, finite numbers) and at most :data:`MAX_REPORT_DATA`
bytes. Who reported is the history row's handler: an outside reporter's name
goes in a namespace of its own (:func:`outside_source`, ``api:NAME``), so a
report never writes rows under a handler's or the backend's name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from drover.model.checks import check_text, json_copy
from drover.model.errors import InvalidSpecError
from drover.model.plan import REPORT_SOURCE
from drover.model.values import Report

__all__ = [
    "API_SOURCE_PREFIX",
    "MAX_REPORT_DATA",
    "MAX_REPORT_TEXT",
    "MAX_SOURCE_LENGTH",
    "check_report",
    "check_source",
    "checked_report",
    "outside_source",
]

#: Most bytes a report's ``data`` may take as compact JSON (UTF-8): a heartbeat's
#: facts, not a payload (each report's data is merged into the entity's).
MAX_REPORT_DATA = 64 * 1024
#: Longest ``status_info`` or ``message`` of a report, in characters.
MAX_REPORT_TEXT = 4096
#: Longest ``source`` a report is recorded under (the history's ``handler`` column).
MAX_SOURCE_LENGTH = 128
#: The namespace of the sources outside reporters name (``drover report --source``,
#: ``POST /api/report``'s ``source``): ``api:ci``, never a handler's name.
API_SOURCE_PREFIX = "api:"
# An outside reporter's name: a word, not a sentence.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Longest entity id or status a report may name (ids are 36 characters, statuses 32).
_MAX_ID = 64
_MAX_STATUS = 32
# More expected statuses than any kind has.
_MAX_EXPECTED = 64
# What PostgreSQL's integer column holds.
_EXIT_CODES = (-(2**31), 2**31 - 1)


def _optional_text(value: Any, field: str) -> str | None:
    return None if value is None else check_text(value, field, MAX_REPORT_TEXT)


def _expected(value: Any) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise InvalidSpecError(f"expected must be a list of statuses, got {type(value).__name__}")
    statuses = list(value)
    if len(statuses) > _MAX_EXPECTED:
        raise InvalidSpecError(f"expected names {len(statuses)} statuses; at most {_MAX_EXPECTED}")
    return frozenset(check_text(s, "each expected status", _MAX_STATUS) for s in statuses)


def _data(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidSpecError(f"data must be a JSON object, got {type(value).__name__}")
    copy: dict[str, Any] = json_copy(value, "data")
    size = len(json.dumps(copy, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
    if size > MAX_REPORT_DATA:
        raise InvalidSpecError(
            f"data is {size} bytes as JSON; at most {MAX_REPORT_DATA} are allowed"
        )
    return copy


def check_report(
    entity_id: Any,
    status: Any,
    *,
    expected: Any = None,
    status_info: Any = None,
    data: Any = None,
    message: Any = None,
) -> Report:
    """The report these values make, checked (see the module's docstring), or
    InvalidSpecError naming the first field refused. Statuses are checked against the
    entity's kind where it is read (storage)."""
    return Report(
        check_text(entity_id, "entity_id", _MAX_ID),
        check_text(status, "status", _MAX_STATUS),
        expected=_expected(expected),
        status_info=_optional_text(status_info, "status_info"),
        data=_data(data),
        message=_optional_text(message, "message"),
    )


def checked_report(report: Report) -> Report:
    """``report`` (a value a plugin built) checked as :func:`check_report` checks its
    fields, and a backend's bookkeeping too: ``exit_code`` a 32-bit integer, ``runtime`` a
    JSON object."""
    checked = check_report(
        report.entity_id,
        report.status,
        expected=report.expected,
        status_info=report.status_info,
        data=report.data,
        message=report.message,
    )
    code, runtime = report.exit_code, report.runtime
    low, high = _EXIT_CODES
    if code is not None and (
        isinstance(code, bool) or not isinstance(code, int) or not low <= code <= high
    ):
        raise InvalidSpecError(f"exit_code must be a 32-bit integer, got {code!r}")
    if runtime is not None:
        if not isinstance(runtime, Mapping):
            raise InvalidSpecError(f"runtime must be a JSON object, got {type(runtime).__name__}")
        runtime = json_copy(runtime, "runtime")
    return attrs.evolve(checked, exit_code=code, runtime=runtime)


def check_source(source: Any) -> str:
    """A report's ``source`` as given (a plugin's own name for its reports), or
    InvalidSpecError: text of at most :data:`MAX_SOURCE_LENGTH` characters."""
    if source == "":
        raise InvalidSpecError("source must not be empty")
    return check_text(source, "source", MAX_SOURCE_LENGTH)


def outside_source(name: Any) -> str:
    """The source an outside reporter's ``name`` is recorded under: ``api:NAME``
    (``api:`` already there is kept), :data:`REPORT_SOURCE` for none (or itself, the
    default); InvalidSpecError unless it is 1-64 letters, digits, ``.``, ``_`` or ``-``."""
    if name is None or name in ("", REPORT_SOURCE):
        return REPORT_SOURCE
    if not isinstance(name, str):
        raise InvalidSpecError(f"source must be text, got {type(name).__name__}")
    bare = name.removeprefix(API_SOURCE_PREFIX)
    if not _NAME.fullmatch(bare):
        shown = bare if len(bare) <= 80 else f"{bare[:80]}…"
        raise InvalidSpecError(
            f"source {shown!r} must be 1-64 letters, digits, '.', '_' or '-' "
            f"(recorded as {API_SOURCE_PREFIX}NAME)"
        )
    return f"{API_SOURCE_PREFIX}{bare}"
