"""What only the PostgreSQL backend has to show (DESIGN §16): the schema's stamp and G13 on a
database, SQLSTATEs translated into the library's errors, a server that restarts under a
journal, the async face on a server, and the way from one file to a server and back."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import urllib.parse
import uuid
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

import journal
import journal.aio
from journal.cli import main as cli
from journal.model import Event
from journal.store.postgres import DOMAIN_COLUMNS, SCHEMA_VERSION
from journal.store.target import redact
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
        _out, err = child.communicate(timeout=60)
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


def test_g14_the_dsn_is_shown_without_its_password() -> None:
    assert redact("postgresql://bot:s3cret@db.internal:5432/agents") == "postgresql://bot:***@db.internal:5432/agents"
    assert redact("postgresql://bot@/agents?host=/run") == "postgresql://bot@/agents?host=/run"


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


def test_g1_a_server_crash_keeps_the_commits_fails_the_write_with_a_typed_error_and_the_journal_reconnects() -> None:
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


def test_g1_a_server_crash_while_coroutines_append_loses_no_awaited_event_and_every_error_tells_the_truth() -> None:
    """Sixteen coroutines append (the writer's rounds: one insert for their plain appends) while
    the server is crashed and started again. Every event an await returned is in the log; every
    write that raised raised a ``JournalError``, and none said ``absent`` of a write the log
    holds; the journal carries on after the restart."""
    import asyncio
    import threading

    from journal.model import WriteOutcome

    with PgServer(fsync=False) as server:
        dsn = server.create_database()
        told: list[journal.Event] = []
        failed: list[tuple[int, int, BaseException]] = []

        async def main() -> None:
            async with journal.aio.open(dsn) as aj:
                for t in range(16):
                    await aj.create_session(f"s{t}")

                async def agent(t: int) -> None:
                    n, after = 0, 0
                    while after < 20 and n < 100_000:  # until 20 appends past the restart
                        if restarted.is_set():
                            after += 1
                        try:
                            told.append(await aj.append(f"s{t}", "user_message", {"content": f"{t}.{n}"}))
                        except Exception as exc:
                            failed.append((t, n, exc))
                            await asyncio.sleep(0.02)
                        n += 1

                def start_again() -> None:
                    server.start()
                    restarted.set()

                restarted = threading.Event()
                crash = threading.Timer(0.1, lambda: server.stop("immediate"))
                restart = threading.Timer(0.4, start_again)
                crash.start()
                restart.start()
                try:
                    await asyncio.gather(*(agent(t) for t in range(16)))
                finally:
                    crash.join()
                    restart.join()
                told.append(await aj.append("s0", "user_message", {"content": "after"}))

        asyncio.run(main())
        assert failed  # the crash landed while they appended
        with journal.open(dsn) as j:
            stored = {(e.session_id, e.data["content"]) for t in range(16) for e in j.events(f"s{t}")}
            assert [e for e in told if (e.session_id, e.data["content"]) not in stored] == []
            for t, n, exc in failed:
                assert isinstance(exc, journal.JournalError), exc
                if getattr(exc, "outcome", None) is WriteOutcome.ABSENT:
                    assert (f"s{t}", f"{t}.{n}") not in stored
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


def test_g1_g2_threads_sharing_a_journal_on_a_server_share_commits_across_their_sessions(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group commit on PostgreSQL: a leader's transaction takes the locks of every session
    queued when it begins, so appends of different sessions ride one commit, their rows one
    INSERT (each batch's sessions, and the rows inserted together, recorded as the real
    ``GroupCommit._commit`` ran it); each thread's events land whole and in order."""
    import threading

    from journal.store import groupcommit
    from journal.store.groupcommit import GroupCommit

    batches: list[set[str | None]] = []
    together: list[int] = []
    real, real_rows = GroupCommit._commit, groupcommit._insert_rows

    def recorded(self: GroupCommit, batch: list) -> None:
        real(self, batch)
        batches.append({item.session for item in batch if item.error is None})

    def rows_recorded(db: object, batch: list) -> set[int]:
        inserted = real_rows(db, batch)  # type: ignore[arg-type]
        together.append(len(inserted))
        return inserted

    monkeypatch.setattr(GroupCommit, "_commit", recorded)
    monkeypatch.setattr(groupcommit, "_insert_rows", rows_recorded)
    threads, each = 8, 60
    with journal.open(pg_dsn) as j:
        for t in range(threads):
            j.create_session(f"s{t}")
            j.append(f"s{t}", "user_message", {"content": "first"})
        for attempt in range(3):  # whether two threads meet in one commit is the scheduler's call
            start = threading.Barrier(threads)

            def work(t: int, attempt: int = attempt, start: threading.Barrier = start) -> None:
                start.wait()
                for n in range(each):
                    j.append(f"s{t}", "user_message", {"content": f"{attempt}.{n}"})

            workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            if any(len(sessions) >= 2 for sessions in batches):
                break
        assert max(len(sessions) for sessions in batches) >= 2
        assert max(together) >= 2
    with journal.open(pg_dsn) as fresh:
        for t in range(threads):
            contents = [e.data["content"] for e in fresh.events(f"s{t}")]
            assert contents[0] == "first"
            assert contents[1 : 1 + each] == [f"0.{n}" for n in range(each)]
        assert fresh.check() == []


def test_g4_two_journals_of_threads_appending_to_the_same_sessions_each_get_the_seq_they_were_written_at(
    pg_dsn: str,
) -> None:
    """Stale guesses in group commits: two ``Journal``s (two connections), four threads each,
    all appending to the same four sessions, so a batch's one INSERT of rows is often refused
    (another connection took a seq) and its appends then run one by one. Every append returns
    the event stored at its seq, and every session stays contiguous."""
    import threading

    sessions, each = 4, 40
    with journal.open(pg_dsn) as setup:
        for s in range(sessions):
            setup.create_session(f"s{s}")
    told: list[Event] = []
    lock = threading.Lock()
    opened = [journal.open(pg_dsn), journal.open(pg_dsn)]
    try:
        for j in opened:
            for s in range(sessions):
                j.append(f"s{s}", "user_message", {"content": f"hello from {id(j)}"})
        start = threading.Barrier(2 * sessions)

        def work(j: journal.Journal, s: int, tag: str) -> None:
            start.wait()
            mine = [j.append(f"s{s}", "user_message", {"content": f"{tag}.{n}"}) for n in range(each)]
            with lock:
                told.extend(mine)

        workers = [
            threading.Thread(target=work, args=(j, s, f"{k}.{s}"))
            for k, j in enumerate(opened)
            for s in range(sessions)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        for j in opened:
            j.close()
    assert len(told) == 2 * sessions * each
    with journal.open(pg_dsn) as fresh:
        stored = {(e.session_id, e.seq): e for s in range(sessions) for e in fresh.events(f"s{s}")}
        for event in told:
            assert stored[(event.session_id, event.seq)].data == event.data
        for s in range(sessions):
            assert [e.seq for e in fresh.events(f"s{s}")] == list(range(2 + 2 * each))
        assert fresh.check() == []


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
    # Another application's database exists: it is not "no such journal", and no file is named.
    schema = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.sessions (id text)")
    foreign = runner.invoke(cli, ["sessions", "--db", pg_server.dsn("contract") + f"&options=-csearch_path%3D{schema}"])
    assert foreign.exit_code != 0 and "is not a journal" in foreign.output
    assert "no such journal" not in foreign.output and "the database was left untouched" in foreign.output
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
            db.execute(
                "INSERT INTO state (session_id, key, at, kind, value) VALUES ('s', 'kept', 0, 'bytes', ?)", (b"1",)
            )
            rows = [("s", "a", 0, "bytes", b"1"), ("s", "b", 0, "bytes", b"2"), ("s", "\ud800", 0, "bytes", b"3")]
            with pytest.raises(journal.InvalidArgument):
                db.executemany("INSERT INTO state (session_id, key, at, kind, value) VALUES (?, ?, ?, ?, ?)", rows)
        assert j.state("s") == {"kept": b"1"}


# -- parity: what SQLite takes, PostgreSQL takes (DESIGN §16) ---------------------------------------


def _meta_plan(j: journal.Journal, meta: dict) -> str:
    """PostgreSQL's plan of ``sessions(meta=...)``, sequential scans priced out: an index the
    query can use is used."""
    from journal.sessions import _session_filters
    from journal.store.postgres import pg_sql

    where, args = _session_filters(j._store.sql, meta, None, None)
    text, _, _ = pg_sql("SELECT s.id FROM sessions AS s WHERE s.purged_ms IS NULL" + where)
    conn = j._store._conn
    conn.execute("SET enable_seqscan = off")
    try:
        return "\n".join(row[0] for row in conn.execute("EXPLAIN (COSTS OFF) " + text, args))
    finally:
        conn.execute("RESET enable_seqscan")


def test_g7_a_session_by_a_long_meta_value_is_found_through_the_digest_index(pg_dsn: str) -> None:
    value = "v" * 200_000
    with journal.open(pg_dsn) as j:
        for i in range(50):
            j.create_session(f"s{i}", meta={"note": value if i == 7 else f"n{i}", "vip": i % 2 == 0})
        assert [s.id for s in j.sessions(meta={"note": value})] == ["s7"]
        for meta in ({"note": value}, {"vip": True, "note": "n4"}):
            plan = _meta_plan(j, meta)
            assert "session_meta_match" in plan and "Seq Scan on session_meta" not in plan, plan


def test_parity_a_file_with_long_meta_values_exports_and_imports_into_a_server(tmp_path: Path, pg_dsn: str) -> None:
    source = tmp_path / "bot.db"
    long_values = {"100kB": "a" * 100_000, "1MB": "b" * 1_000_000}
    with journal.open(source) as j:
        for name, value in long_values.items():
            j.create_session(name, meta={"note": value, "k" * 50_000: name})
            j.append(name, "user_message", {"content": name})
    runner = CliRunner()
    dump = tmp_path / "bot.jsonl"
    exported = runner.invoke(cli, ["export", "--db", str(source), "--output", str(dump)])
    assert exported.exit_code == 0, exported.output
    imported = runner.invoke(cli, ["import", "--db", pg_dsn, str(dump)])
    assert imported.exit_code == 0, imported.output
    with journal.open(pg_dsn) as p, journal.open(source) as j:
        for name, value in long_values.items():
            assert [s.id for s in p.sessions(meta={"note": value})] == [name]
            assert [s.id for s in p.sessions(meta={"k" * 50_000: name})] == [name]
            assert p.session(name).meta == j.session(name).meta and p.events(name) == j.events(name)
        assert p.check() == []


def test_parity_a_file_with_every_identifier_at_its_limit_exports_and_imports_into_a_server(
    tmp_path: Path, pg_dsn: str
) -> None:
    from tests.contract.test_g12_hostile_input import write_identifiers_at_their_limits

    source = tmp_path / "bot.db"
    with journal.open(source) as j:
        sid = write_identifiers_at_their_limits(j)  # random 4-byte characters: the worst case in UTF-8
    runner = CliRunner()
    dump = tmp_path / "bot.jsonl"
    exported = runner.invoke(cli, ["export", "--db", str(source), "--output", str(dump)])
    assert exported.exit_code == 0, exported.output
    imported = runner.invoke(cli, ["import", "--db", pg_dsn, str(dump)])
    assert imported.exit_code == 0, imported.output
    with journal.open(pg_dsn) as p, journal.open(source) as j:
        assert p.events(sid) == j.events(sid) and p.state(sid) == j.state(sid)
        assert p.messages(sid) == j.messages(sid) and p.check() == []
    again = runner.invoke(cli, ["export", "--db", pg_dsn])
    assert again.exit_code == 0 and again.output == dump.read_text()


def _schema_of(dsn: str) -> str:
    return urllib.parse.unquote(dsn.rsplit("search_path", 1)[1]).lstrip("=")


def _pg_dump(pg_server, dsn: str) -> str:
    """``pg_dump`` of the DSN's schema, definitions and rows: what "left untouched" compares,
    every kind of object included."""
    from journal.testing.pgserver import bindir

    done = subprocess.run(
        [str(bindir() / "pg_dump"), "-h", pg_server.socket_dir, "-U", pg_server._user, "-d", "contract",
         "-n", _schema_of(dsn), "--no-owner"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    # (\restrict and \unrestrict carry a key pg_dump draws at random each run)
    return "\n".join(line for line in done.stdout.splitlines() if not line.startswith(("\\restrict", "\\unrestrict")))


FOREIGN_OBJECTS = {
    "table": "CREATE TABLE orders (id int)",
    "view": "CREATE VIEW report AS SELECT 1 AS x",
    "materialized view": "CREATE MATERIALIZED VIEW totals AS SELECT 1 AS x",
    "sequence": "CREATE SEQUENCE invoice_numbers",
    "function": "CREATE FUNCTION answer() RETURNS int LANGUAGE sql AS 'SELECT 42'",
    "procedure": "CREATE PROCEDURE tidy() LANGUAGE sql AS 'SELECT 1'",
    "enum type": "CREATE TYPE mood AS ENUM ('ok', 'sad')",
    "domain": "CREATE DOMAIN positive AS int CHECK (VALUE > 0)",
    "composite type": "CREATE TYPE pair AS (a int, b int)",
    "collation": 'CREATE COLLATION bytes FROM "C"',
    "text search configuration": "CREATE TEXT SEARCH CONFIGURATION plain (COPY = simple)",
}


@pytest.mark.parametrize("sql", list(FOREIGN_OBJECTS.values()), ids=list(FOREIGN_OBJECTS))
def test_g13_a_schema_holding_any_object_of_another_application_is_refused_and_left_untouched(
    pg_server, pg_dsn: str, sql: str
) -> None:
    with Raw(pg_dsn) as raw:
        raw.execute(sql)
    before = _pg_dump(pg_server, pg_dsn)
    for readonly in (False, True):
        with pytest.raises(journal.NotAJournal, match="another application"):
            journal.open(pg_dsn, readonly=readonly)
    assert _pg_dump(pg_server, pg_dsn) == before


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE journal_meta (application text, schema_version text)",
        "CREATE TABLE journal_meta (one int PRIMARY KEY DEFAULT 1, application text, schema_version bigint)",
        "CREATE TABLE journal_meta (one int, application text, schema_version int, owner text)",
        "CREATE VIEW journal_meta AS SELECT 1 AS one, 'journal'::text AS application, 6 AS schema_version",
    ],
    ids=["other-columns", "other-type", "one-more-column", "a-view"],
)
def test_g13_a_journal_meta_of_another_shape_is_not_a_stamp(pg_server, pg_dsn: str, sql: str) -> None:
    with Raw(pg_dsn) as raw:
        raw.execute(sql)
        if sql.startswith("CREATE TABLE"):
            columns = "application, schema_version"
            raw.execute(f"INSERT INTO journal_meta ({columns}) VALUES ('journal', '{SCHEMA_VERSION}')")
    before = _pg_dump(pg_server, pg_dsn)
    for readonly in (False, True):
        with pytest.raises(journal.NotAJournal, match=r"journal_meta|another application"):
            journal.open(pg_dsn, readonly=readonly)
    assert _pg_dump(pg_server, pg_dsn) == before


def test_g13_a_journal_beside_an_object_of_another_application_writes_only_its_own(pg_dsn: str) -> None:
    journal.open(pg_dsn).close()
    with Raw(pg_dsn) as raw:
        raw.execute("CREATE TABLE reports (id int, note text)")
        raw.execute("INSERT INTO reports VALUES (1, 'keep me')")
        raw.execute("CREATE VIEW session_count AS SELECT count(*) AS n FROM sessions")
    with journal.open(pg_dsn) as j:
        j.create_session("s", meta={"k": "v"})
        j.append("s", "user_message", {"content": "hi"})
        assert j.check() == []
    with Raw(pg_dsn) as raw:
        assert raw.execute("SELECT id, note FROM reports") == [(1, "keep me")]
        assert raw.execute("SELECT n FROM session_count") == [(1,)]


def test_a_version_6_schema_made_before_the_meta_digests_is_read_as_it_is_and_upgraded_by_a_write_open(
    pg_dsn: str,
) -> None:
    with journal.open(pg_dsn) as j:
        j.create_session("old", meta={"team": "ops"})
    with Raw(pg_dsn) as raw:  # as schema_pg.sql made session_meta until now
        raw.execute("DROP INDEX session_meta_match")
        raw.execute("DROP INDEX session_meta_session")
        raw.execute("ALTER TABLE session_meta ADD PRIMARY KEY (key, type, value, session_id)")
    with journal.open(pg_dsn, readonly=True) as ro:  # read as it is, nothing changed
        assert [s.id for s in ro.sessions(meta={"team": "ops"})] == ["old"]
    with Raw(pg_dsn) as raw:
        assert raw.execute("SELECT to_regclass('session_meta_match') IS NULL") == [(True,)]
    with journal.open(pg_dsn) as j:
        j.create_session("new", meta={"note": "n" * 100_000})
        assert [s.id for s in j.sessions(meta={"note": "n" * 100_000})] == ["new"]
        assert [s.id for s in j.sessions(meta={"team": "ops"})] == ["old"]
        assert j.check() == []
    with Raw(pg_dsn) as raw:
        assert raw.execute(
            "SELECT to_regclass('session_meta_pkey') IS NULL, to_regclass('session_meta_match') IS NOT NULL"
        ) == [(True, True)]


def as_checks(raw: Raw) -> None:
    """Take the tables every append writes back to what schema_pg.sql made before their column
    rules were domains: each domain's rule as the column's CHECK, named as PostgreSQL names one."""
    changes: dict[str, list[str]] = {}
    for table, columns in DOMAIN_COLUMNS.items():
        for column, domain in columns.items():
            [(base, rule)] = raw.execute(
                "SELECT format_type(t.typbasetype, t.typtypmod), pg_get_constraintdef(c.oid) "
                "FROM pg_type AS t JOIN pg_constraint AS c ON c.contypid = t.oid "
                "WHERE t.typname = ? AND t.typnamespace = current_schema()::regnamespace",
                (domain,),
            )
            collate = ' COLLATE "C"' if base == "text" else ""
            changes.setdefault(table, []).append(f"ALTER COLUMN {column} TYPE {base}{collate}")
            check = re.sub(r"\bVALUE\b", column, rule)
            changes[table].append(f"ADD CONSTRAINT {table}_{column}_check {check}")
    for table, parts in changes.items():
        raw.execute(f"ALTER TABLE {table} {', '.join(parts)}")
    for domain in {d for columns in DOMAIN_COLUMNS.values() for d in columns.values()}:
        raw.execute(f"DROP DOMAIN {domain}")


SHAPES = (
    "SELECT c.relname::text, a.attname::text, format_type(a.atttypid, a.atttypmod), l.collname::text, "
    "pg_get_expr(f.adbin, f.adrelid) FROM pg_attribute AS a JOIN pg_class AS c ON c.oid = a.attrelid "
    "LEFT JOIN pg_collation AS l ON l.oid = a.attcollation "
    "LEFT JOIN pg_attrdef AS f ON f.adrelid = a.attrelid AND f.adnum = a.attnum "
    "WHERE c.relname IN ('events', 'turn_journal', 'tool_calls') AND c.relnamespace = current_schema()::regnamespace "
    "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, a.attnum"
)
CHECKS = (
    "SELECT conrelid::regclass::text, conname::text FROM pg_constraint "
    "WHERE conrelid IN ('events'::regclass, 'turn_journal'::regclass, 'tool_calls'::regclass) AND contype = 'c' "
    "ORDER BY 1, 2"
)
OLD_CHECKS = 4 + 7 + 2  # the events', the turn journal's and the tool calls' column rules


def _refusals(j: journal.Journal, kinds: tuple[str, ...] = ("check",)) -> None:
    """The events rules hold whichever shape the schema has: each bad row is refused, by code
    (a table CHECK is checked after the row trigger, which refuses a row of no session first)."""
    with Raw(j.path) as raw:
        for column, value in (("seq", -1), ("type", "made_up"), ("type", "x."), ("data", "[1]"), ("key", "")):
            row = {"seq": 0, "type": "user_message", "data": '{"content": "hi"}', "key": None, column: value}
            with pytest.raises(Refused) as info:
                raw.execute(
                    "INSERT INTO events (session_id, seq, type, data, time_ms, key) VALUES ('bad', ?, ?, ?, 1, ?)",
                    (row["seq"], row["type"], row["data"], row["key"]),
                )
            assert info.value.kind in kinds, (column, value)


def _turn(j: journal.Journal, session_id: str, turn: int) -> None:
    """A turn that writes every table the domains are on: a call requested, dispatched, answered."""
    j.append(session_id, "user_message", {"content": f"turn {turn}"})
    j.append(session_id, "turn_start", {"turn": turn})
    j.append(session_id, "step_start", {"turn": turn, "step": 1})
    call = {"id": f"c-{turn}", "name": "lookup", "arguments": {}}
    j.append(session_id, "assistant_message", {"content": "", "tool_calls": [call]})
    j.append(session_id, "tool_call", call)
    j.append(session_id, "tool_result", {"tool_call_id": call["id"], "content": "sunny"})
    j.append(session_id, "step_end", {"turn": turn, "step": 1, "outcome": "ok"})
    j.append(session_id, "turn_end", {"turn": turn, "steps": 1, "reason": "complete"})


def _conversion() -> str:
    """The statements docs/postgres.md gives an operator to convert an older schema's tables."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "postgres.md").read_text(encoding="utf-8")
    [block] = re.findall(r"```sql\n(BEGIN;\n.*?COMMIT;)\n```", text, re.DOTALL)
    return block


def test_tables_made_with_checks_keep_them_at_a_write_open_and_the_documented_statements_convert_them(
    pg_dsn: str,
) -> None:
    with journal.open(pg_dsn) as j:
        j.create_session("old")
        _turn(j, "old", 1)
        j.append("old", "turn_start", {"turn": 2})
        before = j.scan()
        with Raw(pg_dsn) as raw:
            fresh = raw.execute(SHAPES)
            assert raw.execute(CHECKS) == [("turn_journal", "turn_journal_check")]
            as_checks(raw)
            old = raw.execute(SHAPES)
            assert len(raw.execute(CHECKS)) == 1 + OLD_CHECKS
    with journal.open(pg_dsn, readonly=True) as ro:  # read as it is, nothing changed
        assert ro.scan() == before
    with Raw(pg_dsn) as raw:
        assert raw.execute("SELECT to_regtype('journal_event_type') IS NULL") == [(True,)]
    for _ in range(2):  # a writable open makes the domains and leaves the tables (no rewrite)
        with journal.open(pg_dsn) as j:
            assert j.scan() == before
            _refusals(j, ("check", "trigger"))
        with Raw(pg_dsn) as raw:
            assert raw.execute(SHAPES) == old
            assert len(raw.execute(CHECKS)) == 1 + OLD_CHECKS
            assert raw.execute("SELECT to_regtype('journal_event_type') IS NOT NULL") == [(True,)]
    with Raw(pg_dsn) as raw:  # what docs/postgres.md tells an operator to run, for the speed
        raw.execute(_conversion())
        assert raw.execute(SHAPES) == fresh
        assert raw.execute(CHECKS) == [("turn_journal", "turn_journal_check")]
    with journal.open(pg_dsn) as j:
        assert j.scan() == before
        j.append("old", "turn_end", {"turn": 2, "steps": 0, "reason": "complete"})
        _turn(j, "old", 3)
        assert len(j.events("old")) == 18 and j.scan().open_turns == ()
        assert j.check() == []
        _refusals(j)


def test_a_fresh_schema_holds_the_rules_as_domains(pg_dsn: str) -> None:
    with journal.open(pg_dsn) as j:
        j.create_session("s")
        _turn(j, "s", 1)
        _refusals(j)
        assert j.check() == []
    with Raw(pg_dsn) as raw:
        shapes = {(table, column): kind for table, column, kind, *_ in raw.execute(SHAPES)}
    for table, columns in DOMAIN_COLUMNS.items():
        for column, domain in columns.items():
            assert shapes[table, column] == domain


CURRENT_TRIGGER = (
    "SELECT pg_get_triggerdef(t.oid) LIKE '%journal.derived%', to_regproc('journal_events_contiguous') IS NOT NULL "
    "FROM pg_trigger AS t WHERE t.tgname = 'events_insert' AND t.tgrelid = 'events'::regclass"
)
V7_TRIGGER = (  # the row trigger as schema_pg.sql made it in version 7: called for every row
    "DROP TRIGGER events_insert ON events; DROP FUNCTION journal_events_contiguous(text[], bigint[]); "
    "CREATE TRIGGER events_insert BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION journal_events_insert()"
)


def test_a_version_7_row_trigger_is_migrated_by_a_write_open_and_recovery_writes_derived_state_once(
    pg_dsn: str,
) -> None:
    journal.open(pg_dsn).close()
    with Raw(pg_dsn) as raw:
        assert raw.execute(CURRENT_TRIGGER) == [(True, True)]
        raw.execute(V7_TRIGGER)
        raw.execute("UPDATE journal_meta SET schema_version = 7")
        assert raw.execute(CURRENT_TRIGGER) == [(False, False)]
    with journal.open(pg_dsn, readonly=True) as j:  # read as it is: nothing is changed
        assert j.sessions() == []
    with Raw(pg_dsn) as raw:
        assert raw.execute(CURRENT_TRIGGER) == [(False, False)]
        assert raw.execute("SELECT schema_version FROM journal_meta") == [(7,)]
    with journal.open(pg_dsn) as j:
        for n in range(3):
            sid = f"s{n}"
            j.create_session(sid)
            call = {"id": f"c{n}", "name": "pay", "arguments": {}}
            j.append_many(
                sid,
                [
                    ("user_message", {"content": "pay"}),
                    ("turn_start", {"turn": 1}),
                    ("step_start", {"turn": 1, "step": 1}),
                    ("assistant_message", {"content": "", "tool_calls": [call], "stop_reason": "tool_use"}),
                    ("tool_call", {"id": call["id"], "name": "pay"}),
                ],
            )
        (result,) = [r for r in j.recover() if r.session_id == "s0"]
        assert [e.type for e in result.appended] == ["tool_result", "turn_end"]
        assert j.scan().clean
        assert j.check() == []  # the derived state recomputed from the log: written once, not twice
    with Raw(pg_dsn) as raw:
        assert raw.execute("SELECT DISTINCT revision, phase, end_reason FROM turn_journal") == [
            (3, "committed", "interrupted")  # step_start, the request, the turn_end: once each
        ]
        assert raw.execute("SELECT DISTINCT state FROM tool_calls") == [("resolved",)]
        assert raw.execute(CURRENT_TRIGGER) == [(True, True)]
        assert raw.execute("SELECT schema_version FROM journal_meta") == [(SCHEMA_VERSION,)]


TURNS_INDEX = "SELECT count(*) FROM pg_indexes WHERE indexname = 'events_turns'"


def test_a_version_8_schema_is_read_as_it_is_and_loses_the_unused_index_on_a_writable_open(pg_dsn: str) -> None:
    with journal.open(pg_dsn) as j:
        j.create_session("s")
        j.append_many("s", [("turn_start", {"turn": 1}), ("user_message", {"content": "hi"})])
    with Raw(pg_dsn) as raw:
        assert raw.execute(TURNS_INDEX) == [(0,)]
        raw.execute(  # the index as versions 1 to 8 made it
            "CREATE INDEX events_turns ON events (session_id, seq) WHERE type IN ('turn_start', 'turn_end')"
        )
        raw.execute("UPDATE journal_meta SET schema_version = 8")
    with journal.open(pg_dsn, readonly=True) as j:  # read as it is: nothing is changed
        assert [t.start_seq for t in j.scan().open_turns] == [0]
    with Raw(pg_dsn) as raw:
        assert raw.execute(TURNS_INDEX) == [(1,)]
        assert raw.execute("SELECT schema_version FROM journal_meta") == [(8,)]
    with journal.open(pg_dsn) as j:
        assert j.append("s", "turn_end", {"turn": 1, "steps": 0, "reason": "complete"}).seq == 2
        assert j.scan().clean and j.check() == []
    with Raw(pg_dsn) as raw:
        assert raw.execute(TURNS_INDEX) == [(0,)]
        assert raw.execute("SELECT schema_version FROM journal_meta") == [(SCHEMA_VERSION,)]


def test_recoverys_batch_binds_any_text_as_it_is_on_both_backends(pg_dsn: str, tmp_path: Path) -> None:
    """Recovery's batch goes to PostgreSQL as binary columns: ids, names and texts that an array
    literal would have to quote (braces, commas, quotes, backslashes, NULL, spaces, non-ASCII)
    come back as they went in, and both backends append the same repairs."""
    odd = ["{a,b}", "NULL", 'say "hi"', "back\\slash", "two  spaces", "é✓ 漢字", "it's", "{}"]
    appended = {}
    for target in (pg_dsn, tmp_path / "j.db"):
        with journal.open(target) as j:
            for n, text in enumerate(odd):
                ascii_part = "".join(c for c in text if c.isascii() and c.isprintable() and c != " ")
                sid = j.create_session(f"s{n}-{ascii_part}").id
                call = {"id": text, "name": text, "arguments": {"q": text}}
                j.append_many(sid, [
                    ("user_message", {"content": text}),
                    ("turn_start", {"turn": 1}),
                    ("assistant_message", {"content": text, "tool_calls": [call]}),
                    ("tool_call", {"id": text, "name": text}),
                ])  # fmt: skip
            results = j.recover()
            appended[str(target)] = sorted((r.session_id, [(e.type, e.data) for e in r.appended]) for r in results)
            assert j.scan().clean and j.check() == []
            for sid, events in appended[str(target)]:
                assert [(e.type, e.data) for e in j.events(sid)][-2:] == events
    pg, lite = appended.values()
    assert pg == lite and len(pg) == len(odd)
    assert [events[0][1]["tool_call_id"] for _sid, events in pg] == [odd[int(s[1:].split("-", 1)[0])] for s, _ in pg]


def test_recoverys_batch_insert_checks_g4_for_all_its_rows_with_the_row_trigger_off(pg_dsn: str) -> None:
    """``insert_repairs`` writes its rows with the row trigger off (``journal.derived``): G4 is
    checked for the whole batch by one statement after them. A batch with a row that does not
    continue its session (a gap, a seq under a fork's seed) is refused whole; the trigger is on
    again for the next write; a batch over several sessions that continues each is written."""
    end = '{"reason":"interrupted"}'
    with journal.open(pg_dsn) as j:
        for sid in ("a", "b"):
            j.create_session(sid)
            j.append_many(sid, [("user_message", {"content": "hi"}), ("turn_start", {"turn": 1})])
        j.fork("a", at=0, id="f")  # seed length 1
        j.append_many("f", [("turn_start", {"turn": 1})])  # every session's next seq is 2
        for rows in (
            [("a", 2, "turn_end", end, 1), ("b", 3, "turn_end", end, 1)],  # b skips its seq 2
            [("f", 0, "turn_end", end, 1)],  # under the fork's seed
            [("a", 3, "turn_end", end, 1), ("a", 4, "turn_end", end, 1)],  # a gap at a's seq 2
            [("a", 2, "turn_end", end, 1), ("a", 4, "turn_end", end, 1)],  # a gap inside the batch
        ):
            with j._store.write("test") as db:
                with pytest.raises(journal.SchemaViolation):
                    db.insert_repairs(rows, [], [(r[0], 1, r[1], "interrupted") for r in rows])
                with pytest.raises(journal.SchemaViolation):  # the row trigger is on again
                    db.insert_events([("b", 3, "user_message", '{"content":"x"}', 1)])
        assert [e.type for s in ("a", "b", "f") for e in j.events(s) if e.type == "turn_end"] == []
        rows = [(sid, 2, "turn_end", end, 1) for sid in ("a", "b", "f")]
        with j._store.write("test") as db:
            db.insert_repairs(rows, [], [(sid, 1, 2, "interrupted") for sid in ("a", "b", "f")])
        assert [e.seq for s in ("a", "b", "f") for e in j.events(s) if e.type == "turn_end"] == [2, 2, 2]
        assert j.scan().clean
        assert j.check() == []


NUL_SAFE = (  # the function, the indexes and the trigger functions that read through it, in this schema
    "SELECT to_regprocedure(quote_ident(current_schema()) || '.journal_json_of(text)') IS NOT NULL, "
    "(SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexdef LIKE '%journal_json_of(%'), "
    "(SELECT count(*) FROM pg_proc WHERE pronamespace = current_schema()::regnamespace "
    "AND prosrc LIKE '%journal_json_of(NEW.%')"
)


def test_a_schema_made_before_journal_json_of_is_read_as_it_is_and_made_nul_safe_by_a_writable_open(
    pg_dsn: str,
) -> None:
    from journal.store.postgres import _schema_statement

    with journal.open(pg_dsn) as j:
        j.create_session("s")
        j.append_many("s", [("turn_start", {"turn": 1}), ("tool_result", {"tool_call_id": "c0", "content": "x"})])
    with Raw(pg_dsn) as raw:
        assert raw.execute(NUL_SAFE) == [(True, 2, 2)]
        for index in ("events_one_result", "events_one_dispatch"):  # as schema_pg.sql made them before
            old = _schema_statement("UNIQUE INDEX", index).replace("journal_json_of(data)", "data::json")
            raw.execute(f"DROP INDEX {index}; {old}")
        for function in ("journal_events_insert", "journal_sessions_meta"):
            old = re.sub(r"journal_json_of\((NEW\.\w+)\)", r"\1::json", _schema_statement("FUNCTION", function))
            raw.execute(old)
        raw.execute("DROP FUNCTION journal_json_of(text)")
        assert raw.execute(NUL_SAFE) == [(False, 0, 0)]
    with journal.open(pg_dsn, readonly=True) as ro:  # read as it is: nothing is changed
        assert [t.start_seq for t in ro.scan().open_turns] == [0]
        assert [p.seq for p in ro.previews("s", chars=5)] == [0, 1]
    with Raw(pg_dsn) as raw:
        assert raw.execute(NUL_SAFE) == [(False, 0, 0)]
    with journal.open(pg_dsn) as j:
        j.append("s", "tool_result", {"tool_call_id": "c1", "content": "nul \x00 kept"})
        with pytest.raises(journal.ResultExists):
            j.append("s", "tool_result", {"tool_call_id": "c0", "content": "a second \x00"})
        assert j.events("s")[-1].data["content"] == "nul \x00 kept"
        assert j.check() == []
    with Raw(pg_dsn) as raw:
        assert raw.execute(NUL_SAFE) == [(True, 2, 2)]
