"""A journal damaged on disk, read through every face: a typed ``CorruptJournal`` saying the file
is damaged, never the driver's or the codec's own error, and nothing written (G13).

The damage is done to real files' bytes, as a failing disk or a stray writer would: one byte of
an event's stored text made 0xFF (not UTF-8: apsw raises ``UnicodeDecodeError`` while stepping the
cursor over that row), and a journal truncated to half its size (its pages malformed). A refused
open leaves the directory as it was: no -wal or -shm that was not there, no byte of the file or of
its -wal changed.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import journal
import journal.aio
from tests.conftest import ROOT, run_child
from tests.test_serve import request, serving, session_path

MARKER = b"MARKERXYZ"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listing(directory: Path) -> dict[str, str]:
    """Every file of ``directory`` with its digest: what a refused open must leave as it was."""
    return {p.name: sha256(p) for p in sorted(directory.iterdir())}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The ``journal`` command in a fresh process (``python -m journal.cli``, as a user runs it)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("JOURNAL_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "journal.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60
    )


def assert_one_line_damage(done: subprocess.CompletedProcess[str], path: Path) -> None:
    """The CLI's refusal of a damaged file: one ``journal: ...`` line naming it, exit status 1."""
    assert done.returncode == 1, (done.returncode, done.stderr, done.stdout)
    assert done.stderr.startswith("journal: ") and done.stderr.count("\n") == 1, done.stderr
    assert f"{path} is damaged" in done.stderr and "unexpected" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout


# -- an event whose stored text is not UTF-8 --------------------------------------------------------


@pytest.fixture
def bad_text(tmp_path: Path) -> Path:
    """A cleanly closed journal (no side files) whose first event's text holds a byte 0xFF."""
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        j.create_session("s")
        j.append("s", "user_message", {"content": "hello " + MARKER.decode() + " world"})
        j.append("s", "assistant_message", {"content": "ok"})
    assert not Path(f"{path}-wal").exists(), "the closing writer folded its -wal in"
    data = bytearray(path.read_bytes())
    assert data.count(MARKER) == 1
    data[data.index(MARKER)] = 0xFF
    path.write_bytes(bytes(data))
    return path


def assert_damaged(error: journal.CorruptJournal, path: Path) -> None:
    assert error.path == str(path)
    assert str(error).startswith(f"{path} is damaged: ") and "`journal check`" in str(error), str(error)
    assert isinstance(error.__cause__, UnicodeDecodeError)


