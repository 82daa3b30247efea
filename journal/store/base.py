"""What the parts need from a store: the interface a second backend (DESIGN §16) implements.

A part never sees a driver: it runs SQL through a ``Database`` handle inside a transaction the
``Store`` opens, and gets the library's own errors (a key conflict is ``UniqueViolation``).

Both stores' transactions are one skeleton, ``Transactions`` (DESIGN §12: begin, a savepoint
per write of a batch, the crash points, COMMIT and its outcome, the re-read after a failed
COMMIT), above a few primitives each backend implements: the seam between the logic and the
driver.
"""

from __future__ import annotations

import abc
import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from journal import crash
from journal.codec import lone_surrogate as _lone_surrogate
from journal.derived_batch import DerivedPlan
from journal.errors import InvalidArgument, JournalError, JournalIOError, SchemaViolation
from journal.model import Durability, WriteOutcome
from journal.store.statements import Statements

# An event row as the log stores it: (session, seq, type, data text, time_ms).
EventRow = tuple[str, int, str, str, int]
# What recovery's repairs make of the derived state: a call resolved by the result at seq
# (session, call, name, seq); a turn closed by its turn_end (session, turn start, seq, reason).
ResultRow = tuple[str, str, str, int]
EndRow = tuple[str, int, int, str]
# The one insert of an event row whose text both backends share (the parts' single appends).
INSERT_EVENT = "INSERT INTO events (session_id, seq, type, data, time_ms) VALUES (?, ?, ?, ?, ?)"


class UniqueViolation(SchemaViolation):
    """A statement hit a unique or primary key: the first write won (callers re-read it)."""


def lone_surrogate(exc: UnicodeEncodeError) -> InvalidArgument:
    """A string the driver cannot encode (a lone surrogate), refused as the caller's bad
    argument: nothing of the statement was sent. The parts check each key and id first
    (``journal.codec.check_text``, the same refusal naming the argument); this is the net
    under them, for both stores and every path (a transaction, a lone statement, a batch)."""
    return _lone_surrogate("argument", exc.object if isinstance(exc.object, str) else "")


class Database(Protocol):
    """The handle a transaction's body gets. A statement whose text is the same in both dialects
    is run as the part wrote it (placeholders ``?``, ``?N``); one whose text differs is the
    backend's own, in ``sql`` (DESIGN §12: parts never ask which backend they are on)."""

    next_seqs: dict[str, int]  # the seq each session appended to gets next, once committed
    sql: Statements  # this backend's text of the statements that differ
    # From this many events the trigger derives state from, a batch's derived state costs less
    # planned once (``insert_events(rows, derived)``) than kept by the row trigger.
    plan_derived_from: int

    def execute(self, sql: str, bindings: Any = None) -> Iterable[tuple[Any, ...]]: ...
    def executemany(self, sql: str, rows: Any) -> Any: ...
    def insert_events(self, rows: Sequence[EventRow], derived: DerivedPlan | None = None) -> None:
        """Append these events, in order: each row ``(session, seq, type, data text, time_ms)``.
        In one statement where that is the backend's fastest way (PostgreSQL: one ``INSERT``
        of arrays, one execution for the batch); SQLite runs its one prepared ``INSERT`` per
        row, which is as fast there. The schema's triggers see each row as for any insert;
        ``derived``, the rows' derived state planned for the batch (one session's events, all
        of them), is what the backend writes in its trigger's stead."""
        ...

    def insert_repairs(self, rows: Sequence[EventRow], results: Sequence[ResultRow], ends: Sequence[EndRow]) -> None:
        """Append recovery's repairs (``rows``: synthetic ``tool_result``s and ``turn_end``s, and
        nothing else), whose derived state is exactly ``results`` and ``ends``: the calls they
        resolve and the turns they close. Both backends write it for the whole batch, a
        statement each, with their trigger's derived part off."""
        ...

    def one(self, sql: str, bindings: Any = None) -> tuple[Any, ...] | None: ...
    def value(self, sql: str, bindings: Any = None) -> Any: ...
    def changes(self) -> int: ...
    def lock_session(self, session_id: str) -> None:
        """Inside a write scoped to sessions (``Store.write(sessions=...)``): take one more
        session, found by the write itself (a claim's). SQLite's writes are whole-file: no-op."""

    @property
    def in_transaction(self) -> bool: ...


