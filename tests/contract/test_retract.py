"""``retract`` never strands a call: a tool result goes with the assistant message that made its
call (and what follows that message), so neither the provider view nor ``messages(provider=True)``
ever owes a call whose result was taken back, and recovery still answers, in the log, a
dispatched call it owes (G8) without the provider view owing it."""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import journal
from journal import transfer
from journal.pure.plan import plan
from journal.pure.view import Message, ProviderView, exchange_start, provider_tail
from tests.conftest import run_child


def call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "name": "get", "arguments": {}}


def asks(j: journal.Journal, *call_ids: str, stop_reason: str = "tool_use") -> journal.Event:
    data = {"content": "", "tool_calls": [call(c) for c in call_ids], "stop_reason": stop_reason}
    return j.append("s", "assistant_message", data)


def answer(j: journal.Journal, call_id: str) -> journal.Event:
    return j.append("s", "tool_result", {"tool_call_id": call_id, "content": f"result of {call_id}"})


def owes_nothing(j: journal.Journal, session_id: str = "s") -> list[Message]:
    """Every view agrees that no call is owed; returns the provider view's messages."""
    view = j.provider_view(session_id)
    assert view.missing == ()
    assert j.messages(session_id, provider=True) == view.messages  # raises UnansweredCalls if one is owed
    for n in range(len(view.messages) + 2):
        assert j.provider_view(session_id, tail=n).missing == ()
        assert j.messages(session_id, tail=n) == j.messages(session_id)[max(len(j.messages(session_id)) - n, 0) :]
    kept = {m.tool_call_id for m in view.messages if m.role == "tool"}
    asked = {c["id"] for m in view.messages for c in m.tool_calls}
    assert kept == asked  # no assistant call without its result, no result without its call
    assert j.check() == []
    return view.messages


def test_g5_retracting_the_tail_tool_result_takes_its_assistant_message_with_it(j: journal.Journal, fresh) -> None:
    j.create_session("s")
    j.append("s", "user_message", {"content": "hi"})
    asked = asks(j, "c1", "c2")
    answer(j, "c1")
    answer(j, "c2")
    gone = j.retract("s", reason="regenerate")
    assert gone is not None and gone.role == "tool" and gone.tool_call_id == "c2"  # the transcript's last
    again = fresh()  # what was committed, through a fresh connection
    assert [m.content for m in owes_nothing(again)] == ["hi"]
    retracts = [e for e in again.events("s") if e.type == "retract"]
    assert [e.data for e in retracts] == [{"seq": s, "reason": "regenerate"} for s in (3, 2, asked.seq)]
    assert again.count("s") == 7  # nothing deleted (G3)
    j.append("s", "user_message", {"content": "again"})
    assert [m.content for m in owes_nothing(j)] == ["hi", "again"]


def test_g5_retracting_an_assistant_message_whose_results_follow_takes_the_whole_exchange(j: journal.Journal) -> None:
    j.create_session("s")
    j.append("s", "user_message", {"content": "hi"})
    asks(j, "c1")
    answer(j, "c1")
    j.append("s", "assistant_message", {"content": "done"})
    assert j.retract("s").content == "done"  # a message without calls goes alone
    assert [m.content for m in owes_nothing(j)] == ["hi", "", "result of c1"]
    assert j.retract("s").tool_call_id == "c1"  # the result, and the message that asked for it
    assert [m.content for m in owes_nothing(j)] == ["hi"]
    assert j.retract("s").content == "hi"
    assert j.retract("s") is None and owes_nothing(j) == []


def test_g8_a_pending_call_of_a_retracted_assistant_message_is_answered_by_recovery_not_owed_by_the_view(
    j: journal.Journal, fresh
) -> None:
    j.create_session("s")
    j.append("s", "user_message", {"content": "pay"})
    turn = j.turn_start("s")
    turn.step_start()
    turn.assistant("", tool_calls=[call("c1"), call("c2")], stop_reason="tool_use")
    with turn.dispatch("c1") as dispatched:
        dispatched.result("paid")
    turn.dispatch("c2")  # dispatched, then the process "dies": no result
    assert j.provider_view("s").missing[0].tool_call_id == "c2"
    gone = j.retract("s")
    assert gone.tool_call_id == "c1"  # the assistant message went with its answered call
    assert [m.content for m in owes_nothing(j)] == ["pay"]
    # Recovery still answers, in the log, the dispatched call the open turn owes (G8)...
    repairs = plan(j.events("s"))
    assert [(r.type, r.tool_call_id) for r in repairs] == [("tool_result", "c2"), ("turn_end", None)]
    assert repairs[0].risk == journal.Risk.TOOL_OUTCOME_UNKNOWN
    j.recover("s", force=True)
    assert plan(j.events("s")) == [] and j.scan().pending_calls == ()
    # ...and the provider view leaves that answer out: no message in it made the call.
    again = fresh()
    assert [m.content for m in owes_nothing(again)] == ["pay"]
    assert any(m.role == "tool" and m.tool_call_id == "c2" for m in again.messages("s"))  # the log's evidence