def assert_nothing_written(path: Path, before: str) -> None:
    assert sha256(path) == before
    wal = Path(f"{path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0, "no frame was written to the -wal"


READS: dict[str, Callable[[journal.Journal], Any]] = {
    "events": lambda j: j.events("s"),
    "messages": lambda j: j.messages("s"),
    "messages-tail-chars": lambda j: j.messages("s", tail=2, chars=100),
    "provider_view": lambda j: j.provider_view("s"),
    "previews": lambda j: j.previews("s"),
}


@pytest.mark.parametrize("read", READS.values(), ids=READS.keys())
def test_every_read_of_a_text_that_is_not_utf8_raises_corrupt_journal_and_writes_nothing(
    bad_text: Path, read: Callable[[journal.Journal], Any]
) -> None:
    before = sha256(bad_text)
    with journal.open(bad_text, readonly=True) as j, pytest.raises(journal.CorruptJournal) as caught:
        read(j)
    assert_damaged(caught.value, bad_text)
    assert_nothing_written(bad_text, before)


def test_a_writable_retract_over_a_text_that_is_not_utf8_raises_corrupt_journal_and_commits_nothing(
    bad_text: Path,
) -> None:
    before = sha256(bad_text)
    with journal.open(bad_text) as j, pytest.raises(journal.CorruptJournal) as caught:
        j.retract("s")
    assert_damaged(caught.value, bad_text)
    assert_nothing_written(bad_text, before)
    with journal.open(bad_text, readonly=True) as fresh:  # a new connection: nothing was committed
        assert fresh.count("s") == 2


def test_the_async_face_raises_corrupt_journal_for_a_text_that_is_not_utf8(bad_text: Path) -> None:
    before = sha256(bad_text)

    async def read() -> None:
        async with journal.aio.open(bad_text, readonly=True) as aj:
            await aj.events("s")

    with pytest.raises(journal.CorruptJournal) as caught:
        asyncio.run(read())
    assert_damaged(caught.value, bad_text)
    assert_nothing_written(bad_text, before)


@pytest.mark.parametrize(
    "args",
    [["show", "s"], ["show", "s", "--json"], ["show", "s", "--view", "messages"], ["export"]],
    ids=["show", "show-json", "show-messages", "export"],
)
def test_the_cli_refuses_a_text_that_is_not_utf8_in_one_line_and_writes_nothing(
    bad_text: Path, args: list[str]
) -> None:
    before = sha256(bad_text)
    done = cli(*args, "--db", str(bad_text), cwd=bad_text.parent)
    assert_one_line_damage(done, bad_text)
    assert "`journal check`" in done.stderr
    assert_nothing_written(bad_text, before)


@pytest.mark.parametrize(
    "path, api",
    [(session_path("s"), False), (session_path("s", view="messages"), False), ("/api/sessions/s", True)],
    ids=["session-page", "messages-page", "api"],
)
def test_the_viewer_answers_a_text_that_is_not_utf8_with_its_error_page(bad_text: Path, path: str, api: bool) -> None:
    before = sha256(bad_text)
    with serving(bad_text) as viewer:
        got = request(viewer, path)
    # The viewer's answer to a JournalError, saying what it is; not a bug's "internal error".
    assert got.status == 500
    message = got.json()["error"] if api else got.text
    assert "is damaged" in message and "internal error" not in message, message
    assert got.headers["Content-Type"].startswith("application/json" if api else "text/html")
    assert_nothing_written(bad_text, before)


# -- a journal truncated to half its size -----------------------------------------------------------


def _journal_alone(tmp_path: Path) -> Path:
    """A cleanly closed journal of 300 events, alone in its own directory (no side files)."""
    path = tmp_path / "alone" / "j.db"
    path.parent.mkdir()
    with journal.open(path) as j:
        j.create_session("s")
        j.append_many("s", [("user_message", {"content": f"m{i} " + "y" * 200}) for i in range(300)])
    assert [p.name for p in path.parent.iterdir()] == ["j.db"]
    return path


@pytest.fixture
def half(tmp_path: Path) -> Path:
    """The journal cut to half its size: its header still names it a journal, its pages are
    malformed."""
    path = _journal_alone(tmp_path)
    os.truncate(path, path.stat().st_size // 2)
    return path


def _open_async(path: Path, *, readonly: bool) -> None:
    async def opened() -> None:
        async with journal.aio.open(path, readonly=readonly):
            pass

    asyncio.run(opened())


OPENS: dict[str, Callable[[Path], Any]] = {
    "readonly": lambda path: journal.open(path, readonly=True).close(),
    "writable": lambda path: journal.open(path).close(),
    "async-readonly": lambda path: _open_async(path, readonly=True),
    "async-writable": lambda path: _open_async(path, readonly=False),
}


@pytest.mark.parametrize("opener", OPENS.values(), ids=OPENS.keys())
def test_a_half_truncated_journal_is_refused_as_damaged_and_the_directory_is_left_as_it_was(
    half: Path, opener: Callable[[Path], Any]
) -> None:
    before = listing(half.parent)
    with pytest.raises(journal.CorruptJournal) as caught:
        opener(half)
    assert caught.value.path == str(half)
    assert "the file was left untouched" in str(caught.value)
    assert listing(half.parent) == before  # no -wal, no -shm, every byte of the file


@pytest.mark.parametrize("args", [["sessions"], ["show", "s"], ["export"], ["tail", "s"]], ids=lambda a: a[0])
def test_every_read_only_cli_command_refuses_a_half_truncated_journal_and_creates_no_side_file(
    half: Path, args: list[str]
) -> None:
    before = listing(half.parent)
    done = cli(*args, "--db", str(half), cwd=half.parent)
    assert_one_line_damage(done, half)
    assert listing(half.parent) == before


def test_check_reports_a_half_truncated_journal_as_damaged_and_creates_no_side_file(half: Path) -> None:
    before = listing(half.parent)
    done = cli("check", "--db", str(half), cwd=half.parent)
    assert done.returncode == 1 and "PROBLEMS FOUND" in done.stdout, (done.stdout, done.stderr)
    assert f"{half} is damaged" in done.stdout
    assert listing(half.parent) == before


KILLED_WRITER = """
import os, sys, journal
j = journal.open(sys.argv[1], checkpoint_pages=0)
for _ in range(50):  # fifty commits, each only in the -wal
    j.append("s", "user_message", {"content": "w" * 300})
os._exit(0)  # no close: the commits stay in the -wal
"""


@pytest.mark.parametrize("readonly", [True, False], ids=["readonly", "writable"])
def test_a_refused_open_never_folds_a_wal_that_was_there_into_the_damaged_file(tmp_path: Path, readonly: bool) -> None:
    """A writer killed with commits in its -wal, then the file cut in half: the refusal keeps the
    file and its -wal byte for byte (SQLite's closing checkpoint would copy the -wal into the
    damaged file and delete it). The -shm, SQLite's index of the -wal, it may rebuild."""
    half = _journal_alone(tmp_path)
    done = run_child(KILLED_WRITER, str(half))
    assert done.returncode == 0, done.stderr
    wal = Path(f"{half}-wal")
    assert wal.stat().st_size > 0
    os.truncate(half, half.stat().st_size // 2)
    before = {name: digest for name, digest in listing(half.parent).items() if not name.endswith("-shm")}
    with pytest.raises(journal.CorruptJournal):
        journal.open(half, readonly=readonly).close()
    after = {name: digest for name, digest in listing(half.parent).items() if not name.endswith("-shm")}
    assert after == before


# -- a journal cut short by a few bytes -------------------------------------------------------------


@pytest.fixture(params=[1, 1000, 4096], ids=lambda n: f"cut{n}")
def cut(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """The journal with its last bytes gone: pages SQLite would read as zeros, and build on."""
    path = _journal_alone(tmp_path)
    os.truncate(path, path.stat().st_size - request.param)
    return path


@pytest.mark.parametrize("opener", [OPENS["writable"], OPENS["async-writable"]], ids=["writable", "async-writable"])
def test_a_journal_cut_short_is_refused_by_a_writable_open_and_left_as_it_was(
    cut: Path, opener: Callable[[Path], Any]
) -> None:
    before = listing(cut.parent)
    with pytest.raises(journal.CorruptJournal) as caught:
        opener(cut)
    assert "shorter than its header says" in str(caught.value) and "the file was left untouched" in str(caught.value)
    assert listing(cut.parent) == before


def test_a_journal_cut_short_accepts_no_append_through_the_cli_and_check_names_the_cut(cut: Path) -> None:
    before = listing(cut.parent)
    done = cli("recover", "--db", str(cut), cwd=cut.parent)
    assert_one_line_damage(done, cut)
    done = cli("check", "--db", str(cut), cwd=cut.parent)
    assert done.returncode == 1 and "PROBLEMS FOUND" in done.stdout, (done.stdout, done.stderr)
    assert "bytes shorter than its header says" in done.stdout
    assert listing(cut.parent) == {k: v for k, v in listing(cut.parent).items() if k in before}
    assert sha256(cut) == before["j.db"]


def test_a_journal_whose_wal_holds_its_last_pages_is_not_cut(tmp_path: Path) -> None:
    """A writer killed with commits in its -wal: the file may lag its header until the next
    checkpoint, and that is no damage (SQLite reads those pages from the -wal)."""
    path = _journal_alone(tmp_path)
    done = run_child(KILLED_WRITER, str(path))
    assert done.returncode == 0, done.stderr
    with journal.open(path) as j:
        assert len(j.events("s")) == 350 and j.integrity_check() == ["ok"]
        j.append("s", "user_message", {"content": "after"})


@pytest.mark.parametrize("read", [*READS.values(), lambda j: j.tool_stats()], ids=[*READS.keys(), "tool_stats"])
def test_a_read_only_read_of_a_journal_cut_short_reads_or_raises_corrupt_journal(
    cut: Path, read: Callable[[journal.Journal], Any]
) -> None:
    """The pages a cut took read as zeros: a row there is not JSON (Python's decoder or
    SQLite's JSON functions meet it). That is damage, said as such, never the decoder's error."""
    before = listing(cut.parent)
    try:
        with journal.open(cut, readonly=True) as j:
            read(j)
    except journal.CorruptJournal as exc:
        assert exc.path == str(cut) and "is damaged" in str(exc)
    assert listing(cut.parent) == before


@pytest.mark.parametrize("args", [["show", "s"], ["export"], ["tail", "s"]], ids=lambda a: a[0])
def test_the_cli_reads_a_journal_cut_short_or_refuses_it_in_one_line(cut: Path, args: list[str]) -> None:
    done = cli(*args, "--db", str(cut), cwd=cut.parent)
    if done.returncode != 0:
        assert_one_line_damage(done, cut)
