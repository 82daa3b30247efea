"""Files the command line must not touch (G13): ``journal export -o`` never writes over SQLite's
files, a dangling ``--db`` symlink never gets its target created, and a misspelt
``JOURNAL_CRASH_AT`` says so instead of silently never firing."""

from __future__ import annotations

import inspect
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

import journal
from journal.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str, input: str | None = None):
    keep_apart = {"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner).parameters else {}
    return CliRunner(**keep_apart).invoke(main, list(args), input=input)


def _refused(result, *, says: str) -> None:
    assert result.exit_code == 1, (result.exit_code, result.stderr, result.stdout)
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.startswith("journal: ") and result.stderr.count("\n") == 1, result.stderr
    assert says in result.stderr, result.stderr


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        j.create_session("s")
        j.append("s", "user_message", {"content": "hi"})
    return path


# -- export -o never writes over an SQLite file ------------------------------------------------------


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_g13_export_refuses_a_side_file_name_whether_or_not_it_exists(suffix: str, db: Path, tmp_path: Path) -> None:
    absent = tmp_path / f"other.db{suffix}"
    _refused(_run("export", "--db", str(db), "-o", str(absent)), says="named as an SQLite side file")
    assert not absent.exists()  # not even created empty
    present = tmp_path / f"notes{suffix}"
    present.write_bytes(b"whatever is here stays here\n")
    _refused(_run("export", "--db", str(db), "-o", str(present)), says="named as an SQLite side file")
    assert present.read_bytes() == b"whatever is here stays here\n"


def _sqlite_files(tmp_path: Path) -> dict[str, Path]:
    """Real SQLite files of each kind, copied under names that say nothing of what they are."""
    found: dict[str, Path] = {}
    live = tmp_path / "live.db"
    with journal.open(live) as j:  # while it is open, its -wal and -shm are on disk
        j.create_session("x")
        j.append("x", "user_message", {"content": "x"})
        for kind in ("wal", "shm"):
            found[kind] = tmp_path / f"copy-of-{kind}.txt"
            shutil.copyfile(f"{live}-{kind}", found[kind])
    found["journal"] = tmp_path / "copy-of-another-journal.txt"
    shutil.copyfile(live, found["journal"])
    foreign = tmp_path / "foreign.sqlite"
    conn = apsw.Connection(str(foreign))
    for sql in ("PRAGMA journal_mode=DELETE", "PRAGMA cache_size=2", "CREATE TABLE t (x)", "BEGIN"):
        conn.execute(sql).fetchall()
    for _ in range(200):  # more than the cache holds: the journal is synced, its header written
        conn.execute("INSERT INTO t VALUES (?)", (b"x" * 3000,))
    found["hot journal"] = tmp_path / "copy-of-hot-journal.txt"
    shutil.copyfile(f"{foreign}-journal", found["hot journal"])
    conn.execute("ROLLBACK")
    conn.close()
    found["foreign database"] = foreign
    return found


def test_g13_export_refuses_every_kind_of_sqlite_file_by_its_bytes_and_leaves_it_byte_for_byte(
    db: Path, tmp_path: Path
) -> None:
    files = _sqlite_files(tmp_path)
    says = {
        "wal": "write-ahead log",
        "shm": "WAL index",
        "journal": "SQLite database",  # another journal
        "hot journal": "rollback journal",
        "foreign database": "SQLite database",
    }
    for kind, path in files.items():
        before = path.read_bytes()
        _refused(_run("export", "--db", str(db), "-o", str(path)), says=says[kind])
        assert path.read_bytes() == before, kind


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_g13_export_refuses_the_journal_it_reads_and_its_side_files(suffix: str, db: Path) -> None:
    with journal.open(db) as j:  # held open: its -wal and -shm exist
        target = Path(f"{db}{suffix}")
        before = target.read_bytes()
        with pytest.raises(journal.InvalidArgument, match="export"):
            journal.transfer.export_file(j, str(target))
        assert target.read_bytes() == before


def test_export_still_writes_over_a_plain_file_and_through_no_symlink(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "dump.jsonl"
    out.write_text("old content that is longer than nothing\n" * 100)
    assert _run("export", "--db", str(db), "-o", str(out)).exit_code == 0
    assert out.read_text().startswith('{"session": {"id": "s"') and "old content" not in out.read_text()
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "nowhere.jsonl")
    done = _run("export", "--db", str(db), "-o", str(link))
    assert done.exit_code == 1 and done.stderr.count("\n") == 1
    assert not (tmp_path / "nowhere.jsonl").exists()


# -- a dangling --db symlink --------------------------------------------------------------------------

COMMANDS = [
    ["init"],
    ["append", "--create", "s", "user_message", '{"content": "hi"}'],
    ["import", "-"],
    ["sessions"],
    ["show", "s"],
    ["tail", "s"],
    ["fork", "s"],
    ["scan"],
    ["recover"],
    ["reconcile"],
    ["indeterminate"],
    ["resolve", "s", "c1", "--outcome", "ran"],
    ["check"],
    ["export"],
    ["purge", "s", "--yes"],
    ["stats"],
    ["state", "s"],
    ["submissions"],
    ["demo"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a[:1]) for a in COMMANDS])
