"""What only the PostgreSQL backend has to show (DESIGN §16): the schema's stamp and G13 on a
database, SQLSTATEs translated into the library's errors, a server that restarts under a
journal, the async face on a server, and the way from one file to a server and back."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

import journal
import journal.aio
from journal.cli import main as cli
from journal.store.postgres import SCHEMA_VERSION, redacted
from journal.testing.pgserver import PgServer
from tests.raw import Raw, Refused


def _schema_dump(dsn: str) -> str:
    """Every object and row of the DSN's schema, as text: what "left untouched" compares."""
    with Raw(dsn) as raw:
        parts = [repr(raw.execute(
            "SELECT c.relname::text, c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() ORDER BY 1"
        ))]  # fmt: skip
        for table in raw.tables():
            parts.append(repr(sorted(map(repr, raw.execute(f'SELECT * FROM "{table}"')))))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def test_g13_a_schema_of_another_application_is_refused_and_left_untouched(pg_dsn: str) -> None:
    with Raw(pg_dsn) as raw:
        raw.execute("CREATE TABLE orders (id int PRIMARY KEY, note text)")
        raw.execute("INSERT INTO orders VALUES (1, 'keep me')")
    before = _schema_dump(pg_dsn)
    for readonly in (False, True):
        with pytest.raises(journal.NotAJournal, match="another application"):
            journal.open(pg_dsn, readonly=readonly)
    assert _schema_dump(pg_dsn) == before


def test_g13_a_journal_of_a_newer_schema_is_refused_and_left_untouched(pg_dsn: str) -> None:
    journal.open(pg_dsn).close()
    with Raw(pg_dsn) as raw:
        raw.execute("UPDATE journal_meta SET schema_version = ?", (SCHEMA_VERSION + 1,))
    before = _schema_dump(pg_dsn)
    with pytest.raises(journal.SchemaTooNew):
        journal.open(pg_dsn)
    assert _schema_dump(pg_dsn) == before


def test_g13_a_stamp_of_another_application_is_refused(pg_dsn: str) -> None:
    journal.open(pg_dsn).close()
    with Raw(pg_dsn) as raw:
        raw.execute("UPDATE journal_meta SET application = 'ledger'")
    with pytest.raises(journal.NotAJournal, match="ledger"):
        journal.open(pg_dsn)


def test_g13_a_read_only_open_never_creates_a_journal(pg_dsn: str) -> None:
    with pytest.raises(journal.NotAJournal, match="never creates"):
        journal.open(pg_dsn, readonly=True)
    with Raw(pg_dsn) as raw:
        assert raw.tables() == []


def test_g13_four_processes_opening_an_empty_database_at_once_make_one_journal(pg_dsn: str) -> None:
    from tests.conftest import python_child

    code = "import sys, journal\nj = journal.open(sys.argv[1]); j.create_session(sys.argv[2]); j.close()"
    children = [python_child(code, pg_dsn, f"s{i}") for i in range(4)]
    for child in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
    with journal.open(pg_dsn) as j:
        assert sorted(s.id for s in j.sessions()) == ["s0", "s1", "s2", "s3"]
    with Raw(pg_dsn) as raw:
        assert raw.execute("SELECT application, schema_version FROM journal_meta") == [("journal", SCHEMA_VERSION)]


def test_a_journal_in_a_readonly_open_refuses_writes_with_a_typed_error(pg_dsn: str) -> None:
    with journal.open(pg_dsn) as j:
        j.create_session("s")
    with journal.open(pg_dsn, readonly=True) as ro:
        assert ro.count("s") == 0
        with pytest.raises(journal.JournalError):
            ro.append("s", "user_message", {"content": "no"})
    with journal.open(pg_dsn) as j:
        assert j.count("s") == 0


def test_the_dsn_is_shown_without_its_password() -> None:
    assert redacted("postgresql://bot:s3cret@db.internal:5432/agents") == "postgresql://bot:***@db.internal:5432/agents"
    assert redacted("postgresql://bot@/agents?host=/run") == "postgresql://bot@/agents?host=/run"


