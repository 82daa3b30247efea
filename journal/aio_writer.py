"""The async face's machinery (DESIGN §13): the writer thread and the reader pool.

``journal.aio`` queues each awaited write here. One writer thread owns the write connection: it
takes everything queued, runs each write in a savepoint of ONE transaction (a refused write
fails alone: G2), commits once, and wakes each waiting coroutine with its own result or error.
A call that runs alone (its kind is ``engine.ALONE``) runs between batches, with its own
transactions. Reads run on read-only connections of a small thread pool.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from journal import crash
from journal.engine import Journal
from journal.errors import (
    InvalidArgument,
    JournalBusy,
    JournalClosed,
    JournalError,
    JournalIOError,
    SchemaViolation,
)
from journal.model import Event, WriteOutcome
from journal.results import Dispatch, PutResult
from journal.store.base import Batch, EventRow

# The writer's batch: its crash points are writer.before_commit and writer.after_commit.
WRITER = "writer"
# At most this many writes share a commit (the rest ride the next one).
MAX_BATCH = 1024


class _Item:
    """One queued write: the call to make on the writer's ``Journal``, then its fate."""

    __slots__ = (
        "alone", "call", "error", "finished", "future", "loop", "operation", "plain", "result", "synced", "taken"
    )  # fmt: skip

    def __init__(
        self,
        call: Callable[[Journal], Any],
        loop: asyncio.AbstractEventLoop,
        *,
        operation: str,
        alone: bool,
        synced: bool,
        plain: tuple[str, str, dict[str, Any]] | None = None,
    ) -> None:
        self.call = call
        self.plain = plain  # an append(session_id, type, data) without key or expected count
        self.operation = operation  # the call's name, for the error a failed round gives it
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()  # the awaiting task's
        self.finished: asyncio.Future[None] = loop.create_future()  # set once its fate is known
        self.alone = alone
        self.synced = synced
        self.taken = False  # handed to the writer: it runs to its end whatever the task does
        self.result: Any = None
        self.error: BaseException | None = None


