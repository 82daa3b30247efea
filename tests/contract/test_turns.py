"""The live loop (DESIGN §6): turns, steps, the turn journal, dispatch (G6), results (G5)."""

from __future__ import annotations

import asyncio

import pytest

import journal
import journal.aio
from journal import Phase

CALLS = [
    {"id": "c1", "name": "ls", "arguments": {"path": "/"}},
    {"id": "c2", "name": "rm", "arguments": {"path": "/tmp/x"}},
]


def _phase(j: journal.Journal, session_id: str) -> Phase | None:
    state = j.turn_state(session_id)
    return None if state is None else state.phase


def test_a_full_turn_moves_through_the_phases_and_closes(j: journal.Journal, fresh) -> None:
    s = j.create_session().id
    with j.turn(s) as turn:
        assert turn.turn == 1 and _phase(j, s) is Phase.BEFORE_PROVIDER
        with turn.step():
            turn.provider_started(stream_key="k1")
            assert _phase(j, s) is Phase.PROVIDER_STARTED
            turn.assistant("", tool_calls=CALLS, stop_reason="tool_use")
            state = j.turn_state(s)
            assert state.phase is Phase.TOOL_REQUEST_RECORDED and state.tool_request == CALLS
            for call in CALLS:
                with turn.dispatch(call["id"]) as d:
                    assert d.arguments == call["arguments"]
                    d.result(f"ran {call['name']}")
        assert _phase(j, s) is Phase.BEFORE_PROVIDER
        with turn.step():
            turn.assistant("done", stop_reason="stop")
    types = [e.type for e in fresh().events(s)]
    assert types == [
        "turn_start", "step_start", "assistant_message", "tool_call", "tool_result", "tool_call", "tool_result",
        "step_end", "step_start", "assistant_message", "step_end", "turn_end",
    ]  # fmt: skip
    end = j.events(s)[-1]
    assert end.data == {"turn": 1, "steps": 2, "reason": "complete"}
    assert j.turn_state(s) is None
    assert j.turn_state(s, 0).phase is Phase.COMMITTED
    assert j.check() == []


def test_turns_are_numbered_from_one_by_counting_the_logs_turns(j: journal.Journal) -> None:
    s = j.create_session().id
    for expected in (1, 2, 3):
        turn = j.turn_start(s)
        assert turn.turn == expected
        j.turn_end(turn, reason="rejected" if expected == 2 else "complete")
    fork = j.fork(s)
    assert j.turn_start(fork.id).turn == 4


def test_a_step_whose_body_raises_ends_with_outcome_error_and_the_exception_propagates(j: journal.Journal) -> None:
    s = j.create_session().id
    turn = j.turn_start(s)
    with pytest.raises(ZeroDivisionError), turn.step():
        raise ZeroDivisionError("the step's body failed")
    assert j.events(s)[-1].data == {"turn": 1, "step": 1, "outcome": "error"}


def test_a_turn_whose_body_raises_is_left_open_for_recovery(j: journal.Journal) -> None:
    s = j.create_session().id
    with pytest.raises(RuntimeError), j.turn(s):
        raise RuntimeError("the model fell over")
    assert [e.type for e in j.events(s)] == ["turn_start"]
    assert _phase(j, s) is Phase.BEFORE_PROVIDER


def test_stream_chunks_first_write_wins_and_read_back_in_order(j: journal.Journal) -> None:
    s = j.create_session().id
    assert j.save_chunk(s, "k", 1, "world")
    assert j.save_chunk(s, "k", 0, "hello ")
    assert not j.save_chunk(s, "k", 0, "HELLO ")
    assert j.stream_chunks("k") == ["hello ", "world"]


def test_g5_second_result_loses_and_is_kept_as_late_evidence(j: journal.Journal, fresh) -> None:
    s = j.create_session().id
    turn = j.turn_start(s)
    turn.step_start()
    turn.assistant("", tool_calls=CALLS[:1])
    first = j.put_result(s, "c1", "real")
    assert first.won and first.late is None
    again = j.put_result(s, "c1", "real")
    assert not again.won and again.event == first.event and again.late is None
    loser = j.put_result(s, "c1", "different", is_error=True)
    assert not loser.won and loser.event == first.event
    assert loser.late.type == "tool_result_late" and loser.late.data["content"] == "different"
    events = fresh().events(s)
    assert [e.type for e in events].count("tool_result") == 1
    assert [e.type for e in events].count("tool_result_late") == 1


def test_dispatching_twice_is_refused_so_a_call_never_runs_twice(j: journal.Journal) -> None:
    s = j.create_session().id
    turn = j.turn_start(s)
    turn.step_start()
    turn.assistant("", tool_calls=CALLS[:1])
    first = turn.dispatch("c1")
    with pytest.raises(journal.AlreadyDispatched) as info:
        turn.dispatch("c1")
    assert info.value.seq == first.event.seq


