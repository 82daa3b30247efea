"""G13: a file that is not a journal is refused before SQLite may write to it.

SQLite writes as soon as it reads a file: it rolls back a hot ``-journal``, rebuilds a ``-shm``
from a ``-wal``, and the last connection to close folds the ``-wal`` into the file and deletes
it. Each foreign file here is made by a real SQLite writer (most of them killed with SIGKILL so
their side files stay), and every way of opening it, in this process and through the command
line, must refuse it and leave every byte of it and of its side files as it was, creating no
side file. Our own journal whose creation is still only in its ``-wal`` must open and keep
everything.
"""

from __future__ import annotations

import hashlib
import signal
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

import journal
from journal import store
from journal.store import header as _header

from .conftest import run_child

SIDE_FILES = ("", "-wal", "-shm", "-journal")
OTHER_APP_ID = 0x46495348  # "FISH": an application id that is not ours


def snapshot(path: Path) -> dict[str, str | None]:
    """The sha256 of the file and of each side file (``None`` where there is none)."""
    out: dict[str, str | None] = {}
    for suffix in SIDE_FILES:
        side = Path(str(path) + suffix)
        out[suffix or "main"] = hashlib.sha256(side.read_bytes()).hexdigest() if side.exists() else None
    return out


def header_application_id(path: Path) -> int:
    """The application id in the main file's header (not what SQLite reads through the -wal)."""
    return struct.unpack(">I", path.read_bytes()[68:72])[0]


# -- foreign files, made by real writers --------------------------------------------------------

# A writer that dies by SIGKILL at the end: no checkpoint, no rollback, no cleanup.
KILLED_WRITER = """
import os, signal, sys, apsw
conn = apsw.Connection(sys.argv[1])
{body}
os.kill(os.getpid(), signal.SIGKILL)
"""


def run_killed_writer(path: Path, body: str) -> None:
    done = run_child(KILLED_WRITER.format(body=body), str(path))
    assert done.returncode == -signal.SIGKILL, done.stderr


def foreign_wal_with_commits_in_the_wal(path: Path) -> None:
    """(a) WAL mode, tables checkpointed into the file, later commits only in the -wal."""
    run_killed_writer(
        path,
        """
conn.pragma("journal_mode", "wal")
conn.execute("CREATE TABLE notes (body TEXT)")
conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
conn.pragma("wal_autocheckpoint", 0)
for i in range(50):
    conn.execute("INSERT INTO notes VALUES (?)", ("note %d " % i * 20,))
""",
    )
    assert Path(str(path) + "-wal").stat().st_size > 0
    assert Path(str(path) + "-shm").exists()


def foreign_rollback_with_a_hot_journal(path: Path) -> None:
    """(b) Rollback mode, killed mid-transaction after its changes reached the file."""
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE notes (body TEXT)")
    with conn:
        conn.executemany("INSERT INTO notes VALUES (?)", [("x" * 500,) for _ in range(400)])
    conn.close()
    before = path.read_bytes()
    run_killed_writer(
        path,
        """
conn.pragma("cache_size", 2)  # spill: the journal is synced, then pages reach the file
conn.execute("BEGIN")
conn.execute("UPDATE notes SET body = upper(body) || 'changed'")
conn.cache_flush()
""",
    )
    assert _header.hot_journal_original_pages(str(path)) not in (None, 0, -1)
    assert path.read_bytes() != before  # the file holds the uncommitted change: rollback would write


def foreign_with_tables(path: Path) -> None:
    """(c) Application id 0 and tables: the common foreign database."""
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine')")
    conn.close()


def foreign_with_another_application_id(path: Path) -> None:
    """(d) Another application's id, WAL mode, and nothing else."""
    conn = apsw.Connection(str(path))
    conn.pragma("journal_mode", "wal")
    conn.pragma("application_id", OTHER_APP_ID)
    conn.close()


