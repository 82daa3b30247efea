"""Set-based recovery (journal.recovery_batch, issue 27): the common case of a whole batch in a
few statements appends exactly what the pure planner plans, event for event, and leaves the
derived tables exactly as the planner's path does; every other case goes to the planner.

Each comparison recovers two copies of one file, one through the set-based path and one through
the planner alone (``Recovery.set_based = False``), with the clock pinned so that both append the
same rows.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from unittest import mock

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
from journal import recovery as recovery_module
from journal import recovery_batch
from journal.codec import _to_text
from journal.model import Risk
from journal.pure import plan as pure
from journal.recovery import Recovery
from tests.strategies import interrupted_logs

_CLOCK_MS = 1_700_000_000_000
_EVENT_READ = "SELECT seq, type, data, time_ms FROM events"  # the planner's read of an open turn's events


def _write(j: journal.Journal, session_id: str, items: list) -> None:
    for type_, data in items:
        try:
            j.append(session_id, type_, data)
        except (journal.ResultExists, journal.AlreadyDispatched, journal.NoOpenTurn):
            pass  # a second result or dispatch (G5), a dispatch outside a turn: not these tests


def _tables(path: Path) -> dict[str, list[tuple]]:
    """Every table of the file, row by row, in key order."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        names = [n for (n,) in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")]
        return {name: sorted(conn.execute(f"SELECT * FROM {name}").fetchall(), key=repr) for name in names}
    finally:
        conn.close()


def _recover(path: Path, *, set_based: bool, **kwargs) -> tuple[list[journal.RecoveryResult], int]:
    """Recover the file one way; the results and how many times the planner read events."""
    reads = 0

    def trace(_cursor, sql, _bindings):
        nonlocal reads
        reads += sql.startswith(_EVENT_READ)
        return True

    with mock.patch("journal.log.now_ms", return_value=_CLOCK_MS), journal.open(path) as j:
        j._recovery.set_based = set_based
        j._store._conn.exec_trace = trace
        results = j.recover(**kwargs)
        j._store._conn.exec_trace = None
        for r in results:  # what each result says was appended is what the log holds, key order too
            stored = j.events(r.session_id)[len(j.events(r.session_id)) - r.count :] if r.count else []
            assert r.appended == tuple(stored) and len(r.appended) == r.count
            assert [_to_text(e.data) for e in r.appended] == [_to_text(e.data) for e in stored]
        assert j.check() == [] and j.scan().open_turns == ()
        assert j.recover() == []  # G8: nothing the second time
    return results, reads


def _both_ways(folder: Path, **kwargs) -> tuple[list, list, int, int]:
    """Recover copies of ``folder/j.db`` both ways; assert they agree row by row."""
    source = folder / "j.db"
    fast, slow = folder / "fast.db", folder / "slow.db"
    for copy in (fast, slow):
        shutil.copyfile(source, copy)
    fast_results, fast_reads = _recover(fast, set_based=True, **kwargs)
    slow_results, slow_reads = _recover(slow, set_based=False, **kwargs)
    assert fast_results == slow_results
    assert _tables(fast) == _tables(slow)
    return fast_results, slow_results, fast_reads, slow_reads


def _build(path: Path, logs: list[list]) -> dict[str, list]:
    """Sessions s0.. with these items; what the pure planner plans for each, from its whole log."""
    plans = {}
    with journal.open(path, durability="normal") as j:
        for n, items in enumerate(logs):
            sid = j.create_session(f"s{n}").id
            _write(j, sid, items)
            plans[sid] = [(r.type, r.data) for r in pure.plan(j.events(sid))]
        j.checkpoint()
    return plans


_ANY_TEXT = st.text(st.characters(blacklist_categories=()), max_size=40)  # lone surrogates, controls too


@given(call_id=_ANY_TEXT, name=_ANY_TEXT, risk=st.sampled_from(list(Risk)))
def test_a_synthetic_result_the_set_based_path_encodes_itself_is_what_the_codec_encodes(call_id, name, risk) -> None:
    assert recovery_batch._synthetic(call_id, name, risk) == _to_text(pure.synthetic_result_data(call_id, name, risk))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(logs=st.lists(interrupted_logs(), min_size=1, max_size=6), batch=st.integers(min_value=1, max_value=4))
