"""The contenders that write the journal's own row: the journal itself, and raw apsw.

Every contender has ``name``, ``durability`` (what it actually ran with, as read back from the
connection) and ``run(k)``, which does ``k`` operations and returns their times in nanoseconds.
The thread contenders return one wall time for the whole job instead. ``path`` is the file it
writes (the driver watches its ``-wal`` to warm it up).

The row is the same everywhere: a ``user_message`` whose data is about 200 bytes of JSON, in a
table with the journal's columns and primary key, written with the pragmas of DESIGN §4
(WAL, ``synchronous`` FULL or NORMAL, ``foreign_keys``, a 10 s busy timeout) inside an explicit
``BEGIN IMMEDIATE`` … ``COMMIT``.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import apsw

import journal

BUSY_TIMEOUT_MS = 10_000

# ~200 bytes once encoded as {"content": ...}; the peers store {"role": "user", "content": ...}.
MESSAGE_TEXT = (
    "Please look at the failing test in tests/test_store.py and tell me why the WAL file keeps "
    "growing after every checkpoint; I think the reader in the other process holds a snapshot open."
)
MESSAGE = {"content": MESSAGE_TEXT}
EVENT_TYPE = "user_message"

# The journal's events table, bare: same columns, types and primary key, without the CHECKs,
# the triggers, the partial indexes and the foreign key of schema.sql.
BARE_EVENTS_SQL = """
CREATE TABLE events (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    type       TEXT NOT NULL,
    data       TEXT NOT NULL,
    time_ms    INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
) STRICT, WITHOUT ROWID
"""
INSERT_SQL = "INSERT INTO events (session_id, seq, type, data, time_ms) VALUES (?, ?, ?, ?, ?)"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def encode(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def timed_calls(op: Callable[[], object], k: int) -> list[int]:
    """Call ``op`` ``k`` times; the time of each call in nanoseconds."""
    clock = time.perf_counter_ns
    out = []
    for _ in range(k):
        start = clock()
        op()
        out.append(clock() - start)
    return out


# -- raw apsw ---------------------------------------------------------------------------------


def raw_connection(path: str, *, synchronous: str) -> apsw.Connection:
    """An apsw connection with the journal's pragmas and nothing else of the journal."""
    conn = apsw.Connection(path)
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    conn.pragma("journal_mode", "wal")
    conn.pragma("synchronous", synchronous)
    conn.pragma("foreign_keys", True)
    return conn


def create_bare_file(path: str) -> None:
    conn = raw_connection(path, synchronous="FULL")
    conn.execute(BARE_EVENTS_SQL)
    conn.close()


def create_journal_file(path: str, session_ids: list[str]) -> None:
    """A file made by the journal itself (schema.sql, triggers and all), with these sessions."""
    with journal.open(path) as j:
        for session_id in session_ids:
            j.create_session(session_id)


def durability_of(conn: apsw.Connection) -> str:
    mode = conn.pragma("journal_mode")
    sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[conn.pragma("synchronous")]
    return f"{str(mode).upper()} + synchronous={sync} (apsw, SQLite {apsw.sqlite_lib_version()})"


class RawAppend:
    """One ``BEGIN IMMEDIATE; INSERT; COMMIT`` per op, the data JSON-encoded from the dict."""

    what = "BEGIN IMMEDIATE; INSERT of one row (data json.dumps'd from the dict); COMMIT"

    def __init__(self, name: str, path: str, *, synchronous: str, session_id: str) -> None:
        self.name, self.path = name, path
        self.conn = raw_connection(path, synchronous=synchronous)
        self.durability = durability_of(self.conn)
        self.session_id = session_id
        self.seq = self.conn.execute(
            "SELECT coalesce(max(seq) + 1, 0) FROM events WHERE session_id = ?", (session_id,)
        ).get

    def append(self) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(INSERT_SQL, (self.session_id, self.seq, EVENT_TYPE, encode(MESSAGE), now_ms()))
        conn.execute("COMMIT")
        self.seq += 1

    def run(self, k: int) -> list[int]:
        return timed_calls(self.append, k)

    def close(self) -> None:
        self.conn.close()


class RawAutocommit(RawAppend):
    """The INSERT alone, as SQLite's autocommit transaction (what a lone journal append runs)."""

    what = "INSERT of one row as its own autocommit transaction (no BEGIN/COMMIT statements)"

    def append(self) -> None:
        self.conn.execute(INSERT_SQL, (self.session_id, self.seq, EVENT_TYPE, encode(MESSAGE), now_ms()))
        self.seq += 1


class RawBatch:
    """``executemany`` of ``rows`` events in one transaction; ``run`` times each batch.

    With ``pre_encoded`` the JSON text is made once, outside the timing (the bare SQLite cost);
    without it every batch encodes its rows from the dicts, as any caller must.
    """

    def __init__(self, name: str, path: str, *, rows: int, pre_encoded: bool, session_id: str) -> None:
        self.name, self.path = name, path
        self.what = f"BEGIN IMMEDIATE; executemany of {rows} rows; COMMIT" + (
            " (JSON pre-encoded)" if pre_encoded else ""
        )
        self.rows = rows
        self.conn = raw_connection(path, synchronous="FULL")
        self.durability = durability_of(self.conn)
        self.session_id = session_id
        self.seq = 0
        self.text = encode(MESSAGE) if pre_encoded else None

    def batch(self) -> None:
        conn, first, t = self.conn, self.seq, now_ms()
        if self.text is None:
            rows = [(self.session_id, first + i, EVENT_TYPE, encode(MESSAGE), t) for i in range(self.rows)]
        else:
            rows = [(self.session_id, first + i, EVENT_TYPE, self.text, t) for i in range(self.rows)]
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(INSERT_SQL, rows)
        conn.execute("COMMIT")
        self.seq += self.rows

    def run(self, k: int) -> list[int]:
        return timed_calls(self.batch, k)

    def close(self) -> None:
        self.conn.close()