class Batch(Protocol):
    """One transaction that many writes share (``Store.batch``): the async face's writer."""

    @property
    def broken(self) -> bool: ...


class Store(Protocol):
    """One connection to one journal: transactions, and the file's upkeep."""

    path: str
    dialect: str  # "sqlite" or "postgresql": the store's own business (parts read ``sql``)
    sql: Statements
    durability: Durability
    readonly: bool
    next_seqs: dict[str, int]

    # ``sessions``: the write changes the rows of these sessions only (``()``: of the sessions it
    # takes with ``Database.lock_session``). A backend whose writers run at once (PostgreSQL)
    # then serialises it only with the writes of the same sessions; ``None`` (the default) is a
    # write of the whole journal, serialised with every other, as every write is on SQLite.
    def write(
        self,
        operation: str,
        *,
        present: Callable[[Database], bool] | None = None,
        synced: bool = False,
        commit: bool = True,
        sessions: Sequence[str] | None = None,
    ) -> AbstractContextManager[Database]: ...
    def write_one(
        self,
        operation: str,
        sql: str,
        bindings: Any,
        *,
        present: Callable[[Database], bool] | None = None,
        sessions: Sequence[str] | None = None,
    ) -> int | None: ...
    def batch(self, operation: str, *, synced: bool = False) -> AbstractContextManager[Batch]: ...
    def read(self) -> AbstractContextManager[Database]: ...
    def integrity_check(self) -> list[str]: ...
    def size_bytes(self) -> int: ...
    def checkpoint(self) -> None: ...
    def close(self) -> None: ...

    @property
    def closed(self) -> bool: ...


# -- the transaction skeleton ------------------------------------------------------------------

_NESTED = "journal: nested write transaction (use a *_txn helper)"


class _Handle(Protocol):
    next_seqs: dict[str, int]


C = TypeVar("C")  # a backend's connection
D = TypeVar("D", bound=_Handle)  # the handle a transaction's body gets (``Database``)