def test_g8_the_set_based_path_appends_exactly_the_planners_events(tmp_path_factory, logs, batch) -> None:
    folder = tmp_path_factory.mktemp("fast")
    plans = _build(folder / "j.db", logs)
    with journal.open(folder / "j.db") as j:
        counts = {sid: j.count(sid) for sid in plans}
    results, _, _, _ = _both_ways(folder)
    appended = {r.session_id: r.appended for r in results}
    for sid, planned in plans.items():
        events = appended.get(sid, ())
        assert [(e.type, e.data) for e in events] == planned
        assert [e.seq for e in events] == list(range(counts[sid], counts[sid] + len(planned)))


_DISPATCHED = [
    ("user_message", {"content": "go"}),
    ("turn_start", {"turn": 1}),
    ("step_start", {"turn": 1, "step": 1}),
    ("assistant_message", {"content": "", "tool_calls": [{"id": "b", "name": "pay"}, {"id": "a", "name": "log"}]}),
    ("tool_call", {"id": "b", "name": "pay"}),
]
_COMMON = {
    "dispatched_one_of_two": _DISPATCHED,
    "answered_one_of_two": [*_DISPATCHED, ("tool_result", {"tool_call_id": "b", "content": "ok"})],
    "requested_mid_step": _DISPATCHED[:4],
    "requested_no_step": [_DISPATCHED[1], _DISPATCHED[3]],
    "no_call": _DISPATCHED[:3],
    "calls_in_request_order": [
        ("turn_start", {"turn": 7}),
        ("assistant_message", {"content": "", "tool_calls": [{"id": i, "name": "t" + i} for i in "zmab"]}),
        ("tool_call", {"id": "a", "name": "ta"}),
        ("tool_result", {"tool_call_id": "m", "content": "ok"}),
    ],
    "call_seen_in_history": [
        ("turn_start", {"turn": 1}),
        ("assistant_message", {"content": "", "tool_calls": [{"id": "a", "name": "log"}]}),
        ("turn_end", {"turn": 1, "steps": 0, "reason": "complete"}),
        ("turn_start", {"turn": 2}),
        ("assistant_message", {"content": "", "tool_calls": [{"id": "a", "name": "log"}, {"id": "c", "name": "x"}]}),
    ],
    "two_steps_dispatched": [
        *_DISPATCHED,
        ("tool_result", {"tool_call_id": "b", "content": "ok"}),
        ("step_end", {"turn": 1, "step": 1, "outcome": "ok"}),
        ("step_start", {"turn": 1, "step": 2}),
        ("assistant_message", {"content": "", "tool_calls": [{"id": "z", "name": "pay"}]}),
    ],
}
_PLANNERS = {
    # a call a closed turn left owed, dispatched by the open one (resumed after an approval)
    "call_seen_in_history_dispatched": [
        ("turn_start", {"turn": 1}),
        ("assistant_message", {"content": "", "tool_calls": [{"id": "a", "name": "log"}]}),
        ("turn_end", {"turn": 1, "steps": 0, "reason": "complete"}),
        ("turn_start", {"turn": 2}),
        ("assistant_message", {"content": "", "tool_calls": [{"id": "a", "name": "log"}, {"id": "c", "name": "x"}]}),
        ("tool_call", {"id": "a", "name": "log"}),
    ],
    "closed_step_no_dispatch": [*_DISPATCHED[:4], ("step_end", {"turn": 1, "step": 1, "outcome": "ok"})],
    "closed_step_then_open_step": [
        *_DISPATCHED[:4],
        ("step_end", {"turn": 1, "step": 1, "outcome": "ok"}),
        ("step_start", {"turn": 1, "step": 2}),
    ],
    "nested_turn": [*_DISPATCHED, ("turn_start", {"turn": 2}), ("step_start", {"turn": 2, "step": 1})],
    "dispatch_before_request": [
        ("turn_start", {"turn": 1}),
        ("assistant_message", {"content": "", "tool_calls": [{"id": "a", "name": "log"}]}),
        ("tool_call", {"id": "q", "name": "pay"}),
    ],
}


@pytest.mark.parametrize("shape", sorted(_COMMON))
def test_g8_a_common_case_is_recovered_without_reading_its_events_and_as_the_planner_does(tmp_path, shape) -> None:
    plans = _build(tmp_path / "j.db", [_COMMON[shape]])
    fast, _slow, fast_reads, slow_reads = _both_ways(tmp_path)
    assert [(e.type, e.data) for r in fast for e in r.appended] == plans["s0"] != []
    assert fast_reads == 0 and slow_reads == 1


