"""Many threads appending durably: no stall, no gap, no lost append (G1, G2, G4; DESIGN §11)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

import journal
from tests.raw import WriteLock


def _hammer(append, errors: list[BaseException], worker: int, n: int) -> None:
    try:
        for i in range(n):
            append(worker, i)
    except BaseException as exc:
        errors.append(exc)


def _appender(j: journal.Journal) -> Callable[[int, int], object]:
    """What a worker appends with: one event naming the worker and its count, to ``j``."""
    return lambda w, i: j.append("s", "x.e", {"w": w, "i": i})


@pytest.mark.parametrize("shared", [True, False], ids=["one-journal", "a-journal-per-thread"])
def test_g4_eight_threads_appending_durably_finish_with_contiguous_seqs(db_path: Path, shared: bool) -> None:
    with journal.open(db_path) as setup:
        setup.create_session("s")
    handles = [journal.open(db_path)] if shared else [journal.open(db_path) for _ in range(8)]
    errors: list[BaseException] = []
    threads = [
        threading.Thread(
            target=_hammer,
            args=(_appender(handles[n % len(handles)]), errors, n, 100),
        )
        for n in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "appending threads stalled"
    for handle in handles:
        handle.close()
    assert errors == []
    with journal.open(db_path) as j:
        events = j.events("s")
        assert [e.seq for e in events] == list(range(800))
        for w in range(8):
            assert [e.data["i"] for e in events if e.data["w"] == w] == list(range(100))


def test_a_refused_append_in_a_shared_commit_fails_alone(db_path: Path) -> None:
    with journal.open(db_path) as j:
        j.create_session("s")
        errors: list[BaseException] = []
        good = [
            threading.Thread(target=_hammer, args=(lambda w, i: j.append("s", "x.e", {"w": w, "i": i}), errors, w, 50))
            for w in range(4)
        ]
        bad_errors: list[BaseException] = []
        bad = threading.Thread(target=_hammer, args=(lambda w, i: j.append("missing", "x.e", {}), bad_errors, 9, 50))
        for t in [*good, bad]:
            t.start()
        for t in [*good, bad]:
            t.join(timeout=120)
        assert errors == []
        assert len(bad_errors) == 1 and isinstance(bad_errors[0], journal.SessionNotFound)
        assert [e.seq for e in j.events("s")] == list(range(200))
        assert j.check() == []


def test_g2_appends_refused_inside_a_shared_commit_undo_only_themselves(db_path: Path) -> None:
    # Another connection appends to the same session meanwhile, so the seqs this Journal guesses
    # go stale: inside a shared commit the schema refuses such an INSERT, SQLite undoes that one
    # statement (with its triggers), and the append is made again at the right seq.
    with journal.open(db_path) as a, journal.open(db_path) as b:
        a.create_session("s")
        errors: list[BaseException] = []
        threads = [
            threading.Thread(target=_hammer, args=(lambda w, i: a.append("s", "x.e", {"w": w, "i": i}), errors, w, 60))
            for w in range(6)
        ] + [
            threading.Thread(target=_hammer, args=(lambda w, i: b.append("s", "x.e", {"w": w, "i": i}), errors, 9, 60))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert errors == [] and not any(t.is_alive() for t in threads)
        events = a.events("s")
        assert [e.seq for e in events] == list(range(420))
        for w in [*range(6), 9]:
            assert [e.data["i"] for e in events if e.data["w"] == w] == list(range(60))
        assert a.check() == []


def test_a_caller_interrupted_while_queued_withdraws_its_append_and_the_others_go_on(db_path: Path) -> None:
    with journal.open(db_path) as j:
        j.create_session("s")
        holder = WriteLock(db_path)  # the leader below waits for it, leading
        leader = threading.Thread(target=j.append, args=("s", "x.e", {"who": "leader"}))
        leader.start()
        while not j._appends._leading:  # private: the test needs the leader to be in place
            time.sleep(0.001)
        # SIGINT raises KeyboardInterrupt in the main thread, waiting in its queued append.
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            j.append("s", "x.e", {"who": "interrupted"})  # queued behind the leader
        holder.release()
        leader.join(timeout=30)
        assert not leader.is_alive()
        assert j.append("s", "x.e", {"who": "after"}).seq == 1  # the group still works
        assert [e.data["who"] for e in j.events("s")] == ["leader", "after"]


def _queue_behind_a_held_lock(j, works):
    """Run ``works`` through the journal's group commit so that they share ONE commit: a
    leader waits for another connection's write lock while the rest queue behind it."""
    holder = WriteLock(j._store._dsn if j._store.dialect == "postgresql" else j.path)
    outcomes: dict[int, object] = {}

    def run(i, work):
        try:
            outcomes[i] = j._appends.run(work)  # private: the test drives the group directly
        except BaseException as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate(works)]
    threads[0].start()
    while not j._appends._leading:
        time.sleep(0.001)
    for t in threads[1:]:
        t.start()
    while len(j._appends._queue) < len(works) - 1:
        time.sleep(0.001)
    holder.release()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    return [outcomes[i] for i in range(len(works))]