def test_a_result_written_after_its_assistant_message_was_retracted_is_left_out(j: journal.Journal) -> None:
    j.create_session("s")
    j.append("s", "user_message", {"content": "hi"})
    asks(j, "c1")
    assert j.retract("s").tool_calls[0]["id"] == "c1"  # no result yet: it goes alone
    answer(j, "c1")
    assert [m.content for m in owes_nothing(j)] == ["hi"]
    assert j.retract("s").tool_call_id == "c1"  # an orphan result goes alone too
    assert [m.content for m in owes_nothing(j)] == ["hi"]


def test_a_long_batch_of_results_goes_whole_whatever_its_length(j: journal.Journal) -> None:
    j.create_session("s")
    j.append("s", "user_message", {"content": "hi"})
    ids = [f"c{n}" for n in range(40)]
    asks(j, *ids)
    for call_id in reversed(ids):  # answered in any order: the view places them in call order
        answer(j, call_id)
    j.retract("s")
    assert [m.content for m in owes_nothing(j)] == ["hi"]
    assert sum(e.type == "retract" for e in j.events("s")) == 41


def test_results_interleaved_across_two_assistant_messages_take_both(j: journal.Journal) -> None:
    j.create_session("s")
    j.append("s", "user_message", {"content": "hi"})
    asks(j, "c1")
    asks(j, "c2")
    answer(j, "c1")
    answer(j, "c2")  # its own assistant is the second, but taking it alone would strand c1
    j.retract("s")
    assert [m.content for m in owes_nothing(j)] == ["hi"]


def test_a_result_of_a_left_out_or_compacted_assistant_message_goes_alone(j: journal.Journal) -> None:
    j.create_session("s")
    j.append("s", "user_message", {"content": "hi"})
    asks(j, "c1", stop_reason="aborted")  # left out of the provider view, with its calls
    answer(j, "c1")
    assert j.retract("s").tool_call_id == "c1"
    assert [m.role for m in j.messages("s")] == ["user", "assistant"]
    owes_nothing(j)
    asks(j, "c2")
    j.compact("s", 1, 2, "a summary", type="assistant_message")  # the summary stands for both
    answer(j, "c2")
    assert j.retract("s").tool_call_id == "c2"
    assert [m.content for m in owes_nothing(j)] == ["hi", "a summary"]


def test_a_forks_retract_reaches_into_what_it_inherits_and_leaves_the_parent_alone(j: journal.Journal) -> None:
    j.create_session("s")
    j.append("s", "user_message", {"content": "hi"})
    asks(j, "c1")
    fork = j.fork("s", id="f").id
    j.append(fork, "tool_result", {"tool_call_id": "c1", "content": "forked answer"})
    assert j.retract(fork).content == "forked answer"
    assert [m.content for m in owes_nothing(j, fork)] == ["hi"]
    assert [m.role for m in j.messages("s")] == ["user", "assistant"]  # the parent still asks


def test_an_exported_session_with_a_retracted_exchange_imports_and_exports_the_same_bytes(
    j: journal.Journal,
) -> None:
    j.create_session("s")
    j.append("s", "user_message", {"content": "hi"})
    asks(j, "c1", "c2")
    answer(j, "c1")
    answer(j, "c2")
    j.retract("s")
    lines = [line.replace('"s"', '"s2"') for line in transfer.export_lines(j, ["s"])]
    assert transfer.import_lines(j, lines) == 1
    assert list(transfer.export_lines(j, ["s2"])) == lines
    assert [m.content for m in owes_nothing(j, "s2")] == ["hi"]


RETRACT_CHILD = """
import sys, journal
with journal.open(sys.argv[1]) as j:
    j.retract("s")
"""