def test_a_stale_attempts_writes_raise_lease_lost_and_change_nothing(j: journal.Journal, fresh) -> None:
    s = j.create_session().id
    turn = j.turn_start(s)
    turn.step_start()
    turn.assistant("", tool_calls=CALLS[:1])
    # Another worker takes the turn over (the reconciler's new attempt does exactly this).
    with j._store.write("test") as db:
        db.execute("UPDATE turn_journal SET attempt = 2 WHERE session_id = ?", (s,))
    before_events = fresh().events(s)
    before_state = j.turn_state(s)
    for write in (
        lambda: turn.step_end(),
        lambda: turn.provider_started(stream_key="k"),
        lambda: turn.dispatch("c1"),
        lambda: turn.complete(),
        lambda: turn.assistant("late"),
    ):
        with pytest.raises(journal.LeaseLost):
            write()
    assert fresh().events(s) == before_events
    assert j.turn_state(s) == before_state


def test_a_turn_closed_under_its_handle_dispatches_no_more_tools(j: journal.Journal) -> None:
    s = j.create_session().id
    turn = j.turn_start(s)
    turn.step_start()
    turn.assistant("", tool_calls=CALLS[:1])
    j.append(s, "turn_end", {"turn": 1, "steps": 1, "reason": "rejected"})  # another process ended it
    with pytest.raises(journal.LeaseLost):
        turn.dispatch("c1")
    with pytest.raises(journal.NoOpenTurn):
        j.dispatch(s, "c1")


def test_g6_a_call_an_earlier_turn_left_awaiting_approval_is_dispatched_by_the_turn_that_resumes_it(
    j: journal.Journal, fresh
) -> None:
    """Frameworks pause a run for a human's approval: the turn that requested the call ends
    without answering it, and a later run executes it. Its dispatch is committed, before the
    tool runs, by the turn that holds the session then; nothing else may dispatch it."""
    s = j.create_session().id
    first = j.turn_start(s)
    with first.step():
        first.assistant("", tool_calls=CALLS[:1])
    first.complete()  # paused: c1 awaits a human
    with pytest.raises(journal.NoOpenTurn):
        j.dispatch(s, "c1")  # no turn resumes it
    with pytest.raises(journal.LeaseLost):
        first.dispatch("c1")  # the paused turn's own handle: closed
    second = j.turn_start(s)
    with second.dispatch("c1") as call:
        assert [e.type for e in fresh().events(s, since=second.start_seq)] == ["turn_start", "tool_call"]
        call.result("approved and paid")
    with pytest.raises(journal.AlreadyDispatched):
        second.dispatch("c1")
    second.complete()
    assert j.scan().clean and j.provider_view(s).missing == ()


def test_g8_a_resumed_call_killed_inside_its_tool_is_answered_may_have_run_by_recovery(j: journal.Journal) -> None:
    """The call an approval resumed was handed out by the resuming turn: a crash inside it is
    that turn's, so the scan lists it as owed and recovery answers it "MAY have run"."""
    s = j.create_session().id
    first = j.turn_start(s)
    with first.step():
        first.assistant("", tool_calls=CALLS[:1])
    first.complete()  # paused for a human
    second = j.turn_start(s)
    second.dispatch("c1")  # approved, handed out, then the process dies inside the tool
    (turn,) = j.scan().open_turns
    assert turn.start_seq == second.start_seq and [c.call_id for c in turn.owed] == ["c1"]
    planned = j.plan(s)
    (result,) = j.recover(s, force=True)
    assert [(e.type, e.data) for e in result.appended] == [(r.type, r.data) for r in planned]
    answer, end = result.appended
    assert (
        answer.data["tool_call_id"] == "c1"
        and answer.data["metadata"]["risk"] == journal.Risk.TOOL_OUTCOME_UNKNOWN.value
    )
    assert end.data["reason"] == "interrupted"
    assert j.scan().clean and j.provider_view(s).missing == ()