def test_options_of_a_file_are_refused_for_a_server(pg_dsn: str) -> None:
    with pytest.raises(journal.InvalidArgument, match="vfs"):
        journal.open(pg_dsn, vfs="unix")
    with pytest.raises(journal.InvalidArgument, match="checkpoint_pages"):
        journal.open(pg_dsn, checkpoint_pages=100)


def test_an_unreachable_server_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(journal.JournalIOError, match="cannot connect"):
        journal.open(f"postgresql://nobody@/none?host={tmp_path}&connect_timeout=2")


def test_g12_values_postgresql_cannot_hold_are_refused_before_anything_is_written(pg_dsn: str) -> None:
    with journal.open(pg_dsn) as j:
        j.create_session("s")
        with pytest.raises(journal.InvalidArgument):
            j.create_session("s\udc80")
        # A NUL inside JSON text is an escape the codec writes, and the server keeps it.
        event = j.append("s", "user_message", {"content": "a\x00b"})
        assert j.events("s")[0].data == event.data == {"content": "a\x00b"}
        with pytest.raises(journal.InvalidArgument):
            j.set_state("s", {"k": "\ud800"})
        assert j.count("s") == 1 and j.state("s") == {}


def test_g1_a_server_crash_keeps_what_was_committed_fails_the_write_in_its_way_with_a_typed_error_and_the_journal_reconnects() -> None:
    with PgServer(fsync=False) as server:
        dsn = server.create_database()
        with journal.open(dsn) as j:
            j.create_session("s")
            j.append("s", "user_message", {"content": "before"})
            server.stop("immediate")  # a crash of the server
            with pytest.raises(journal.JournalIOError):
                j.append("s", "user_message", {"content": "while down"})
            with pytest.raises(journal.JournalIOError):
                j.events("s")
            server.start()
            j.append("s", "user_message", {"content": "after"})  # a new connection, the same handle
            assert [e.data["content"] for e in j.events("s")] == ["before", "after"]
            assert j.check() == []


def test_g4_the_async_face_on_a_server_gives_64_concurrent_appends_contiguous_seqs(pg_dsn: str) -> None:
    import asyncio

    async def main() -> list[int]:
        async with journal.aio.open(pg_dsn) as aj:
            await aj.create_session("s")
            events = await asyncio.gather(*(aj.append("s", "user_message", {"content": str(i)}) for i in range(64)))
            return sorted(e.seq for e in events)

    assert asyncio.run(main()) == list(range(64))
    with journal.open(pg_dsn) as j:
        assert [e.seq for e in j.events("s")] == list(range(64)) and j.check() == []


def _history(j: journal.Journal) -> None:
    """A bit of everything export carries: meta, turns, calls and results, a fork, keys, state."""
    j.create_session("chat", meta={"user": "ana", "vip": True})
    with j.turn("chat") as turn, turn.step():
        turn.assistant("", tool_calls=[{"id": "c1", "name": "lookup", "arguments": {"q": "x"}}])
        turn.dispatch("c1").result("found")
    j.append("chat", "x.note", {"n": 1}, key="note-1")
    j.append_many("chat", [("x.note", {"n": 2})], state={"memory": {"facts": ["a"]}, "blob": b"\x00\xff"})
    j.fork("chat", 8, id="chat.retry", meta={"why": "redo"})
    j.append("chat.retry", "user_message", {"content": "again"})