@pytest.mark.parametrize("point", ["retract.before_commit", "retract.after_commit"])
def test_g2_a_kill_at_the_retract_commit_leaves_the_whole_exchange_or_none_of_it(point: str, db_path, fresh) -> None:
    with fresh() as j:
        j.create_session("s")
        j.append("s", "user_message", {"content": "hi"})
        asks(j, "c1", "c2")
        answer(j, "c1")
        answer(j, "c2")
    done = run_child(RETRACT_CHILD, str(db_path), env={"JOURNAL_CRASH_AT": point})
    assert done.returncode == -signal.SIGKILL, done.stderr
    with fresh() as j:
        kept = owes_nothing(j)
        assert [m.role for m in kept] == (["user", "assistant", "tool", "tool"] if "before" in point else ["user"])
        assert sum(e.type == "retract" for e in j.events("s")) == (0 if "before" in point else 3)


# -- the pure rule ------------------------------------------------------------------------------


def _messages(*shape: str) -> list[Message]:
    """Messages from a compact shape: ``u``, ``a`` (no calls), ``a:c1,c2`` (calls), ``x:c1`` (an
    aborted assistant with calls), ``t:c1`` (a result)."""
    out = []
    for seq, item in enumerate(shape):
        kind, _, ids = item.partition(":")
        calls = tuple(call(c) for c in ids.split(",")) if ids and kind in "ax" else ()
        if kind == "u":
            out.append(Message(role="user", content="u", seq=seq))
        elif kind in "ax":
            out.append(
                Message(role="assistant", tool_calls=calls, stop_reason="aborted" if kind == "x" else None, seq=seq)
            )
        else:
            out.append(Message(role="tool", tool_call_id=ids, seq=seq))
    return out


@pytest.mark.parametrize(
    ("shape", "whole", "start"),
    [
        ((), True, 0),
        (("u",), True, 0),
        (("u", "a"), False, 1),
        (("u", "a:c1"), False, 1),  # no result yet: it goes alone
        (("u", "a:c1", "t:c1"), False, 1),
        (("u", "a:c1,c2", "t:c1", "t:c2"), False, 1),
        (("u", "a:c1", "t:c1", "u"), False, 3),
        (("a:c1", "a:c2", "t:c1", "t:c2"), False, 0),
        (("u", "x:c1", "t:c1"), False, None),  # its owner may stand before the window
        (("u", "x:c1", "t:c1"), True, 2),  # an aborted assistant owns nothing
        (("a:c1", "u", "x:c1", "t:c1"), False, 0),  # the kept one that made the call owns it
        (("t:c9",), False, None),
        (("t:c9",), True, 0),
        (("a:c1", "t:c1", "a:c1", "t:c1"), False, 2),  # a reused id: the nearest assistant
    ],
    ids=lambda value: json.dumps(value) if isinstance(value, tuple) else str(value),
)
def test_exchange_start_keeps_every_call_with_its_result(
    shape: tuple[str, ...], whole: bool, start: int | None
) -> None:
    messages = _messages(*shape)
    assert exchange_start(messages, whole=whole) == start


def provider_view_of(transcript: list[Message]) -> ProviderView:
    """The provider view of a transcript already folded (all of it)."""
    view = provider_tail(transcript, len(transcript), whole=True)
    assert view is not None
    return view


_SHAPES = st.lists(
    st.one_of(
        st.just("u"),
        st.builds(
            lambda ids: "a:" + ",".join(ids) if ids else "a", st.lists(st.sampled_from("123"), unique=True, max_size=2)
        ),
        st.builds(lambda i: f"x:{i}", st.sampled_from("123")),
        st.builds(lambda i: f"t:{i}", st.sampled_from("123")),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(_SHAPES, st.integers(min_value=1, max_value=12))
def test_exchange_start_strands_no_call_and_a_window_agrees_with_the_whole(shape: list[str], window: int) -> None:
    messages = _messages(*shape)
    start = exchange_start(messages, whole=True)
    assert start is not None and (not messages or start < len(messages))
    # What stays owes no call it did not owe before: none whose result went with the retract
    # (a result is never written twice for a call, G5, so nobody could answer it again).
    owed_before = {(m.assistant_seq, m.tool_call_id) for m in provider_view_of(messages).missing}
    owed_after = {(m.assistant_seq, m.tool_call_id) for m in provider_view_of(messages[:start]).missing}
    assert owed_after <= owed_before
    # Read from the end, a window gives the same answer or asks for more.
    last = messages[max(len(messages) - window, 0) :]
    found = exchange_start(last, whole=len(last) == len(messages))
    assert found is None or found + len(messages) - len(last) == start
