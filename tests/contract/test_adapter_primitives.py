"""What framework adapters need from the engine (DESIGN §14): idempotency keys, conditional
appends, keyed state, indexed reads, retract, taking over an open turn."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import journal
from journal.cli import main
from tests.raw import Raw

from ..conftest import python_child, run_child

CALL = {"id": "c1", "name": "t", "arguments": {}}


def note(n: Any) -> tuple[str, dict[str, Any]]:
    return ("x.note", {"n": n})


# -- idempotency keys ---------------------------------------------------------------------------------


def test_g2_a_duplicate_key_returns_the_stored_event_and_writes_nothing(j: journal.Journal, fresh) -> None:
    j.create_session("s")
    first = j.append("s", "x.entry", {"text": "hello"}, key="uuid-1")
    assert (first.key, first.existing) == ("uuid-1", False)
    again = j.append("s", "x.entry", {"text": "hello"}, key="uuid-1")
    assert again == first and again.existing
    other = j.append("s", "x.entry", {"text": "other"}, key="uuid-2")
    assert other.seq == 1
    stored = fresh().events("s")
    assert [(e.seq, e.key) for e in stored] == [(0, "uuid-1"), (1, "uuid-2")]
    assert stored[0].to_dict()["key"] == "uuid-1"


def test_g2_a_batch_skips_the_keys_already_stored_or_repeated_and_writes_the_rest_in_one_transaction(
    j: journal.Journal, fresh
) -> None:
    j.create_session("s")
    j.append("s", "x.entry", {"n": 0}, key="a")
    out = j.append_many(
        "s",
        [
            ("x.entry", {"n": 1}, "a"),
            ("x.entry", {"n": 2}, "b"),
            ("x.entry", {"n": 3}, "b"),
            note(4),
            ("x.entry", {"n": 5}, "c"),
        ],
    )
    assert [(e.seq, e.existing) for e in out] == [(0, True), (1, False), (1, True), (2, False), (3, False)]
    assert [e.data["n"] for e in fresh().events("s")] == [0, 2, 4, 5]


def test_a_key_inherited_by_a_fork_is_a_duplicate_there_and_a_fork_key_is_not_its_parents(j: journal.Journal) -> None:
    j.create_session("p")
    j.append("p", "x.entry", {"n": 0}, key="k")
    fork = j.fork("p", id="f").id
    assert j.append(fork, "x.entry", {"n": 1}, key="k").existing
    assert not j.append(fork, "x.entry", {"n": 2}, key="mine").existing
    assert not j.append("p", "x.entry", {"n": 3}, key="mine").existing  # the parent's log is its own


@pytest.mark.parametrize("key", ["", "k" * 257, 7, None])
def test_g12_a_bad_key_is_refused_before_anything_is_written(j: journal.Journal, key: Any) -> None:
    j.create_session("s")
    if key is None:
        with pytest.raises(journal.InvalidArgument):
            j.append_many("s", [("x.a", {}, 3)])
        return
    with pytest.raises(journal.InvalidArgument):
        j.append("s", "x.a", {}, key=key)
    assert j.count("s") == 0


RACER = """
import sys, journal
with journal.open(sys.argv[1]) as j:
    for k in range(8):
        for attempt in range(8):
            e = j.append("s", "x.entry", {"who": sys.argv[2], "k": k}, key=f"key-{k}")
            print(e.seq, e.existing, flush=True)
"""


def test_g2_two_processes_racing_the_same_keys_store_each_once(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        j.create_session("s")
    racers = [python_child(RACER, str(path), name) for name in ("a", "b")]
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err
        assert len(out.split("\n")) >= 64
    with journal.open(path) as j:
        events = j.events("s")
        assert sorted(e.key for e in events) == [f"key-{k}" for k in range(8)]
        assert j.check() == []


BATCH_CHILD = """
import sys, journal
with journal.open(sys.argv[1]) as j:
    j.append_many("s", [("x.entry", {"n": 9}, "old"), ("tool_result", {"tool_call_id": "c1", "content": "again"}),
                        ("x.entry", {"n": 10}, "new")])
