"""Group commit for ``append`` from many threads of one process.

A durable commit costs an fsync; threads appending at once would each pay one, one after the
other (they share one connection). Instead they take turns leading: a thread that finds no
leader becomes one and commits its own append together with everything queued by then, in ONE
transaction (a refused append is one statement that SQLite undoes on its own, so it fails alone,
in its own thread). Then it wakes the appends it committed, hands the lead to the first thread
queued meanwhile, and returns. While a leader waits on its fsync (which releases the GIL), the
threads of the previous batch run on and queue their next appends: each commit carries what
arrived during the last one, and no thread waits for others to arrive.

Every append still returns only after the commit that holds it has returned (G1), and each is
atomic (G2). A thread appending alone never comes here (``run_one`` commits its INSERT directly).

An error never stands for a committed append: a batch is one transaction, so when its COMMIT
fails every append in it raises a ``JournalIOError`` of its own whose outcome is re-read from
all their ``present`` checks (any one found: the batch is there, ``present``; else
``unknown``, DESIGN §4), and an error that is not the library's is given as one with that
outcome, not raw.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

from journal.errors import JournalError, JournalIOError
from journal.model import WriteOutcome
from journal.store.base import Database, EventRow, Store


class Pending:
    """One queued append: its work, then its result or its error.

    ``wake`` is held from the start; the leader that finishes the append, or hands it the lead,
    releases it: the cheapest way to wake exactly one thread."""

    __slots__ = ("done", "error", "lead", "present", "result", "row", "session", "wake", "work", "written")

    def __init__(
        self,
        work: Callable[[Database], Any],
        session: str | None = None,
        present: Callable[[Database], bool] | None = None,
        row: EventRow | None = None,
        written: list[int] | None = None,
    ) -> None:
        self.work = work
        self.session = session  # the one session it writes, if the caller said
        self.present = present  # re-reads whether its append is in the file (after a failed COMMIT)
        self.row = row  # the one event row ``work`` would insert, when the caller knows it
        self.written = written  # where the seq goes once the row is inserted for it
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False  # committed (or failed) by a leader
        self.lead = False  # handed the lead by the last leader: its thread commits next
        self.wake = threading.Lock()
        self.wake.acquire()


class GroupCommit:
    """Batches concurrent writes of one ``Store`` into shared transactions.

    Each ``work`` given to ``run`` must change the database with at most one statement (an
    INSERT, with its triggers): a statement the schema refuses is undone by SQLite on its own,
    so appends sharing a transaction need no savepoint each.
    """

    def __init__(self, store: Store, operation: str) -> None:
        self._store = store
        self._operation = operation
        self._mutex = threading.Lock()  # guards _queue, _leading and the items' flags
        self._queue: list[Pending] = []
        self._leading = False

    def run(
        self,
        work: Callable[[Database], Any],
        *,
        present: Callable[[Database], bool] | None = None,
        session: str | None = None,
        row: EventRow | None = None,
        written: list[int] | None = None,
    ) -> Any:
        """Run ``work(db)`` inside a committed transaction and return what it returned.
        ``session``: the one session ``work`` writes (see ``_commit``). ``row``: the event row
        ``work`` would insert (and then return its seq); where the store gains by it
        (PostgreSQL: one round trip for all), the rows of a batch are inserted in one statement
        instead, the seq returned and appended to ``written``; refused, each ``work`` runs."""
        item = Pending(work, session, present, row, written)
        with self._mutex:
            follow = self._leading
            if follow:
                self._queue.append(item)
            else:
                self._leading = True
        if follow:
            try:
                item.wake.acquire()  # until a leader committed this append, or handed us the lead
            except BaseException:  # interrupted (KeyboardInterrupt) while waiting
                self._abandon(item)
                raise
        if not item.done:
            self._lead(item)
        if item.error is not None:
            raise item.error
        return item.result

    def run_one(
        self,
        sql: str,
        bindings: Any,
        *,
        present: Callable[[Database], bool] | None = None,
        session: str | None = None,
    ) -> int | None:
        """Commit one statement on its own (``Store.write_one``) unless other threads are writing
        through this group: how many rows it changed, or ``None`` if it was not run (the caller
        then uses ``run``).

        The check reads the group's state without its lock: a stale answer only decides whether
        this append shares a commit, never whether it is committed (the store's lock does that).
        """
        if self._leading or self._queue:
            return None
        scope = None if session is None else (session,)
        return self._store.write_one(self._operation, sql, bindings, present=present, sessions=scope)

    def _lead(self, own: Pending) -> None:
        """Commit ``own`` with everything queued, then hand the lead on (``_leading`` is ours)."""
        batch = [own]
        try:
            self._commit(batch)
        finally:
            with self._mutex:
                for item in batch:
                    item.done = True
                successor = self._pass_lead()
            for item in batch:
                if item is not own:
                    item.wake.release()
            if successor is not None:
                successor.wake.release()

    def _pass_lead(self) -> Pending | None:
        """The first queued append leads next (``_leading`` stays set), or no one does. Under
        ``_mutex``; the caller wakes the successor."""
        if not self._queue:
            self._leading = False
            return None
        successor = self._queue.pop(0)
        successor.lead = True
        return successor

    def _abandon(self, item: Pending) -> None:
        """A waiting caller gave up: withdraw its append if no leader took it, and pass on a
        lead it was handed; an append already in a batch is committed all the same."""
        with self._mutex:
            if item in self._queue:
                self._queue.remove(item)
                return
            successor = self._pass_lead() if item.lead and not item.done else None
        if successor is not None:
            successor.wake.release()

    def _commit(self, batch: list[Pending]) -> None:
        """Commit ``batch`` (the leader's own append) with everything queued by the time the
        write transaction has begun: what arrived while it waited for the connection rides too."""

        def present_any(db: Database) -> bool:
            # One transaction: any of its appends found in the file means all of them are.
            return any(item.present(db) for item in batch if item.error is None and item.present is not None)

        # Where writers of different sessions run at once (PostgreSQL), a transaction holds
        # the locks of the sessions it writes, taken together when it begins (in the keys'
        # order: two writers never wait on each other in a cycle): the appends queued by then
        # ride along, whatever their sessions, and those that arrive later wait for the next
        # leader. On SQLite every transaction holds the file: what arrived while it waited for
        # the lock rides too.
        scoped = self._store.dialect != "sqlite"
        sessions: list[str] | None = None
        if scoped:
            with self._mutex:
                batch += self._queue
                self._queue = []
            named = [item.session for item in batch]
            sessions = None if None in named else sorted(set(filter(None, named)))
        committing = False  # past the appends: an error now is the COMMIT's
        try:
            with self._store.write(self._operation, present=present_any, sessions=sessions) as db:
                if not scoped:
                    with self._mutex:
                        batch += self._queue
                        self._queue = []
                if len(batch) == 1:
                    batch[0].result = batch[0].work(db)
                    committing = True
                    return
                inserted = _insert_rows(db, batch) if scoped else set()
                for item in batch:
                    if id(item) in inserted:
                        continue
                    try:
                        item.result = item.work(db)
                    except Exception as exc:
                        if not db.in_transaction:
                            raise  # SQLite rolled the whole transaction back: every append in it failed
                        # Its one statement was undone by SQLite already, or never ran (a value
                        # refused when bound): the others commit without it.
                        item.error = exc
                committing = True
        except BaseException as exc:
            failed = [item for item in batch if item.error is None]
            for item in failed:
                error = _own_error(exc, self._operation, committing=committing, alone=len(failed) == 1)
                item.result, item.error = None, error


def _insert_rows(db: Database, batch: list[Pending]) -> set[int]:
    """Insert the rows of the batch's plain appends in one statement; the ``id``s of the items
    it wrote (none when it was refused and undone: a stale guess of a session's next seq)."""
    rows = [(item, item.row) for item in batch if item.row is not None]
    if len(rows) < 2:
        return set()
    try:
        db.insert_events([row for _, row in rows])
    except JournalError:
        if not db.in_transaction:
            raise  # the transaction is gone: every append in it failed
        return set()
    for item, (session_id, seq, *_) in rows:
        item.result = seq
        db.next_seqs[session_id] = max(db.next_seqs.get(session_id, 0), seq + 1)
        if item.written is not None:
            item.written.append(seq)
    return {id(item) for item, _ in rows}


def _own_error(exc: BaseException, operation: str, *, committing: bool, alone: bool) -> BaseException:
    """The error one append of a failed batch raises in its own thread.

    The store's error already says what the re-read found (``present_any``); each append of a
    batch gets its own copy, since every thread raises (and chains) it separately. An error that
    is not the library's, from the COMMIT, cannot say whether the batch is in the file: it
    becomes a ``JournalIOError`` with outcome ``unknown``. One raised by an append's own work
    rolled the batch back (the store undoes a body that raises): nothing of it was written."""
    if committing and not isinstance(exc, JournalError):
        own: BaseException = JournalIOError(operation, WriteOutcome.UNKNOWN, f"{type(exc).__name__}: {exc}")
    elif alone or not isinstance(exc, JournalError):
        return exc
    else:
        own = copy.copy(exc)
    own.__cause__ = exc
    return own