def foreign_with_tables_only_in_the_wal(path: Path) -> None:
    """(e) WAL mode, the tables never checkpointed: the file's own page 1 is empty."""
    run_killed_writer(
        path,
        """
conn.pragma("journal_mode", "wal")
conn.pragma("wal_autocheckpoint", 0)
conn.execute("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('only in the wal')")
""",
    )
    page = _header.read_page_one(path.read_bytes()[:108])
    assert page is not None and not page.has_schema and page.application_id == 0


# A rollback-mode writer killed inside its commit: once the journal is synced and the pages are
# written to the file, just before the file's own sync (after which the journal would go).
KILLED_IN_COMMIT = """
import os, signal, sys, apsw

class File(apsw.VFSFile):
    def __init__(self, name, flags):
        self.main_db = bool(flags[0] & apsw.SQLITE_OPEN_MAIN_DB)
        super().__init__("", name, flags)

    def xSync(self, flags):
        if self.main_db:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().xSync(flags)

class KillAtSync(apsw.VFS):
    def __init__(self):
        super().__init__("kill-at-sync", "")

    def xOpen(self, name, flags):
        return File(name, flags)

vfs = KillAtSync()
conn = apsw.Connection(sys.argv[1], vfs="kill-at-sync")
conn.execute(sys.argv[2])
"""


def foreign_emptied_with_a_hot_journal(path: Path) -> None:
    """(f) Rollback mode, killed while committing the drop of its only table: the file's page 1
    is empty, and only its hot journal still holds the table that rolling back restores."""
    foreign_with_tables(path)
    done = run_child(KILLED_IN_COMMIT, str(path), "DROP TABLE notes")
    assert done.returncode == -signal.SIGKILL, done.stderr
    page = _header.read_page_one(path.read_bytes()[:108])
    assert page is not None and not page.has_schema and page.application_id == 0
    assert _header.hot_journal_original_pages(str(path)) not in (None, 0, -1)


def foreign_with_another_application_id_only_in_the_wal(path: Path) -> None:
    """(g) WAL mode, another application's id set and never checkpointed, no table."""
    run_killed_writer(
        path,
        f"""
conn.pragma("journal_mode", "wal")
conn.pragma("wal_autocheckpoint", 0)
conn.pragma("application_id", {OTHER_APP_ID})
""",
    )
    assert header_application_id(path) == 0


FOREIGN_FILES: dict[str, Callable[[Path], None]] = {
    "wal_with_commits_in_the_wal": foreign_wal_with_commits_in_the_wal,
    "rollback_with_a_hot_journal": foreign_rollback_with_a_hot_journal,
    "app_id_0_with_tables": foreign_with_tables,
    "another_application_id": foreign_with_another_application_id,
    "tables_only_in_the_wal": foreign_with_tables_only_in_the_wal,
    "emptied_with_a_hot_journal": foreign_emptied_with_a_hot_journal,
    "another_application_id_only_in_the_wal": foreign_with_another_application_id_only_in_the_wal,
}


@pytest.fixture(params=list(FOREIGN_FILES), ids=list(FOREIGN_FILES))
def foreign(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / "other.db"
    FOREIGN_FILES[request.param](path)
    return path


# The files with side files: plain SQLite, opening one as the library once did (read-write,
# read the header, close), rolls back the hot journal or folds the -wal in and deletes it.
WITH_SIDE_FILES = [name for name in FOREIGN_FILES if name not in ("app_id_0_with_tables", "another_application_id")]


@pytest.mark.parametrize("name", WITH_SIDE_FILES)
def test_g13_plain_sqlite_would_change_the_foreign_files_with_side_files(name: str, tmp_path: Path) -> None:
    # Without this, the tests below could pass by leaving alone files SQLite leaves alone too.
    path = tmp_path / "other.db"
    FOREIGN_FILES[name](path)
    before = snapshot(path)
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE)
    conn.pragma("application_id")
    conn.close()
    assert snapshot(path) != before


def test_g13_open_refuses_a_foreign_file_and_leaves_every_byte(foreign: Path) -> None:
    before = snapshot(foreign)
    with pytest.raises(journal.NotAJournal) as info:
        journal.open(foreign)
    assert info.value.path == str(foreign)
    assert snapshot(foreign) == before


