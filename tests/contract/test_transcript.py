"""The messages view on a journal: fold, compaction, the provider view after a recovery."""

from __future__ import annotations

import pytest

import journal


def _chat(j: journal.Journal, s: str, n: int) -> None:
    for i in range(n):
        j.append(s, "user_message" if i % 2 == 0 else "assistant_message", {"content": f"m{i}"})


def test_messages_fold_the_surface_events_and_skip_bookkeeping(j: journal.Journal) -> None:
    s = j.create_session().id
    with j.turn(s) as turn, turn.step():
        j.append(s, "user_message", {"content": "hi", "name": "ada"})
        turn.assistant("hello", reasoning="be polite")
    messages = j.messages(s)
    assert [(m.role, m.content) for m in messages] == [("user", "hi"), ("assistant", "hello")]
    assert messages[0].name == "ada" and messages[1].reasoning == "be polite"


def test_compact_replaces_a_range_and_keeps_later_appends(j: journal.Journal) -> None:
    s = j.create_session().id
    _chat(j, s, 6)
    event = j.compact(s, 1, 3, "summary of m1..m3")
    assert event.data["surface_op"] == ["replace", 1, 3]
    j.append(s, "user_message", {"content": "after"})
    assert [m.content for m in j.messages(s)] == ["m0", "summary of m1..m3", "m4", "m5", "after"]
    assert j.count(s) == 8  # the log keeps everything


@pytest.mark.parametrize(("start", "stop"), [(3, 1), (-1, 2), (0, 6), (6, 6), (0.5, 2), (True, 2)])
def test_compact_with_a_bad_range_is_a_typed_error_and_writes_nothing(j: journal.Journal, start, stop) -> None:
    s = j.create_session().id
    _chat(j, s, 6)
    with pytest.raises(journal.InvalidRange):
        j.compact(s, start, stop, "x")
    assert j.count(s) == 6


def test_the_provider_view_of_a_recovered_session_answers_each_call_once_right_after_it(j: journal.Journal) -> None:
    s = j.create_session().id
    j.append(s, "user_message", {"content": "do three things"})
    turn = j.turn_start(s)
    turn.step_start()
    calls = [{"id": f"c{i}", "name": "t", "arguments": {}} for i in range(3)]
    turn.assistant("", tool_calls=calls)
    turn.dispatch("c2").result("third done")  # results out of call order
    turn.dispatch("c0")
    j.append(s, "assistant_message", {"content": "partial", "stop_reason": "aborted"})
    before = j.provider_view(s)
    assert sorted(m.tool_call_id for m in before.missing) == ["c0", "c1"]
    with pytest.raises(journal.UnansweredCalls) as info:
        j.messages(s, provider=True)
    assert sorted(info.value.call_ids) == ["c0", "c1"]
    j.recover(s)
    assert j.messages(s, provider=True) == j.provider_view(s).messages
    view = j.provider_view(s)
    assert view.missing == ()
    roles = [(m.role, m.tool_call_id) for m in view.messages]
    assert roles == [("user", None), ("assistant", None), ("tool", "c0"), ("tool", "c1"), ("tool", "c2")]
    assert [m.risk for m in view.messages[2:]] == ["tool_outcome_unknown", "tool_not_started", None]
    assert all(m.stop_reason != "aborted" for m in view.messages)