# -- the journal ------------------------------------------------------------------------------


def journal_durability(j: journal.Journal) -> str:
    # The pragma as the journal's own connection reports it (read through the store).
    with j._store.read() as db:
        mode = db.value("PRAGMA journal_mode")
        sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[db.value("PRAGMA synchronous")]
    return f"{str(mode).upper()} + synchronous={sync} (journal durability={j.durability.value})"


class JournalAppend:
    """``Journal.append`` of one ``user_message``: one durable transaction per op."""

    what = "Journal.append(session_id, 'user_message', data): one transaction"

    def __init__(self, name: str, path: str, *, durability: str) -> None:
        self.name, self.path = name, path
        self.journal = journal.open(path, durability=durability)
        self.durability = journal_durability(self.journal)
        self.session_id = self.journal.create_session().id

    def append(self) -> None:
        self.journal.append(self.session_id, EVENT_TYPE, MESSAGE)

    def run(self, k: int) -> list[int]:
        return timed_calls(self.append, k)

    def close(self) -> None:
        self.journal.close()


class JournalBatch:
    """``Journal.append_many`` of ``rows`` events; ``run`` times each batch."""

    def __init__(self, name: str, path: str, *, rows: int) -> None:
        self.name, self.path = name, path
        self.what = f"Journal.append_many of {rows} user_message events: one transaction"
        self.rows = rows
        self.journal = journal.open(path, durability="full")
        self.durability = journal_durability(self.journal)
        self.session_id = self.journal.create_session().id

    def batch(self) -> None:
        self.journal.append_many(self.session_id, [(EVENT_TYPE, MESSAGE)] * self.rows)

    def run(self, k: int) -> list[int]:
        return timed_calls(self.batch, k)

    def close(self) -> None:
        self.journal.close()


# -- many threads -----------------------------------------------------------------------------


class ThreadsStalled(Exception):
    """The threads did not finish within the time allowed (a writer starved the others)."""


def run_threads(workers: list[Callable[[], None]], *, timeout_s: float) -> int:
    """Start the workers together; the wall time until the last one ends, in nanoseconds."""
    barrier = threading.Barrier(len(workers) + 1)
    errors: list[BaseException] = []

    def body(work: Callable[[], None]) -> None:
        barrier.wait()
        try:
            work()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(w,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter_ns()
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    elapsed = time.perf_counter_ns() - start
    if any(t.is_alive() for t in threads):
        raise ThreadsStalled(f"{sum(t.is_alive() for t in threads)} of {len(threads)} threads still running")
    if errors:
        raise errors[0]
    return elapsed


class ThreadedAppend:
    """``threads`` threads, each appending ``total // threads`` events to its own session.

    ``mode`` is ``"shared"`` (one Journal for all threads), ``"own"`` (a Journal per thread, same
    file) or ``"raw"`` (an apsw connection per thread, bare table). ``run`` returns one wall time.
    """

    def __init__(self, name: str, path: str, *, threads: int, mode: str, total: int, timeout_s: float) -> None:
        self.name, self.path, self.threads, self.mode, self.timeout_s = name, path, threads, mode, timeout_s
        self.per_thread = total // threads
        self.total = self.per_thread * threads
        self.what = f"{threads} thread(s) x {self.per_thread} durable appends, each thread its own session"
        self._closers: list[Callable[[], None]] = []
        self._appenders = [self._appender(path, i) for i in range(threads)]

    def _appender(self, path: str, index: int) -> Callable[[], None]:
        if self.mode == "raw":
            raw = RawAppend(self.name, path, synchronous="FULL", session_id=new_id())
            self._closers.append(raw.close)
            self.durability = raw.durability
            return raw.append
        if self.mode == "own" or index == 0:
            self._journal = journal.open(path, durability="full")
            self._closers.append(self._journal.close)
            self.durability = journal_durability(self._journal)
        j, session_id = self._journal, self._journal.create_session().id
        return lambda: j.append(session_id, EVENT_TYPE, MESSAGE)

    def run(self, k: int) -> list[int]:
        """``k`` jobs of ``total`` appends; one wall time per job."""
        n = self.per_thread

        def work(append: Callable[[], None]) -> Callable[[], None]:
            def loop() -> None:
                for _ in range(n):
                    append()

            return loop

        return [run_threads([work(a) for a in self._appenders], timeout_s=self.timeout_s) for _ in range(k)]

    def close(self) -> None:
        for close in self._closers:
            close()


def new_path(directory: str, name: str) -> str:
    return os.path.join(directory, f"{name}.db")


def new_id() -> str:
    """A session id shaped like the journal's own (32 hex characters), so rows are the same size."""
    return uuid.uuid4().hex