def test_export_from_a_file_imports_into_a_server_and_back_unchanged(tmp_path: Path, pg_dsn: str) -> None:
    source = tmp_path / "bot.db"
    with journal.open(source) as j:
        _history(j)
    runner = CliRunner()
    first = runner.invoke(cli, ["export", "--db", str(source)])
    assert first.exit_code == 0, first.output
    dump = tmp_path / "bot.jsonl"
    dump.write_text(first.output)
    into_server = runner.invoke(cli, ["import", "--db", pg_dsn, str(dump)])
    assert into_server.exit_code == 0, into_server.output
    from_server = runner.invoke(cli, ["export", "--db", pg_dsn])
    assert from_server.exit_code == 0, from_server.output
    assert from_server.output == first.output  # the same sessions, events, keys and state
    (tmp_path / "again.jsonl").write_text(from_server.output)
    back = tmp_path / "back.db"
    into_file = runner.invoke(cli, ["import", "--db", str(back), str(tmp_path / "again.jsonl")])
    assert into_file.exit_code == 0, into_file.output
    with journal.open(back) as j, journal.open(pg_dsn) as p:
        for sid in ("chat", "chat.retry"):
            assert j.events(sid) == p.events(sid)
            assert j.state(sid) == p.state(sid)
            assert j.messages(sid) == p.messages(sid)
        assert j.sessions(meta={"vip": True})[0].id == "chat" == p.sessions(meta={"vip": True})[0].id
        assert j.check() == [] and p.check() == []


def test_the_cli_reads_a_server_and_refuses_a_database_without_a_journal(pg_dsn: str, pg_server) -> None:
    with journal.open(pg_dsn) as j:
        j.create_session("s", meta={"team": "ops"})
        j.append("s", "user_message", {"content": "hello"})
    runner = CliRunner()
    listed = runner.invoke(cli, ["sessions", "--db", pg_dsn, "--json"])
    assert listed.exit_code == 0, listed.output
    assert [s["id"] for s in json.loads(listed.output)["sessions"]] == ["s"]
    empty = pg_server.dsn("contract") + f"&options=-csearch_path%3Dnone_{uuid.uuid4().hex[:8]}"
    missing = runner.invoke(cli, ["scan", "--db", empty])
    assert missing.exit_code != 0 and "no such journal" in missing.output
    with psycopg.connect(pg_dsn) as conn:  # and nothing was created for it
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'none_%'").fetchone()[0] == 0


def test_g3_a_session_with_events_is_never_deleted_by_hand(pg_dsn: str) -> None:
    # (events has no foreign key to sessions on PostgreSQL: its triggers keep the rule)
    with journal.open(pg_dsn) as j:
        j.create_session("s")
        j.append("s", "user_message", {"content": "keep me"})
    with Raw(pg_dsn) as raw:
        with pytest.raises(Refused):
            raw.execute("DELETE FROM sessions WHERE id = 's'")
        with pytest.raises(Refused):  # nor can an event name a session that does not exist
            raw.execute("INSERT INTO events (session_id, seq, type, data, time_ms) VALUES ('ghost', 0, 'x.e', '{}', 0)")
    with journal.open(pg_dsn) as j:
        assert j.count("s") == 1
        j.purge("s")  # purge erases it all, the one way
        assert j.sessions() == []


def test_without_psycopg_a_dsn_names_the_extra_to_install(tmp_path: Path) -> None:
    from tests.conftest import run_child

    code = """
import sys
sys.modules["psycopg"] = None  # as if it were not installed
import journal
try:
    journal.open("postgresql://bot@/agents")
except ImportError as exc:
    print(exc)
"""
    done = run_child(code)
    assert done.returncode == 0, done.stderr
    assert "agent-journal[postgres]" in done.stdout


def test_g2_a_batch_refused_midway_on_the_client_leaves_none_of_its_rows(pg_dsn: str) -> None:
    with journal.open(pg_dsn) as j:
        j.create_session("s")
        with j._store.write("test") as db:
            db.execute("INSERT INTO state (session_id, key, at, kind, value) VALUES ('s', 'kept', 0, 'bytes', ?)", (b"1",))
            rows = [("s", "a", 0, "bytes", b"1"), ("s", "b", 0, "bytes", b"2"), ("s", "\ud800", 0, "bytes", b"3")]
            with pytest.raises(journal.InvalidArgument):
                db.executemany("INSERT INTO state (session_id, key, at, kind, value) VALUES (?, ?, ?, ?, ?)", rows)
        assert j.state("s") == {"kept": b"1"}
