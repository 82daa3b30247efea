"""Group commit for ``append`` from many threads of one process.

A durable commit costs an fsync; threads appending at once would each pay one, one after the
other (they share one connection). Instead, the first thread to arrive becomes the leader: it
commits everything queued so far in ONE transaction, each append inside its own savepoint (so a
refused append undoes only itself and raises only in its own thread), then wakes the waiters
and goes on while more is queued. Every append still returns only after the commit that holds it
has returned (G1), and each is atomic (G2); a single thread pays nothing but an uncontended lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from journal.errors import JournalError
from journal.store import Database, Store


@attrs.define(eq=False)
class Pending:
    """One queued append: its work, then its result or its error."""

    work: Callable[[Database], Any]
    result: Any = None
    error: BaseException | None = None
    done: bool = False


class GroupCommit:
    """Batches concurrent writes of one ``Store`` into shared transactions."""

    def __init__(self, store: Store, operation: str) -> None:
        self._store = store
        self._operation = operation
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # followers wait here for their commit
        self._arrived = threading.Condition(lock)  # the leader waits here for arrivals
        self._queue: list[Pending] = []
        self._leading = False
        self._callers = 0  # threads queued in run(), waiting or leading

    def run(self, work: Callable[[Database], Any], *, present: Callable[[Database], bool] | None = None) -> Any:
        """Run ``work(db)`` inside a committed transaction and return what it returned."""
        with self._cond:
            alone = not self._leading and not self._queue
            if alone:
                self._leading = True
        if alone:
            return self._run_alone(work, present)
        item = Pending(work)
        with self._cond:
            self._callers += 1
            self._queue.append(item)
            self._arrived.notify()
            while self._leading and not item.done:
                self._cond.wait()
            if not item.done:
                self._leading = True
        try:
            if not item.done:
                self._lead(present)
        finally:
            with self._cond:
                self._callers -= 1
        if item.error is not None:
            raise item.error
        return item.result

    def run_one(self, sql: str, bindings: Any, *, present: Callable[[Database], bool] | None = None) -> bool:
        """Commit one statement on its own (``Store.write_one``) unless other threads are writing
        through this group; ``False`` if it was not run (the caller then uses ``run``).

        The check reads the group's state without its lock: a stale answer only decides whether
        this append shares a commit, never whether it is committed (the store's lock does that).
        """
        if self._leading or self._queue:
            return False
        return self._store.write_one(self._operation, sql, bindings, present=present)

    def _run_alone(self, work: Callable[[Database], Any], present: Callable[[Database], bool] | None) -> Any:
        """The common case, one thread appending: its own transaction, nothing to share."""
        try:
            with self._store.write(self._operation, present=present) as db:
                return work(db)
        finally:
            with self._cond:
                self._leading = False
                if self._queue:
                    self._cond.notify_all()  # arrivals meanwhile: one of them leads now

    def _lead(self, present: Callable[[Database], bool] | None) -> None:
        try:
            while True:
                with self._cond:
                    deadline = time.monotonic() + 0.0002
                    while self._callers > len(self._queue) + 1 and time.monotonic() < deadline:
                        # Threads just woken by the last commit are about to queue their next
                        # append: let them (waiting releases the GIL) so they share this commit.
                        self._arrived.wait(0.00005)
                    batch, self._queue = self._queue, []
                    if not batch:
                        return
                self._commit(batch, present if len(batch) == 1 else None)
                with self._cond:
                    for item in batch:
                        item.done = True
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._leading = False
                self._cond.notify_all()

    def _commit(self, batch: list[Pending], present: Callable[[Database], bool] | None) -> None:
        try:
            with self._store.write(self._operation, present=present) as db:
                if len(batch) == 1:
                    batch[0].result = batch[0].work(db)
                    return
                for item in batch:
                    db.execute("SAVEPOINT one_append")
                    seqs = dict(db.next_seqs)
                    try:
                        item.result = item.work(db)
                    except JournalError as exc:
                        db.execute("ROLLBACK TO one_append")
                        db.next_seqs = seqs
                        item.error = exc
                    finally:
                        db.execute("RELEASE one_append")
        except BaseException as exc:  # the whole transaction failed: every append in it did
            for item in batch:
                if item.error is None:
                    item.result, item.error = None, exc
