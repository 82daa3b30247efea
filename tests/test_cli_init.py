"""``journal init`` says "ready" only for a journal it can write; else one ``journal:`` line, exit 1.

The command runs in a child process (the real ``journal`` entry point), as a user would run it.
A file is made unwritable with ``chmod`` for an ordinary user and with ``chattr +i`` (immutable)
for root, whom file modes do not stop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import journal

from .conftest import python_child, run_child


def _journal_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_child("from journal.cli import main; main()", *args)


@contextlib.contextmanager
def _unwritable(path: Path) -> Iterator[None]:
    """``path`` cannot be written by this process until the block ends."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o444 if path.is_file() else 0o555)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    try:
        made = subprocess.run(["chattr", "+i", str(path)], check=False, capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("root, and no chattr here to make a file immutable (file modes do not stop root)")
    if made.returncode != 0:
        pytest.skip(f"root, and chattr +i is not available here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def _assert_one_line_failure(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "ready" not in done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("journal: "), done.stderr
    return lines[0]


def test_init_creates_a_journal_and_says_ready(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    done = _journal_cli("init", "--db", str(path))
    assert done.returncode == 0 and done.stdout.startswith("journal ready: "), done.stderr
    with journal.open(path) as j:
        assert j.integrity_check() == ["ok"]


@pytest.mark.parametrize("part", ["", "-wal", "-shm"], ids=["file", "wal", "shm"])
def test_init_of_a_journal_it_cannot_write_fails_in_one_line_and_writes_nothing(tmp_path: Path, part: str) -> None:
    path = tmp_path / "j.db"
    with journal.open(path) as j:
        j.create_session("s")
        j.append("s", "user_message", {"content": "kept"})
        unwritable = Path(str(path) + part)
        with _unwritable(unwritable):  # the journal's own connection keeps the -wal and -shm
            line = _assert_one_line_failure(_journal_cli("init", "--db", str(path)))
    assert "cannot be written" in line and unwritable.name in line
    with journal.open(path) as j:  # a fresh connection: the journal is as it was
        assert [e.data for e in j.events("s")] == [{"content": "kept"}]
        assert j.check() == []


def test_init_in_a_directory_it_cannot_write_fails_in_one_line_and_creates_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "locked"
    folder.mkdir()
    with _unwritable(folder):
        _assert_one_line_failure(_journal_cli("init", "--db", str(folder / "j.db")))
    assert list(folder.iterdir()) == []


HOLDER = """
import sys, time, apsw
conn = apsw.Connection(sys.argv[1])
conn.execute("PRAGMA locking_mode=EXCLUSIVE")
conn.execute("BEGIN IMMEDIATE; COMMIT")  # in WAL mode: the file is this process's alone from now on
print("holding", flush=True)
time.sleep(600)
"""


def test_init_of_a_journal_another_process_holds_exclusively_fails_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    journal.open(path).close()
    holder = python_child(HOLDER, str(path))
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n", holder.stderr
        line = _assert_one_line_failure(_journal_cli("init", "--db", str(path)))
        assert "locked" in line
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