def test_a_turn_closed_by_recovery_dispatches_no_more_tools(j: journal.Journal) -> None:
    s = j.create_session().id
    turn = j.turn_start(s)
    turn.step_start()
    turn.assistant("", tool_calls=CALLS[:1])
    (result,) = j.recover(s, force=True)  # the turn's owner is alive: only a forced recovery closes it
    assert [e.type for e in result.appended] == ["tool_result", "turn_end"]
    for dispatch in (lambda: turn.dispatch("c1"), lambda: j.dispatch(s, "c1")):
        with pytest.raises(journal.ResultExists):  # recovery answered it: it did not run, and never will
            dispatch()


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda j, s, end: j.append(s, "turn_end", end), id="append"),
        pytest.param(lambda j, s, end: j.append_many(s, [("x.note", {}), ("turn_end", end)]), id="append_many"),
        pytest.param(lambda j, s, end: asyncio.run(_async_append(j, s, end)), id="async_append"),
    ],
)
def test_g12_only_recovery_ends_a_turn_as_interrupted(j: journal.Journal, fresh, write) -> None:
    """DESIGN §5: ``interrupted`` is recovery's mark of a crash; a plain append of it is refused
    before anything is written, on every face, and recovery still writes its own."""
    s = j.create_session().id
    j.append(s, "turn_start", {"turn": 1})
    before = j.events(s)
    with pytest.raises(journal.InvalidEvent, match="only by recovery") as refused:
        write(j, s, {"turn": 1, "steps": 0, "reason": "interrupted"})
    assert refused.value.field == "reason"
    assert fresh().events(s) == before
    j.append(s, "turn_end", {"turn": 1, "steps": 0, "reason": "rejected"})  # a turn ended on purpose
    j.append(s, "turn_start", {"turn": 2})
    (result,) = j.recover(s)
    assert [e.data.get("reason") for e in result.appended] == ["interrupted"]


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda j, s, end: j.append(s, "turn_end", end), id="append"),
        pytest.param(lambda j, s, end: j.append_many(s, [("x.note", {}), ("turn_end", end)]), id="append_many"),
        pytest.param(lambda j, s, end: j.append_many(s, [("x.note", {}, "k"), ("turn_end", end)]), id="keyed_batch"),
        pytest.param(lambda j, s, end: asyncio.run(_async_append(j, s, end)), id="async_append"),
    ],
)
def test_g12_a_turn_end_naming_another_turn_than_the_open_one_is_refused(j: journal.Journal, fresh, write) -> None:
    """A ``turn_end`` closes the innermost open turn: one naming another would make the log say
    turn 1 ended while turn 7 did (and recovery would end turn 1 again)."""
    s = j.create_session().id
    j.append_many(s, [("turn_start", {"turn": 1}), ("turn_start", {"turn": 7})])  # a hand-made nesting
    before = j.events(s)
    with pytest.raises(journal.InvalidEvent, match="the open turn is turn 7") as refused:
        write(j, s, {"turn": 1, "steps": 0, "reason": "complete"})
    assert refused.value.field == "turn"
    assert fresh().events(s) == before
    write(j, s, {"turn": 7, "steps": 0, "reason": "complete"})  # the open one
    j.append(s, "turn_end", {"steps": 0, "reason": "complete"})  # no number: the innermost, turn 1
    assert j.scan().clean and j.plan(s) == []
    j.append(s, "turn_start", {"turn": 2})
    with pytest.raises(journal.InvalidEvent):  # inside one batch too, before anything of it is written
        j.append_many(s, [("turn_end", {"turn": 2, "steps": 0, "reason": "complete"}), ("turn_start", {"turn": 3}),
                          ("turn_end", {"turn": 4, "steps": 0, "reason": "complete"})])  # fmt: skip
    assert [t.turn for t in j.scan().open_turns] == [2]


async def _async_append(j: journal.Journal, s: str, end: dict[str, object]) -> None:
    async with journal.aio.open(j.path) as aj:
        await aj.append(s, "turn_end", end)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda j, s, t: j.put_result(s, "nobody-asked", "x"), id="result-for-unknown-call"),
        pytest.param(lambda j, s, t: j.dispatch(s, "nobody-asked"), id="dispatch-for-unknown-call"),
        pytest.param(lambda j, s, t: j.turn_end(t, reason="interrupted"), id="interrupted-from-live-api"),
        pytest.param(lambda j, s, t: j.turn_start(s), id="nested-turn-start"),
        pytest.param(lambda j, s, t: j.step_end(t), id="step-end-without-step"),
        pytest.param(lambda j, s, t: t.provider_started(), id="provider-started-outside-step"),
        pytest.param(lambda j, s, t: t.assistant("hi"), id="assistant-outside-step"),
        pytest.param(lambda j, s, t: t.step_end(outcome="meh"), id="bad-step-outcome"),
    ],
)
def test_bad_live_loop_input_is_a_typed_error_and_writes_nothing(j: journal.Journal, fresh, bad) -> None:
    s = j.create_session().id
    turn = j.turn_start(s)
    before = fresh().events(s)
    with pytest.raises(journal.JournalError):
        bad(j, s, turn)
    assert fresh().events(s) == before


def test_a_step_outside_a_turn_is_a_typed_error(j: journal.Journal) -> None:
    s = j.create_session().id
    turn = j.turn_start(s)
    turn.complete()
    with pytest.raises(journal.LeaseLost):
        turn.step_start()
    assert [e.type for e in j.events(s)] == ["turn_start", "turn_end"]


def test_a_turn_start_written_with_plain_append_opens_a_turn_the_journal_sees(j: journal.Journal) -> None:
    s = j.create_session().id
    j.append(s, "turn_start", {"turn": 1})
    assert _phase(j, s) is Phase.BEFORE_PROVIDER
    with pytest.raises(journal.OpenTurnError):
        j.turn_start(s)