class _Writer:
    """The thread that owns the write connection and commits what is queued, in batches."""

    def __init__(self, opener: Callable[[], Journal]) -> None:
        self._opener = opener
        self._cond = threading.Condition(threading.Lock())
        self._queue: collections.deque[_Item] = collections.deque()
        self._closing = False
        self._finished = False  # the thread has ended
        self.journal: Journal | None = None
        self.commits = 0  # batches committed (for the benchmarks: fsyncs under "full")
        self._started: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None
        self._stopped: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None
        self._on_commit: Callable[[], None] | None = None
        self._thread = threading.Thread(target=self._run, name="journal-writer", daemon=True)

    def start(self, loop: asyncio.AbstractEventLoop, on_commit: Callable[[], None]) -> asyncio.Future[None]:
        future = loop.create_future()
        self._started = (loop, future)
        self._on_commit = on_commit
        self._thread.start()
        return future

    def put(self, item: _Item) -> None:
        with self._cond:
            if self._closing:
                raise JournalClosed()
            self._queue.append(item)
            self._cond.notify()

    def withdraw(self, item: _Item) -> bool:
        """Take a write back if the writer has not taken it yet; whether it was."""
        with self._cond:
            if item.taken:
                return False
            self._queue.remove(item)
            return True

    def stop(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """Refuse new writes, commit the queued ones, close the connection; done when it is."""
        future = loop.create_future()
        with self._cond:
            if self._finished:  # the thread is gone (its journal never opened): nothing to wait for
                future.set_result(None)
                return future
            self._stopped = (loop, future)
            self._closing = True
            self._cond.notify()
        return future

    # -- the thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        assert self._started is not None
        try:
            self.journal = self._opener()
        except BaseException as exc:
            self._fail_queued()  # writes queued while it opened never ran: nothing was written
            _call_soon(self._started[0], _settle_future, self._started[1], None, exc)
            self._finish(None)
            return
        _call_soon(self._started[0], _settle_future, self._started[1], None, None)
        error: BaseException | None = None
        try:
            while True:
                batch = self._take()
                if not batch:
                    break
                if batch[0].alone:
                    self._run_alone(batch[0])
                elif len(batch) == 1 and not crash.armed():
                    # A round of one write is that write's own transaction, as the sync call
                    # makes it: a lone append is one statement (one round trip on PostgreSQL)
                    # rather than BEGIN, a savepoint, the statement and COMMIT. Its durability,
                    # its errors and the outcome they carry are the sync call's. With a crash
                    # point armed the round stays a batch, so that its points are passed.
                    self._run_alone(batch[0])
                    if batch[0].error is None:
                        self.commits += 1
                else:
                    self._run_batch(batch)
                self._wake(batch)
        finally:
            try:
                self.journal.close()
            except BaseException as exc:
                error = exc
            self._fail_queued()  # only if the loop above died: fail them rather than drop them
            self._finish(error)

    def _finish(self, error: BaseException | None) -> None:
        """The thread ends: settle ``close()``'s wait, now or (``stop`` after it) at once."""
        with self._cond:
            self._finished = True
            stopped = self._stopped
        if stopped is not None:
            _call_soon(stopped[0], _settle_future, stopped[1], None, error)

    def _fail_queued(self) -> None:
        """Refuse new writes, and fail every queued one with ``JournalClosed`` (none of them ran)."""
        with self._cond:
            self._closing = True
            left = list(self._queue)
            self._queue.clear()
            for item in left:
                item.taken = True  # its fate is decided here: a cancelled task waits for it
        for item in left:
            item.error = JournalClosed()
        self._wake(left)

    def _take(self) -> list[_Item]:
        """The next round: a call that runs alone, or every queued write up to ``MAX_BATCH``;
        empty once closing with nothing left."""
        with self._cond:
            while not self._queue and not self._closing:
                self._cond.wait()
            if not self._queue:
                return []
            first = self._queue.popleft()
            first.taken = True
            batch = [first]
            if not first.alone:
                while self._queue and not self._queue[0].alone and len(batch) < MAX_BATCH:
                    item = self._queue.popleft()
                    item.taken = True
                    batch.append(item)
            return batch

    def _run_alone(self, item: _Item) -> None:
        assert self.journal is not None
        try:
            item.result = item.call(self.journal)
        except BaseException as exc:
            item.error = exc

    def _run_batch(self, batch: list[_Item]) -> None:
        journal = self.journal
        assert journal is not None
        store = journal._store
        ran = 0  # the writes that ran (a broken round stops early: the rest never did)
        committing = False  # past the writes: an error now is the COMMIT's (or the store's)
        try:
            with store.batch(WRITER, synced=any(item.synced for item in batch)) as shared:
                rows = _Rows()
                for item in batch:
                    if item.plain is not None:
                        try:
                            if rows.add(journal, item):
                                ran += 1
                                continue  # inserted with the others of its run
                        except BaseException as exc:  # refused before anything was written
                            ran += 1
                            item.result, item.error = None, exc
                            continue
                    if not rows.insert(journal, shared):  # first: this write may read them
                        break
                    ran += 1
                    try:
                        item.result = item.call(journal)
                    except BaseException as exc:
                        item.result, item.error = None, exc
                    if shared.broken:
                        break  # SQLite rolled everything back: the batch fails as a whole
                else:
                    rows.insert(journal, shared)
                committing = True
            self.commits += 1
        except BaseException as exc:
            kept = [item for item in batch[:ran] if item.error is None]
            outcome = _round_outcome(journal, exc, kept) if committing else WriteOutcome.ABSENT
            for item in batch:
                if item.error is None:
                    gone = outcome if item in kept else WriteOutcome.ABSENT
                    item.result, item.error = None, _member_error(exc, item.operation, gone)

    def _wake(self, items: list[_Item]) -> None:
        """Hand each write's fate to its loop: one wake-up per loop, not one per write."""
        by_loop: dict[asyncio.AbstractEventLoop, list[_Item]] = {}
        for item in items:
            by_loop.setdefault(item.loop, []).append(item)
        for loop, mine in by_loop.items():
            _call_soon(loop, self._settle, mine)

    def _settle(self, items: list[_Item]) -> None:
        for item in items:
            _settle_future(item.future, item.result, item.error)
            _settle_future(item.finished, None, None)
        if self._on_commit is not None:
            self._on_commit()


class _Rows:
    """A run of plain appends of one round, inserted in one statement (``insert_events``: one
    round trip on PostgreSQL for the run, where each append alone is one; the schema's triggers
    check and derive each row as for any insert), each write's event made as ``append`` makes
    it (``Log.round_row``). A refused insert (a stale guess of a session's next seq) was undone
    alone: each of its appends then runs itself, in its place, and finds out why."""

    def __init__(self) -> None:
        self.items: list[_Item] = []
        self.rows: list[EventRow] = []
        self.next_seqs: dict[str, int] = {}  # the sessions' next seqs after the run's rows

    def add(self, journal: Journal, item: _Item) -> bool:
        """Add the append to the run; False when it must run itself (after the run)."""
        assert item.plain is not None
        made = journal._log.round_row(*item.plain, self.next_seqs)
        if made is None:
            return False
        row, item.result = made
        self.items.append(item)
        self.rows.append(row)
        self.next_seqs[row[0]] = row[1] + 1
        return True

    def insert(self, journal: Journal, shared: Batch) -> bool:
        """Insert the run (then empty); False when the round broke doing so."""
        items, rows = self.items, self.rows
        if not items:
            return True
        self.items, self.rows, next_seqs, self.next_seqs = [], [], self.next_seqs, {}
        store = journal._store
        try:
            with store.write("append") as db:
                db.insert_events(rows)
        except BaseException as exc:
            # Refused and undone: each append runs itself, in its place, and says why.
            error: BaseException = exc
            for n, item in enumerate(items):
                item.result = None
                if shared.broken:  # the round's transaction is gone: the rest never ran
                    for rest in items[n:]:
                        rest.result, rest.error = None, _member_error(error, rest.operation, WriteOutcome.ABSENT)
                    return False
                try:
                    item.result = item.call(journal)
                except BaseException as own:
                    item.result, item.error = None, own
                    error = own
            return not shared.broken
        store.next_seqs.update(next_seqs)
        return True


# A round's transaction that fails with one of these was rolled back whole: nothing of it stays.
_REFUSED = (JournalBusy, JournalClosed, SchemaViolation, InvalidArgument)


def _round_outcome(journal: Journal, exc: BaseException, kept: list[_Item]) -> WriteOutcome:
    """What is known of a round whose COMMIT (or the store around it) raised ``exc``.

    A round is one transaction: all its writes are in the file or none is. An error that says
    nothing was written (a broken round, a busy COMMIT) is taken at its word. Otherwise (DESIGN
    §4: the commit may have landed, say before a failing checkpoint) the writes' own events are
    looked for: one found means the round is there (``present``); none found says nothing, since
    a commit whose fsync failed can reappear after a crash (``unknown``)."""
    if isinstance(exc, _REFUSED):
        return WriteOutcome.ABSENT  # the round was refused and rolled back: nothing was written
    if isinstance(exc, JournalIOError) and exc.outcome != WriteOutcome.UNKNOWN:
        return WriteOutcome(exc.outcome)
    try:
        for item in kept:
            for event in _witnesses(item.result):
                found = journal.events(event.session_id, since=event.seq, limit=1)
                if found and found[0] == event:
                    return WriteOutcome.PRESENT
    except Exception:
        return WriteOutcome.UNKNOWN
    return WriteOutcome.UNKNOWN


def _witnesses(result: Any) -> list[Event]:
    """The events a write's result says it wrote in its round (not those it found stored)."""
    if isinstance(result, Event):
        return [] if result.existing else [result]
    if isinstance(result, list):
        return [e for e in result if isinstance(e, Event) and not e.existing]
    if isinstance(result, PutResult):
        return [result.event] if result.won else [] if result.late is None else [result.late]
    if isinstance(result, Dispatch):
        return [result.event]
    return []


def _member_error(exc: BaseException, operation: str, outcome: WriteOutcome) -> BaseException:
    """The error one write of a failed round raises in its own task: its own copy (each task
    raises and chains it separately), saying what is known of it. An error that is not the
    library's becomes a ``JournalIOError`` with the outcome: never an untyped error for a write
    that may be in the file."""
    if isinstance(exc, JournalIOError):
        own: BaseException = type(exc)(operation, outcome, exc.detail)
    elif isinstance(exc, JournalError) and outcome is WriteOutcome.ABSENT:
        own = copy.copy(exc)
    else:
        own = JournalIOError(operation, outcome, f"{type(exc).__name__}: {exc}")
    own.__cause__ = exc
    return own


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        pass  # the loop is closed: nobody is waiting any more


def _settle_future(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the task was cancelled while its write ran
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class _Readers:
    """Reader connections, one per thread of a small pool, opened when first needed."""

    def __init__(self, opener: Callable[[], Journal], size: int) -> None:
        self._opener = opener
        self._local = threading.local()
        self._opened: list[Journal] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="journal-reader")

    def journal(self) -> Journal:
        j = getattr(self._local, "journal", None)
        if j is None:
            j = self._local.journal = self._opener()
            with self._lock:
                self._opened.append(j)
        return j

    async def run(self, call: Callable[[Journal], Any]) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: call(self.journal()))

    def close(self) -> None:
        """Wait for the reads in flight, then close every reader connection (off the loop)."""
        self._pool.shutdown(wait=True)
        with self._lock:
            opened, self._opened = self._opened, []
        for j in opened:
            j.close()