_ROW = "INSERT INTO events (session_id, seq, type, data, time_ms) VALUES (?, ?, 'x.e', ?, 0)"


@pytest.mark.parametrize(
    "bad, error",
    [
        (lambda db: db.execute(_ROW, ("s", 50, '{"c":"\udc80"}')), UnicodeEncodeError),  # refused when bound
        (lambda db: db.execute(_ROW, ("s", 2**70, "{}")), OverflowError),
        (lambda db: 1 / 0, ZeroDivisionError),
        (lambda db: db.execute(_ROW, ("s", 0, "{}")), journal.JournalError),  # a seq taken: refused by the schema
    ],
    ids=["lone-surrogate", "int-too-big", "python-error", "schema-refusal"],
)
def test_g2_any_error_of_one_queued_append_fails_it_alone(db_path: Path, backend: str, bad, error) -> None:
    if backend == "postgresql" and error in (UnicodeEncodeError, OverflowError):
        error = journal.InvalidArgument  # psycopg's refusal, or the server's, translated
    with journal.open(db_path) as j:
        j.create_session("s")
        j.append("s", "x.e", {"i": 0})

        def good(i):
            return lambda db: db.execute(_ROW, ("s", i, f'{{"i":{i}}}')) and i

        def wrapped(db):
            try:
                return bad(db)
            except apsw.ConstraintError as exc:
                raise journal.SchemaViolation("append", str(exc)) from exc

        outcomes = _queue_behind_a_held_lock(j, [good(1), good(2), wrapped, good(3), good(4)])
        assert outcomes[:2] + outcomes[3:] == [1, 2, 3, 4]
        assert isinstance(outcomes[2], error)
    with journal.open(db_path, readonly=True) as fresh:  # durable, seen through a new connection
        assert [e.data.get("i") for e in fresh.events("s")] == [0, 1, 2, 3, 4]
        assert fresh.check() == []


def test_g2_a_lone_surrogate_among_concurrent_appends_is_refused_alone(db_path: Path) -> None:
    with journal.open(db_path) as j:
        j.create_session("s")
        errors: list[BaseException] = []
        good = [
            threading.Thread(target=_hammer, args=(lambda w, i: j.append("s", "x.e", {"w": w, "i": i}), errors, w, 40))
            for w in range(4)
        ]
        bad_errors: list[BaseException] = []
        bad = threading.Thread(
            target=_hammer, args=(lambda w, i: j.append("s", "x.e", {"t": "\ud800"}), bad_errors, 9, 1)
        )
        for t in [*good, bad]:
            t.start()
        for t in [*good, bad]:
            t.join(timeout=120)
        assert errors == []
        assert len(bad_errors) == 1 and isinstance(bad_errors[0], journal.InvalidEvent)
        assert [e.seq for e in j.events("s")] == list(range(160))