print("done")
"""


@pytest.mark.parametrize("point", ["append_many.before_commit", "append_many.after_commit"])
def test_g2_a_kill_in_a_batch_with_a_stored_key_and_a_second_result_leaves_all_or_nothing(
    tmp_path: Path, point: str
) -> None:
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        j.create_session("s")
        j.append("s", "assistant_message", {"content": "", "tool_calls": [CALL]})
        j.append("s", "tool_result", {"tool_call_id": "c1", "content": "done"})
        j.append("s", "x.entry", {"n": 1}, key="old")
    done = run_child(BATCH_CHILD, str(path), env={"JOURNAL_CRASH_AT": point})
    assert done.returncode == -signal.SIGKILL, done.stderr
    with journal.open(path) as j:
        types = [e.type for e in j.events("s")]
        if point.endswith("before_commit"):
            assert types == ["assistant_message", "tool_result", "x.entry"]
        else:
            assert types == ["assistant_message", "tool_result", "x.entry", "tool_result_late", "x.entry"]
        assert j.check() == []


# -- conditional appends ---------------------------------------------------------------------------------


def test_expected_count_appends_only_on_the_count_given(j: journal.Journal, fresh) -> None:
    j.create_session("s")
    j.append("s", *note(0), expected_count=0)
    with pytest.raises(journal.CountMismatch) as info:
        j.append("s", *note(1), expected_count=0)
    assert (info.value.expected, info.value.actual) == (0, 1)
    with pytest.raises(journal.CountMismatch):
        j.append_many("s", [note(2), note(3)], expected_count=5)
    j.append_many("s", [note(2), note(3)], expected_count=1)
    assert [e.data["n"] for e in fresh().events("s")] == [0, 2, 3]
    # A retried conditional append with a key answers with its event, not a mismatch.
    first = j.append("s", *note(4), key="retry", expected_count=3)
    assert j.append("s", *note(4), key="retry", expected_count=3) == first


CAS = """
import sys, journal
with journal.open(sys.argv[1]) as j:
    won = 0
    for round in range(40):
        count = j.count("s")
        try:
            j.append("s", "x.cas", {"who": sys.argv[2], "at": count}, expected_count=count)
            won += 1
        except journal.CountMismatch:
            pass
    print(won)
