"""An older journal (schema version 1, or 3) is brought to the current version when it is opened.

`tests/data/schema_v1.sql` is schema.sql as version 1 shipped it. A version-1 file is made with
it and filled through raw SQL (its own triggers derive the turn journal and the tool calls), then
opened by the library: the migration runs in one transaction, keeps every row, and leaves a file
that behaves exactly like a new one (G13: never downgraded; a read-only open migrates nothing).
A version-3 file is today's schema without version 4's addition, the listing index, nor version
5's, the compactions table; a version-4 file lacks only the latter.
"""

from __future__ import annotations

import hashlib
import json
import signal
from pathlib import Path

import apsw
import pytest

import journal
from journal import crash, store
from journal.escape import dumps
from journal.transfer import import_lines

from .conftest import run_child
from .raw import Raw

V1_SCHEMA = (Path(__file__).parent / "data" / "schema_v1.sql").read_text(encoding="utf-8")

CALLS = [{"id": "c1", "name": "read_file", "arguments": {}}, {"id": "c2", "name": "write_file", "arguments": {}}]
EVENTS = [
    ("turn_start", {"turn": 1}),
    ("user_message", {"content": "tidy up"}),
    ("step_start", {"turn": 1, "step": 1}),
    ("assistant_message", {"content": "", "tool_calls": CALLS}),
    ("tool_call", {"id": "c1", "name": "read_file"}),
    ("tool_result", {"tool_call_id": "c1", "content": "ok"}),
    ("tool_call", {"id": "c2", "name": "write_file"}),
    ("tool_result", {"tool_call_id": "c2", "content": "written"}),
    ("step_end", {"turn": 1, "step": 1, "outcome": "tool_results"}),
    ("turn_end", {"steps": 1, "reason": "complete", "turn": 1}),
    ("turn_start", {"turn": 2}),  # left open: the restart scan must still find it
]


def make_v1_journal(path: Path) -> None:
    """A version-1 journal: session `s` with EVENTS, and a fork `f` of its first 10 with one more."""
    conn = apsw.Connection(str(path))
    conn.pragma("journal_mode", "wal")
    with conn:
        conn.execute(V1_SCHEMA)
        conn.pragma("application_id", store.APPLICATION_ID)
        conn.pragma("user_version", 1)
        conn.execute("INSERT INTO sessions (id, created_ms) VALUES ('s', 1)")
        for seq, (type_, data) in enumerate(EVENTS):
            conn.execute("INSERT INTO events VALUES ('s', ?, ?, ?, ?)", (seq, type_, json.dumps(data), 10 + seq))
        conn.execute("INSERT INTO sessions (id, parent_id, seed_length, created_ms) VALUES ('f', 's', 10, 2)")
        conn.execute("INSERT INTO events VALUES ('f', 10, 'user_message', '{\"content\":\"forked\"}', 99)")
    conn.close()


def rows(path: Path) -> dict[str, list[tuple]]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        selects = {
            "events": "SELECT session_id, seq, type, data, time_ms FROM events",
            "tool_calls": "SELECT * FROM tool_calls",
            "turn_journal": f"SELECT {TURN_JOURNAL_V1} FROM turn_journal",
            "sessions": "SELECT id, parent_id, seed_length, meta, created_ms FROM sessions",
        }
        return {table: sorted(conn.execute(sql)) for table, sql in selects.items()}
    finally:
        conn.close()


# The turn journal's columns in version 1 (version 3 adds owner).
TURN_JOURNAL_V1 = (
    "session_id, start_seq, turn, phase, attempt, revision, checkpoint_seq, tool_request, stream_key, steps, "
    "step_open, submission_id, outer_start, end_seq, end_reason"
)


def schema_objects(path: Path) -> set[tuple[str, str]]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return set(conn.execute("SELECT type, name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'"))
    finally:
        conn.close()


