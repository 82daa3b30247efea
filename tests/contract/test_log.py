"""Sessions and the append-only log: G2, G3, G4, G12, reads and fork."""

from __future__ import annotations

import itertools
import json
import math
import re
from contextlib import nullcontext
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
from journal.codec import Codec
from tests.raw import Raw, Refused
from tests.strategies import appendable_items, json_values


def test_generated_session_id_is_32_lowercase_hex(j: journal.Journal) -> None:
    session = j.create_session()
    assert re.fullmatch(r"[0-9a-f]{32}", session.id)
    assert j.session(session.id).count == 0


def test_duplicate_session_id_is_a_typed_error(j: journal.Journal) -> None:
    j.create_session("s", meta={"title": "first"})
    with pytest.raises(journal.SessionExists):
        j.create_session("s")
    assert j.session("s").meta == {"title": "first"}


def test_unknown_session_is_session_not_found(j: journal.Journal) -> None:
    with pytest.raises(journal.SessionNotFound):
        j.session("nope")
    with pytest.raises(journal.SessionNotFound):
        j.append("nope", "user_message", {"content": "hi"})
    with pytest.raises(LookupError):
        j.events("nope")


def test_sessions_lists_every_session_with_its_count(j: journal.Journal) -> None:
    j.create_session("a")
    j.create_session("b")
    j.append("b", "user_message", {"content": "hi"})
    assert [(s.id, s.count) for s in j.sessions()] == [("a", 0), ("b", 1)]


def test_append_returns_the_event_as_stored(j: journal.Journal, fresh) -> None:
    j.create_session("s")
    event = j.append("s", "user_message", {"content": "hi", "metadata": {"k": (1, 2)}})
    assert (event.session_id, event.seq, event.type) == ("s", 0, "user_message")
    assert event.data == {"content": "hi", "metadata": {"k": [1, 2]}}
    assert fresh().events("s") == [event]


def test_g4_seq_is_contiguous_from_zero(j: journal.Journal) -> None:
    j.create_session("s")
    for i in range(5):
        assert j.append("s", "x.tick", {"i": i}).seq == i
    assert [e.seq for e in j.append_many("s", [("x.tick", {"i": 5}), ("x.tick", {"i": 6})])] == [5, 6]
    assert [e.seq for e in j.events("s")] == list(range(7))
    assert j.count("s") == 7


def test_g2_g12_append_many_with_one_invalid_item_writes_nothing(j: journal.Journal, fresh) -> None:
    j.create_session("s")
    items = [("user_message", {"content": "ok"}), ("user_message", {"content": math.nan}), ("x.a", {})]
    with pytest.raises(journal.InvalidEvent) as info:
        j.append_many("s", items)
    assert info.value.index == 1
    assert fresh().count("s") == 0


def test_g2_append_many_refused_midway_writes_nothing(j: journal.Journal, fresh) -> None:
    j.create_session("s")
    j.append("s", "turn_start", {"turn": 1})
    j.append("s", "assistant_message", {"content": "", "tool_calls": [{"id": "c", "name": "t", "arguments": {}}]})
    dispatch = ("tool_call", {"id": "c", "name": "t"})
    with pytest.raises(journal.AlreadyDispatched):
        j.append_many("s", [("x.before", {}), dispatch, dispatch])
    assert fresh().count("s") == 2


def test_g2_g5_a_second_result_in_a_batch_is_kept_late_and_the_rest_is_written(j: journal.Journal, fresh) -> None:
    j.create_session("s")
    j.append("s", "assistant_message", {"content": "", "tool_calls": [{"id": "c", "name": "t", "arguments": {}}]})
    j.append("s", "tool_result", {"tool_call_id": "c", "content": "done"})
    again, other, after = j.append_many(
        "s",
        [
            ("tool_result", {"tool_call_id": "c", "content": "done"}),  # the same: not written
            ("tool_result", {"tool_call_id": "c", "content": "another"}),  # kept as evidence
            ("x.after", {}),
        ],
    )
    assert again.existing and again.seq == 1
    assert (other.type, other.seq, after.seq) == ("tool_result_late", 2, 3)
    assert [e.type for e in fresh().events("s")] == ["assistant_message", "tool_result", "tool_result_late", "x.after"]