class Transactions(abc.ABC, Generic[C, D]):
    """``write``, ``write_one`` and ``batch``, written once above the few primitives each
    backend implements (DESIGN §12: the abstract methods below, and three class attributes).

    What the skeleton keeps, whatever the backend: one transaction per public write, a batch
    one transaction whose writes are savepoints (G1, G2); the crash points
    ``<operation>.before_commit`` and ``<operation>.after_commit`` around each COMMIT
    (docs/crash-points.md); the outcome of a failed COMMIT re-read through ``present``
    (DESIGN §4); ``next_seqs`` kept only from a commit. A store sets ``durability``,
    ``next_seqs``, ``_lock`` (threads share a store: it serialises transactions on the
    connection), ``_in_txn`` and ``_batch`` in its ``__init__``.
    """

    durability: Durability
    next_seqs: dict[str, int]
    _lock: threading.RLock
    _in_txn: bool
    _batch: SavepointBatch[C, D] | None
    _driver_errors: ClassVar[tuple[type[Exception], ...]]  # what the driver raises
    _batch_lost: ClassVar[str]  # why a batch whose transaction the backend gave up wrote nothing
    # Whether a driver error inside a batch (past a statement's own refusal) gives the batch up:
    # the backend may have lost the transaction without saying so.
    _errors_break_batch: ClassVar[bool]

    # -- the primitives ------------------------------------------------------------------------

    @abc.abstractmethod
    def _checked(self, operation: str) -> C:
        """The connection, or ``JournalClosed``."""

    @abc.abstractmethod
    def _begin(self, conn: C, operation: str, *, synced: bool, sessions: Sequence[str] | None) -> None:
        """Begin a write transaction holding the write's locks (``Store.write``'s ``sessions``);
        ``synced``: its COMMIT survives power loss. A failure is raised translated, with nothing
        left open."""

    def _end(self) -> None:
        """After each transaction ``_begin`` began, however it ended."""

    @abc.abstractmethod
    def _database(self, conn: C, sessions: Sequence[str] | None) -> D:
        """The handle a write's body gets."""

    @abc.abstractmethod
    def _commit(self, conn: C) -> None:
        """COMMIT; a driver error propagates."""

    @abc.abstractmethod
    def _rollback(self, conn: C) -> None:
        """Roll back an open transaction, if any; never raises (a failing disk, a lost link)."""

    @abc.abstractmethod
    def _autocommit(self, conn: C, operation: str, sql: str, bindings: Any, sessions: Sequence[str] | None) -> int:
        """``write_one``'s statement, committed with it as one transaction: how many rows it
        changed. A refusal of the statement (the schema's, a value, a lock not had in time) is
        raised translated (nothing was written); a driver error propagates, with the outcome of
        a failed COMMIT."""

    @abc.abstractmethod
    def _savepoint(self, conn: C, operation: str, *, synced: bool) -> None:
        """Open the savepoint of one write inside a batch; ``synced``: the write asks more
        durability than the batch's COMMIT gives (raise or give it)."""

    @abc.abstractmethod
    def _release(self, conn: C) -> None:
        """Keep what the write's savepoint did."""

    @abc.abstractmethod
    def _rollback_to(self, conn: C) -> None:
        """Undo what the write's savepoint did, and close it."""

    @abc.abstractmethod
    def _statement(self, conn: C, sql: str, bindings: Any) -> int:
        """One statement inside a batch, refused alone: how many rows it changed."""

    @abc.abstractmethod
    def _in_transaction(self, conn: C) -> bool:
        """Whether the transaction is still open (a backend may give one up on its own)."""

    @abc.abstractmethod
    def _unsendable(self, exc: BaseException) -> InvalidArgument | None:
        """A value the driver refused before sending anything, as the caller's bad argument;
        ``None`` for any other error."""

    @abc.abstractmethod
    def _translate(self, exc: BaseException, operation: str, *, outcome: WriteOutcome) -> JournalError:
        """A driver error as the library's; ``outcome`` is what is known of the write."""

    def _commit_error(self, exc: BaseException, operation: str, outcome: WriteOutcome) -> JournalError:
        """A failed COMMIT's error, ``outcome`` re-read."""
        return self._translate(exc, operation, outcome=outcome)

    @abc.abstractmethod
    def read(self) -> AbstractContextManager[D]:
        """One read snapshot, or the caller's open write transaction."""

    # -- the skeleton --------------------------------------------------------------------------

    @contextlib.contextmanager
    def write(
        self,
        operation: str,
        *,
        present: Callable[[D], bool] | None = None,
        synced: bool = False,
        commit: bool = True,
        sessions: Sequence[str] | None = None,
    ) -> Iterator[D]:
        """One write transaction, committed when the body returns (rolled back instead with
        ``commit=False``: a dry run sees its own writes, and nothing stays); inside a ``batch``
        (on its thread), a savepoint of it.

        If the body raises, the transaction is rolled back and the error propagates (a driver
        error translated, with outcome ``absent``). If COMMIT itself fails, the outcome is
        unknown (DESIGN §4); ``present`` may re-read to say the write is there after all.
        ``synced`` makes this commit survive power loss even under ``durability="normal"`` (the
        dispatch barrier needs it: a tool must never run on a record a power cut can take).
        ``sessions``: the write changes only these sessions' rows (``Store.write``).
        """
        with self._lock:
            if self._batch is not None:
                with self._batch.savepoint(operation, synced=synced, commit=commit) as db:
                    yield db
                return
            conn = self._checked(operation)
            self._start(conn, operation, synced=synced, sessions=sessions)
            try:
                db = self._database(conn, sessions)
                try:
                    yield db
                    # Inside: an observer that raises here is rolled back as the body would be,
                    # never leaving the transaction open on the connection.
                    if commit and crash.armed():
                        crash.reached(f"{operation}.before_commit")
                except BaseException as exc:
                    self._rollback(conn)
                    error = self._body_error(exc, operation)
                    if error is exc:
                        raise
                    raise error from exc
                if not commit:
                    self._rollback(conn)
                    return
                self._commit_or_raise(conn, operation, present)
                self.next_seqs.update(db.next_seqs)
                if crash.armed():
                    crash.reached(f"{operation}.after_commit")
            finally:
                self._in_txn = False
                self._end()

    def write_one(
        self,
        operation: str,
        sql: str,
        bindings: Any,
        *,
        present: Callable[[D], bool] | None = None,
        sessions: Sequence[str] | None = None,
    ) -> int | None:
        """Run one statement as a transaction of its own and return how many rows it changed;
        ``None`` if it did not run because another thread holds the connection or a crash point
        is armed (then use ``write``). Inside a ``batch`` (on its thread), a statement of it.

        The backend sends the statement with its commit (``_autocommit``: saving round trips or
        statements), so an error cannot be placed before or after the commit: one that is not
        the statement's refusal has the outcome of a failed COMMIT, unknown unless ``present``
        finds the write. ``write`` has the commit boundary that crash points name.
        """
        if not self._lock.acquire(False):
            return None
        try:
            batch = self._batch
            if batch is not None:
                return batch.statement(operation, sql, bindings)
            if crash.armed():
                return None
            if self._in_txn:
                raise RuntimeError(_NESTED)
            conn = self._checked(operation)
            try:
                return self._autocommit(conn, operation, sql, bindings, sessions)
            except BaseException as exc:
                self._rollback(conn)
                if not isinstance(exc, self._driver_errors):
                    raise
                self.next_seqs.clear()
                raise self._commit_failed(exc, operation, present) from exc
        finally:
            self._lock.release()

    @contextlib.contextmanager
    def batch(self, operation: str, *, synced: bool = False) -> Iterator[SavepointBatch[C, D]]:
        """One transaction that many writes share: the async face's writer.

        Until the body returns, each ``write`` (on this thread) is a savepoint inside it, and a
        ``write_one`` a statement inside it: a write that fails is undone alone and the others
        stay (G2). The one COMMIT at the end makes them all durable at once; its crash points
        are ``<operation>.before_commit`` and ``<operation>.after_commit`` (the writes inside
        name none). If the body raises, or the backend gave the transaction up
        (``SavepointBatch.broken``), every write in it is gone. ``synced`` as for ``write``.
        """
        with self._lock:
            conn = self._checked(operation)
            self._start(conn, operation, synced=synced, sessions=None)
            batch = self._batch = SavepointBatch(self, conn, synced=synced or self.durability is Durability.FULL)
            try:
                try:
                    yield batch
                    if batch.broken:
                        raise JournalIOError(operation, WriteOutcome.ABSENT, self._batch_lost)
                    if crash.armed():
                        crash.reached(f"{operation}.before_commit")
                except BaseException:
                    self._rollback(conn)
                    self.next_seqs.clear()
                    raise
                self._commit_or_raise(conn, operation, None)
                if crash.armed():
                    crash.reached(f"{operation}.after_commit")
            finally:
                self._batch = None
                self._in_txn = False
                self._end()

    def _start(self, conn: C, operation: str, *, synced: bool, sessions: Sequence[str] | None) -> None:
        if self._in_txn:
            raise RuntimeError(_NESTED)
        self._begin(conn, operation, synced=synced, sessions=sessions)
        self._in_txn = True

    def _commit_or_raise(self, conn: C, operation: str, present: Callable[[D], bool] | None) -> None:
        """COMMIT; if it fails, the transaction is rolled back and the error says what a re-read
        found of the write."""
        try:
            self._commit(conn)
        except self._driver_errors as exc:
            self._rollback(conn)
            self.next_seqs.clear()  # the outcome is not known: guess again
            raise self._commit_failed(exc, operation, present) from exc

    def _commit_failed(self, exc: BaseException, operation: str, present: Callable[[D], bool] | None) -> JournalError:
        return self._commit_error(exc, operation, self._reread(present))

    def _reread(self, present: Callable[[D], bool] | None) -> WriteOutcome:
        """What is known of a write whose COMMIT failed: ``present`` if re-reading finds it, else
        ``unknown`` (a re-read that fails too tells nothing either)."""
        if present is not None:
            try:
                with self.read() as db:
                    if present(db):
                        return WriteOutcome.PRESENT
            except Exception:
                pass
        return WriteOutcome.UNKNOWN

    def _body_error(self, exc: BaseException, operation: str) -> BaseException:
        """What an error raised inside a transaction becomes, the write undone: a value the
        driver could not send is the caller's bad argument, a driver error the library's (with
        outcome ``absent``); any other error propagates as it is."""
        refused = self._unsendable(exc)
        if refused is not None:
            return refused
        if isinstance(exc, self._driver_errors):
            return self._translate(exc, operation, outcome=WriteOutcome.ABSENT)
        return exc


