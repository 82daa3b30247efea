"""A NUL (U+0000) in what a model or a tool wrote is kept, on both backends (DESIGN §16, parity).

SQLite holds any text; PostgreSQL's json operators refuse a whole document that holds the escape
of U+0000, so the server reads the events' JSON through ``journal_json_of``. The stored text is
kept exactly: every read returns the NUL as written, and every rule keyed on the JSON (G5's one
result, G6's one dispatch, the derived calls and turns) holds as for any other text.
"""

from __future__ import annotations

import pytest

import journal
from journal import InvalidEvent, Risk
from journal.preview import Clipped

NUL = "\x00"
ODD_ID = "call\\u0000x"  # a backslash, then "u0000": not a NUL, and never read as one


def _events(call_id: str) -> list[tuple[str, dict]]:
    call = {"id": call_id, "name": "read_file", "arguments": {"path": f"a{NUL}b", "n": 1}}
    return [
        ("user_message", {"content": f"read {NUL} please", "metadata": {"note": NUL}}),
        ("turn_start", {"turn": 1}),
        ("step_start", {"turn": 1, "step": 1}),
        ("assistant_message", {"content": f"sure{NUL}", "tool_calls": [call], "stop_reason": "tool_use"}),
        ("tool_call", {"id": call_id, "name": "read_file", "arguments": {"path": f"a{NUL}b"}}),
    ]


@pytest.mark.parametrize("call_id", ["c1", ODD_ID])
def test_g5_g6_a_nul_anywhere_in_data_is_kept_and_every_rule_still_holds(
    j: journal.Journal, fresh, call_id: str
) -> None:
    s = j.create_session().id
    written = j.append_many(s, _events(call_id))
    result = j.put_result(s, call_id, f"bytes: {NUL}{NUL}\\u0000 end")
    assert result.won
    assert not j.put_result(s, call_id, "again").won  # G5: the first result wins
    with pytest.raises(journal.AlreadyDispatched):
        j.dispatch(s, call_id)  # G6: one dispatch

    again = fresh()
    events = again.events(s)
    assert [e.data for e in events[: len(written)]] == [e.data for e in written]
    (answer,) = [e for e in events if e.type == "tool_result"]
    assert answer.data["content"] == f"bytes: {NUL}{NUL}\\u0000 end"
    assert [e.type for e in events[-2:]] == ["tool_result", "tool_result_late"]
    messages = again.messages(s)
    assert messages[0].content == f"read {NUL} please" and messages[-1].tool_call_id == call_id
    assert messages[-1].content == answer.data["content"]
    assert again.provider_view(s).missing == ()
    assert again.messages(s, tail=3) == messages[-3:]
    cut = again.messages(s, tail=3, chars=100)
    assert [m.tool_call_id for m in cut] == [m.tool_call_id for m in messages[-3:]]
    assert [p.seq for p in again.previews(s, chars=4)] == [e.seq for e in events]


def test_recovery_answers_a_call_whose_arguments_hold_a_nul(j: journal.Journal) -> None:
    s = j.create_session().id
    j.append_many(s, _events("c1"))
    assert [c.call_id for c in j.scan().pending_calls] == ["c1"]
    j.recover()
    answer = [e for e in j.events(s) if e.type == "tool_result"]
    assert [e.data["metadata"]["risk"] for e in answer] == [Risk.TOOL_OUTCOME_UNKNOWN.value]
    assert j.scan().clean and j.provider_view(s).missing == ()


def test_a_nul_in_a_call_id_or_a_meta_value_is_still_refused_before_anything_is_written(j: journal.Journal) -> None:
    with pytest.raises(journal.InvalidArgument):
        j.create_session("m", meta={"title": f"t{NUL}"})  # a meta value is a filter's key
    assert [x.id for x in j.sessions()] == []
    s = j.create_session().id
    with pytest.raises(InvalidEvent):
        j.append(s, "tool_call", {"id": f"c{NUL}1", "name": "pay"})
    assert j.events(s) == []


def test_a_cut_read_keeps_a_nul_and_cuts_around_it(j: journal.Journal) -> None:
    s = j.create_session().id
    j.append_many(s, [
        ("user_message", {"content": f"ab{NUL}cd", "metadata": {f"{NUL}k": f"v{NUL}w"}}),
        ("assistant_message", {"content": "", "tool_calls": [
            {"id": "c1", "name": "read", "arguments": {"path": f"x{NUL}" + "y" * 50}}]}),
        ("tool_result", {"tool_call_id": "c1", "content": f"{NUL}" * 10}),
    ])  # fmt: skip
    whole = [p.data for p in j.previews(s, chars=2000)]
    assert whole == [e.data for e in j.events(s)]
    short = j.previews(s, chars=3)
    assert short[0].data["content"] == f"ab{NUL}" and short[0].cut == ("content",)
    assert isinstance(short[0].data["content"], Clipped)
    (call,) = short[1].data["tool_calls"]
    assert call["id"] == "c1" and isinstance(call["arguments"], Clipped) and len(call["arguments"]) == 3
    assert short[2].data["tool_call_id"] == "c1" and short[2].data["content"] == NUL * 3
    assert [m.content for m in j.messages(s, tail=3, chars=3)] == [f"ab{NUL}", "", NUL * 3]
    assert j.provider_view(s, tail=3, chars=3).missing == ()
