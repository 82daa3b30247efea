"""The restart scan (G7) and close-policy recovery through the database (G8, G9)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
from journal import Phase, Risk
from journal import recovery as pure
from tests.raw import Raw
from tests.strategies import appendable_items

from ..conftest import python_child, release_together, run_child

CALLS = [{"id": "a", "name": "read", "arguments": {}}, {"id": "b", "name": "pay", "arguments": {"cents": 100}}]


def _crashed_session(j: journal.Journal) -> str:
    """A turn that asked for two calls, dispatched one, and died."""
    s = j.create_session().id
    j.append(s, "user_message", {"content": "pay"})
    turn = j.turn_start(s)
    turn.step_start()
    turn.provider_started()
    turn.assistant("", tool_calls=CALLS, stop_reason="tool_use")
    turn.dispatch("b")
    return s


def test_scan_names_the_open_turn_its_phase_and_owed_calls(j: journal.Journal) -> None:
    s = _crashed_session(j)
    report = j.scan()
    assert not report.clean and report.sessions == [s]
    (turn,) = report.open_turns
    assert (turn.session_id, turn.turn, turn.phase, turn.attempt) == (s, 1, Phase.TOOL_REQUEST_RECORDED, 1)
    assert [(c.call_id, c.dispatched) for c in turn.owed] == [("a", False), ("b", True)]
    assert [(p.session_id, p.call_id) for p in report.pending_calls] == [(s, "b")]


def test_scan_of_a_clean_file_is_clean(j: journal.Journal) -> None:
    s = j.create_session().id
    with j.turn(s) as turn, turn.step():
        turn.assistant("hi", stop_reason="stop")
    assert j.scan().clean


def test_g7_scan_writes_nothing_and_runs_on_a_read_only_journal(j: journal.Journal, db_path: Path) -> None:
    s = _crashed_session(j)
    with journal.open(db_path, readonly=True) as ro:
        report = ro.scan()
        assert report.sessions == [s]
        if ro._store.dialect == "sqlite":
            assert ro._store._conn.pragma("query_only") == 1
        else:
            assert ro._store._conn.execute("SHOW default_transaction_read_only").fetchone() == ("on",)
    assert j.count(s) == 5


SCAN_QUERIES = [
    pytest.param(
        "SELECT session_id, start_seq FROM turn_journal WHERE end_seq IS NULL ORDER BY session_id, start_seq",
        "turn_journal_open",
        id="open-turns",
    ),
    pytest.param(
        "SELECT session_id, call_id FROM tool_calls WHERE state = 'dispatched' ORDER BY session_id, dispatch_seq",
        "tool_calls_dispatched",
        id="pending-calls",
    ),
    pytest.param(
        "SELECT session_id, call_id FROM tool_calls WHERE state = 'indeterminate' ORDER BY session_id, dispatch_seq",
        "tool_calls_indeterminate",
        id="indeterminate",
    ),
    pytest.param(
        # Each backend's own text (SQLite's names the index its planner would pass over).
        {
            "sqlite": "SELECT call_id FROM tool_calls INDEXED BY tool_calls_owed WHERE session_id = 's' "
            "AND result_seq IS NULL AND coalesce(requested_seq, dispatch_seq) >= 0",
            "postgresql": "SELECT call_id FROM tool_calls WHERE session_id = 's' "
            "AND result_seq IS NULL AND coalesce(requested_seq, dispatch_seq) >= 0",
        },
        "tool_calls_owed",
        id="owed-calls",
    ),
]


@pytest.mark.parametrize(("sql", "index"), SCAN_QUERIES)
def test_g7_scan_queries_read_partial_indexes_not_the_tables(
    j: journal.Journal, db_path, sql: str | dict[str, str], index: str
) -> None:
    if isinstance(sql, dict):
        sql = sql[j._store.dialect]
    if j._store.dialect == "sqlite":
        plan = " ".join(row[3] for row in j._store._conn.execute("EXPLAIN QUERY PLAN " + sql))
        assert f"USING INDEX {index}" in plan, plan
    else:
        # An empty table is read whole, whatever its indexes: forbid that, and the plan shows
        # the partial index answers the query.
        with Raw(db_path) as raw:
            raw.execute("SET enable_seqscan = off")
            plan = " ".join(row[0] for row in raw.execute("EXPLAIN " + sql))
        assert f"Index Scan using {index}" in plan or f"Index Only Scan using {index}" in plan, plan
    assert "events" not in plan


def test_recover_appends_the_planned_repairs_with_their_risks(j: journal.Journal, fresh) -> None:
    s = _crashed_session(j)
    (result,) = j.recover()
    assert [e.type for e in result.appended] == ["tool_result", "tool_result", "turn_end"]
    risks = {e.data["tool_call_id"]: e.data["metadata"]["risk"] for e in result.appended[:2]}
    assert risks == {"a": Risk.TOOL_NOT_STARTED.value, "b": Risk.TOOL_OUTCOME_UNKNOWN.value}
    assert result.appended[-1].data == {"turn": 1, "steps": 1, "reason": "interrupted"}
    reopened = fresh()
    assert not reopened.interrupted(s)
    assert reopened.scan().clean
    assert reopened.check() == []


def test_g8_recovering_twice_appends_nothing_the_second_time(j: journal.Journal) -> None:
    s = _crashed_session(j)
    j.recover(s)
    count = j.count(s)
    assert [r.appended for r in j.recover(s)] == [()]
    assert j.recover() == []
    assert j.count(s) == count


def test_a_result_given_after_the_crash_is_not_repaired_again(j: journal.Journal) -> None:
    s = _crashed_session(j)
    j.put_result(s, "b", "paid, receipt 7")
    plan = j.plan(s)
    assert [(r.type, r.tool_call_id) for r in plan] == [("tool_result", "a"), ("turn_end", None)]


def test_recover_rejects_an_unknown_policy(j: journal.Journal) -> None:
    with pytest.raises(journal.InvalidArgument):
        j.recover(policy="truncate")


RECOVERER = """
import json, os, sys, time, journal
path, go = sys.argv[1], sys.argv[2]
with journal.open(path) as j:
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    # The turns were opened by the test's own process, which is alive: force, as an operator
    # who knows it crashed would.
    print(json.dumps([len(r.appended) for r in j.recover(force=True)]))