@pytest.mark.parametrize(
    "sql", ["UPDATE events SET data = '{}'", "DELETE FROM events", "UPDATE events SET seq = seq + 10"]
)
def test_g3_raw_update_and_delete_on_events_fail(j: journal.Journal, db_path, sql: str) -> None:
    j.create_session("s")
    j.append("s", "user_message", {"content": "keep me"})
    with Raw(db_path) as raw:
        with pytest.raises(Refused) as info:
            raw.execute(sql)
        assert info.value.kind == "trigger"
    assert [e.data for e in j.events("s")] == [{"content": "keep me"}]


@pytest.mark.parametrize(
    ("session", "seq", "code"),
    [
        ("s", 5, "trigger"),  # a gap after 0..2
        ("s", 1, "key"),  # a taken seq
        ("empty", 1, "trigger"),  # an empty session starts at 0
        ("f", 1, "trigger"),  # below a fork's seed length (2)
        ("f", 0, "trigger"),
        ("f", 3, "trigger"),  # a fork starts at its seed length
    ],
)
def test_g4_raw_insert_off_the_sessions_next_seq_is_refused_by_the_schema(
    j: journal.Journal, db_path, session: str, seq: int, code: str
) -> None:
    j.create_session("s")
    j.create_session("empty")
    j.append_many("s", [("user_message", {"content": str(i)}) for i in range(3)])
    j.fork("s", 1, id="f")
    with Raw(db_path) as conn:
        with pytest.raises(Refused) as info:
            conn.execute(
                "INSERT INTO events (session_id, seq, type, data, time_ms) VALUES (?, ?, 'x.raw', '{}', 0)",
                (session, seq),
            )
        assert info.value.kind == code
        # and the one seq that continues each session is taken
        conn.execute("INSERT INTO events (session_id, seq, type, data, time_ms) VALUES ('s', 3, 'x.raw', '{}', 0)")
        conn.execute("INSERT INTO events (session_id, seq, type, data, time_ms) VALUES ('empty', 0, 'x.raw', '{}', 0)")
        conn.execute("INSERT INTO events (session_id, seq, type, data, time_ms) VALUES ('f', 2, 'x.raw', '{}', 0)")
    assert [j.count(s) for s in ("s", "empty", "f")] == [4, 1, 3]


class _Unjsonable:
    pass


def _cycle() -> dict:
    d: dict = {"content": "x"}
    d["self"] = d
    return d


BAD_INPUTS = [
    pytest.param("no_such_type", {"content": "x"}, "type", id="unknown-type"),
    pytest.param("x.", {}, "type", id="bare-app-prefix"),
    pytest.param("user_message", ["content"], "data", id="data-not-an-object"),
    pytest.param("user_message", {"content": "x", "n": math.nan}, "data.n", id="nan"),
    pytest.param("user_message", {"content": "x", "n": math.inf}, "data.n", id="infinity"),
    pytest.param("user_message", {"content": b"bytes"}, "data.content", id="bytes"),
    pytest.param("user_message", {"content": "x", "m": {1: "a"}}, "data.m", id="non-string-key"),
    pytest.param("user_message", _cycle(), "data.self", id="cycle"),
    pytest.param("user_message", {"content": _Unjsonable()}, "data.content", id="not-json"),
    pytest.param("user_message", {"content": "x" * (1024 * 1024 + 1)}, "data", id="over-size-limit"),
    pytest.param("user_message", {}, "data.content", id="missing-required-field"),
    pytest.param("tool_result", {"tool_call_id": 7, "content": "x"}, "data.tool_call_id", id="wrong-json-type"),
    pytest.param("turn_start", {"turn": True}, "data.turn", id="bool-is-not-an-int"),
    pytest.param(journal.EventType.TURN_START, {}, "data.turn", id="enum-type-missing-field"),
    pytest.param("turn_end", {"turn": 1, "steps": 0, "reason": "bored"}, "data.reason", id="bad-enum"),
    pytest.param(
        "assistant_message",
        {"content": "", "tool_calls": [{"name": "t"}]},
        "data.tool_calls[0].id",
        id="call-without-id",
    ),
    pytest.param("turn_start", {"turn": 1, "surface_op": "append"}, "data.surface_op", id="surface-op-on-bookkeeping"),
    pytest.param(
        "user_message", {"content": "x", "surface_op": ["replace", 3, 1]}, "data.surface_op", id="reversed-range"
    ),
    pytest.param(
        "user_message", {"content": "x", "surface_op": ["replace", -1, 2]}, "data.surface_op", id="negative-range"
    ),
    pytest.param("user_message", {"content": "x", "surface_op": ["swap", 0, 1]}, "data.surface_op", id="unknown-op"),
    pytest.param("user_message", {"content": "x", "surface_op": ["replace", 0]}, "data.surface_op", id="short-range"),
]