@pytest.mark.parametrize("shape", sorted(_PLANNERS))
def test_g8_what_the_set_based_path_does_not_cover_goes_to_the_planner_in_the_same_batch(tmp_path, shape) -> None:
    plans = _build(tmp_path / "j.db", [_PLANNERS[shape], _DISPATCHED])
    fast, _slow, fast_reads, _ = _both_ways(tmp_path)
    assert {r.session_id: [(e.type, e.data) for e in r.appended] for r in fast} == plans
    assert fast_reads == 1  # the planner read only the session it had to


def test_g8_a_fork_is_recovered_by_the_planner_with_what_it_inherits(tmp_path) -> None:
    with journal.open(tmp_path / "j.db", durability="normal") as j:
        parent = j.create_session("p").id
        _write(j, parent, [("turn_start", {"turn": 1}), _DISPATCHED[3], ("tool_call", {"id": "b", "name": "pay"}),
                           ("turn_end", {"turn": 1, "steps": 0, "reason": "complete"})])  # fmt: skip
        fork = j.fork(parent, "last", id="f").id
        _write(j, fork, [("turn_start", {"turn": 2}), _DISPATCHED[3]])  # b and a again: seen in the parent
        planned = [(r.type, r.data) for r in pure.plan(j.events(fork))]
    fast, _slow, fast_reads, _ = _both_ways(tmp_path)
    assert [(e.type, e.data) for r in fast for e in r.appended] == planned == [planned[0]]
    assert fast_reads == 1


def test_g8_a_live_owners_turn_is_left_alone_by_the_set_based_path(tmp_path) -> None:
    with journal.open(tmp_path / "j.db") as j:
        sid = j.create_session("s").id
        j.append_many(sid, _DISPATCHED)
        j._store._conn.execute("UPDATE turn_journal SET owner = ? WHERE session_id = ?", ("elsewhere:1:1", sid))
    with journal.open(tmp_path / "j.db") as j:
        (held,) = j.recover()
        assert held.appended == () and held.live_owner == "elsewhere:1:1"
        (forced,) = j.recover(force=True)
        assert [e.type for e in forced.appended] == ["tool_result", "tool_result", "turn_end"]


def _statements(path: Path) -> int:
    """Statements recovery runs (an ``executemany`` is one, whatever its rows: one cursor)."""
    cursors: list = []  # kept alive, so that no two statements share an id

    def trace(cursor, _sql, _bindings):
        if not any(c is cursor for c in cursors):
            cursors.append(cursor)
        return True

    with journal.open(path) as j:
        j._store._conn.exec_trace = trace
        results = j.recover()
        j._store._conn.exec_trace = None
        assert all(len(r.appended) == 3 for r in results) and j.check() == []
    return len(cursors)


def test_g8_a_batch_of_common_sessions_is_recovered_in_as_many_statements_as_one(tmp_path) -> None:
    _build(tmp_path / "one.db", [_DISPATCHED])
    _build(tmp_path / "many.db", [_DISPATCHED] * 40)
    assert _statements(tmp_path / "many.db") == _statements(tmp_path / "one.db")


def test_journal_recover_json_is_the_same_through_either_path(tmp_path) -> None:
    from click.testing import CliRunner

    from journal.cli import main

    _build(tmp_path / "j.db", [_DISPATCHED, _COMMON["answered_one_of_two"], _PLANNERS["closed_step_no_dispatch"]])
    outputs = []
    for name, set_based in (("fast.db", True), ("slow.db", False)):
        shutil.copyfile(tmp_path / "j.db", tmp_path / name)
        with (
            mock.patch("journal.log.now_ms", return_value=_CLOCK_MS),
            mock.patch.object(Recovery, "__init__", _init_with(set_based)),
        ):
            result = CliRunner().invoke(main, ["recover", "--db", str(tmp_path / name), "--force", "--json"])
        assert result.exit_code == 0, result.output
        outputs.append(json.loads(result.stdout))
    assert outputs[0] == outputs[1]
    assert [len(s["appended"]) for s in outputs[0]["sessions"]] == [3, 2, 3]


def _init_with(set_based: bool):
    original = Recovery.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.set_based = set_based

    return init