"""


def test_g8_two_processes_recovering_at_once_produce_one_set_of_repairs(
    j: journal.Journal, db_path: Path, tmp_path
) -> None:
    sessions = [_crashed_session(j) for _ in range(5)]
    before = {s: j.count(s) for s in sessions}
    go = tmp_path / "go"
    racers = [python_child(RECOVERER, str(db_path), str(go)) for _ in range(2)]
    release_together(racers, go)
    for racer in racers:
        _out, err = racer.communicate(timeout=60)
        assert racer.returncode == 0, err
    for s in sessions:
        assert j.count(s) == before[s] + 3
        events = j.events(s)
        assert [e.type for e in events].count("turn_end") == 1
    assert j.scan().clean


# -- properties over random logs, through the database ----------------------------------------

_items = appendable_items()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(_items, max_size=25))
def test_g8_property_recover_closes_every_turn_keeps_history_and_is_idempotent(tmp_path_factory, items) -> None:
    path = tmp_path_factory.mktemp("prop") / "j.db"
    with journal.open(path, durability="normal") as j:
        s = j.create_session().id
        for type_, data in items:
            try:
                j.append(s, type_, data)
            except (journal.ResultExists, journal.AlreadyDispatched, journal.NoOpenTurn):
                pass  # a second result or dispatch (G5), a dispatch outside a turn: not this test
        before = j.events(s)
        assert [r.type for r in pure.plan(before)] == [r.type for r in j.plan(s)]
        j.recover(s)
        after = j.events(s)
        assert after[: len(before)] == before
        assert not j.interrupted(s)
        assert j.scan().open_turns == ()
        assert j.recover(s)[0].appended == ()
        assert j.count(s) == len(after)
        assert j.check() == []


def test_demo_style_crash_in_a_child_then_recover(tmp_path: Path) -> None:
    code = """
import sys, journal
from journal.testing import Ledger, workload
with journal.open(sys.argv[1]) as j:
    j.create_session("s")
    workload.run(j, "s", Ledger(sys.argv[2]))
