"""Group commit for threads under storage faults: an error never stands for a committed append.

Appends from several threads share one transaction (``journal.store.groupcommit``); when its
COMMIT fails, every append in it raises a ``JournalIOError`` of its own whose ``outcome`` is
what a re-read found (DESIGN §4), checked here against a fresh connection (G1, G2).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import journal

APPENDS = 6


def _appends_sharing_one_commit(j: journal.Journal, arm: Callable[[], None]) -> list[Any]:
    """``APPENDS`` threads' appends in ONE commit: the first leads and waits for the connection
    (held here), the rest queue behind it; the fault is armed before the lead may go on."""
    outcomes: dict[int, Any] = {}

    def append(k: int) -> None:
        try:
            outcomes[k] = j.append("s", "x.note", {"k": k})
        except BaseException as exc:
            outcomes[k] = exc

    threads = [threading.Thread(target=append, args=(k,)) for k in range(APPENDS)]
    with j._store._lock:  # private: the leader's transaction waits for it
        threads[0].start()
        while not j._appends._leading:  # a wait for a state, not a timing: no bound is asserted
            time.sleep(0.001)
        for t in threads[1:]:
            t.start()
        while len(j._appends._queue) < APPENDS - 1:
            time.sleep(0.001)
        arm()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    return [outcomes[k] for k in range(APPENDS)]


def test_g1_an_fsync_error_at_a_shared_commit_gives_every_thread_an_unknown_outcome_never_absent(
    vfs: Any, tmp_path: Path
) -> None:
    path = tmp_path / "j.db"
    j = journal.open(path, vfs=vfs.name)
    try:
        j.create_session("s")
        outcomes = _appends_sharing_one_commit(j, lambda: vfs.fail_sync(1, suffix="-wal"))
        vfs.crash()  # the process dies before anything else reaches the disk
    finally:
        try:
            j.close()
        except journal.JournalError:
            pass  # the dead disk
    assert all(isinstance(o, journal.JournalIOError) for o in outcomes), outcomes
    assert [o.outcome for o in outcomes] == ["unknown"] * APPENDS
    assert len({id(o) for o in outcomes}) == APPENDS  # each thread raised its own error
    vfs.reset()
    with journal.open(path) as fresh:
        # The commit frame reached the WAL before its fsync failed: after the crash the batch is
        # back, so "absent" would have been a lie (and a retry a duplicate).
        assert sorted(e.data["k"] for e in fresh.events("s")) == list(range(APPENDS))
        assert fresh.integrity_check() == ["ok"] and fresh.check() == []


def test_g1_a_failed_checkpoint_after_a_shared_commit_gives_every_thread_a_present_outcome(
    vfs: Any, tmp_path: Path
) -> None:
    path = tmp_path / "j.db"
    with journal.open(path, vfs=vfs.name, checkpoint_pages=1) as j:
        j.create_session("s")
        # The COMMIT is synced in the WAL; the auto-checkpoint after it fails writing the
        # database file, and SQLite reports that error from the COMMIT.
        outcomes = _appends_sharing_one_commit(j, lambda: vfs.fail_write(1, suffix="j.db"))
    assert all(isinstance(o, journal.JournalIOError) for o in outcomes), outcomes
    assert [o.outcome for o in outcomes] == ["present"] * APPENDS  # re-read: the batch is there
    vfs.reset()
    with journal.open(path) as fresh:
        assert sorted(e.data["k"] for e in fresh.events("s")) == list(range(APPENDS))
        assert fresh.integrity_check() == ["ok"] and fresh.check() == []


def test_g2_a_refused_append_in_a_failed_shared_commit_keeps_its_own_error(vfs: Any, tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    outcomes: dict[str, Any] = {}
    with journal.open(path, vfs=vfs.name, checkpoint_pages=1) as j:
        j.create_session("s")

        def refused() -> None:
            try:
                j.append("nobody", "x.note", {"k": "refused"})
            except BaseException as exc:
                outcomes["refused"] = exc

        def arm() -> None:
            vfs.fail_write(1, suffix="j.db")
            bad = threading.Thread(target=refused)  # queued last: it rides the same batch
            bad.start()
            while len(j._appends._queue) < APPENDS:
                time.sleep(0.001)
            outcomes["bad"] = bad

        shared = _appends_sharing_one_commit(j, arm)
        outcomes["bad"].join(timeout=60)
    assert isinstance(outcomes["refused"], journal.SessionNotFound)
    assert [o.outcome for o in shared] == ["present"] * APPENDS
    vfs.reset()
    with journal.open(path) as fresh:
        assert sorted(e.data["k"] for e in fresh.events("s")) == list(range(APPENDS))
