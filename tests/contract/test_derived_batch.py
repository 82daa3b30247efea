"""A batch's derived state planned once (journal.derived_batch, issue 27): the turn journal and
the tool-call states ``append_many`` writes in a few statements are, column for column, what the
schema's trigger writes row by row, on either backend."""

from __future__ import annotations

import contextlib
import itertools
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import journal
from journal import derived_batch
from journal.store.postgres import PgDatabase
from journal.store.sqlite import SqliteDatabase

_CALLS = st.sampled_from(["c1", "c2", "c3"])
# Every kind the trigger derives from, as the codec takes them: each way a turn ends, a request
# with no call, the same call named differently by its request, dispatch and result (the order
# decides the name), a message without calls.
_ITEMS = st.one_of(
    st.sampled_from([1, 2]).map(lambda n: ("turn_start", {"turn": n})),
    st.sampled_from(["complete", "rejected"]).map(lambda r: ("turn_end", {"turn": 1, "steps": 0, "reason": r})),
    st.just(("step_start", {"turn": 1, "step": 1})),
    st.just(("step_end", {"turn": 1, "step": 1, "outcome": "ok"})),
    st.lists(_CALLS, max_size=3, unique=True).map(
        lambda ids: ("assistant_message", {"content": "", "tool_calls": [{"id": i, "name": f"t{i}"} for i in ids]})
    ),
    _CALLS.map(lambda i: ("tool_call", {"id": i, "name": f"d{i}", "effect": "idempotent", "idempotency_key": i})),
    _CALLS.map(lambda i: ("tool_result", {"tool_call_id": i, "name": f"r{i}", "content": "r"})),
    st.just(("user_message", {"content": "hi"})),
    st.just(("assistant_message", {"content": "no calls"})),
)
# A batch opens a turn first more often than not (a dispatch outside one refuses the batch).
_BATCHES = st.tuples(st.booleans(), st.lists(_ITEMS, min_size=1, max_size=16)).map(
    lambda b: [("turn_start", {"turn": 1}), *b[1]] if b[0] else b[1]
)
_sessions = itertools.count()


def _always_planned() -> contextlib.ExitStack:
    """Every batch written in one insert gets its plan, however few its deriving events."""
    stack = contextlib.ExitStack()
    for database in (SqliteDatabase, PgDatabase):
        stack.enter_context(mock.patch.object(database, "plan_derived_from", 0))
    return stack


def _derived(j: journal.Journal, sid: str) -> tuple[list, list]:
    with j._store.read() as db:
        turns = list(db.execute("SELECT * FROM turn_journal WHERE session_id = ? ORDER BY start_seq", (sid,)))
        calls = list(db.execute("SELECT * FROM tool_calls WHERE session_id = ? ORDER BY call_id", (sid,)))
    return [t[1:] for t in turns], [c[1:] for c in calls]


def _write(j: journal.Journal, sid: str, history: list, batch: list, *, planned: bool) -> object:
    for type_, data in history:
        try:
            j.append(sid, type_, data)
        except journal.JournalError:
            pass
    way = _always_planned() if planned else mock.patch("journal.log._derived_plan_txn", return_value=None)
    with way:
        try:
            return [(e.seq, e.type, e.data) for e in j.append_many(sid, batch)]
        except journal.JournalError as exc:
            return type(exc)


_OPEN = [("turn_start", {"turn": 1}), ("step_start", {"turn": 1, "step": 1})]
_REQUEST = ("assistant_message", {"content": "", "tool_calls": [{"id": "c1", "name": "tc1"}]})
_END = ("turn_end", {"turn": 1, "steps": 1, "reason": "complete"})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(_ITEMS, max_size=10), batch=_BATCHES)
@example(history=[], batch=[*_OPEN, _END])  # each column each kind sets, on the batch's own turn
@example(history=[], batch=[*_OPEN, _REQUEST, ("step_end", {"turn": 1, "step": 1, "outcome": "ok"})])
@example(history=[*_OPEN, _REQUEST], batch=[_END, ("turn_start", {"turn": 2}), *_OPEN[1:]])  # a turn open before
@example(history=[*_OPEN, ("turn_start", {"turn": 2})], batch=[_REQUEST, _END, _REQUEST, _END])  # nested
def test_a_batchs_derived_state_planned_once_is_what_the_trigger_writes_row_by_row(j, history, batch) -> None:
    n = next(_sessions)
    outcomes = []
    for planned in (True, False):
        sid = j.create_session(f"b{n}-{planned}").id
        got = _write(j, sid, history, batch, planned=planned)
        outcomes.append((got, [(e.seq, e.type, e.data) for e in j.events(sid)], _derived(j, sid)))
    assert outcomes[0] == outcomes[1]