def test_g13_a_version_1_journal_is_migrated_keeping_every_row(tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    make_v1_journal(old)
    before = rows(old)
    with journal.open(old) as j:
        assert j.check() == []
        assert [e.type for e in j.events("s")] == [t for t, _ in EVENTS]
        assert [e.seq for e in j.events("f")] == list(range(11))
        assert [t.start_seq for t in j.scan().open_turns] == [10]
    assert rows(old) == before
    new = tmp_path / "new.db"
    journal.open(new).close()
    assert schema_objects(old) == schema_objects(new)  # the same tables, indexes, views, triggers
    conn = apsw.Connection(str(old))
    assert conn.pragma("user_version") == store.SCHEMA_VERSION
    assert "copy_until" not in {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
    assert conn.pragma("integrity_check") == "ok"
    conn.close()


def test_a_migrated_journal_works_like_a_new_one(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    make_v1_journal(path)
    with journal.open(path) as j:
        j.recover("s")  # closes turn 2 through the new triggers
        assert j.scan().open_turns == ()
        j.append("s", "user_message", {"content": "after the migration"})
        j.append("s", "user_message", {"content": "and again"})
        assert not j.put_result("s", "c1", "twice").won  # the stored result still wins (G5)
        # Purge gives the fork its own copy under its own events: version 1's seq trigger
        # needed a column for this that version 2 no longer has.
        result = j.purge("s", copy_forks=True)
        assert result.forks_copied == ("f",)
        assert [e.seq for e in j.events("f")] == list(range(11))
        assert j.check() == []


def test_g13_a_read_only_open_of_a_version_1_journal_reads_it_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    make_v1_journal(path)
    apsw.Connection(str(path)).close()  # fold the WAL in, so the bytes below are the whole file
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with journal.open(path, readonly=True) as j:
        assert j.count("s") == len(EVENTS)
        assert j.check() == []
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_the_migration_passes_both_of_its_crash_points(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    make_v1_journal(path)
    reached: list[str] = []
    with crash.observing(reached.append):
        journal.open(path).close()
    assert reached == ["migrate_schema.before_commit", "migrate_schema.after_commit"]


MIGRATE_CHILD = """
import sys, journal
journal.open(sys.argv[1]).close()
print("finished")
"""


@pytest.mark.parametrize("point", ["migrate_schema.before_commit", "migrate_schema.after_commit"])
def test_a_kill_during_the_migration_leaves_a_file_the_next_open_migrates(tmp_path: Path, point: str) -> None:
    path = tmp_path / "old.db"
    make_v1_journal(path)
    before = rows(path)
    done = run_child(MIGRATE_CHILD, str(path), env={"JOURNAL_CRASH_AT": point})
    assert done.returncode == -signal.SIGKILL, done.stderr
    conn = apsw.Connection(str(path))
    version = conn.pragma("user_version")
    conn.close()
    assert version == (1 if point.endswith("before_commit") else store.SCHEMA_VERSION)
    with journal.open(path) as j:
        assert j.integrity_check() == ["ok"]
        assert j.check() == []
    assert rows(path) == before


V5_OBJECTS = (
    "DROP TRIGGER compaction_events_apply; DROP TRIGGER events_compaction; "
    "DROP VIEW compaction_events; DROP TABLE compactions;"
)


# Version 6's tables of what version 7 rebuilt: submissions in rowid order, state values of any type.
V6_STATE = (
    "CREATE TABLE state_v6 (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions (id), "
    "key TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 256), at INTEGER NOT NULL CHECK (at >= 0), "
    "kind TEXT NOT NULL CHECK (kind IN ('json', 'bytes')), value ANY NOT NULL, "
    "CHECK ((kind = 'bytes' AND typeof(value) = 'blob') OR (kind = 'json' AND typeof(value) = 'text' "
    "AND json_valid(value)))) STRICT"
)
SUBMISSION_COLUMNS = (
    "id, session_id, type, data, state, attempt, max_attempts, timeout_s, created_ms, updated_ms, lease_owner, "
    "lease_expires_ms, input_seq, turn_start_seq, resume_mode, outcome"
)


OLD_GATE_TAIL = "\n AND NOT EXISTS (SELECT 1 FROM derived_by_statement)"


# The index of the turn boundaries as versions 1 to 8 made it (version 9 dropped it).
V8_TURNS_INDEX = "CREATE INDEX events_turns ON events (session_id, seq) WHERE type IN ('turn_start', 'turn_end')"


def undo_v9(conn: apsw.Connection) -> None:
    """Take a current file back to version 8's schema: the index of the turn boundaries again."""
    conn.execute(V8_TURNS_INDEX)


def undo_v8(conn: apsw.Connection) -> None:
    """Take a current file back to version 7's schema: no derived_by_statement, and the gate
    trigger that always derives, row by row."""
    undo_v9(conn)
    (gate,) = [s for s in store.schema_statements(("TRIGGER",)) if s.split(None, 3)[2] == "events_derived"]
    assert gate.count(OLD_GATE_TAIL) == 1
    conn.execute("DROP TRIGGER events_derived; DROP TABLE derived_by_statement")
    conn.execute(gate.replace(OLD_GATE_TAIL, ""))


def make_v7_journal(path: Path) -> None:
    """A version-7 file holding three sessions killed mid-tool (one call dispatched, one not)."""
    with journal.open(path) as j:
        for n in range(3):
            sid = f"s{n}"
            j.create_session(sid)
            calls = [
                {"id": f"c{n}a", "name": "pay", "arguments": {}},
                {"id": f"c{n}b", "name": "mail", "arguments": {}},
            ]
            j.append_many(
                sid,
                [
                    ("user_message", {"content": "pay"}),
                    ("turn_start", {"turn": 1}),
                    ("step_start", {"turn": 1, "step": 1}),
                    ("assistant_message", {"content": "", "tool_calls": calls}),
                    ("tool_call", {"id": f"c{n}a", "name": "pay"}),
                ],
            )
    conn = apsw.Connection(str(path))
    with conn:
        undo_v8(conn)
        conn.pragma("user_version", 7)
    conn.close()


def test_g13_a_version_7_journal_is_read_as_it_is_and_migrated_by_a_writable_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    make_v7_journal(path)
    apsw.Connection(str(path)).close()  # fold the WAL in, so the bytes below are the whole file
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with journal.open(path, readonly=True) as j:
        assert len(j.scan().open_turns) == 3
        assert j.check() == []
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    with journal.open(path) as j:
        repaired = {
            r.session_id: [(e.type, e.data.get("metadata", {}).get("risk")) for e in r.appended] for r in j.recover()
        }
        assert repaired == {
            f"s{n}": [("tool_result", "tool_outcome_unknown"), ("tool_result", "tool_not_started"), ("turn_end", None)]
            for n in range(3)
        }
        assert j.scan().clean
        assert j.check() == []  # the derived state written by statement is what the log says
    new = tmp_path / "new.db"
    journal.open(new).close()
    assert schema_objects(path) == schema_objects(new)
    assert _raw(path, "SELECT count(*) FROM derived_by_statement") == [(0,)]
    assert _raw(path, "SELECT DISTINCT phase, end_reason, revision FROM turn_journal") == [
        ("committed", "interrupted", 3)
    ]
    assert _raw(path, "SELECT DISTINCT state FROM tool_calls") == [("resolved",)]
    conn = apsw.Connection(str(path))
    assert conn.pragma("user_version") == store.SCHEMA_VERSION == 9
    assert conn.pragma("integrity_check") == "ok"
    conn.close()


def test_g13_a_version_8_journal_is_read_as_it_is_and_loses_the_unused_index_on_a_writable_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    with journal.open(path) as j:
        j.create_session("s")
        j.append_many("s", [(t, {**d, "outcome": "ok"} if t == "step_end" else d) for t, d in EVENTS])
    conn = apsw.Connection(str(path))
    with conn:
        undo_v9(conn)
        conn.pragma("user_version", 8)
    conn.close()
    before = rows(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with journal.open(path, readonly=True) as j:
        assert [t.start_seq for t in j.scan().open_turns] == [10]
        assert j.check() == []
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert index_sql(path, "events_turns") is not None
    with journal.open(path) as j:
        assert j.append("s", "turn_end", {"turn": 2, "steps": 0, "reason": "complete"}).seq == 11
        assert j.scan().clean and j.check() == []
    new = tmp_path / "new.db"
    journal.open(new).close()
    assert schema_objects(path) == schema_objects(new)
    assert index_sql(path, "events_turns") is None
    after = rows(path)
    assert after["events"][: len(before["events"])] == before["events"] and len(after["events"]) == 12
    assert after["tool_calls"] == before["tool_calls"]
    conn = apsw.Connection(str(path))
    assert conn.pragma("user_version") == store.SCHEMA_VERSION == 9
    assert conn.pragma("integrity_check") == "ok"
    conn.close()


def undo_v7(conn: apsw.Connection) -> None:
    """Take a current file back to version 6's schema: submissions without their ordinal (in
    rowid order instead), state values of JSON kept as text."""
    undo_v8(conn)
    (create,) = [s for s in store.schema_statements(("TABLE",)) if s.split(None, 3)[2] == "submissions"]
    ordinal = create[create.index("    -- The order submissions") : create.index("    CHECK ((state = 'running')")]
    conn.execute(create.replace(ordinal, "").replace("TABLE submissions (", "TABLE submissions_v6 (", 1))
    conn.execute(
        f"INSERT INTO submissions_v6 SELECT {SUBMISSION_COLUMNS} FROM submissions ORDER BY ordinal; "
        "DROP TABLE submissions; ALTER TABLE submissions_v6 RENAME TO submissions; "
        "CREATE INDEX submissions_queued ON submissions (session_id) WHERE state = 'queued'; "
        "CREATE INDEX submissions_running ON submissions (lease_expires_ms) WHERE state = 'running';"
    )
    conn.execute(V6_STATE)
    conn.execute(
        "INSERT INTO state_v6 SELECT id, session_id, key, at, kind, "
        "CASE WHEN kind = 'json' THEN CAST(value AS TEXT) ELSE value END FROM state ORDER BY id; "
        "DROP TABLE state; ALTER TABLE state_v6 RENAME TO state; "
        "CREATE INDEX state_at ON state (session_id, key, at, id);"
    )


def undo_v6(conn: apsw.Connection) -> None:
    """Take a current file back to version 5's schema: what version 6 added goes (the key
    column, the retract type, the indexes, state, session_meta), and compactions lose retracts."""
    undo_v7(conn)
    conn.execute(
        "DROP INDEX events_key; DROP INDEX events_app; DROP TABLE state; DROP TRIGGER sessions_meta; "
        "DROP TABLE session_meta; ALTER TABLE events DROP COLUMN key;"
    )
    sql = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'events'").get
    version = conn.pragma("schema_version")
    conn.pragma("writable_schema", True)
    conn.execute("UPDATE sqlite_schema SET sql = ? WHERE name = 'events'", (sql.replace(" OR type = 'retract'", ""),))
    conn.pragma("schema_version", version + 1)
    conn.pragma("writable_schema", False)


def make_v3_journal(path: Path) -> None:
    """A version-3 journal: today's schema without the listing index (version 4's change) nor
    the compactions table (version 5's), with sessions created out of id order, a fork, and
    events."""
    created = {"c": 1, "a": 2, "b": 2}  # listing order: c, then a and b (a tie, so by id)
    lines = []
    for sid, created_ms in created.items():
        lines.append(dumps({"session": {"id": sid, "meta": {"title": sid}, "created_ms": created_ms}}))
        event = {"session_id": sid, "seq": 0, "type": "user_message", "data": {"content": sid}, "time_ms": 5}
        lines.append(dumps({"event": event}))
    with journal.open(path) as j:
        import_lines(j, lines)
        j.fork("a", 0, id="f")
    conn = apsw.Connection(str(path))
    with conn:
        conn.execute("DROP INDEX sessions_created")
        undo_v6(conn)
        conn.execute(V5_OBJECTS)
        conn.pragma("user_version", 3)
    conn.close()


def index_sql(path: Path, name: str) -> str | None:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute("SELECT sql FROM sqlite_schema WHERE type = 'index' AND name = ?", (name,)).get
    finally:
        conn.close()


def test_g13_a_version_3_journal_gains_the_listing_index_keeping_every_row(tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    make_v3_journal(old)
    before = rows(old)
    assert index_sql(old, "sessions_created") is None
    with journal.open(old) as j:
        assert [(s.id, s.count) for s in j.sessions()] == [("c", 1), ("a", 1), ("b", 1), ("f", 1)]
        assert [s.id for s in j.sessions(limit=2, after="a")] == ["b", "f"]
        assert j.check() == []
    assert rows(old) == before
    new = tmp_path / "new.db"
    journal.open(new).close()
    assert schema_objects(old) == schema_objects(new)
    assert index_sql(old, "sessions_created") == index_sql(new, "sessions_created") is not None
    conn = apsw.Connection(str(old))
    assert conn.pragma("user_version") == store.SCHEMA_VERSION == 9
    assert conn.pragma("integrity_check") == "ok"
    conn.close()


def test_a_version_1_journal_is_migrated_to_the_listing_index_too(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    make_v1_journal(path)
    journal.open(path).close()
    new = tmp_path / "new.db"
    journal.open(new).close()
    assert index_sql(path, "sessions_created") == index_sql(new, "sessions_created") is not None


def test_g13_a_read_only_open_of_a_version_3_journal_pages_its_sessions_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    make_v3_journal(path)
    apsw.Connection(str(path)).close()  # fold the WAL in, so the bytes below are the whole file
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with journal.open(path, readonly=True) as j:
        everything = j.sessions()
        assert [s.id for s in everything] == ["c", "a", "b", "f"]
        pages = [j.sessions(limit=3), j.sessions(limit=3, after="b")]
        assert [s for page in pages for s in page] == everything  # without the index: sorted
        assert j.session("f").count == 1
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert index_sql(path, "sessions_created") is None


# -- version 4 to 5: the compactions table ------------------------------------------------------


def _compacted(j: journal.Journal) -> None:
    """Session `p` compacted twice, a fork `f` of it compacted again (its first compaction is
    placed through its parent's), and `q`, whose surface_op only appends."""
    j.create_session("p")
    j.append_many("p", [("user_message", {"content": f"m{i}"}) for i in range(12)])
    j.compact("p", 0, 4, "first summary")
    j.append("p", "assistant_message", {"content": "more"})
    j.append("p", "user_message", {"content": "greedy summary", "surface_op": ["replace", 2, 100]})  # ends it
    j.fork("p", id="f")
    j.append_many("f", [("user_message", {"content": f"f{i}"}) for i in range(4)])
    j.compact("f", 1, 3, "fork summary")
    j.append("f", "user_message", {"content": "last"})
    j.create_session("q")
    j.append("q", "user_message", {"content": "q", "surface_op": "append"})


def _compaction_rows(path: Path) -> list[tuple]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return sorted(conn.execute("SELECT * FROM compactions"))
    finally:
        conn.close()


def make_v4_journal(path: Path) -> list[tuple]:
    """A version-4 journal holding compactions (and the rows version 5 gives them)."""
    with journal.open(path) as j:
        _compacted(j)
    placed = _compaction_rows(path)
    conn = apsw.Connection(str(path))
    with conn:
        undo_v6(conn)
        conn.execute(V5_OBJECTS)
        conn.pragma("user_version", 4)
    conn.close()
    return placed


def test_g13_a_version_4_journal_gains_a_row_for_each_compaction_it_holds(tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    placed = make_v4_journal(old)
    assert [(row[0], row[1]) for row in placed] == [("f", 19), ("p", 12), ("p", 14)]
    before = rows(old)
    with journal.open(old) as j:
        assert j.check() == []
        for s in ("p", "f", "q"):
            whole = j.messages(s)
            assert [j.messages(s, tail=n) for n in range(len(whole) + 1)] == [
                whole[len(whole) - n :] for n in range(len(whole) + 1)
            ]
        j.compact("f", 0, 1, "after the migration")  # placed by the new trigger from the old rows
        assert j.check() == []
    assert [row for row in _compaction_rows(old) if row[:2] != ("f", 21)] == placed
    assert rows(old) | {"events": []} == before | {"events": []}
    new = tmp_path / "new.db"
    journal.open(new).close()
    assert schema_objects(old) == schema_objects(new)


def test_g13_a_read_only_open_of_a_version_4_journal_reads_tails_by_folding_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    make_v4_journal(path)
    apsw.Connection(str(path)).close()  # fold the WAL in, so the bytes below are the whole file
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with journal.open(path, readonly=True) as j:
        for s in ("p", "f"):
            whole = j.messages(s)
            assert j.messages(s, tail=3) == whole[-3:]
            assert j.provider_view(s, tail=2) == j.provider_view(s).tail(2)
        assert j.check() == []
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


# -- version 6 to 7: the submission order, state values as bytes -------------------------------


STATE = {"channel": {"messages": ["hi", "there"]}, "blob": b"\x00\xffraw", "count": 3}


def make_v6_journal(path: Path) -> list[str]:
    """A version-6 journal: submissions to two sessions queued in an order their ids do not
    sort in (one claimed), and state of JSON values and bytes. The ids in submission order."""
    ids = ["z1", "a2", "m3", "b4", "y5"]
    with journal.open(path) as j:
        for sid in ("s", "t"):
            j.create_session(sid)
        for n, sub_id in enumerate(ids):
            j.submit("s" if n % 2 == 0 else "t", "user_message", {"content": sub_id}, id=sub_id)
        claim = j.claim(session_id="s")
        assert claim is not None and claim.submission.id == "z1"
        j.set_state("s", STATE)
    conn = apsw.Connection(str(path))
    with conn:
        undo_v7(conn)
        conn.pragma("user_version", 6)
    conn.close()
    return ids


def _raw(path: Path, sql: str) -> list[tuple]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


def test_g13_a_version_6_journal_gains_the_submission_order_and_keeps_every_row(tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    ids = make_v6_journal(old)
    assert _raw(old, "SELECT typeof(value) FROM state WHERE kind = 'json' LIMIT 1") == [("text",)]
    before = _raw(old, f"SELECT {SUBMISSION_COLUMNS} FROM submissions ORDER BY rowid")
    with journal.open(old) as j:
        assert [s.id for s in j.submissions()] == ids  # submission order, not id order
        assert j.state("s") == STATE
        assert j.check() == []
    assert _raw(old, f"SELECT {SUBMISSION_COLUMNS} FROM submissions ORDER BY ordinal") == before
    assert _raw(old, "SELECT id, ordinal FROM submissions ORDER BY ordinal") == [
        (sub_id, n) for n, sub_id in enumerate(ids, start=1)
    ]
    assert _raw(old, "SELECT DISTINCT typeof(value) FROM state") == [("blob",)]
    with journal.open(old) as j:
        # The queue goes on in the order it had: t's head, and none of s's while z1 runs.
        claims = [j.claim(session_id=sid) for sid in ("t", "t", "s")]
        assert [c.submission.id if c else None for c in claims] == ["a2", None, None]
        j.submit("t", "user_message", {"content": "after"}, id="c6")
        assert [s.id for s in j.submissions()] == [*ids, "c6"]
        assert j.state("s") == STATE
    new = tmp_path / "new.db"
    journal.open(new).close()
    assert schema_objects(old) == schema_objects(new)
    conn = apsw.Connection(str(old))
    assert conn.pragma("user_version") == store.SCHEMA_VERSION == 9
    assert conn.pragma("integrity_check") == "ok"
    conn.close()


def test_g13_a_migrated_journal_refuses_a_state_value_that_is_not_bytes(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    make_v6_journal(path)
    journal.open(path).close()
    conn = apsw.Connection(str(path))
    try:
        with pytest.raises(apsw.ConstraintError):  # STRICT: a BLOB column takes no text
            conn.execute("INSERT INTO state (session_id, key, at, kind, value) VALUES ('s', 'k', 0, 'json', '1')")
        with pytest.raises(apsw.ConstraintError):  # nor bytes that are not JSON's text as json
            conn.execute("INSERT INTO state (session_id, key, at, kind, value) VALUES ('s', 'k', 0, 'json', x'7b')")
    finally:
        conn.close()


def test_g13_a_read_only_open_of_a_version_6_journal_reads_it_in_order_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    ids = make_v6_journal(path)
    apsw.Connection(str(path)).close()  # fold the WAL in, so the bytes below are the whole file
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with journal.open(path, readonly=True) as j:
        assert [s.id for s in j.submissions()] == ids
        assert [s.id for s in j.submissions("t")] == ids[1::2]
        assert j.state("s") == STATE
        assert j.check() == []
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


# -- PostgreSQL's schema version moves with the file's ---------------------------------------------


def make_pg_v6_journal(dsn: str) -> list[str]:
    """A version-6 schema on PostgreSQL: the submission order in a column named ``rowid``."""
    ids = ["z1", "a2", "m3"]
    with journal.open(dsn) as j:
        j.create_session("s")
        for sub_id in ids:
            j.submit("s", "user_message", {"content": sub_id}, id=sub_id)
        j.set_state("s", STATE)
    with Raw(dsn) as raw:
        raw.execute("ALTER TABLE submissions RENAME COLUMN ordinal TO rowid")
        raw.execute("UPDATE journal_meta SET schema_version = 6")
    return ids


def test_g13_a_version_6_schema_on_postgresql_is_migrated_by_a_writable_open(pg_dsn: str) -> None:
    ids = make_pg_v6_journal(pg_dsn)
    with journal.open(pg_dsn) as j:
        assert [s.id for s in j.submissions()] == ids
        assert j.state("s") == STATE
        claim = j.claim(session_id="s")
        assert claim is not None and claim.submission.id == "z1"
        assert j.check() == []
    with Raw(pg_dsn) as raw:
        assert raw.execute("SELECT schema_version FROM journal_meta") == [(store.SCHEMA_VERSION,)]
        assert raw.execute("SELECT id FROM submissions ORDER BY ordinal") == [(i,) for i in ids]
    with journal.open(pg_dsn, readonly=True) as ro:
        assert [s.id for s in ro.submissions()] == ids


def test_g13_a_read_only_open_of_a_version_6_schema_on_postgresql_is_refused_and_changes_nothing(
    pg_dsn: str,
) -> None:
    make_pg_v6_journal(pg_dsn)
    with pytest.raises(journal.NotAJournal, match="open it writable once"):
        journal.open(pg_dsn, readonly=True)
    with Raw(pg_dsn) as raw:
        assert raw.execute("SELECT schema_version FROM journal_meta") == [(6,)]
