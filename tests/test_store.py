"""Opening files: the right file, the right version (G13), pragmas, permissions."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import threading
from pathlib import Path

import apsw
import pytest

import journal
from journal import store
from journal.classify import ResumeMode


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
def test_a_writer_kept_out_past_the_busy_timeout_gets_journal_busy_and_writes_nothing(db_path: Path, before: int) -> None:
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
        holder.execute("INSERT INTO events VALUES ('s', 1, 'x.other', '{}', 0)")
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