def test_a_batch_of_whole_turns_takes_the_planned_path_and_stays_consistent(j) -> None:
    sid = j.create_session("turns").id
    j.append_many(sid, [("turn_start", {"turn": 1}), ("step_start", {"turn": 1, "step": 1})])
    items = [
        ("assistant_message", {"content": "", "tool_calls": [{"id": "a", "name": "pay"}, {"id": "b", "name": "log"}]}),
        ("tool_call", {"id": "a", "name": "pay"}),
        ("tool_result", {"tool_call_id": "a", "content": "paid"}),
        ("step_end", {"turn": 1, "step": 1, "outcome": "ok"}),
        ("turn_start", {"turn": 2}),  # nested: applies to turn 2 until its end, then to turn 1 again
        ("step_start", {"turn": 2, "step": 1}),
        ("step_end", {"turn": 2, "step": 1, "outcome": "ok"}),
        ("turn_end", {"turn": 2, "steps": 1, "reason": "complete"}),
        ("step_start", {"turn": 1, "step": 2}),
    ]
    plans = []
    real = derived_batch.plan

    def spy(*args, **kwargs):
        plans.append(real(*args, **kwargs))
        return plans[-1]

    with mock.patch("journal.derived_batch.plan", side_effect=spy), _always_planned():
        j.append_many(sid, items)
    assert len(plans) == 1 and plans[0] is not None  # the batch took the planned path
    assert j.check() == []
    (outer, inner) = _derived(j, sid)[0]
    # (start_seq, turn, phase, attempt, revision, checkpoint_seq, tool_request, stream_key, steps,
    #  step_open, submission_id, outer_start, end_seq, end_reason, owner)
    assert outer[:2] == (0, 1) and outer[8:10] == (2, 1) and outer[12] is None  # two steps, the second open
    assert inner[:2] == (6, 2) and inner[11:14] == (0, 9, "complete")  # turn 2 inside it, closed
    assert j.scan().open_turns[0].owed[0].call_id == "b"  # b owed, a answered


def test_a_request_after_its_dispatch_in_one_batch_keeps_the_trigger(j) -> None:
    """Kind by kind (requests, then dispatches, then results) would name the call by its request;
    the trigger names it by what came first: such a batch is not planned."""
    types = ["turn_start", "tool_call", "assistant_message"]
    datas = [{"turn": 1}, {"id": "a", "name": "first"}, {"content": "", "tool_calls": [{"id": "a", "name": "later"}]}]
    assert derived_batch.plan("s", 0, types, datas, []) is None
    types = ["turn_start", "tool_result", "tool_call"]
    datas = [{"turn": 1}, {"tool_call_id": "a", "content": "r"}, {"id": "a", "name": "t"}]
    assert derived_batch.plan("s", 0, types, datas, []) is None


def test_a_step_end_in_a_planned_batch_clears_the_turns_stream_key_as_the_trigger_does(j) -> None:
    rows = []
    for planned in (True, False):
        sid = j.create_session(f"stream-{planned}").id
        turn = j.turn_start(sid)
        turn.step_start()
        turn.provider_started(stream_key=f"k-{planned}")
        _write(j, sid, [], [_REQUEST, ("step_end", {"turn": 1, "step": 1, "outcome": "ok"})], planned=planned)
        rows.append(_derived(j, sid)[0])
    assert rows[0] == rows[1] and rows[0][0][7] is None  # stream_key


