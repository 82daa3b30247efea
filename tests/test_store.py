"""Opening files: the right file, the right version (G13), pragmas, permissions."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import stat
import threading
from pathlib import Path

import apsw
import pytest

import journal
from journal import store
from journal.classify import ResumeMode

from .conftest import run_child


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_new_file_is_created_private_in_wal_mode_with_the_pragmas(db_path: Path) -> None:
    with journal.open(db_path) as j:
        conn = j._store._conn
        assert conn.pragma("journal_mode") == "wal"
        assert conn.pragma("synchronous") == 2  # FULL
        assert conn.pragma("foreign_keys") == 1
        assert conn.pragma("application_id") == store.APPLICATION_ID
        assert conn.pragma("user_version") == store.SCHEMA_VERSION
    assert stat.S_IMODE(os.stat(db_path).st_mode) == 0o600


def test_normal_durability_sets_synchronous_normal(db_path: Path) -> None:
    with journal.open(db_path, durability="normal") as j:
        assert j._store._conn.pragma("synchronous") == 1


def test_unknown_durability_is_refused(db_path: Path) -> None:
    with pytest.raises(journal.InvalidArgument):
        journal.open(db_path, durability="sometimes")
    assert not db_path.exists()


def test_g13_foreign_sqlite_file_is_not_a_journal_and_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine')")
    conn.close()
    before = sha256(path)
    with pytest.raises(journal.NotAJournal):
        journal.open(path)
    assert sha256(path) == before
    assert not (tmp_path / "other.db-wal").exists()


def test_g13_text_file_is_not_a_journal_and_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("dear diary\n" * 100)
    before = sha256(path)
    with pytest.raises(journal.NotAJournal):
        journal.open(path)
    assert sha256(path) == before


def test_g13_newer_schema_is_refused_and_not_downgraded(db_path: Path) -> None:
    journal.open(db_path).close()
    conn = apsw.Connection(str(db_path))
    conn.pragma("user_version", store.SCHEMA_VERSION + 1)
    conn.close()
    before = sha256(db_path)
    with pytest.raises(journal.SchemaTooNew) as info:
        journal.open(db_path)
    assert info.value.version == store.SCHEMA_VERSION + 1
    assert sha256(db_path) == before
    conn = apsw.Connection(str(db_path))
    assert conn.pragma("user_version") == store.SCHEMA_VERSION + 1
    conn.close()


def test_an_empty_sqlite_file_becomes_a_journal(db_path: Path) -> None:
    apsw.Connection(str(db_path)).close()
    with journal.open(db_path) as j:
        j.create_session("s")
        assert j.count("s") == 0


def test_reopening_keeps_everything(db_path: Path) -> None:
    with journal.open(db_path) as j:
        j.create_session("s")
        j.append("s", "user_message", {"content": "hi"})
    with journal.open(db_path) as j:
        assert [e.data for e in j.events("s")] == [{"content": "hi"}]


def test_shipped_schema_is_the_root_schema() -> None:
    root = Path(__file__).resolve().parent.parent / "schema.sql"
    assert store.schema_sql() == root.read_text(encoding="utf-8")


def test_readonly_open_reads_and_never_writes(db_path: Path) -> None:
    with journal.open(db_path) as j:
        j.create_session("s")
        j.append("s", "user_message", {"content": "hi"})
    with journal.open(db_path, readonly=True) as r:
        assert r.count("s") == 1
        with pytest.raises(journal.JournalError):
            r.append("s", "user_message", {"content": "no"})
    with journal.open(db_path) as j:
        assert j.count("s") == 1


def test_readonly_open_of_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(journal.NotAJournal):
        journal.open(tmp_path / "absent.db", readonly=True)
    assert not (tmp_path / "absent.db").exists()


def test_use_after_close_is_a_typed_error(db_path: Path) -> None:
    j = journal.open(db_path)
    j.close()
    with pytest.raises(journal.JournalClosed):
        j.create_session()


def _check_lists(sql: str, column: str) -> list[set[str]]:
    """The value sets a CHECK allows for ``column``: ``column IN (...)`` lists, and chains of
    ``column = '...' OR ...`` (the events type check is written that way, for speed)."""
    lists = [set(re.findall(r"'([^']*)'", m)) for m in re.findall(rf"\b{column}\s+IN\s*\(([^)]*)\)", sql)]
    chains = re.findall(rf"CHECK \(\s*({column} = '[^']*'(?:\s+OR\s+{column} = '[^']*')*)", sql)
    return lists + [set(re.findall(r"'([^']*)'", chain)) for chain in chains]


@pytest.mark.parametrize(
    ("column", "vocabulary"),
    [
        ("phase", journal.Phase),
        ("end_reason", journal.TurnEndReason),
        ("type", journal.EventType),
        ("resume_mode", ResumeMode),
        ("effect", journal.EffectKind),
    ],
)
def test_schema_check_constraints_list_exactly_the_enums_values(column: str, vocabulary) -> None:
    lists = _check_lists(store.schema_sql(), column)
    assert lists, f"no CHECK ({column} IN ...) in schema.sql"
    assert {v.value for v in vocabulary} in lists


def test_schema_state_checks_match_the_call_and_submission_vocabularies() -> None:
    lists = _check_lists(store.schema_sql(), "state")
    assert {v.value for v in journal.CallState} in lists
    assert {v.value for v in journal.SubmissionState} in lists


@pytest.mark.parametrize("before", [0, 1], ids=["first-append", "lone-insert"])
def test_a_writer_kept_out_past_the_busy_timeout_gets_journal_busy_and_writes_nothing(
    db_path: Path, before: int
) -> None:
    # After one append the next is a lone INSERT committed on its own (Store.write_one): it
    # must wait and give up exactly as a BEGIN IMMEDIATE transaction does.
    with journal.open(db_path, busy_timeout_ms=100) as j:
        j.create_session("s")
        for i in range(before):
            j.append("s", "user_message", {"content": f"before {i}"})
        holder = apsw.Connection(str(db_path))
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(journal.JournalBusy) as info:
                j.append("s", "user_message", {"content": "blocked"})
            assert info.value.timeout_ms == 100
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert j.count("s") == before
        assert j.append("s", "user_message", {"content": "now"}).seq == before


def test_a_lone_insert_waits_for_another_writer_then_takes_the_next_seq(db_path: Path) -> None:
    with journal.open(db_path) as j:
        j.create_session("s")
        j.append("s", "user_message", {"content": "first"})  # this process now guesses seq 1
        holder = apsw.Connection(str(db_path))
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("INSERT INTO events (session_id, seq, type, data, time_ms) VALUES ('s', 1, 'x.other', '{}', 0)")
        timer = threading.Timer(0.2, holder.execute, ("COMMIT",))
        timer.start()
        try:
            event = j.append("s", "user_message", {"content": "second"})
        finally:
            timer.join()
            holder.close()
        assert event.seq == 2
        assert [(e.seq, e.type) for e in j.events("s")] == [(0, "user_message"), (1, "x.other"), (2, "user_message")]


def test_a_directory_is_not_a_journal(tmp_path: Path) -> None:
    with pytest.raises(journal.NotAJournal):
        journal.open(tmp_path)


# -- a journal in a directory the reader cannot write ---------------------------------------------

READ_IN_A_READ_ONLY_DIRECTORY = """
import json, os, sys, journal
directory, path = sys.argv[1], sys.argv[2]
try:  # the test means nothing if this process could write there after all
    open(os.path.join(directory, "probe"), "w").close()
    print(json.dumps({"wrote": True}))
    raise SystemExit(0)
