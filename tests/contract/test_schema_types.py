"""The two schemas agree on what a value is (DESIGN §16, parity): a state value is stored as
bytes on both backends and reads back the same, and a session's queue follows one column,
``ordinal``, on both."""

from __future__ import annotations

import pytest

import journal

from ..raw import Raw

VALUES = {
    "object": {"nested": {"list": [1, 2.5, "three", None, True]}},
    "array": ["a", {"b": False}],
    "string": "text with \u00e9 and \U0001f600 and a \u0000 NUL",
    "integer": 2**62,
    "float": 1.0e-300,
    "true": True,
    "null": None,
    "bytes": b"\x00\xff not utf-8 \xc3",
    "empty bytes": b"",
}


@pytest.mark.parametrize("key", sorted(VALUES))
def test_a_state_value_reads_back_the_same_on_both_backends(j: journal.Journal, db_path, key: str) -> None:
    j.create_session("s")
    j.set_state("s", {key: VALUES[key]})
    assert j.state("s") == {key: VALUES[key]}
    with journal.open(db_path, readonly=True) as fresh:  # through a fresh connection
        assert fresh.state("s") == {key: VALUES[key]}
        assert [(k, v) for k, _at, v in fresh._state_history("s")] == [(key, VALUES[key])]


def test_every_state_value_is_stored_as_bytes_on_both_backends(j: journal.Journal, db_path) -> None:
    j.create_session("s")
    j.set_state("s", VALUES)
    with Raw(db_path) as raw:
        if raw.postgres:
            kinds = raw.execute("SELECT DISTINCT pg_typeof(value)::text FROM state")
            assert kinds == [("bytea",)]
        else:
            assert raw.execute("SELECT DISTINCT typeof(value) FROM state") == [("blob",)]
        # A JSON value's bytes are its UTF-8 text, the same on both.
        (stored,) = raw.execute("SELECT value FROM state WHERE key = 'array'")[0]
        assert bytes(stored).decode("utf-8") == '["a",{"b":false}]'


def test_a_sessions_queue_follows_the_order_column_on_both_backends(j: journal.Journal, db_path) -> None:
    j.create_session("s")
    ids = ["z", "a", "m", "b"]
    for sub_id in ids:
        j.submit("s", "user_message", {"content": sub_id}, id=sub_id)
    with Raw(db_path) as raw:
        assert raw.execute("SELECT id FROM submissions ORDER BY ordinal") == [(i,) for i in ids]
    assert [s.id for s in j.submissions("s")] == ids
    for expected in ids:
        claim = j.claim(session_id="s")
        assert claim is not None and claim.submission.id == expected
        claim.complete()
