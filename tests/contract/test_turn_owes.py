"""A turn never closes owing the result of a call it dispatched.

A closed turn is not a crash, so recovery leaves it alone; a dispatched call without a result in
it would stay unanswered for good, the scan listing it pending, ``recover`` appending nothing and
the provider view missing it. So ending a turn is refused while it owes one (nothing written, the
turn still open for recovery to close honestly), and the engine's own closes (a worker's
``fail``, the reconciler settling a submission) answer it as recovery would: it MAY have run.
"""

from __future__ import annotations

import pytest

import journal
from journal import Risk, TurnOwesResults, UnansweredCalls

PAY = {"id": "c1", "name": "pay", "arguments": {"cents": 4200}}


def _dispatched_turn(j: journal.Journal, s: str) -> journal.Turn:
    turn = j.turn_start(s)
    with turn.step():
        turn.assistant("", tool_calls=[PAY])
        turn.dispatch("c1")  # the tool ran, or not; no result was recorded
    return turn


def test_ending_a_turn_that_owes_a_dispatched_result_is_refused_and_writes_nothing(j: journal.Journal) -> None:
    s = j.create_session().id
    turn = _dispatched_turn(j, s)
    before = j.events(s)
    for end in (turn.complete, turn.reject):
        with pytest.raises(TurnOwesResults) as refused:
            end()
        assert refused.value.call_ids == ("c1",) and refused.value.start_seq == turn.start_seq
        assert isinstance(refused.value, UnansweredCalls)
        assert "put_result" in str(refused.value) and "MAY have run" in str(refused.value)
    assert j.events(s) == before
    assert not turn.closed

    # The turn is still open, so every face agrees: the scan lists it, recovery answers the call
    # (it may have run), the provider view has nothing missing.
    report = j.scan()
    assert [t.session_id for t in report.open_turns] == [s]
    assert [c.call_id for c in report.pending_calls] == ["c1"]
    j.recover()
    answer = [e for e in j.events(s) if e.type == "tool_result"]
    assert [e.data["metadata"]["risk"] for e in answer] == [Risk.TOOL_OUTCOME_UNKNOWN.value]
    assert j.scan().clean
    assert j.provider_view(s).missing == ()


def test_a_turn_whose_dispatched_calls_are_answered_ends(j: journal.Journal) -> None:
    s = j.create_session().id
    turn = _dispatched_turn(j, s)
    turn.put_result("c1", "paid 42.00")
    turn.complete()
    assert j.scan().clean and j.provider_view(s).missing == ()


def test_the_turn_context_manager_leaves_a_turn_owing_a_result_open(j: journal.Journal) -> None:
    s = j.create_session().id
    with pytest.raises(TurnOwesResults), j.turn(s) as turn, turn.step():
        turn.assistant("", tool_calls=[PAY])
        with turn.dispatch("c1"):
            pass  # a tool that never reported
    assert [e.type for e in j.events(s)][-1] == "step_end"
    j.recover()
    assert j.events(s)[-1].data["reason"] == "interrupted" and j.provider_view(s).missing == ()


def test_a_failed_claim_answers_what_its_turn_dispatched_before_closing(j: journal.Journal) -> None:
    s = j.create_session().id
    j.submit(s, "user_message", {"content": "pay"})
    claim = j.claim()
    claim.turn.step_start()
    claim.turn.assistant("", tool_calls=[PAY])
    claim.turn.dispatch("c1")
    claim.fail("the worker gave up")
    types = [e.type for e in j.events(s)]
    assert types[-3:] == ["step_end", "tool_result", "turn_end"]
    result = j.events(s)[-2]
    assert result.data["tool_call_id"] == "c1" and result.data["metadata"]["risk"] == Risk.TOOL_OUTCOME_UNKNOWN.value
    assert "MAY have run" in result.data["content"]
    assert j.scan().clean and j.provider_view(s).missing == ()
    assert j.plan(s) == []


def test_a_plain_turn_end_may_close_a_turn_whose_call_awaits_its_result_and_every_face_says_so(
    j: journal.Journal,
) -> None:
    """A framework's run may end with a call handed out and its result to come later (a deferred
    or long-running tool): its adapter appends the turn_end as it is. Nothing is invented: the
    call is listed owed by the scan and the provider view, recovery leaves the closed turn alone,
    and the result is appended when it comes."""
    s = j.create_session().id
    turn = _dispatched_turn(j, s)
    j.append(s, "turn_end", {"turn": turn.turn, "steps": 1, "reason": "complete"})
    assert j.scan().open_turns == () and [c.call_id for c in j.scan().pending_calls] == ["c1"]
    assert [m.tool_call_id for m in j.provider_view(s).missing] == ["c1"]
    assert j.plan(s) == [] and all(not r.appended for r in j.recover())
    j.put_result(s, "c1", "approved and paid")
    assert j.scan().clean and j.provider_view(s).missing == ()
