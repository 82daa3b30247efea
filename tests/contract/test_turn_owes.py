"""A turn closed while a call it dispatched has no result: every face says the call is owed.

A framework may end a run with a call handed out and its result still to come (pydantic-ai's
deferred tools: a human approves the call later), and a closed turn is not a crash (DESIGN §7): recovery
invents nothing for it. The scan lists the call among the dispatched calls without a result, the
provider view names it missing, and the result is appended, as any result, when it comes.
"""

from __future__ import annotations

import pytest

import journal
from journal import UnansweredCalls

PAY = {"id": "c1", "name": "pay", "arguments": {"cents": 4200}}


def _dispatched_turn(j: journal.Journal, s: str) -> journal.Turn:
    turn = j.turn_start(s)
    with turn.step():
        turn.assistant("", tool_calls=[PAY])
        turn.dispatch("c1")  # handed out; its result comes later
    return turn


def _owed_everywhere(j: journal.Journal, s: str) -> None:
    report = j.scan()
    assert report.open_turns == () and [c.call_id for c in report.pending_calls] == ["c1"]
    assert [m.tool_call_id for m in j.provider_view(s).missing] == ["c1"]
    with pytest.raises(UnansweredCalls):
        j.messages(s, provider=True)
    assert j.plan(s) == [] and all(not r.appended for r in j.recover())


@pytest.mark.parametrize("close", ["turn_api", "plain_append"])
def test_a_turn_closed_owing_a_dispatched_result_is_owed_on_every_face_until_the_result_lands(
    j: journal.Journal, close: str
) -> None:
    s = j.create_session().id
    turn = _dispatched_turn(j, s)
    if close == "turn_api":
        turn.complete()
    else:
        j.append(s, "turn_end", {"turn": turn.turn, "steps": 1, "reason": "complete"})
    _owed_everywhere(j, s)
    j.put_result(s, "c1", "approved and paid")
    assert j.scan().clean and j.provider_view(s).missing == ()
    assert [m.role for m in j.messages(s, provider=True)] == ["assistant", "tool"]


def test_a_turn_whose_tool_raised_is_left_open_and_recovery_says_the_call_may_have_run(j: journal.Journal) -> None:
    s = j.create_session().id
    with pytest.raises(RuntimeError), j.turn(s) as turn, turn.step():
        turn.assistant("", tool_calls=[PAY])
        with turn.dispatch("c1"):
            raise RuntimeError("the payment service hung up")
    assert [t.session_id for t in j.scan().open_turns] == [s]
    j.recover()
    (answer,) = [e for e in j.events(s) if e.type == "tool_result"]
    assert answer.data["metadata"]["risk"] == journal.Risk.TOOL_OUTCOME_UNKNOWN.value
    assert j.scan().clean and j.provider_view(s).missing == ()