@pytest.mark.parametrize("before", [0, 1], ids=["empty", "after-one"])
@pytest.mark.parametrize(("type_", "data", "field"), BAD_INPUTS)
def test_g12_bad_input_is_refused_naming_the_problem_and_writes_nothing(
    db_path, fresh, type_, data, field, before
) -> None:
    with journal.open(db_path, max_event_bytes=1024 * 1024) as j:
        j.create_session("s")
        for _ in range(before):  # then the next append would be a lone INSERT
            j.append("s", "user_message", {"content": "fine"})
        with pytest.raises(journal.InvalidEvent) as info:
            j.append("s", type_, data)
        assert info.value.field == field
        assert field in str(info.value)
    assert fresh().count("s") == before


def test_app_events_and_compaction_ranges_are_accepted(j: journal.Journal) -> None:
    j.create_session("s")
    j.append("s", "x.ui.note", {"anything": [1, {"goes": None}]})
    j.append("s", "assistant_message", {"content": "summary", "surface_op": ["replace", 0, 10**9]})
    assert j.count("s") == 2


def test_events_since_returns_exactly_the_tail(j: journal.Journal) -> None:
    j.create_session("s")
    j.append_many("s", [("x.n", {"i": i}) for i in range(20)])
    for k in (0, 1, 7, 19, 20, 25):
        assert [e.seq for e in j.events("s", since=k)] == list(range(k, 20))
    with pytest.raises(journal.InvalidArgument):
        j.events("s", since=-1)


@pytest.mark.sqlite_only(reason="reads SQLite's query plan")
def test_events_since_reads_a_primary_key_range_not_the_whole_table(j: journal.Journal) -> None:
    j.create_session("s")
    plan = " ".join(
        row[3]
        for row in j._store._conn.execute(
            "EXPLAIN QUERY PLAN SELECT seq, type, data, time_ms FROM events "
            "WHERE session_id = ? AND seq >= ? ORDER BY seq",
            ("s", 5),
        )
    )
    assert "SEARCH events USING PRIMARY KEY (session_id=? AND seq>?)" in plan
    assert "SCAN" not in plan


def test_g4_two_handles_alternating_appends_stay_contiguous(db_path) -> None:
    with journal.open(db_path) as a, journal.open(db_path) as b:
        a.create_session("s")
        seqs = [(a if i % 3 else b).append("s", "x.e", {"i": i}).seq for i in range(30)]
        assert seqs == list(range(30))
        a.purge("s")
        b.create_session("s")
        assert a.append("s", "x.e", {}).seq == 0  # a session made anew starts at 0 again
        assert b.append("s", "x.e", {}).seq == 1


def test_an_append_after_any_write_of_this_journal_is_a_lone_insert(j: journal.Journal, monkeypatch) -> None:
    # Every committed insert of the library leaves the session's next seq with the store, so the
    # next plain append needs no transaction around its INSERT (a performance property: G1-G4
    # hold on either path, and the schema refuses a wrong seq).
    lone: list[bool] = []
    write_one = type(j._store).write_one
    monkeypatch.setattr(
        type(j._store), "write_one", lambda self, *a, **k: lone.append(write_one(self, *a, **k)) or lone[-1]
    )
    j.create_session("s")
    j.append("s", "user_message", {"content": "first"})  # nothing known yet: reads the seq
    turn = j.turn_start("s")
    turn.step_start()
    j.append("s", "user_message", {"content": "after the turn's writes"})
    j.append_many("s", [("x.n", {"i": i}) for i in range(3)])
    j.append("s", "user_message", {"content": "after a batch"})
    assert lone == [True, True]
    assert [e.seq for e in j.events("s")] == list(range(8))
    assert j.check() == []


