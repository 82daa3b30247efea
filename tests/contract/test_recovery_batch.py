"""Recovery at scale: planned from the open work only, many sessions per transaction (issue 14).

The plan of a session read from its outermost open turn on (with what ``tool_calls`` says of the
earlier log) is the plan of its whole log; a batch recovers exactly what one-by-one recovery
does; racing batches make one repair; a crash inside a batch leaves each session repaired or
untouched; the scan's statement count does not grow with the open work.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
from journal.pure import plan as pure
from journal.recovery_batch import recover_common_txn
from tests.conftest import python_child, release_together, run_child
from tests.strategies import appendable_items

_items = appendable_items(("c1", "c2", "c3", "c4"), max_calls=3, named=True)
_logs = st.lists(_items, max_size=30)


def _write(j: journal.Journal, session_id: str, items: list) -> None:
    for type_, data in items:
        try:
            j.append(session_id, type_, data)
        except (journal.ResultExists, journal.AlreadyDispatched, journal.NoOpenTurn):
            pass  # a second result or dispatch (G5), a dispatch outside a turn: not these tests


def _shape(j: journal.Journal, session_id: str) -> list[tuple[str, dict]]:
    return [(e.type, e.data) for e in j.events(session_id)]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=_logs, more=_logs, fork_at=st.integers(min_value=0, max_value=40))
def test_g8_the_plan_from_the_open_work_is_the_plan_of_the_whole_log(tmp_path_factory, items, more, fork_at) -> None:
    path = tmp_path_factory.mktemp("window") / "j.db"
    with journal.open(path, durability="normal") as j:
        s = j.create_session("s").id
        _write(j, s, items)
        assert j.plan(s) == pure.plan(j.events(s))
        # A fork reads its prefix through the parent: its window's earlier calls are the parent's.
        try:
            f = j.fork(s, min(fork_at, j.count(s) - 1) if j.count(s) else "last", id="f").id
        except (journal.OpenTurnError, journal.BoundaryOutOfRange):
            return
        _write(j, f, more)
        assert j.plan(f) == pure.plan(j.events(f))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(logs=st.lists(_logs, min_size=1, max_size=7), batch=st.integers(min_value=1, max_value=4))
def test_g8_recovering_many_sessions_in_batches_makes_exactly_the_repairs_of_one_by_one(
    tmp_path_factory, logs, batch
) -> None:
    folder = tmp_path_factory.mktemp("batch")
    with (
        journal.open(folder / "a.db", durability="normal") as a,
        journal.open(folder / "b.db", durability="normal") as b,
    ):
        ids = [f"s{i}" for i in range(len(logs))]
        for sid, items in zip(ids, logs):
            for j in (a, b):
                j.create_session(sid)
                _write(j, sid, items)
        a._recovery.batch_sessions = batch
        batched = {r.session_id: r for r in a.recover()}
        interrupted = b.scan().sessions
        for sid in interrupted:
            b.recover(sid)
        for sid in ids:
            assert _shape(a, sid) == _shape(b, sid)
            assert not a.interrupted(sid)
        assert sorted(batched) == sorted(interrupted)
        assert a.check() == [] and a.scan().open_turns == ()
        assert a.recover() == []


def _crashed_sessions(j: journal.Journal, count: int) -> list[str]:
    """Sessions left mid-tool: two calls requested, the first dispatched, no result."""
    ids = []
    for n in range(count):
        sid = j.create_session(f"s{n}").id
        j.append_many(sid, [
            ("user_message", {"content": "go"}), ("turn_start", {"turn": 1}), ("step_start", {"turn": 1, "step": 1}),
            ("assistant_message",
             {"content": "", "tool_calls": [{"id": "a", "name": "pay"}, {"id": "b", "name": "log"}]}),
            ("tool_call", {"id": "a", "name": "pay"}),
        ])  # fmt: skip
        ids.append(sid)
    return ids


def _assert_set_based(j: journal.Journal, ids: list[str]) -> None:
    """These sessions are the set-based path's (journal.recovery_batch) on this backend, all of
    them, in one batch: planned and written there, then rolled back (nothing stays)."""
    with j._store.write("probe", commit=False) as db:
        common, rest = recover_common_txn(db, j._log.codec, ids, 0)
    assert sorted(common) == sorted(ids) and rest == []
    assert all([e.type for e in common[sid].events()] == ["tool_result", "tool_result", "turn_end"] for sid in ids)
    assert all(j.interrupted(sid) for sid in ids)


def test_the_crashed_sessions_of_these_tests_take_the_set_based_path_on_either_backend(j) -> None:
    _assert_set_based(j, _crashed_sessions(j, 5))


@pytest.mark.sqlite_only(reason="traces the statements SQLite runs")
def test_recovery_reads_only_the_open_work_of_a_long_session(j, tmp_path) -> None:
    sid = j.create_session("long").id
    for t in range(1, 51):
        j.append_many(sid, [("user_message", {"content": "q"}), ("turn_start", {"turn": t}),
                            ("turn_end", {"turn": t, "steps": 0, "reason": "complete"})])  # fmt: skip
    # A turn that closed its step and dispatched nothing: the planner's case (not the set-based
    # path's, journal.recovery_batch), which reads the open turn's events.
    j.append_many(sid, [("turn_start", {"turn": 51}), ("step_start", {"turn": 51, "step": 1}),
                        ("assistant_message", {"content": "", "tool_calls": [{"id": "c", "name": "t"}]}),
                        ("step_end", {"turn": 51, "step": 1, "outcome": "ok"})])  # fmt: skip
    start = j.count(sid) - 4
    reads: list[tuple] = []

    def trace(_cursor, sql, bindings):
        if sql.startswith("SELECT seq, type, data, time_ms FROM events"):
            reads.append(tuple(bindings))
        return True

    j._store._conn.exec_trace = trace
    (result,) = j.recover(sid)
    j._store._conn.exec_trace = None
    assert [e.type for e in result.appended] == ["tool_result", "turn_end"]
    assert reads and all(binding[1] >= start for binding in reads), reads


def _statements(j: journal.Journal, call) -> int:
    count = 0

    def trace(_cursor, _sql, _bindings):
        nonlocal count
        count += 1
        return True

    j._store._conn.exec_trace = trace
    try:
        call()
    finally:
        j._store._conn.exec_trace = None
    return count


@pytest.mark.sqlite_only(reason="traces the statements SQLite runs")
def test_g7_the_scan_runs_the_same_number_of_statements_whatever_the_open_work(j) -> None:
    _crashed_sessions(j, 1)
    one = _statements(j, j.scan)
    for n in range(1, 40):
        sid = j.create_session(f"t{n}").id
        j.append_many(sid, [("turn_start", {"turn": 1})])
    assert len(j.scan().open_turns) == 40
    assert _statements(j, j.scan) == one


@pytest.mark.sqlite_only(reason="traces the statements SQLite runs")
def test_recovering_many_sessions_runs_one_transaction_per_batch(j) -> None:
    _crashed_sessions(j, 7)
    j._recovery.batch_sessions = 3
    writes = []

    def trace(_cursor, sql, _bindings):
        if sql.strip().upper() == "BEGIN IMMEDIATE":
            writes.append(sql)
        return True

    progress: list[tuple[int, int]] = []
    j._store._conn.exec_trace = trace
    results = j.recover(on_progress=lambda done, total: progress.append((done, total)))
    j._store._conn.exec_trace = None
    assert [len(r.appended) for r in results] == [3] * 7
    assert len(writes) == 3
    assert progress == [(3, 7), (6, 7), (7, 7)]


_BATCH_RECOVERER = """
import json, os, sys, time, journal
path, go = sys.argv[1], sys.argv[2]
with journal.open(path) as j:
    j._recovery.batch_sessions = 3
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    print(json.dumps([len(r.appended) for r in j.recover(force=True)]))
"""


def test_g8_two_processes_recovering_batches_at_once_make_one_repair_per_call(j, db_path: Path, tmp_path: Path) -> None:
    ids = _crashed_sessions(j, 10)
    _assert_set_based(j, ids)  # the racers take the set-based path, on either backend
    go = tmp_path / "go"
    racers = [python_child(_BATCH_RECOVERER, str(db_path), str(go)) for _ in range(2)]
    release_together(racers, go)
    appended = []
    for racer in racers:
        out, err = racer.communicate(timeout=60)
        assert racer.returncode == 0, err
        appended.append(json.loads(out))
    assert sum(map(sum, appended)) == 3 * len(ids)
    for sid in ids:
        types = [e.type for e in j.events(sid)]
        assert types.count("tool_result") == 2 and types.count("turn_end") == 1
    assert j.check() == [] and j.scan().open_turns == ()


_KILLED_RECOVERER = """
import sys, journal
with journal.open(sys.argv[1]) as j:
    j._recovery.batch_sessions = 3
    j.recover(force=True)