def test_only_a_batch_with_enough_derived_events_is_planned(j) -> None:
    """Below the backend's ``plan_derived_from`` events the trigger derives from, its row
    programs cost less than the plan's statements (bench/batch.py); from there on the plan is made."""
    turn = [
        ("user_message", {"content": "q"}),
        ("turn_start", {"turn": 1}),
        ("step_start", {"turn": 1, "step": 1}),
        ("step_end", {"turn": 1, "step": 1, "outcome": "ok"}),
        ("turn_end", {"turn": 1, "steps": 1, "reason": "complete"}),
    ]  # four deriving events a turn
    with j._store.read() as db:
        turns = -(-db.plan_derived_from // 4)
    plans = []
    real = derived_batch.plan
    with mock.patch("journal.derived_batch.plan", side_effect=lambda *a: plans.append(real(*a)) or plans[-1]):
        j.append_many(j.create_session("few").id, turn * (turns - 1))
        assert plans == []
        j.append_many(j.create_session("many").id, turn * turns)
    assert len(plans) == 1 and plans[0] is not None
    assert j.check() == []


def test_a_planned_batch_holding_a_compaction_places_it_as_the_trigger_does(j) -> None:
    """PostgreSQL's row trigger places compactions too: a batch that holds one keeps it there."""
    turn = [
        ("turn_start", {"turn": 1}),
        ("step_start", {"turn": 1, "step": 1}),
        _REQUEST,
        ("step_end", {"turn": 1, "step": 1, "outcome": "ok"}),
        ("turn_end", {"turn": 1, "steps": 1, "reason": "complete"}),
    ]
    placed = []
    for planned in (True, False):
        sid = j.create_session(f"compacted-{planned}").id
        j.append_many(sid, [("user_message", {"content": "a"}), ("user_message", {"content": "b"})])
        batch = [*turn * 5, ("user_message", {"content": "a and b", "surface_op": ["replace", 0, 2]}), *turn * 5]
        with mock.patch("journal.log._derived_plan_txn", return_value=None) if not planned else mock.MagicMock():
            j.append_many(sid, [(t, dict(d)) for t, d in batch])
        with j._store.read() as db:
            rows = [r[1:] for r in db.execute("SELECT * FROM compactions WHERE session_id = ? ORDER BY 2", (sid,))]
        placed.append((rows, _derived(j, sid), [(m.role, m.content, m.seq) for m in j.messages(sid)]))
    assert placed[0] == placed[1] and placed[0][0] != []


def test_g4_a_planned_batch_that_would_leave_a_gap_is_refused_and_writes_nothing(j) -> None:
    """With the row trigger's derived part off, G4 still holds: SQLite's own trigger checks each
    row; PostgreSQL checks the batch at once (``journal_events_contiguous``)."""
    sid = j.create_session("gap").id
    j.append(sid, "user_message", {"content": "first"})
    types = ["turn_start", "step_start", "step_end", "turn_end"]
    datas = [{"turn": 1}, {"turn": 1, "step": 1}, {"turn": 1, "step": 1, "outcome": "ok"}]
    datas.append({"turn": 1, "steps": 1, "reason": "complete"})
    texts = ['{"turn":1}', '{"turn":1,"step":1}', '{"turn":1,"step":1,"outcome":"ok"}']
    texts.append('{"turn":1,"steps":1,"reason":"complete"}')
    plan = derived_batch.plan(sid, 2, types, datas, [])  # seq 1 is free: a gap before the batch
    assert plan is not None
    with pytest.raises(journal.SchemaViolation), j._store.write("append_many", sessions=(sid,)) as db:
        db.insert_events([(sid, 2 + n, t, x, 0) for n, (t, x) in enumerate(zip(types, texts))], plan)
    assert j.count(sid) == 1 and j.check() == [] and _derived(j, sid) == ([], [])
    j.append_many(sid, list(zip(types, datas)))  # where it belongs, the batch goes in
    assert j.count(sid) == 5 and j.check() == []