"""


def test_g4_expected_count_from_two_processes_lets_exactly_one_append_at_each_count(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        j.create_session("s")
    racers = [python_child(CAS, str(path), name) for name in ("a", "b")]
    wins = 0
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err
        wins += int(out)
    with journal.open(path) as j:
        events = j.events("s")
        assert len(events) == wins
        assert [e.data["at"] for e in events] == list(range(wins))  # each appended at the count it saw


# -- keyed state -----------------------------------------------------------------------------------------


def test_keyed_state_latest_wins_and_every_version_reads_back_as_of_its_seq(j: journal.Journal) -> None:
    j.create_session("s")
    assert j.state("s") == {}
    j.set_state("s", {"messages": [1], "config": {"model": "m"}})  # at 0: before any event
    expected = {-1: None}
    history = []
    for step in range(20):
        j.append_many("s", [note(step)], state={"messages": list(range(step + 2))})
        history.append(j.state("s"))
    assert j.state("s") == {"config": {"model": "m"}, "messages": list(range(21))}
    for seq, seen in enumerate(history):
        assert j.state("s", as_of=seq) == seen
    assert j.state("s", keys=["config"]) == {"config": {"model": "m"}}
    assert expected  # (the state before any event is the set_state's)
    j.set_state("s", {"blob": b"\x00\xffbytes"})
    assert j.state("s", keys=["blob"]) == {"blob": b"\x00\xffbytes"}


def test_state_bytes_grow_with_what_changed_not_with_a_copy_of_the_rest(j: journal.Journal, db_path: Path) -> None:
    j.create_session("s")
    j.set_state("s", {f"channel-{c}": "x" * 1000 for c in range(10)})
    for step in range(200):
        j.append_many("s", [note(step)], state={"channel-0": f"step {step}"})
    with Raw(db_path) as conn:
        assert conn.value("SELECT count(*) FROM state") == 10 + 200
        assert conn.value("SELECT sum(length(value)) FROM state") < 10 * 1002 + 200 * 20


@pytest.mark.parametrize("value", [float("nan"), {1: "non-string key"}, object(), "\ud800"])
def test_g12_a_bad_state_value_is_refused_before_anything_is_written(j: journal.Journal, value: Any) -> None:
    j.create_session("s")
    with pytest.raises(journal.InvalidArgument):
        j.set_state("s", {"ok": 1, "bad": value})
    with pytest.raises(journal.InvalidArgument):
        j.append_many("s", [note(0)], state={"bad": value})
    assert j.state("s") == {} and j.count("s") == 0


def test_g1_keyed_state_survives_a_kill(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    done = run_child(
        """
        import os, signal, sys, journal
        j = journal.open(sys.argv[1])
        j.create_session("s")
        j.append_many("s", [("x.step", {"n": 1})], state={"channel": {"v": 1}, "raw": b"\\x01"})
        j.set_state("s", {"channel": {"v": 2}})
        os.kill(os.getpid(), signal.SIGKILL)
        """,
        str(path),
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    with journal.open(path) as j:
        assert j.state("s") == {"channel": {"v": 2}, "raw": b"\x01"}
        assert j.state("s", as_of=0) == {"channel": {"v": 2}, "raw": b"\x01"}  # both written after event 0


def test_g11_a_fork_inherits_the_state_as_of_its_fork_point_and_neither_sees_the_others_writes(
    j: journal.Journal,
) -> None:
    j.create_session("p")
    j.append_many("p", [note(0)], state={"a": 1, "b": 1})
    j.append_many("p", [note(1)], state={"a": 2})
    early = j.fork("p", 0, id="early").id
    late = j.fork("p", id="late", meta={"title": "a copy"}).id
    j.set_state("p", {"a": 3, "c": 1})  # the parent, after both forks
    assert j.state(early) == {"a": 1, "b": 1}
    assert j.state(late) == {"a": 2, "b": 1}
    j.set_state(late, {"b": 9})
    assert j.state("p") == {"a": 3, "b": 1, "c": 1}
    assert j.state(late) == {"a": 2, "b": 9}
    assert j.state(late, as_of=0) == {"a": 1, "b": 1}  # as of an inherited seq: the parent's then
    grand = j.fork(late, id="grand").id
    assert j.state(grand) == {"a": 2, "b": 9}


def test_g3_state_disappears_with_purge_and_a_copied_fork_keeps_its_history(j: journal.Journal, db_path: Path) -> None:
    j.create_session("p")
    j.append_many("p", [note(0)], state={"a": 1})
    j.append_many("p", [note(1)], state={"a": 2})
    fork = j.fork("p", id="f").id
    j.purge("p", copy_forks=True)
    assert j.state(fork) == {"a": 2}
    assert j.state(fork, as_of=0) == {"a": 1}
    j.purge(fork)
    with Raw(db_path) as conn:
        assert conn.value("SELECT count(*) FROM state") == 0


# -- indexed reads --------------------------------------------------------------------------------------


def _plans(j: journal.Journal, call: Any) -> list[str]:
    """The query plans of the statements ``call`` runs on the journal's connection."""
    conn = j._store._conn
    seen: list[tuple[str, Any]] = []

    def trace(cursor: Any, sql: str, bindings: Any) -> bool:
        seen.append((sql, bindings))
        return True

    conn.exec_trace = trace
    try:
        call()
    finally:
        conn.exec_trace = None
    plans = []
    for sql, bindings in seen:
        if sql.lstrip().upper().startswith("SELECT"):
            plans.append(" | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", bindings)))
    return plans


