"""The command line's contract: every refusal is one line ``journal: ...`` on stderr, exit status 1
(2 for a usage error), never a traceback; nothing is created where nothing should be."""

from __future__ import annotations

import inspect
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

import journal
from journal.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _runner() -> CliRunner:
    return CliRunner(**({"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner).parameters else {}))


def run(*args: str, db: Path | None = None, input: str | bytes | None = None):
    argv = [*args, *(["--db", str(db)] if db is not None else [])]
    return _runner().invoke(main, argv, input=input)


def refused(result, code: int = 1, *, says: str = "") -> str:
    """Assert the one-line refusal and return its text."""
    err = result.stderr
    assert result.exit_code == code, (result.exit_code, err, result.stdout)
    assert "Traceback" not in err + result.stdout
    assert err.startswith("journal: ") and err.count("\n") == 1, err
    assert says in err, err
    return err


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        s = j.create_session("s").id
        j.append(s, "user_message", {"content": "hi"})
        j.submit(s, "user_message", {"content": "queued"}, id="sub-1")
    return path


# -- journal import ----------------------------------------------------------------------------------

GOOD_SESSION = json.dumps({"session": {"id": "new", "meta": None}})
GOOD_EVENT = {"session_id": "new", "seq": 0, "type": "user_message", "data": {"content": "a"}, "time_ms": 5}

BAD_IMPORTS = {
    "not_json": (b"{nope\n", "line 2: not JSON"),
    "nan": (json.dumps({"event": GOOD_EVENT}).replace('"a"', "NaN").encode() + b"\n", "NaN is not JSON"),
    "duplicate_key": (b'{"event": {"seq": 0, "seq": 0}}\n', "duplicate key 'seq'"),
    "unknown_record": (b'{"other": {}}\n', "expected"),
    "two_records_in_one": (json.dumps({"event": GOOD_EVENT, "session": {}}).encode() + b"\n", "expected"),
    "unknown_key": (json.dumps({"event": {**GOOD_EVENT, "extra": 1}}).encode() + b"\n", "unknown field 'extra'"),
    "missing_field": (
        json.dumps({"event": {k: v for k, v in GOOD_EVENT.items() if k != "time_ms"}}).encode() + b"\n",
        "missing field 'time_ms'",
    ),
    "wrong_type_seq": (json.dumps({"event": {**GOOD_EVENT, "seq": "0"}}).encode() + b"\n", "seq"),
    "wrong_type_time": (json.dumps({"event": {**GOOD_EVENT, "time_ms": True}}).encode() + b"\n", "time_ms"),
    "negative_time": (json.dumps({"event": {**GOOD_EVENT, "time_ms": -1}}).encode() + b"\n", "time_ms"),
    "event_not_object": (b'{"event": [1]}\n', "must be a JSON object"),
    "non_utf8": (b'{"event": {"content": "\xff\xfe"}}\n', "line 2: not UTF-8"),
    "invalid_event": (json.dumps({"event": {**GOOD_EVENT, "data": {}}}).encode() + b"\n", "data.content"),
    "unknown_type": (json.dumps({"event": {**GOOD_EVENT, "type": "bogus"}}).encode() + b"\n", "unknown event type"),
    "seq_gap": (json.dumps({"event": {**GOOD_EVENT, "seq": 1}}).encode() + b"\n", "1 breaks the sequence"),
    "other_session": (json.dumps({"event": {**GOOD_EVENT, "session_id": "s"}}).encode() + b"\n", "session_id"),
    "bad_session_id": (None, "line 1: id"),
    "bad_meta": (None, "meta"),
}


@pytest.mark.parametrize("case", BAD_IMPORTS, ids=list(BAD_IMPORTS))
def test_import_refuses_a_bad_file_in_one_line_and_writes_nothing_of_the_refused_session(case: str, db: Path) -> None:
    second, says = BAD_IMPORTS[case]
    lines = [GOOD_SESSION.encode() + b"\n", second or b""]
    if case == "bad_session_id":
        lines = [json.dumps({"session": {"id": "has space"}}).encode() + b"\n"]
    elif case == "bad_meta":
        lines = [json.dumps({"session": {"id": "new", "meta": [1]}}).encode() + b"\n"]
    before = [s.id for s in journal.open(db, readonly=True).sessions()]
    refused(run("import", "-", db=db, input=b"".join(lines)), says=says)
    with journal.open(db, readonly=True) as j:
        assert [s.id for s in j.sessions()] == before


def test_import_of_an_existing_session_is_refused_and_changes_nothing(db: Path) -> None:
    dump = run("export", db=db).stdout
    refused(run("import", "-", db=db, input=dump), says="a session 's' already exists")
    with journal.open(db, readonly=True) as j:
        assert j.count("s") == 1


# -- the environment and the arguments -------------------------------------------------------------


def _journal(*args: bytes | str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    environment = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    environment.pop("JOURNAL_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "journal.cli", *args], capture_output=True, env=environment, timeout=60
    )


@pytest.mark.parametrize("value", ["x:abc", "x:0", "x:-1", ":3", "x:1.5", "x:\x1b[2J"])
def test_a_malformed_crash_point_variable_warns_in_one_line_and_the_command_still_works(value: str, db: Path) -> None:
    done = _journal("sessions", "--db", str(db), env={"JOURNAL_CRASH_AT": value})
    assert done.returncode == 0 and done.stdout.startswith(b"s "), done.stderr
    assert done.stderr.count(b"\n") == 1 and b"JOURNAL_CRASH_AT=" in done.stderr and b"\x1b" not in done.stderr


def test_non_utf8_arguments_are_refused_in_one_line(db: Path) -> None:
    done = _journal("show", b"s\xff", "--db", str(db))
    assert done.returncode == 1 and done.stderr.count(b"\n") == 1 and b"'s\\udcff'" in done.stderr
    done = _journal("sessions", "--db", os.fsencode(db.parent) + b"/\xff.db")
    assert (
        done.returncode == 1 and done.stderr.startswith(b"journal: no such journal: ") and done.stderr.count(b"\n") == 1
    )


# -- the demo ----------------------------------------------------------------------------------------


def test_the_demo_refuses_an_unusable_db_in_one_line(tmp_path: Path) -> None:
    refused(run("demo", "--db", str(tmp_path)), 2, says="is a directory")
    refused(run("demo", "--db", str(tmp_path / "missing" / "d.db")), says="No such file or directory")
    foreign = tmp_path / "notes.txt"
    foreign.write_text("mine")
    refused(run("demo", "--db", str(foreign)), says="not a journal")
    assert foreign.read_text() == "mine" and not (tmp_path / "notes.txt.ledger").exists()


def test_the_demo_never_follows_a_symlink_to_its_ledger(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    (tmp_path / "d.db.ledger").symlink_to(target)
    refused(run("demo", "--db", str(tmp_path / "d.db")), says="not a regular file")
    assert not target.exists() and not (tmp_path / "d.db").exists()


# -- unknown sessions and submissions -----------------------------------------------------------------

UNKNOWN_SESSION = [
    ["show", "nope"], ["show", "nope", "--json"], ["tail", "nope"], ["fork", "nope"], ["recover", "nope"],
    ["recover", "nope", "--dry-run"], ["indeterminate", "nope"], ["resolve", "nope", "c", "--outcome", "ran"],
    ["check", "nope"], ["export", "nope"], ["purge", "nope", "--yes"], ["purge", "nope"],
    ["append", "nope", "user_message", '{"content": "x"}'], ["submissions", "--session", "nope"],
]  # fmt: skip


@pytest.mark.parametrize("args", UNKNOWN_SESSION, ids=[" ".join(a) for a in UNKNOWN_SESSION])
def test_an_unknown_session_is_exit_status_1_in_every_command(args: list[str], db: Path) -> None:
    refused(run(*args, db=db), says="no session 'nope'")


def test_a_bad_submission_id_is_named_as_a_submission(db: Path) -> None:
    refused(run("submissions", "--id", "nope", db=db), says="no submission 'nope'")
    listed = json.loads(run("submissions", "--id", "sub-1", "--json", db=db).stdout)["submissions"]
    assert [s["id"] for s in listed] == ["sub-1"]


# -- export -o ---------------------------------------------------------------------------------------


def test_export_never_writes_over_a_journal_or_an_sqlite_file(db: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    journal.open(other).close()
    foreign = tmp_path / "foreign.sqlite"
    conn = apsw.Connection(str(foreign))
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    wal = Path(f"{db}-wal")
    with journal.open(db) as j:  # a -wal beside the journal, as a running agent leaves it
        j.append("s", "x.note", {})
        before = {p: p.read_bytes() for p in (db, wal, other, foreign)}
        for target in (db, wal, other, foreign):
            refused(run("export", "-o", str(target), db=db), says=str(target))
        assert {p: p.read_bytes() for p in (db, wal, other, foreign)} == before


def test_export_creates_its_file_0600_and_never_through_a_symlink(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    assert run("export", "-o", str(out), db=db).exit_code == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert out.read_text() == run("export", db=db).stdout
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "link.jsonl").symlink_to(victim)
    refused(run("export", "-o", str(tmp_path / "link.jsonl"), db=db))
    assert victim.read_text() == "keep"
    plain = tmp_path / "plain.txt"
    plain.write_text("old contents, longer than nothing")
    assert run("export", "-o", str(plain), db=db).exit_code == 0 and plain.read_text() == out.read_text()


# -- paths that do not exist ----------------------------------------------------------------------------

NO_CREATE = [
    ["recover"], ["recover", "--dry-run"], ["reconcile"], ["reconcile", "--dry-run"], ["fork", "s"],
    ["purge", "s", "--yes"], ["resolve", "s", "c", "--outcome", "ran"], ["append", "s", "x.note", "{}"],
    ["sessions"], ["show", "s"], ["scan"], ["check"], ["stats"], ["export"], ["indeterminate"], ["submissions"],
]  # fmt: skip


@pytest.mark.parametrize("args", NO_CREATE, ids=[" ".join(a) for a in NO_CREATE])
def test_a_path_that_does_not_exist_is_no_such_journal_and_nothing_is_created(args: list[str], tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    refused(run(*args, db=path), says=f"no such journal: {path}")
    assert _files(tmp_path) == []


@pytest.mark.parametrize("args", [["init"], ["append", "s", "x.note", "{}", "--create"], ["import", "-"]])
def test_init_append_create_and_import_create_a_journal(args: list[str], tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    assert run(*args, db=path, input="").exit_code == 0
    assert journal.open(path, readonly=True).sessions is not None and path.exists()


REFUSED_APPENDS = [
    ["append", "s", "user_message", '{"nocontent": 1}', "--create"],
    ["append", "s", "turn_end", '{"turn": 1, "steps": 0, "reason": "interrupted"}', "--create"],
    ["append", "s", "nosuchtype", "{}", "--create"],
]  # fmt: skip


@pytest.mark.parametrize("args", REFUSED_APPENDS, ids=[a[2] for a in REFUSED_APPENDS])
def test_g12_an_append_create_of_an_event_it_refuses_creates_neither_the_journal_nor_the_session(
    args: list[str], tmp_path: Path
) -> None:
    """Invalid input writes nothing: the event is checked before the journal or the session is
    created (the session was created, and the file with it, then the append refused)."""
    path = tmp_path / "new.db"
    refused(run(*args, db=path), says="invalid event")
    assert _files(tmp_path) == []
    journal.open(path).close()
    refused(run(*args, db=path), says="invalid event")
    with journal.open(path, readonly=True) as j:
        assert j.sessions() == []


# -- numeric options -------------------------------------------------------------------------------------

USAGE = [
    ["tail", "s", "-n", "-1"], ["tail", "s", "-n", "nan"], ["tail", "s", "-n", "1e999"],
    ["tail", "s", "-n", str(2**64)],
    ["tail", "s", "--interval", "-1"], ["tail", "s", "--interval", "0"], ["tail", "s", "--interval", "nan"],
    ["tail", "s", "--interval", "inf"], ["tail", "s", "--interval", "1e400"], ["tail", "s", "--interval", "99999999"],
    ["show", "s", "--since", "-1"], ["show", "s", "--since", str(2**63)], ["show", "s", "--since", "abc"],
    ["show", "s", "--since", "0", "--view", "messages"], ["show", "s", "--since", "0", "--view", "provider"],
    ["fork", "s", "--at", "abc"], ["fork", "s", "--at", "-1"], ["fork", "s", "--at", "1.0"],
    ["fork", "s", "--at", str(2**64)],
    ["reconcile", "--context-window", "0"], ["show"], ["nosuchcommand"],
]  # fmt: skip


@pytest.mark.parametrize("args", USAGE, ids=[" ".join(a) for a in USAGE])
def test_a_bad_option_value_is_a_one_line_usage_error(args: list[str], db: Path) -> None:
    refused(run(*args, db=db), 2)


def test_a_fork_boundary_past_the_end_is_a_library_error(db: Path) -> None:
    refused(run("fork", "s", "--at", "99", db=db), 1, says="past the end")


# -- journal check on a damaged file ----------------------------------------------------------------------


def _damage(path: Path) -> None:
    """Write garbage over a few pages in the middle of a cleanly closed, checkpointed journal."""
    with journal.open(path) as j:
        for i in range(30):
            j.append_many(j.create_session(f"bulk{i}").id, [("user_message", {"content": "x" * 400})] * 20)
        j.checkpoint()
    size = path.stat().st_size
    with open(path, "r+b") as f:
        for offset in (size // 3, size // 2, 2 * size // 3):
            f.seek(offset - offset % 4096 + 64)
            f.write(bytes(range(256)) * 12)


def test_check_reports_a_damaged_file_as_not_ok_rather_than_failing(db: Path) -> None:
    _damage(db)
    result = run("check", "--json", db=db)
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["integrity"] and report["integrity"] != ["ok"]
    text = run("check", db=db)
    assert text.exit_code == 1 and "PROBLEMS FOUND" in text.stdout and "integrity: " in text.stdout
    assert "journal check" not in result.stdout + text.stdout  # it is the command showing its findings


def test_check_on_a_healthy_file_is_ok(db: Path) -> None:
    result = run("check", "--json", db=db)
    assert result.exit_code == 0 and json.loads(result.stdout) == {"ok": True, "integrity": ["ok"], "disagreements": []}