def test_g13_a_dangling_db_symlink_never_gets_its_target_created(args: list[str], tmp_path: Path) -> None:
    link, target = tmp_path / "link.db", tmp_path / "missing" / "target.db"
    (tmp_path / "missing").mkdir()
    link.symlink_to(target)
    done = _run(*args, "--db", str(link), input="")
    assert done.exit_code == 1 and done.stderr.startswith("journal: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert list((tmp_path / "missing").iterdir()) == [] and link.is_symlink()


def test_g13_the_library_refuses_a_dangling_symlink_with_a_typed_error_and_creates_nothing(tmp_path: Path) -> None:
    link, target = tmp_path / "link.db", tmp_path / "target.db"
    link.symlink_to(target)
    for readonly in (False, True):
        with pytest.raises(journal.NotAJournal, match="symlink to a file that does not exist"):
            journal.open(link, readonly=readonly)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.db"]
    # A symlink to a journal that exists is opened as the journal itself.
    with journal.open(target) as j:
        j.create_session("s")
    with journal.open(link) as j:
        assert [s.id for s in j.sessions()] == ["s"]


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
@pytest.mark.parametrize("exists", [False, True], ids=["new", "existing"])
def test_g13_a_dangling_symlink_at_a_side_file_is_refused_and_its_target_never_created(
    tmp_path: Path, suffix: str, exists: bool
) -> None:
    """SQLite creates its -wal/-shm/-journal through a symlink: a dangling one planted beside a
    journal would have it create a file where the link points. Refused before SQLite runs."""
    db = tmp_path / "j.db"
    if exists:
        with journal.open(db) as j:
            j.create_session("s")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    Path(f"{db}{suffix}").symlink_to(elsewhere / "planted")
    before = db.read_bytes() if exists else None
    with pytest.raises(journal.NotAJournal, match=f"its {suffix} file is a symlink"):
        journal.open(db)
    assert list(elsewhere.iterdir()) == []
    assert (db.read_bytes() if exists else None) == before and db.exists() == exists


# -- JOURNAL_CRASH_AT names no known point ----------------------------------------------------------


def _journal(*args: str, crash_at: str) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), JOURNAL_CRASH_AT=crash_at)
    env.pop("JOURNAL_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "journal.cli", *args], check=False, capture_output=True, env=env, timeout=60
    )


def test_an_unknown_crash_point_is_reported_once_on_stderr_and_the_command_still_works(db: Path) -> None:
    done = _journal("sessions", "--db", str(db), crash_at="dispach.after_commit\x1b[2J:2")
    assert done.returncode == 0 and done.stdout.startswith(b"s "), done.stderr
    assert done.stderr.count(b"\n") == 1 and b"no known crash point" in done.stderr, done.stderr
    assert b"journal.crash.POINTS" in done.stderr and b"\x1b" not in done.stderr


@pytest.mark.parametrize("point", ["append.after_commit:3", "tool.before_run", "import.before_commit"])
def test_a_known_crash_point_is_armed_without_a_word(point: str, db: Path) -> None:
    done = _journal("sessions", "--db", str(db), crash_at=point)
    assert done.returncode == 0 and done.stderr == b"", done.stderr


def test_an_unknown_crash_point_is_still_armed_for_a_tool_that_reaches_it(tmp_path: Path) -> None:
    code = "import journal.crash as c; c.reached('my.point'); print('survived')"
    env = dict(os.environ, PYTHONPATH=str(ROOT), JOURNAL_CRASH_AT="my.point")
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, env=env, timeout=60)
    assert done.returncode == -signal.SIGKILL and b"survived" not in done.stdout  # SIGKILL: the point fired
    assert done.stderr.count(b"no known crash point") == 1