except PermissionError:
    pass
try:
    with journal.open(path, readonly=True) as j:
        print(json.dumps({"count": j.count("s")}))
except journal.JournalError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
"""


def _without_write_permission() -> None:
    """In the child, before it starts: take away root's power to ignore file permissions
    (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) from the capabilities it will run with."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _read_in_a_read_only_directory(path: Path) -> dict:
    directory = path.parent
    directory.chmod(0o555)
    try:
        kwargs = {"preexec_fn": _without_write_permission} if os.geteuid() == 0 else {}
        done = run_child(READ_IN_A_READ_ONLY_DIRECTORY, str(directory), str(path), **kwargs)
    finally:
        directory.chmod(0o755)
    if done.returncode != 0 and "PR_CAPBSET_DROP" in done.stderr:
        pytest.skip("cannot run a reader without write permission here (no CAP_SETPCAP to drop root's)")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert "wrote" not in result, "the child could write to the read-only directory"
    return result


def _journal_with_events(path: Path, count: int) -> None:
    path.parent.mkdir()
    with journal.open(path) as j:
        j.create_session("s")
        for i in range(count):
            j.append("s", "user_message", {"content": f"event {i}"})


def test_a_readonly_open_in_a_directory_it_cannot_write_reads_a_checkpointed_journal(tmp_path: Path) -> None:
    path = tmp_path / "backup" / "j.db"
    _journal_with_events(path, 3)
    assert not Path(f"{path}-wal").exists()
    before = sha256(path)
    assert _read_in_a_read_only_directory(path) == {"count": 3}
    assert sha256(path) == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["j.db"]