"""


@pytest.mark.parametrize(("point", "repaired"), [("recover.before_commit:2", 3), ("recover.after_commit:2", 6),
                                                 ("recover.before_commit:1", 0)])  # fmt: skip
def test_g8_a_kill_inside_a_batched_recovery_leaves_each_session_repaired_or_untouched(
    j, db_path, point, repaired
) -> None:
    ids = _crashed_sessions(j, 8)
    _assert_set_based(j, ids)  # the killed batches are the set-based path's, on either backend
    before = {sid: j.count(sid) for sid in ids}
    j.close()
    child = run_child(_KILLED_RECOVERER, str(db_path), env={"JOURNAL_CRASH_AT": point})
    assert child.returncode == -signal.SIGKILL, child.stderr
    with journal.open(db_path) as again:
        assert again.integrity_check() == ["ok"] and again.check() == []
        grown = {sid: again.count(sid) - before[sid] for sid in ids}
        assert sorted(grown.values()) == [0] * (8 - repaired) + [3] * repaired
        again.recover(force=True)
        assert all(again.count(sid) == before[sid] + 3 for sid in ids)
        assert again.scan().open_turns == () and again.check() == []


def test_journal_recover_shows_progress_on_stderr_over_many_batches(db_path: Path) -> None:
    with journal.open(db_path, durability="normal") as j:
        _crashed_sessions(j, 501)
    child = run_child(
        "import sys; from journal.cli import main; main(['recover', '--db', sys.argv[1], '--force', '--json'])",
        str(db_path),
        env={"PYTHONIOENCODING": "utf-8"},
    )
    assert child.returncode == 0, child.stderr
    assert child.stderr.splitlines() == ["journal: recovered 500/501 sessions", "journal: recovered 501/501 sessions"]
    document = json.loads(child.stdout)
    assert len(document["sessions"]) == 501