@settings(max_examples=40, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(["x.a", "x.b", "user_message", "x.c"]), max_size=40),
    point=st.integers(0, 100),
    wanted=st.lists(st.sampled_from(["x.a", "x.b", "user_message", "x.zz"]), min_size=1, max_size=3),
    limit=st.one_of(st.none(), st.integers(0, 10)),
    newest=st.booleans(),
)
def test_events_by_type_newest_first_match_a_filter_over_events(jm, kinds, point, wanted, limit, newest) -> None:
    s = jm.create_session().id
    items = [(k, {"content": "m"} if k == "user_message" else {"i": i}) for i, k in enumerate(kinds)]
    if items:
        jm.append_many(s, items[: len(items) // 2])
    fork = jm.fork(s, point % jm.count(s) if jm.count(s) else "last").id
    if items[len(items) // 2 :]:
        jm.append_many(fork, items[len(items) // 2 :])
    for session in (s, fork):
        every = [e for e in jm.events(session) if e.type in wanted]
        if newest:
            every.reverse()
        assert jm.events(session, types=wanted, newest_first=newest, limit=limit) == every[:limit]


@pytest.fixture(scope="module")
def jm(tmp_path_factory: pytest.TempPathFactory):
    with journal.open(tmp_path_factory.mktemp("reads") / "j.db", durability="normal") as j:
        yield j


def test_app_events_by_type_are_read_through_an_index(j: journal.Journal) -> None:
    j.create_session("s")
    j.append_many("s", [("x.checkpoint" if i % 100 == 0 else "x.write", {"i": i}) for i in range(2000)])
    latest = j.events("s", types=["x.checkpoint"], newest_first=True, limit=1)
    assert latest[0].data == {"i": 1900}
    if j._store.dialect == "sqlite":  # (the plans are SQLite's to show)
        plans = _plans(j, lambda: j.events("s", types=["x.checkpoint"], newest_first=True, limit=1))
        assert any("USING INDEX events_app" in p for p in plans), plans


def test_sessions_by_meta_and_prefix_are_paged_and_read_through_an_index(j: journal.Journal) -> None:
    for i in range(30):
        j.create_session(f"{'bot' if i % 2 else 'web'}-{i:02}", meta={"user": f"u{i % 3}", "n": i, "vip": i % 5 == 0})
    j.fork("bot-01", id="bot-copy", meta={"user": "u0", "copy": True})
    every = j.sessions()  # the listing order: created_ms, then id

    def having(**wanted: Any) -> list[str]:
        return [
            s.id
            for s in every
            if s.meta and all(s.meta.get(k) == v and type(s.meta.get(k)) is type(v) for k, v in wanted.items())
        ]

    u0 = [s.id for s in j.sessions(meta={"user": "u0"})]
    assert u0 == having(user="u0") and len(u0) == 11
    pages, page = [], j.sessions(meta={"user": "u0"}, limit=4)
    while page:
        pages += page
        page = j.sessions(meta={"user": "u0"}, limit=4, after=page[-1]) if len(page) == 4 else []
    assert [s.id for s in pages] == u0
    assert sorted(s.id for s in j.sessions(meta={"user": "u0", "vip": True})) == ["bot-15", "web-00"]
    assert [s.id for s in j.sessions(meta={"n": 3})] == ["bot-03"]
    assert j.sessions(meta={"n": 3.0}) == [] and j.sessions(meta={"n": "3"}) == []  # JSON types differ
    assert [s.id for s in j.sessions(prefix="bot-0")] == [s.id for s in every if s.id.startswith("bot-0")]
    assert sorted(s.id for s in j.sessions(prefix="bot-0")) == [f"bot-0{i}" for i in (1, 3, 5, 7, 9)]
    both = [s.id for s in j.sessions(prefix="bot-", meta={"user": "u0"})]
    assert both == [i for i in having(user="u0") if i.startswith("bot-")] and "bot-copy" in both
    assert all(s.last_ms >= s.created_ms for s in j.sessions(prefix="bot"))
    if j._store.dialect == "sqlite":  # (the plans are SQLite's to show)
        plans = _plans(j, lambda: j.sessions(meta={"user": "u0"}, limit=4))
        assert any("session_meta" in p and "INDEX" in p for p in plans), plans
    with pytest.raises(journal.InvalidArgument):
        j.sessions(meta={"user": None})
    with pytest.raises(journal.InvalidArgument):
        j.sessions(prefix="")


# -- retract --------------------------------------------------------------------------------------------


def test_g3_retract_takes_the_last_message_back_in_every_view_and_deletes_nothing(j: journal.Journal) -> None:
    j.create_session("s")
    j.append("s", "user_message", {"content": "hi"})
    j.append("s", "assistant_message", {"content": "", "tool_calls": [CALL]})
    j.append("s", "tool_result", {"tool_call_id": "c1", "content": "ok"})
    j.append("s", "assistant_message", {"content": "a wrong answer"})
    gone = j.retract("s", reason="regenerate")
    assert gone is not None and gone.content == "a wrong answer"
    assert [m.content for m in j.messages("s")] == ["hi", "", "ok"]
    assert [m.content for m in j.messages("s", tail=2)] == ["", "ok"]
    assert [m.content for m in j.provider_view("s").messages] == ["hi", "", "ok"]
    assert [m.content for m in j.provider_view("s", tail=1).messages] == ["ok"]
    assert [e.type for e in j.events("s")][-1] == "retract"
    assert j.count("s") == 5  # nothing deleted
    assert j.check() == []
    with pytest.raises(journal.InvalidEvent):
        j.append("s", "retract", {"seq": 0})  # only retract() appends one


def test_retract_on_an_empty_transcript_writes_nothing(j: journal.Journal) -> None:
    j.create_session("s")
    assert j.retract("s") is None
    assert j.count("s") == 0


def test_show_marks_the_retracted_message(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        j.create_session("s")
        j.append("s", "user_message", {"content": "keep"})
        j.append("s", "user_message", {"content": "take back"})
        j.retract("s")
    out = CliRunner().invoke(main, ["show", "s", "--db", str(path)]).output
    assert "retracted" in out
    lines = [line for line in out.splitlines() if "take back" in line]
    assert lines and "retracted" in lines[0]
    messages = CliRunner().invoke(main, ["show", "s", "--db", str(path), "--view", "messages", "--json"]).output
    assert [m["content"] for m in json.loads(messages)["items"]] == ["keep"]


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.sampled_from(["msg", "msg", "msg", "retract", "compact"]), max_size=40))
def test_every_tail_with_retracts_and_compactions_is_the_end_of_the_transcript(jm, ops) -> None:
    s = jm.create_session().id
    for i, op in enumerate(ops):
        if op == "msg":
            jm.append(s, "user_message", {"content": f"m{i}"})
        elif op == "retract":
            jm.retract(s)
        elif jm.messages(s):
            count = len(jm.messages(s))
            jm.compact(s, max(count - 3, 0), count - 1, f"summary {i}")
    whole = jm.messages(s)
    for n in range(len(whole) + 2):
        assert jm.messages(s, tail=n) == whole[max(len(whole) - n, 0) :]
    assert jm.check(s) == []


# -- taking over an open turn ---------------------------------------------------------------------------

HOLDER = """
import sys, time, journal
j = journal.open(sys.argv[1])
turn = j.turn_start("s")
turn.step_start()
print("holding", flush=True)
time.sleep(60)
"""


def test_take_over_is_refused_while_the_owner_lives_and_allowed_once_it_is_dead(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        j.create_session("s")
    holder = python_child(HOLDER, str(path))
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        with journal.open(path) as j:
            with pytest.raises(journal.TurnHeld):
                j.take_over("s")
            with pytest.raises(journal.TurnHeld), j.turn("s", resume=True):
                pass
    finally:
        holder.kill()
        holder.wait()
    with journal.open(path) as j:
        turn = j.take_over("s")
        assert turn.step_number == 1 and turn.attempt == 2
        turn.step_end()
        with turn.step():
            turn.assistant("continued")
        turn.complete()
        assert [e.type for e in j.events("s")] == [
            "turn_start", "step_start", "step_end", "step_start", "assistant_message", "step_end", "turn_end"
        ]  # fmt: skip
        assert j.scan().open_turns == () and j.check() == []


def test_take_over_fences_the_old_handle_and_needs_an_open_turn(j: journal.Journal) -> None:
    j.create_session("s")
    with pytest.raises(journal.NoOpenTurn):
        j.take_over("s")
    old = j.turn_start("s")  # this process's own turn: it may take it over
    new = j.take_over("s")
    with pytest.raises(journal.LeaseLost):
        old.step_start()
    with j.turn("s", resume=True) as same:
        assert same.start_seq == new.start_seq
    assert j.turn_state("s") is None or j.turn_state("s").end_seq is not None


def test_a_claimed_turn_is_handed_over_by_reconcile_not_taken_over(j: journal.Journal) -> None:
    j.create_session("s")
    j.submit("s", "user_message", {"content": "go"})
    claim = j.claim(owner="elsewhere:1:1")
    assert claim is not None
    with pytest.raises(journal.TurnHeld):
        j.take_over("s")


# -- export and import carry keys and state --------------------------------------------------------------


def test_export_and_import_carry_keys_and_every_state_version(tmp_path: Path) -> None:
    from journal import transfer

    with journal.open(tmp_path / "a.db") as a:
        a.create_session("p")
        a.append_many("p", [("x.entry", {"n": 0}, "k0"), note(1)], state={"chan": [0], "raw": b"\x00\x01"})
        a.append("p", "x.entry", {"n": 2}, key="k2")
        a.set_state("p", {"chan": [0, 1]})
        fork = a.fork("p", id="f").id
        a.set_state(fork, {"chan": "fork's"})
        lines = list(transfer.export_lines(a))
    renamed = [line.replace('"p"', '"p2"').replace('"f"', '"f2"') for line in lines]
    with journal.open(tmp_path / "b.db") as b:
        assert transfer.import_lines(b, renamed) == 2
        assert [(e.seq, e.key) for e in b.events("p2")] == [(0, "k0"), (1, None), (2, "k2")]
        assert b.append("p2", "x.entry", {"n": 2}, key="k2").existing
        assert b.state("p2") == {"chan": [0, 1], "raw": b"\x00\x01"}
        assert b.state("p2", as_of=1) == {"chan": [0], "raw": b"\x00\x01"}
        assert b.state("f2") == {"chan": "fork's", "raw": b"\x00\x01"}
        assert b.check() == []
        assert list(transfer.export_lines(b, ["p2", "f2"])) == renamed  # the same bytes back


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"state": {"session_id": "s", "key": "k", "at": 5, "json": 1}}', "at"),
        ('{"state": {"session_id": "s", "key": "k", "at": 0}}', "json"),
        ('{"state": {"session_id": "s", "key": "k", "at": 0, "bytes": "%%%"}}', "base64"),
        ('{"event": {"session_id": "s", "seq": 1, "type": "x.a", "data": {}, "time_ms": 1, "key": "dup"}}', "key"),
    ],
)
def test_g12_a_bad_key_or_state_line_is_refused_and_imports_nothing_of_its_session(
    tmp_path: Path, line: str, problem: str
) -> None:
    from journal import transfer

    lines = [
        '{"session": {"id": "s", "meta": null, "created_ms": 1}}',
        '{"event": {"session_id": "s", "seq": 0, "type": "x.a", "data": {}, "time_ms": 1, "key": "dup"}}',
        line,
    ]
    with journal.open(tmp_path / "j.db") as j:
        with pytest.raises(journal.InvalidArgument) as info:
            transfer.import_lines(j, lines)
        assert problem in str(info.value)
        assert j.sessions() == []


# -- the command line ---------------------------------------------------------------------------------


def test_cli_sessions_filters_by_meta_and_prefix(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        j.create_session("bot-1", meta={"user": "alice", "n": 3})
        j.create_session("bot-2", meta={"user": "bob", "n": "3"})
        j.create_session("web-1", meta={"user": "alice"})
    run = CliRunner().invoke

    def ids(*args: str) -> list[str]:
        out = run(main, ["sessions", "--db", str(path), "--json", *args])
        assert out.exit_code == 0, out.output
        return [s["id"] for s in json.loads(out.output)["sessions"]]

    assert ids("--meta", "user=alice") == ["bot-1", "web-1"]
    assert ids("--meta", "user=alice", "--prefix", "bot") == ["bot-1"]
    assert ids("--meta", "n=3") == ["bot-1"]
    assert ids("--meta", 'n="3"') == ["bot-2"]
    assert run(main, ["sessions", "--db", str(path), "--meta", "nokey"]).exit_code == 2


def test_g14_cli_state_prints_each_key_escaped_and_json_exactly(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        j.create_session("s")
        j.append_many("s", [note(0)], state={"plan": {"step": 1}, "\x1b[31mkey": "v", "raw": b"\x00\x01\x02"})
        j.set_state("s", {"plan": {"step": 2}})
    run = CliRunner().invoke
    text = run(main, ["state", "s", "--db", str(path)]).output
    assert '{"step": 2}' in text and "<3 bytes>" in text and "\x1b" not in text and "\\x1b[31mkey" in text
    doc = json.loads(run(main, ["state", "s", "--db", str(path), "--as-of", "0", "--json"]).output)
    assert doc["as_of"] == 0
    assert {item["key"]: item for item in doc["state"]}["plan"] == {"key": "plan", "json": {"step": 2}}
    assert {item["key"]: item for item in doc["state"]}["raw"] == {"key": "raw", "bytes": "AAEC"}


def test_sessions_by_parent_lists_a_sessions_forks(j: journal.Journal) -> None:
    j.create_session("p")
    j.append("p", *note(0))
    forks = [j.fork("p", id=f"f{i}").id for i in range(5)]
    j.fork("f0", id="grandchild")
    assert [s.id for s in j.sessions(parent_id="p")] == forks
    assert [s.id for s in j.sessions(parent_id="p", limit=2, after="f1")] == ["f2", "f3"]
    assert [s.id for s in j.sessions(parent_id="f0")] == ["grandchild"]
    assert j.sessions(parent_id="nobody") == []