class SavepointBatch(Generic[C, D]):
    """The writes inside one ``Transactions.batch`` transaction (``Batch``): each ``write`` a
    savepoint, kept if its body returns and undone alone if it raises; each ``write_one`` one
    statement, refused alone."""

    def __init__(self, store: Transactions[C, D], conn: C, *, synced: bool) -> None:
        self._store = store
        self._conn = conn
        self._synced = synced  # the COMMIT will survive power loss
        self._open = False  # a savepoint is open
        self._broken = False  # the batch gave its transaction up (``_errors_break_batch``)

    @property
    def broken(self) -> bool:
        """Whether the transaction is gone (SQLite rolls a whole one back on its own after a
        full disk or an I/O error; a connection may be lost): nothing written in it stays, and
        nothing more can be."""
        return self._broken or not self._store._in_transaction(self._conn)

    @contextlib.contextmanager
    def savepoint(self, operation: str, *, synced: bool, commit: bool) -> Iterator[D]:
        """One write inside the batch: kept if its body returns, undone alone if it raises."""
        if self._open:
            raise RuntimeError(_NESTED)
        store, conn = self._store, self._conn
        try:
            store._savepoint(conn, operation, synced=synced and not self._synced)
        except store._driver_errors as exc:
            raise self._failed(exc, operation) from exc
        self._open = True
        try:
            db = store._database(conn, None)
            try:
                yield db
            except BaseException as exc:
                self._undo()
                error = self._failed(exc, operation)
                if error is exc:
                    raise
                raise error from exc
            if not commit:
                self._undo()
                return
            try:
                store._release(conn)
            except store._driver_errors as exc:
                raise self._failed(exc, operation) from exc
            # A guess until the batch commits; a failed batch clears every guess.
            store.next_seqs.update(db.next_seqs)
        finally:
            self._open = False

    def statement(self, operation: str, sql: str, bindings: Any) -> int:
        """One statement inside the batch, refused alone."""
        try:
            return self._store._statement(self._conn, sql, bindings)
        except BaseException as exc:
            error = self._failed(exc, operation)
            if error is exc:
                raise
            raise error from exc

    def _failed(self, exc: BaseException, operation: str) -> BaseException:
        store = self._store
        if store._errors_break_batch and isinstance(exc, store._driver_errors):
            self._broken = True
        return store._body_error(exc, operation)

    def _undo(self) -> None:
        store = self._store
        if not store._in_transaction(self._conn):
            return  # the backend rolled everything back on its own: ``broken`` says so
        try:
            store._rollback_to(self._conn)
        except store._driver_errors:
            # The batch cannot tell what stays: given up where the backend may have lost it,
            # else its COMMIT will tell.
            self._broken = self._broken or store._errors_break_batch