KILLED_WITH_COMMITS_IN_THE_WAL = """
import os, signal, sys, journal
j = journal.open(sys.argv[1], checkpoint_pages=0)
j.create_session("s")
for i in range(4):
    j.append("s", "user_message", {"content": "event %d" % i})
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_readonly_open_in_a_directory_it_cannot_write_reads_the_wal_through_an_existing_shm(tmp_path: Path) -> None:
    path = tmp_path / "backup" / "j.db"
    path.parent.mkdir()
    done = run_child(KILLED_WITH_COMMITS_IN_THE_WAL, str(path))
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert Path(f"{path}-shm").exists() and Path(f"{path}-wal").stat().st_size > 0
    assert _read_in_a_read_only_directory(path) == {"count": 4}


def test_a_readonly_open_in_a_directory_it_cannot_write_refuses_clearly_when_the_wal_cannot_be_read(
    tmp_path: Path,
) -> None:
    # Commits only in the -wal, and no -shm to read it through: the main file alone is stale.
    path = tmp_path / "backup" / "j.db"
    path.parent.mkdir()
    done = run_child(KILLED_WITH_COMMITS_IN_THE_WAL, str(path))
    assert done.returncode == -signal.SIGKILL, done.stderr
    Path(f"{path}-shm").unlink()
    result = _read_in_a_read_only_directory(path)
    assert result["error"] == "JournalIOError"
    assert "directory is not writable" in result["message"] and "-wal" in result["message"]


def test_a_readonly_open_in_a_directory_it_cannot_write_reads_past_a_wal_without_commits(tmp_path: Path) -> None:
    path = tmp_path / "backup" / "j.db"
    _journal_with_events(path, 2)
    Path(f"{path}-wal").write_bytes(b"")  # left empty by a writer that checkpointed and truncated
    assert _read_in_a_read_only_directory(path) == {"count": 2}


def test_a_batch_of_repairs_refused_midway_leaves_the_derived_switch_off(db_path: Path) -> None:
    """``insert_repairs`` turns the gate trigger's derived part off for its rows only: a row the
    schema refuses (here G4: a seq that does not continue the log) leaves the switch off again
    inside the transaction, so the appends after it are derived as always."""
    with journal.open(db_path) as j:
        j.create_session("s")
        j.append_many("s", [("turn_start", {"turn": 1})])
        with j._store.write("test") as db:
            with pytest.raises(journal.SchemaViolation):
                db.insert_repairs(
                    [("s", 5, "turn_end", '{"reason":"interrupted"}', 1)], [], [("s", 0, 5, "interrupted")]
                )
            assert db.value("SELECT count(*) FROM derived_by_statement") == 0
            db.insert_events([("s", 1, "turn_end", '{"turn":1}', 1)])
        assert j.check() == []
        assert j.scan().clean  # the turn_end after the refusal was derived: the turn is closed
