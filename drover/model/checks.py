"""Checks every value a user or a handler hands drover goes through before it is written.

The two databases must accept exactly the same input: JSON has no NaN or
infinity, and PostgreSQL refuses NUL characters and lone surrogates that
SQLite would store, so those are refused here, for both. Each check raises
:class:`InvalidSpecError` with one line naming the problem.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from drover.model.errors import InvalidSpecError

__all__ = [
    "MAX_COUNT",
    "MAX_FILTER_LENGTH",
    "MAX_JSON_DEPTH",
    "MAX_NAME_LENGTH",
    "PRIORITY_RANGE",
    "check_filter",
    "check_name",
    "check_priority",
    "check_text",
    "check_whole",
    "is_finite",
    "is_kebab_case",
    "is_number",
    "json_copy",
    "load_json",
    "parse_json",
    "text_problem",
]

#: The range of ``priority``: a 32-bit integer, as PostgreSQL stores it.
PRIORITY_RANGE = (-(2**31), 2**31 - 1)
#: The largest count drover stores (retries, requeues, budgets, limits): a 32-bit
#: integer, as PostgreSQL stores its counters.
MAX_COUNT = 2**31 - 1
#: Longest entity name, in characters (PostgreSQL's ``varchar(255)``).
MAX_NAME_LENGTH = 255
#: Deepest JSON drover stores: deeper is refused before Python's recursion limit is near.
MAX_JSON_DEPTH = 64
#: Longest text filter (a name pattern, a handler, an id), in characters: longer ones
#: match nothing a filter could mean, and SQLite refuses a LIKE pattern past 50,000 bytes.
MAX_FILTER_LENGTH = 1024
_KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def is_kebab_case(name: str) -> bool:
    """Tell whether ``name`` is a valid handler or kind name (``kebab-case``)."""
    return bool(_KEBAB.match(name))


def text_problem(text: str) -> str | None:
    """Why PostgreSQL would refuse ``text`` where SQLite takes it, or ``None``."""
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates: what Python makes of bytes that are not UTF-8.
        return "is not valid UTF-8 text"
    return None


def is_number(value: Any) -> bool:
    """An int or a float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_finite(value: int | float) -> bool:
    """Whether ``value`` is a finite number (an int too large for a float is not)."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def json_copy(value: Any, what: str, depth: int = 0) -> Any:
    """A JSON-safe copy of ``value`` that both databases store alike, or InvalidSpecError."""
    if depth > MAX_JSON_DEPTH:
        raise InvalidSpecError(f"{what} is nested more than {MAX_JSON_DEPTH} levels deep")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not is_finite(value):
            # SQLite's JSON reads it as infinity (``10**400``), PostgreSQL exactly. Its bits,
            # not its digits: str() of a huge int is refused (and slow).
            raise InvalidSpecError(
                f"{what}: an integer of {value.bit_length()} bits is not a finite number "
                "(SQLite would read it as infinity)"
            )
        return value
    if isinstance(value, str):
        problem = text_problem(value)
        if problem:
            raise InvalidSpecError(f"{what}: the text {value!r} {problem}")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidSpecError(f"{what}: {value!r} is not a finite number")
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidSpecError(f"{what}: key {key!r} is not a string")
            problem = text_problem(key)
            if problem:
                raise InvalidSpecError(f"{what}: the key {key!r} {problem}")
            out[key] = json_copy(item, what, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [json_copy(item, what, depth + 1) for item in value]
    raise InvalidSpecError(
        f"{what} is not JSON-serializable: {type(value).__name__} {value!r} is not a JSON value"
    )


def load_json(text: str, what: str) -> Any:
    """``text`` parsed as JSON, or InvalidSpecError naming ``what``: never a
    RecursionError (Python's parser recurses, and a few thousand ``[`` exceed its limit)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise InvalidSpecError(f"{what} is nested more than {MAX_JSON_DEPTH} levels deep") from None
    except ValueError as error:
        raise InvalidSpecError(f"{what} is not JSON: {error}") from None


def parse_json(text: str, what: str) -> Any:
    """``text`` parsed as JSON (:func:`load_json`) and checked as :func:`json_copy` checks
    a value."""
    return json_copy(load_json(text, what), what)


def check_filter(raw: Any, what: str) -> str | None:
    """A text filter (a name pattern, a handler, an id) as given, ``None`` for none
    (``""`` counts as none), or InvalidSpecError naming ``what``: past
    :data:`MAX_FILTER_LENGTH`, or text PostgreSQL would refuse."""
    if raw is None or raw == "":
        return None
    return check_text(raw, what, MAX_FILTER_LENGTH)


def check_text(value: Any, what: str, limit: int) -> str:
    """``value`` if it is text of at most ``limit`` characters that PostgreSQL would
    store, else InvalidSpecError naming ``what``."""
    if not isinstance(value, str):
        raise InvalidSpecError(f"{what} must be text, got {type(value).__name__}")
    if len(value) > limit:
        raise InvalidSpecError(
            f"{what} is {len(value)} characters long; at most {limit} are allowed"
        )
    problem = text_problem(value)
    if problem:
        raise InvalidSpecError(f"{what} {problem}")
    return str(value)


def check_whole(value: Any, where: str, *, limit: int = MAX_COUNT) -> None:
    """Refuse anything but a whole number from 0 to ``limit`` or ``None``."""
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit
    ):
        raise InvalidSpecError(
            f"{where} must be a whole number from 0 to {limit} or null, got {value!r}"
        )


def check_name(raw: Any) -> str | None:
    """A valid name, or ``None`` for none given (``""`` counts as none)."""
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str):
        raise InvalidSpecError(f"name must be text, got {raw!r}")
    if len(raw) > MAX_NAME_LENGTH:
        raise InvalidSpecError(
            f"name is {len(raw)} characters long; at most {MAX_NAME_LENGTH} are allowed"
        )
    problem = text_problem(raw)
    if problem:
        raise InvalidSpecError(f"name {raw!r} {problem}")
    return raw


def check_priority(raw: Any) -> int:
    """A priority: an integer that fits PostgreSQL's 32 bits (``None`` is 0)."""
    priority = raw or 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidSpecError(f"priority must be an integer, got {priority!r}")
    low, high = PRIORITY_RANGE
    if not low <= priority <= high:
        raise InvalidSpecError(
            f"priority {priority} is out of range: it must be between {low} and {high}"
        )
    return priority