def test_g13_readonly_open_refuses_a_foreign_file_and_creates_no_side_file(foreign: Path) -> None:
    before = snapshot(foreign)
    with pytest.raises(journal.NotAJournal):
        journal.open(foreign, readonly=True)
    assert snapshot(foreign) == before


def _cli_commands(tmp_path: Path) -> dict[str, list[str]]:
    """Every command that writes, with arguments it accepts (read-only ones open as above)."""
    source = tmp_path / "export.jsonl"
    source.write_text("")
    return {
        "init": ["init"],
        "append": ["append", "--create", "s", "user_message", '{"content":"x"}'],
        "recover": ["recover"],
        "reconcile": ["reconcile"],
        "fork": ["fork", "s"],
        "purge": ["purge", "s", "--yes"],
        "resolve": ["resolve", "s", "c1", "--outcome", "ran"],
        "import": ["import", str(source)],
    }


def test_g13_every_cli_command_refuses_a_foreign_file_and_leaves_every_byte(foreign: Path, tmp_path: Path) -> None:
    before = snapshot(foreign)
    # All at once (each only reads the file's bytes and refuses); each checked on its own.
    running = {
        name: subprocess.Popen(
            [sys.executable, "-m", "journal.cli", *args, "--db", str(foreign)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        for name, args in _cli_commands(tmp_path).items()
    }
    for name, proc in running.items():
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 1, (name, out, err)
        assert err.count("\n") == 1 and "is not a journal" in err, (name, err)
    assert snapshot(foreign) == before


def test_g13_a_newer_schema_is_refused_before_sqlite_opens_the_file(tmp_path: Path) -> None:
    # Left by a newer writer that was killed: its -wal holds commits, and the -shm is its own.
    path = tmp_path / "newer.db"
    journal.open(path).close()
    run_killed_writer(
        path,
        f"""
conn.pragma("user_version", {store.SCHEMA_VERSION + 1})
conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
conn.pragma("wal_autocheckpoint", 0)
conn.execute("INSERT INTO sessions (id, created_ms) VALUES ('newer', 1)")
""",
    )
    before = snapshot(path)
    assert before["-wal"] is not None
    for readonly in (False, True):
        with pytest.raises(journal.SchemaTooNew):
            journal.open(path, readonly=readonly)
        assert snapshot(path) == before


# -- our own journal, its creation only in the -wal ---------------------------------------------

CREATE_AND_DIE = """
import os, signal, sys, journal
j = journal.open(sys.argv[1], checkpoint_pages=0)
j.create_session("s")
for i in range(5):
    j.append("s", "user_message", {"content": "event %d" % i})
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_g13_a_journal_whose_creation_is_only_in_its_wal_opens_and_keeps_every_event(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    done = run_child(CREATE_AND_DIE, str(path))
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert header_application_id(path) == 0  # the file's own header does not name it yet
    with journal.open(path, readonly=True) as r:
        assert r.count("s") == 5
    with journal.open(path) as j:
        assert [e.data["content"] for e in j.events("s")] == [f"event {i}" for i in range(5)]
        assert j.integrity_check() == ["ok"]
        j.append("s", "user_message", {"content": "after the crash"})
    with journal.open(path) as j:
        assert j.count("s") == 6


OPEN_ONLY = """
import sys, journal
journal.open(sys.argv[1]).close()
"""


@pytest.mark.parametrize("point", ["create_schema.before_commit", "create_schema.after_commit"])
def test_g13_a_journal_killed_while_being_created_opens(tmp_path: Path, point: str) -> None:
    path = tmp_path / "j.db"
    done = run_child(OPEN_ONLY, str(path), env={"JOURNAL_CRASH_AT": point})
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert header_application_id(path) == 0
    with journal.open(path) as j:
        j.create_session("s")
        j.append("s", "user_message", {"content": "hi"})
        assert j.integrity_check() == ["ok"]
    assert header_application_id(path) == store.APPLICATION_ID


def test_g13_a_new_journal_names_itself_in_its_own_header_at_once(tmp_path: Path) -> None:
    # Checkpointed right after creation: other openers need not read the -wal to know it.
    path = tmp_path / "j.db"
    with journal.open(path):
        assert header_application_id(path) == store.APPLICATION_ID


def _torn_new_file(path: Path, original_pages: int) -> None:
    """A new file whose first sector never reached the disk, beside the hot journal of its
    creation (magic, no records, the size before the transaction, sector and page size)."""
    path.write_bytes(bytes(4096))
    header = bytes.fromhex("d9d505f920a163d7") + struct.pack(">5I", 0, 0, original_pages, 512, 4096)
    Path(str(path) + "-journal").write_bytes(header.ljust(512, b"\0"))


def test_g13_a_torn_new_file_beside_its_creation_journal_becomes_a_journal(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    _torn_new_file(path, original_pages=0)
    with journal.open(path) as j:
        j.create_session("s")
        assert j.integrity_check() == ["ok"]
    assert not Path(str(path) + "-journal").exists()


def test_g13_a_zeroed_file_beside_a_journal_of_older_pages_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    _torn_new_file(path, original_pages=3)
    before = snapshot(path)
    with pytest.raises(journal.NotAJournal):
        journal.open(path)
    assert snapshot(path) == before


# -- the WAL reader, against WALs SQLite wrote --------------------------------------------------


def _wal_of_two_transactions(path: Path) -> None:
    """A killed writer's WAL: one table in the first transaction, a second in the second."""
    run_killed_writer(
        path,
        """
conn.pragma("journal_mode", "wal")
conn.pragma("wal_autocheckpoint", 0)
conn.execute("CREATE TABLE a (x)")
conn.execute("BEGIN; CREATE TABLE b (x); INSERT INTO b SELECT zeroblob(3000) FROM (SELECT 1 UNION SELECT 2); COMMIT")
""",
    )


def _schema_sizes(wal: Path) -> list[int]:
    """The number of schema entries in each committed copy of page 1, oldest first."""
    return [struct.unpack(">H", image[103:105])[0] for image in _header.committed_page_ones(str(wal))]


def test_g13_the_wal_reader_sees_each_committed_copy_of_page_one(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    _wal_of_two_transactions(path)
    assert _schema_sizes(Path(str(path) + "-wal")) == [1, 2]


def test_g13_the_wal_reader_ignores_a_transaction_without_its_commit_frame(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    _wal_of_two_transactions(path)
    wal = Path(str(path) + "-wal")
    page_size = struct.unpack(">I", wal.read_bytes()[8:12])[0]
    wal.write_bytes(wal.read_bytes()[: -(24 + page_size)])  # the last frame commits the second
    assert _schema_sizes(wal) == [1]


def test_g13_the_wal_reader_stops_at_a_frame_whose_checksum_fails(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    _wal_of_two_transactions(path)
    wal = Path(str(path) + "-wal")
    data = bytearray(wal.read_bytes())
    page_size = struct.unpack(">I", data[8:12])[0]
    first_frame_page = 32 + 24
    data[first_frame_page + page_size - 1] ^= 0xFF  # inside the first frame's page
    wal.write_bytes(bytes(data))
    assert _schema_sizes(wal) == []


def test_g13_the_wal_reader_ignores_frames_of_an_earlier_generation(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    _wal_of_two_transactions(path)
    wal = Path(str(path) + "-wal")
    data = bytearray(wal.read_bytes())
    data[16:20] = struct.pack(">I", struct.unpack(">I", data[16:20])[0] + 1)  # a new salt-1
    # Re-seal the header's own checksum, so only the frames' salts are out of date.
    order = "<" if data[3] == 0x82 else ">"
    data[24:32] = struct.pack(">2I", *_header._wal_checksum(bytes(data[:24]), order, 0, 0))
    wal.write_bytes(bytes(data))
    assert _schema_sizes(wal) == []