"""
    done = run_child(
        code, str(tmp_path / "j.db"), str(tmp_path / "ledger"), env={"JOURNAL_CRASH_AT": "tool.after_run:2"}
    )
    assert done.returncode == -signal.SIGKILL
    with journal.open(tmp_path / "j.db") as j:
        (result,) = j.recover()
        synthetic = [e for e in result.appended if e.type == "tool_result"]
        assert [e.data["metadata"]["risk"] for e in synthetic] == ["tool_outcome_unknown", "tool_not_started"]
        assert "MAY have run" in synthetic[0].data["content"]
        assert "did not run and had no side effects" in synthetic[1].data["content"]
    assert json.loads((tmp_path / "ledger").read_text().splitlines()[-1])["call"] == "t1-rm"


def test_g7_scan_lists_a_turns_owed_calls_in_the_order_recovery_answers_them(j, fresh) -> None:
    """One message asked for ``rm`` then ``log`` (and an earlier one for ``b``): scan names the
    turn's owed calls in the order the plan and recovery answer them (it sorted a message's
    calls by id: ``log`` before ``rm``)."""
    s = j.create_session().id
    turn = j.turn_start(s)
    j.append(s, "assistant_message", {"content": "", "tool_calls": [{"id": "zz", "name": "t", "arguments": {}}]})
    calls = [{"id": c, "name": "t", "arguments": {}} for c in ("rm", "log", "b")]
    j.append(s, "assistant_message", {"content": "", "tool_calls": calls})
    j.dispatch(s, "log", turn=turn)
    (open_turn,) = fresh().scan().open_turns
    planned = [r.data["tool_call_id"] for r in j.plan(s) if r.type == "tool_result"]
    assert [c.call_id for c in open_turn.owed] == planned == ["zz", "rm", "log", "b"]


def test_g12_a_call_requested_outside_any_turn_is_dispatched_by_the_open_turn_that_resumes_it(j, fresh) -> None:
    """A framework's run without the journal's turns asked for a call and paused for a human's
    approval (openai-agents' plain ``Runner.run``); the run that resumes it opens a turn and
    dispatches the call there with its handle: recorded in that turn, so a crash inside the tool
    is that turn's to recover (MAY have run), as the planner says. Without a handle it is still
    refused."""
    s = j.create_session().id
    j.append(s, "assistant_message", {"content": "", "tool_calls": [{"id": "c1", "name": "t", "arguments": {}}]})
    with pytest.raises(journal.NoOpenTurn):
        j.dispatch(s, "c1")
    turn = j.turn_start(s)
    assert j.dispatch(s, "c1", turn=turn).event is not None
    assert [c.call_id for c in fresh().scan().pending_calls] == ["c1"]
    assert [r.type for r in j.plan(s)] == [r.type for r in pure.plan(j.events(s))] == ["tool_result", "turn_end"]
    (result,) = j.recover(s, force=True)  # the turn's owner is this live process: an operator's force
    (synthetic,) = [e for e in result.appended if e.type == "tool_result"]
    assert synthetic.data["metadata"]["risk"] == "tool_outcome_unknown" and "MAY have run" in synthetic.data["content"]
    assert fresh().scan().clean and j.provider_view(s).missing == () and j.check() == []


def test_g12_a_dispatch_outside_a_turn_is_refused_so_scan_recover_and_the_provider_view_agree(j, fresh) -> None:
    s = j.create_session().id
    j.append(s, "assistant_message", {"content": "", "tool_calls": [{"id": "c1", "name": "t", "arguments": {}}]})
    count = j.count(s)
    with pytest.raises(journal.NoOpenTurn):
        j.dispatch(s, "c1")
    with pytest.raises(journal.NoOpenTurn):
        j.append(s, "tool_call", {"id": "c1", "name": "t"})
    with pytest.raises(journal.NoOpenTurn):
        j.append_many(s, [("user_message", {"content": "x"}), ("tool_call", {"id": "c1", "name": "t"})])
    assert fresh().count(s) == count
    # Nothing was dispatched, so nothing may have run: the scan names no call, and the result
    # the provider view misses is the caller's to write (a put_result works outside a turn).
    assert j.scan().pending_calls == () and j.recover() == []
    assert [m.tool_call_id for m in j.provider_view(s).missing] == ["c1"]
    assert j.put_result(s, "c1", "done").won and j.provider_view(s).missing == ()
    # Inside a turn, a plain append of a dispatch (as a batch that opens the turn) is accepted.
    j.append_many(s, [("turn_start", {"turn": 1}), ("assistant_message", {"content": "", "tool_calls": [
        {"id": "c2", "name": "t", "arguments": {}}]}), ("tool_call", {"id": "c2", "name": "t"})])  # fmt: skip
    assert [c.call_id for c in j.scan().pending_calls] == ["c2"]
    (result,) = j.recover()
    assert [e.data.get("metadata", {}).get("risk") for e in result.appended if e.type == "tool_result"] == [
        "tool_outcome_unknown"
    ]
    assert j.scan().clean and j.provider_view(s).missing == ()