_JSON = json_values(storable=True, max_leaves=20, max_size=4, max_key_size=8, max_text_size=None)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8), _JSON, max_size=5))
def test_event_data_is_stored_as_the_standard_compact_json_and_returned_as_its_decoding(data) -> None:
    text, copy = Codec().encode_copy("x.any", data)
    assert text == json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    assert copy == json.loads(text) and copy is not data


def _requested(j: journal.Journal, session_id: str, *call_ids: str) -> journal.Turn:
    turn = j.turn_start(session_id)
    turn.step_start()
    turn.assistant("", tool_calls=[{"id": c, "name": "t", "arguments": {}} for c in call_ids])
    return turn


def test_g5_g6_a_lone_dispatch_or_result_is_one_insert_and_a_second_one_is_refused(j, fresh, monkeypatch) -> None:
    lone: list[object] = []
    write_one = type(j._store).write_one
    monkeypatch.setattr(
        type(j._store), "write_one", lambda self, *a, **k: lone.append(write_one(self, *a, **k)) or lone[-1]
    )
    j.create_session("s")
    _requested(j, "s", "c1")
    j.append("s", "tool_call", {"id": "c1", "name": "t"})
    j.append("s", "tool_result", {"tool_call_id": "c1", "content": "first"})
    assert lone == [1, 1]  # each was one autocommit INSERT
    with pytest.raises(journal.AlreadyDispatched):
        j.append("s", "tool_call", {"id": "c1", "name": "t"})
    with pytest.raises(journal.ResultExists):
        j.append("s", "tool_result", {"tool_call_id": "c1", "content": "second"})
    types = [(e.type, e.data.get("content")) for e in fresh().events("s")]
    assert types.count(("tool_call", None)) == 1 and ("tool_result", "first") in types
    assert ("tool_result", "second") not in types


def test_g5_a_result_the_parent_holds_wins_in_a_fork_on_a_lone_append_too(j, fresh) -> None:
    j.create_session("p")
    turn = _requested(j, "p", "c1")
    j.put_result("p", "c1", "parent's")
    turn.step_end()
    turn.complete()
    j.fork("p", id="f")
    j.append("f", "user_message", {"content": "the fork's own first event"})  # the seq is now known
    with pytest.raises(journal.ResultExists):
        j.append("f", "tool_result", {"tool_call_id": "c1", "content": "fork's"})
    assert [e.data.get("content") for e in fresh().events("f") if e.type == "tool_result"] == ["parent's"]


def test_g6_a_lone_dispatch_outside_an_open_turn_is_refused_and_writes_nothing(j, fresh) -> None:
    j.create_session("s")
    turn = _requested(j, "s", "c1")
    turn.step_end()
    turn.complete()
    count = j.count("s")
    with pytest.raises(journal.NoOpenTurn):
        j.append("s", "tool_call", {"id": "c1", "name": "t"})
    assert fresh().count("s") == count


_batch_items = appendable_items(("c1", "c2", "c3"), max_calls=2)
_batches = itertools.count()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(_batch_items, max_size=8), batch=st.lists(_batch_items, min_size=1, max_size=10))
def test_g5_g6_a_batch_written_in_one_insert_is_what_item_by_item_writes(j: journal.Journal, history, batch) -> None:
    """``append_many`` writes a batch in one insert when one read of its calls and of the open
    turns settles what its dispatches and results would read; the item-by-item path (each of
    those reading first) is the oracle: the same events or the same error, the same log after."""
    n = next(_batches)
    outcomes = []
    for way, settled in (("one", None), ("items", False)):
        sid = j.create_session(f"b{n}-{way}").id
        for type_, data in history:
            try:
                j.append(sid, type_, data)
            except (journal.ResultExists, journal.AlreadyDispatched, journal.NoOpenTurn):
                pass
        patch = (
            mock.patch("journal.log._reads_settled_txn", return_value=(False, None))
            if settled is False
            else nullcontext()
        )
        with patch:
            try:
                got: object = [(e.seq, e.type, e.data, e.existing) for e in j.append_many(sid, batch)]
            except journal.JournalError as exc:
                got = type(exc)
        outcomes.append((got, [(e.seq, e.type, e.data) for e in j.events(sid)], j.plan(sid)))
    assert outcomes[0] == outcomes[1]
    assert j.check() == []