class _Paths:
    """Which path recovered which session: ``set_based`` (journal.recovery_batch) or ``planner``."""

    def __init__(self) -> None:
        self.set_based: list[str] = []
        self.planner: list[str] = []

    def __enter__(self) -> _Paths:
        common_txn = recovery_module.recover_common_txn
        apply_plan_txn = Recovery.apply_plan_txn

        def spy_common(*args, **kwargs):
            common, rest = common_txn(*args, **kwargs)
            self.set_based.extend(common)
            return common, rest

        def spy_plan(recovery, db, session_id, time_ms):
            self.planner.append(session_id)
            return apply_plan_txn(recovery, db, session_id, time_ms)

        self._patches = [
            mock.patch.object(recovery_module, "recover_common_txn", spy_common),
            mock.patch.object(Recovery, "apply_plan_txn", spy_plan),
        ]
        for patch in self._patches:
            patch.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for patch in reversed(self._patches):
            patch.stop()


def test_g8_recovery_on_either_backend_appends_the_planners_events(j) -> None:
    planned = {}
    for shape, items in sorted({**_COMMON, **_PLANNERS}.items()):
        sid = j.create_session(shape).id
        _write(j, sid, items)
        planned[sid] = [(r.type, r.data) for r in pure.plan(j.events(sid))]
    with _Paths() as paths:
        done = {r.session_id: [(e.type, e.data) for e in r.appended] for r in j.recover()}
    assert done == planned
    # Each backend takes the set-based path for the common case (its own open_work statement),
    # and the planner for the rest, each session by exactly one of them.
    assert sorted(paths.set_based) == sorted(_COMMON)
    assert sorted(paths.planner) == sorted(_PLANNERS)
    assert j.check() == [] and j.recover() == []


def _derived(j: journal.Journal, session_id: str) -> dict[str, list[tuple]]:
    """The session's rows of the derived tables, without its id."""
    with j._store.read() as db:
        return {
            "turn_journal": [tuple(r)[1:] for r in db.execute(
                "SELECT * FROM turn_journal WHERE session_id = ? ORDER BY start_seq", (session_id,))],
            "tool_calls": [tuple(r)[1:] for r in db.execute(
                "SELECT * FROM tool_calls WHERE session_id = ? ORDER BY call_id", (session_id,))],
        }  # fmt: skip


_examples = iter(range(1_000_000))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(logs=st.lists(interrupted_logs(), min_size=1, max_size=4))
def test_g8_on_either_backend_the_set_based_path_writes_what_the_planner_writes(j, logs) -> None:
    n = next(_examples)
    pairs = []
    for k, items in enumerate(logs):
        fast, slow = j.create_session(f"fast-{n}-{k}").id, j.create_session(f"slow-{n}-{k}").id
        _write(j, fast, items)
        _write(j, slow, items)
        pairs.append((fast, slow, [(r.type, r.data) for r in pure.plan(j.events(fast))]))
    fast_ids, slow_ids = [p[0] for p in pairs], [p[1] for p in pairs]
    with mock.patch("journal.log.now_ms", return_value=_CLOCK_MS), _Paths() as paths:
        j._recovery.set_based = True
        fast_results = {r.session_id: r.appended for sid in fast_ids for r in j.recover(sid)}
        j._recovery.set_based = False
        slow_results = {r.session_id: r.appended for sid in slow_ids for r in j.recover(sid)}
        j._recovery.set_based = True
    assert not set(paths.set_based) & set(slow_ids)
    for fast, slow, planned in pairs:
        got = fast_results[fast]
        assert [(e.type, e.data) for e in got] == planned
        assert [(e.seq, e.type, e.data, e.time_ms) for e in got] == [
            (e.seq, e.type, e.data, e.time_ms) for e in slow_results[slow]
        ]
        assert _derived(j, fast) == _derived(j, slow)
        assert not j.interrupted(fast)


@pytest.mark.parametrize("set_based", [True, False], ids=["set_based", "planner"])
def test_g12_a_repair_over_the_size_limit_is_refused_by_either_path_and_nothing_is_written(tmp_path, set_based) -> None:
    long_id = "c" * 300
    with journal.open(tmp_path / "j.db", max_event_bytes=900) as j:
        common = j.create_session("a").id
        j.append_many(common, _DISPATCHED)
        big = j.create_session("b").id
        asked = {"content": "", "tool_calls": [{"id": long_id, "name": "t"}]}
        j.append_many(big, [("turn_start", {"turn": 1}), ("assistant_message", asked)])
        before = {sid: j.count(sid) for sid in (common, big)}
        j._recovery.set_based = set_based
        with pytest.raises(journal.InvalidEvent):
            j.recover()
    with journal.open(tmp_path / "j.db", max_event_bytes=900) as again:  # a fresh connection: nothing stayed
        assert {sid: again.count(sid) for sid in before} == before
