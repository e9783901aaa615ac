"""Ids bound as one JSON parameter: the text json_each reads back as the same ids."""

from __future__ import annotations

import json
import sqlite3

import pytest

from drover.model.ids import new_id
from drover.storage._sql import ids_value


@pytest.mark.parametrize(
    "ids",
    [
        [],
        [new_id() for _ in range(3)],
        ["plain", "with space", "a,b", "[x]"],
        ['quote"d', "back\\slash", "tab\tand\x01control", "\x7f", "naïve", "日本"],
    ],
    ids=["empty", "uuids", "punctuation", "escaped"],
)
def test_ids_value_is_the_json_array_of_the_ids(ids):
    """Whatever the ids hold, the value is a JSON array that SQLite reads back unchanged."""
    value = ids_value(ids, postgres=False)
    assert json.loads(value) == ids
    conn = sqlite3.connect(":memory:")
    try:
        got = [row[0] for row in conn.execute("SELECT value FROM json_each(?)", (value,))]
    finally:
        conn.close()
    assert got == ids


def test_ids_value_of_uuids_is_compact_json():
    """Plain ids are joined as they are (no escaping needed); the result is valid JSON."""
    ids = [new_id(), new_id()]
    assert ids_value(ids, postgres=False) == '["' + '","'.join(ids) + '"]'
    assert ids_value(tuple(ids), postgres=False) == ids_value(ids, postgres=False)


def test_ids_value_on_postgres_is_a_list():
    """PostgreSQL binds an array: the ids as a list."""
    assert ids_value(("a", "b"), postgres=True) == ["a", "b"]
