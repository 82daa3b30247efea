"""The SQLite store: the only module that talks to apsw (opening, pragmas, the schema,
transactions, errors).

Everything above this module speaks the library's own types. A write is ``with store.write(op)
as db:``: one ``BEGIN IMMEDIATE`` transaction, committed on exit. A read is ``with store.read()
as db:``: one snapshot. Driver errors are translated here, by result code, into
``journal.errors``. Whether a file is a journal is decided from its bytes (``journal.store.header``)
before SQLite may touch it (G13).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from typing import Any

import apsw

from journal.derived_batch import DerivedPlan
from journal.errors import (
    CorruptJournal,
    DiskFull,
    InvalidArgument,
    JournalBusy,
    JournalClosed,
    JournalError,
    JournalIOError,
    NotAJournal,
    SchemaTooNew,
    SchemaViolation,
)
from journal.model import Durability, WriteOutcome
from journal.store import header as _header
from journal.store.base import (
    INSERT_EVENT,
    EndRow,
    EventRow,
    ResultRow,
    SavepointBatch,
    Transactions,
    UniqueViolation,
    lone_surrogate,
)
from journal.store.sqlite_sql import (
    CHANGE_TURN_SQL,
    CLOSE_TURNS_SQL,
    DISPATCH_CALLS_SQL,
    OPEN_TURN_SQL,
    REQUEST_CALLS_SQL,
    RESOLVE_CALLS_SQL,
    RESULT_CALLS_SQL,
    STATEMENTS,
)
from journal.store.sqlite_sql import OPEN_WORK_SQL as OPEN_WORK_SQL  # (where they were: tests name them here)
from journal.store.sqlite_sql import PREVIEWS_AT_SQL as PREVIEWS_AT_SQL
from journal.store.sqlite_sql import PREVIEWS_SQL as PREVIEWS_SQL

APPLICATION_ID = 0x4A524E4C  # "JRNL"
# 2: the derived-state triggers became one gate trigger and a view; the seq trigger one lookup.
# 3: the turn journal names the process driving each turn (owner).
# 4: an index on sessions (created_ms, id) pages the listing.
# 5: the compactions table (and its triggers) places each compaction in its transcript.
# 6: idempotency keys, the events-by-type index, the retract type, keyed state, session_meta,
#    compactions with retracts.
# 7: submissions are ordered by their own column (ordinal), not by rowid; state values are bytes
#    (a JSON value's UTF-8 text), as on PostgreSQL.
# 8: recovery writes the derived state of a batch of repairs by statement (derived_by_statement).
# 9: no index of the turn boundaries (events_turns): no statement read it, and every turn event
#    paid its entry (~80 bytes a turn on disk).
SCHEMA_VERSION = 9
SQLITE_HEADER = _header.SQLITE_HEADER
DEFAULT_BUSY_TIMEOUT_MS = 10_000

# The extended result codes of a key conflict (never the message text).
_KEY_CONFLICTS = (apsw.SQLITE_CONSTRAINT_UNIQUE, apsw.SQLITE_CONSTRAINT_PRIMARYKEY)


def schema_sql() -> str:
    """The text of ``schema.sql`` as shipped inside the package."""
    return resources.files("journal").joinpath("schema.sql").read_text(encoding="utf-8")


def schema_statements(kinds: tuple[str, ...]) -> list[str]:
    """The statements of ``schema.sql`` that create these kinds of object (``"TRIGGER"``, …)."""
    out, buffer = [], ""
    for line in schema_sql().splitlines(keepends=True):
        if not buffer and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buffer += line
        if apsw.complete(buffer):
            if buffer.split(None, 2)[1].upper() in kinds:
                out.append(buffer.strip())
            buffer = ""
    return out


def _migrate_1(db: SqliteDatabase) -> None:
    """Version 1 to 2: new triggers and view; the column only the old seq trigger read goes."""
    for kind, name in list(db.execute("SELECT type, name FROM sqlite_schema WHERE type IN ('trigger', 'view')")):
        db.execute(f'DROP {kind.upper()} "{name}"')
    db.execute("ALTER TABLE sessions DROP COLUMN copy_until")
    _create_derived_by_statement(db)  # today's gate trigger reads it (ALTER TABLE checks triggers)
    for statement in schema_statements(("VIEW", "TRIGGER")):
        db.execute(statement)


def _migrate_2(db: SqliteDatabase) -> None:
    """Version 2 to 3: the turn journal's owner column (NULL for the turns already there: their
    owner is unknown, and recovery treats them as before)."""
    db.execute("ALTER TABLE turn_journal ADD COLUMN owner TEXT")


def _migrate_3(db: SqliteDatabase) -> None:
    """Version 3 to 4: the index that pages the sessions in listing order (``sessions()``).
    Building it reads every session once; a read-only open of a version-3 file lists the
    sessions without it, sorting them for each page."""
    db.execute("CREATE INDEX sessions_created ON sessions (created_ms, id)")


def _migrate_4(db: SqliteDatabase) -> None:
    """Version 4 to 5: the compactions table (version 6 makes it again, with retracts)."""
    db.execute(
        "CREATE TABLE compactions (session_id TEXT NOT NULL REFERENCES sessions (id), seq INTEGER NOT NULL, "
        "first INTEGER NOT NULL, last INTEGER NOT NULL, before INTEGER NOT NULL, after INTEGER NOT NULL, "
        "PRIMARY KEY (session_id, seq)) STRICT, WITHOUT ROWID"
    )


_RETRACT_CHECK = ("OR type = 'operator_resolution'", "OR type = 'operator_resolution' OR type = 'retract'")


def _migrate_5(db: SqliteDatabase) -> None:
    """Version 5 to 6: what framework adapters need. The events' idempotency ``key`` column (an
    added column: no row is rewritten) and its unique index; the index of events by type; the
    ``retract`` event type; the ``state`` table; the ``session_meta`` table, filled from every
    session's meta; the compactions table again, with retracts (``kind``), refilled through its
    trigger.

    The type CHECK gains a value by editing the table's text in ``sqlite_schema`` (SQLite's
    documented way to loosen a constraint, which rewrites no row: every stored type stays
    allowed). Building the two indexes reads every event once."""
    db.execute("ALTER TABLE events ADD COLUMN key TEXT CHECK (key IS NULL OR length(key) BETWEEN 1 AND 256)")
    old, new = _RETRACT_CHECK
    sql = db.value("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'events'")
    if sql.count(old) != 1:
        raise NotAJournal("?", "the events table's type CHECK is not one this version can extend")
    version = db.value("PRAGMA schema_version")
    db.execute("PRAGMA writable_schema = ON")
    try:
        db.execute(
            "UPDATE sqlite_schema SET sql = ? WHERE type = 'table' AND name = 'events'", (sql.replace(old, new),)
        )
        db.execute(f"PRAGMA schema_version = {version + 1}")
    finally:
        db.execute("PRAGMA writable_schema = OFF")
    # Version 1's migration made every trigger and view of the current schema already.
    for name in ("compaction_events_apply", "events_compaction", "sessions_meta"):
        db.execute(f"DROP TRIGGER IF EXISTS {name}")
    db.execute("DROP VIEW IF EXISTS compaction_events")
    db.execute("DROP TABLE IF EXISTS compactions")
    created = {
        "events_key", "events_app", "state", "state_at", "session_meta", "sessions_meta",
        "compactions", "compaction_events", "events_compaction", "compaction_events_apply",
    }  # fmt: skip
    for statement in schema_statements(("TABLE", "INDEX", "UNIQUE", "VIEW", "TRIGGER")):
        words = statement.split(None, 4)
        name = words[3] if words[1] == "UNIQUE" else words[2]
        if name in created:
            db.execute(statement)
    db.execute(
        "INSERT INTO session_meta (session_id, key, type, value) "
        "SELECT s.id, m.key, m.type, m.value FROM sessions AS s, json_each(s.meta) AS m "
        "WHERE s.meta IS NOT NULL AND m.type NOT IN ('object', 'array', 'null')"
    )
    _place_compactions(db)


def _place_compactions(db: SqliteDatabase) -> None:
    """The compactions table's rows for the events already logged: the events that may be one go
    through the schema's own trigger, parents before their forks and each session in seq order,
    so each is placed from those before it."""
    db.execute(
        "WITH RECURSIVE depth (id, n) AS ("
        " SELECT id, 0 FROM sessions WHERE parent_id IS NULL"
        " UNION ALL SELECT s.id, d.n + 1 FROM depth AS d JOIN sessions AS s ON s.parent_id = d.id) "
        "INSERT INTO compaction_events SELECT e.session_id, e.seq, e.type, e.data"
        " FROM events AS e JOIN depth AS d ON d.id = e.session_id"
        " WHERE instr(e.data, '\"surface_op\"') OR e.type = 'retract' ORDER BY d.n, e.session_id, e.seq"
    )


def _rebuilt(db: SqliteDatabase, table: str, columns: str, indexes: tuple[str, ...]) -> None:
    """``table`` made again as schema.sql makes it today, its rows copied in rowid order through
    ``columns`` (the new table's columns, as expressions over the old one's), then its indexes:
    SQLite's way to change a column's type or constraints (ALTER TABLE cannot)."""
    (create,) = [s for s in schema_statements(("TABLE",)) if s.split(None, 3)[2] == table]
    db.execute(create.replace(f"CREATE TABLE {table} (", f"CREATE TABLE {table}_new (", 1))
    db.execute(f"INSERT INTO {table}_new SELECT {columns} FROM {table} ORDER BY rowid")
    db.execute(f"DROP TABLE {table}")
    db.execute(f"ALTER TABLE {table}_new RENAME TO {table}")
    for statement in schema_statements(("INDEX", "UNIQUE")):
        words = statement.split(None, 4)
        if (words[3] if words[1] == "UNIQUE" else words[2]) in indexes:
            db.execute(statement)


def _migrate_6(db: SqliteDatabase) -> None:
    """Version 6 to 7: the submissions' ``ordinal`` column, numbered in the order the rows were
    made (their rowids), which the queue followed until now; state values as bytes (a JSON
    value's UTF-8 text, the same bytes as before). Both tables are rebuilt: every submission and
    state row is read once."""
    _rebuilt(
        db,
        "submissions",
        "id, session_id, type, data, state, attempt, max_attempts, timeout_s, created_ms, updated_ms, lease_owner, "
        "lease_expires_ms, input_seq, turn_start_seq, resume_mode, outcome, row_number() OVER (ORDER BY rowid)",
        ("submissions_queued", "submissions_running"),
    )
    _rebuilt(
        db,
        "state",
        "id, session_id, key, at, kind, CASE WHEN kind = 'json' THEN CAST(value AS BLOB) ELSE value END",
        ("state_at",),
    )


def _migrate_7(db: SqliteDatabase) -> None:
    """Version 7 to 8: the table whose row, inside recovery's transaction, turns the gate
    trigger's derived part off for a batch of repairs, and the gate that reads it. No row is
    read or rewritten."""
    _create_derived_by_statement(db)
    db.execute("DROP TRIGGER IF EXISTS events_derived")
    (gate,) = [s for s in schema_statements(("TRIGGER",)) if s.split(None, 3)[2] == "events_derived"]
    db.execute(gate)


def _migrate_8(db: SqliteDatabase) -> None:
    """Version 8 to 9: the index of the turn boundaries goes (nothing read it). No row is read or
    rewritten."""
    db.execute("DROP INDEX IF EXISTS events_turns")


def _create_derived_by_statement(db: SqliteDatabase) -> None:
    """The table as schema.sql makes it, unless a migration before made it already."""
    (create,) = [s for s in schema_statements(("TABLE",)) if s.split(None, 3)[2] == "derived_by_statement"]
    db.execute(create.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1))


# Each migration takes a file from its version to the next, inside the opening transaction.
MIGRATIONS: dict[int, Callable[[SqliteDatabase], None]] = {
    1: _migrate_1,
    2: _migrate_2,
    3: _migrate_3,
    4: _migrate_4,
    5: _migrate_5,
    6: _migrate_6,
    7: _migrate_7,
    8: _migrate_8,
}


def _translate(
    exc: BaseException,
    operation: str,
    *,
    outcome: WriteOutcome,
    path: str,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
) -> JournalError:
    """A driver error as the library's error; ``outcome`` is what is known of the write, ``path``
    the file's (a damaged file is named)."""
    if isinstance(exc, (apsw.BusyError, apsw.LockedError)):
        return JournalBusy(busy_timeout_ms)
    if isinstance(exc, apsw.FullError):
        return DiskFull(operation, outcome, str(exc))
    if isinstance(exc, (apsw.IOError, apsw.CantOpenError, apsw.ReadOnlyError)):
        return JournalIOError(operation, outcome, str(exc))
    if isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
        return CorruptJournal(path, f"{exc} during {operation}; `journal check` lists the damage")
    if isinstance(exc, apsw.ConnectionClosedError):
        return JournalClosed()
    if isinstance(exc, apsw.ConstraintError):
        return _refused(exc, operation)
    if isinstance(exc, apsw.SQLError) and "malformed JSON" in str(exc):
        # The schema's CHECKs hold every stored JSON text valid (json_valid): one that is not is
        # damage (a page lost to a cut file reads as zeros), met by a JSON function of a read.
        return CorruptJournal(
            path, f"a stored JSON text is malformed during {operation}; `journal check` lists the damage"
        )
    return JournalIOError(operation, outcome, f"{type(exc).__name__}: {exc}")


def _undecodable(path: str, exc: json.JSONDecodeError) -> CorruptJournal:
    """A stored row read back that is not the JSON the schema's CHECKs let in: the file is
    damaged (a page lost to a cut file reads as zeros)."""
    return CorruptJournal(path, f"a row cannot be read back (not JSON: {exc.msg}); `journal check` lists the damage")


def _refused(exc: apsw.ConstraintError, operation: str) -> SchemaViolation:
    """The schema's refusal of a statement; a key conflict says so by its type."""
    # apsw sets extendedresult on every error; its stub documents it without declaring it.
    code: int = exc.extendedresult  # type: ignore[attr-defined]
    kind = UniqueViolation if code in _KEY_CONFLICTS else SchemaViolation
    return kind(operation, str(exc))


# What apsw raises when it cannot bind a value, before SQLite runs the statement: a string with a
# lone surrogate (no UTF-8 for it), an integer outside 64 bits.
_UNBINDABLE = (UnicodeEncodeError, OverflowError)


def _unbindable(exc: BaseException) -> InvalidArgument:
    """A value SQLite cannot hold, refused as the caller's bad argument (nothing was written)."""
    if isinstance(exc, UnicodeEncodeError):
        return lone_surrogate(exc)
    return InvalidArgument("argument", "an integer is outside SQLite's signed 64-bit range")


def _rows(cursor: apsw.Cursor, path: str) -> Iterator[tuple[Any, ...]]:
    """The rows of ``cursor``; a stored text that is not UTF-8 (bytes damaged on disk: apsw
    decodes each TEXT column while stepping, and raises the codec's error) is ``CorruptJournal``.

    Every row any part reads comes through here (``SqliteDatabase``), so every face (the API,
    the async one, the CLI, the viewer) gets the typed error, and nothing was written by it."""
    try:
        yield from cursor
    except UnicodeDecodeError as exc:
        raise CorruptJournal(
            path, "a row cannot be read back (a stored text is not UTF-8); `journal check` lists the damage"
        ) from exc


def _close_quietly(conn: apsw.Connection) -> None:
    """Close a connection whose disk may be failing (apsw closes it even when close raises)."""
    try:
        conn.close()
    except apsw.Error:
        pass


class SqliteDatabase:
    """A cursor-like handle given to the body of a read or a write.

    ``next_seqs`` collects, for each session this transaction appended to, the seq its next
    event gets; the store keeps them once the transaction has committed (``Store.next_seqs``).
    """

    __slots__ = ("_conn", "_path", "next_seqs")
    dialect = "sqlite"
    sql = STATEMENTS  # the statements whose text is SQLite's own (journal.store.statements)
    # The trigger's sub-program and the plan's statements cost about the same up to 56 deriving
    # events (seven 8-event turns); from twelve such turns (84) the plan is ahead under either
    # durability (Dec 2, append_many of whole turns).
    plan_derived_from = 84

    def __init__(self, conn: apsw.Connection, path: str) -> None:
        self._conn = conn
        self._path = path  # the file a damaged row is reported in
        self.next_seqs: dict[str, int] = {}

    def execute(self, sql: str, bindings: Any = None) -> Iterator[tuple[Any, ...]]:
        """Run one statement at once (a write is done before any row is read) and return its
        rows; the schema's refusal is a ``SchemaViolation`` (``UniqueViolation`` for a key
        conflict), raised before anything of the statement stays; a row whose text is damaged
        is ``CorruptJournal`` (``_rows``)."""
        try:
            return _rows(self._conn.execute(sql, bindings), self._path)
        except apsw.ConstraintError as exc:
            raise _refused(exc, "the statement") from exc

    def executemany(self, sql: str, rows: Any) -> apsw.Cursor:
        try:
            return self._conn.executemany(sql, rows)
        except apsw.ConstraintError as exc:
            raise _refused(exc, "the statement") from exc

    def insert_events(self, rows: Sequence[EventRow], derived: DerivedPlan | None = None) -> None:
        """The rows; with ``derived`` (their derived state, planned for the batch) the gate
        trigger's derived part is off while they are inserted and the plan's statements write
        that state instead, a few for the batch (``journal.derived_batch``)."""
        if not rows:
            return
        if derived is None:
            self.executemany(INSERT_EVENT, rows)
            return
        self.execute("INSERT INTO derived_by_statement (one) VALUES (1)")
        try:
            self.executemany(INSERT_EVENT, rows)
            bounds = (derived.session_id, derived.first, derived.end)
            opened, changes = derived.opened(), derived.changes()
            if opened:
                self.executemany(OPEN_TURN_SQL, opened)
            if changes:
                self.executemany(CHANGE_TURN_SQL, changes)
            if derived.requests:
                self.execute(REQUEST_CALLS_SQL, bounds)
            if derived.dispatches:
                self.execute(DISPATCH_CALLS_SQL, bounds)
            if derived.results:
                self.execute(RESULT_CALLS_SQL, bounds)
        finally:
            if self._conn.in_transaction:
                self._conn.execute("DELETE FROM derived_by_statement")

    def insert_repairs(self, rows: Sequence[EventRow], results: Sequence[ResultRow], ends: Sequence[EndRow]) -> None:
        """The rows with the gate trigger's derived part off (a row in ``derived_by_statement``,
        deleted again whatever happens), then the derived state of the batch in one statement
        each (``RESOLVE_CALLS_SQL``, ``CLOSE_TURNS_SQL``). G4's trigger still checks each row."""
        if not rows:
            return
        self.execute("INSERT INTO derived_by_statement (one) VALUES (1)")
        try:
            self.executemany(INSERT_EVENT, rows)
            if results:
                self.execute(RESOLVE_CALLS_SQL, (json.dumps(results),))
            if ends:
                self.execute(CLOSE_TURNS_SQL, (json.dumps(ends),))
        finally:
            if self._conn.in_transaction:
                self._conn.execute("DELETE FROM derived_by_statement")

    def one(self, sql: str, bindings: Any = None) -> tuple[Any, ...] | None:
        """The first row, or ``None``."""
        for row in _rows(self._conn.execute(sql, bindings), self._path):
            return row
        return None

    def value(self, sql: str, bindings: Any = None) -> Any:
        """The first column of the first row, or ``None``."""
        for row in _rows(self._conn.execute(sql, bindings), self._path):
            return row[0]
        return None

    def changes(self) -> int:
        return self._conn.changes()

    def lock_session(self, session_id: str) -> None:
        """Nothing to take: an SQLite write transaction holds the whole file."""

    @property
    def in_transaction(self) -> bool:
        """Whether the transaction is still open: SQLite rolls a whole one back on its own after
        some errors (a full disk, an I/O error), not only the failing statement."""
        return self._conn.in_transaction


class SqliteStore(Transactions[apsw.Connection, SqliteDatabase]):
    """One connection to one journal file, with the pragmas of DESIGN §4.

    Threads may share a store: a lock serialises transactions on the connection, so two threads
    never interleave statements inside one transaction.
    """

    dialect = "sqlite"
    sql = STATEMENTS

    def __init__(
        self,
        path: str,
        *,
        durability: Durability = Durability.FULL,
        readonly: bool = False,
        vfs: str | None = None,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        checkpoint_pages: int | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.durability = durability
        self.readonly = readonly
        self.busy_timeout_ms = busy_timeout_ms
        self._lock = threading.RLock()
        self._in_txn = False
        self._batch: SavepointBatch[apsw.Connection, SqliteDatabase] | None = (
            None  # while a batch holds the transaction
        )
        self._upgraded = False  # this transaction raised synchronous to FULL (``_begin``)
        # The seq each session's next event gets, as this connection last committed it. Another
        # connection may have appended since: it is a guess, and the schema's contiguity trigger
        # refuses an insert at a stale one (the caller then reads the seq in its transaction).
        self.next_seqs: dict[str, int] = {}
        self._busy_since = 0.0
        # Whether the file's header names it ours (its application id), as its bytes said before
        # SQLite opened it: a file that says so and cannot be read is a damaged journal.
        self._ours = False
        self._wal_existed = False  # (the -wal beside the file, before this open)
        self._conn = self._connect(vfs)
        try:
            self._configure(checkpoint_pages)
            self._prepare_schema(checkpoint_pages)
        except BaseException as exc:
            if self._wal_existed:
                # The -wal was there before this open: closing the refused connection must not
                # checkpoint it into the file (into a damaged one, past the refusal) and delete it.
                # A -wal this open made holds nothing to copy, and SQLite's close removes it and
                # the -shm (it takes the file's exclusive lock first: no other connection uses them).
                with contextlib.suppress(apsw.Error):
                    self._conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
            _close_quietly(self._conn)
            if isinstance(exc, apsw.Error):
                # A pragma or a read of the header failed on the disk: a typed error, never a
                # driver one (the schema's own transaction is translated by write()).
                raise self._translate(exc, "open", outcome=WriteOutcome.ABSENT) from exc
            raise

    # -- opening -------------------------------------------------------------------------------

    def _connect(self, vfs: str | None) -> apsw.Connection:
        """A connection to a file known, from its bytes, to be a journal or new or empty (G13).

        SQLite writes as soon as it reads (it rolls back a hot journal, rebuilds a -shm, and
        folds a -wal in on close), so a foreign file is refused before any connection exists.
        """
        if os.path.isdir(self.path):
            raise NotAJournal(self.path, "a directory")
        for suffix in ("-wal", "-shm", "-journal"):
            # SQLite creates its side files through a symlink: a dangling one would have it
            # create a file wherever the link points, outside the journal's directory.
            side = self.path + suffix
            if os.path.islink(side) and not os.path.exists(side):
                raise NotAJournal(self.path, f"its {suffix} file is a symlink to a file that does not exist")
        # Only the default VFS keeps a file's bytes where the path says, so only then can they be
        # read before SQLite opens the file (a test VFS may keep them elsewhere, or count reads).
        verdict = self._identify() if vfs is None else self._identify_by_magic()
        if verdict is _header.Verdict.NEW:
            # A symlink whose target does not exist: creating a file there, where the link
            # points, is not what opening a journal should do (a typo, a moved disk).
            linked = os.path.islink(self.path)
            if linked and not os.path.exists(self.path):
                raise NotAJournal(self.path, "a symlink to a file that does not exist (no target is created)")
            if self.readonly:
                raise NotAJournal(self.path, "no such journal (a read-only open never creates one)")
            # A new file is created 0600 (transcripts hold secrets); SQLite gives the -wal and
            # -shm files the main file's mode. O_NOFOLLOW: a symlink made since the check is
            # not followed either.
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_WRONLY | (0 if linked else os.O_NOFOLLOW), 0o600)
            except OSError as exc:
                raise JournalIOError("open", WriteOutcome.ABSENT, str(exc)) from exc
            os.close(fd)
        elif verdict is _header.Verdict.EMPTY and self.readonly:
            raise NotAJournal(self.path, "an empty database (open it writable once to create it)")
        elif verdict is _header.Verdict.JOURNAL and self.readonly and vfs is None:
            self._probe()
        self._wal_existed = os.path.lexists(self.path + "-wal")
        flags = apsw.SQLITE_OPEN_READONLY if self.readonly else apsw.SQLITE_OPEN_READWRITE
        target = self.path
        if self.readonly and vfs is None and verdict is _header.Verdict.JOURNAL and self._missing():
            # A file cut short (no -wal commit holds its lost pages) has no writer (writable opens
            # are refused): read it immutable, as the probe did, so no side file is made.
            target, flags = "file:" + urllib.parse.quote(self.path) + "?immutable=1", flags | apsw.SQLITE_OPEN_URI
        try:
            kwargs: dict[str, Any] = {"flags": flags}
            if vfs is not None:
                kwargs["vfs"] = vfs
            conn = apsw.Connection(target, **kwargs)
        except apsw.Error as exc:
            raise self._translate(exc, "open", outcome=WriteOutcome.ABSENT) from exc
        if self.readonly and vfs is None:
            return self._readable(conn)
        return conn

    def _identify(self) -> _header.Verdict:
        """G13 from the bytes on disk: refuse a foreign file before SQLite may write to it."""
        try:
            identity = _header.identify(self.path, APPLICATION_ID)
        except OSError as exc:
            raise JournalIOError("open", WriteOutcome.ABSENT, str(exc)) from exc
        if identity.verdict is _header.Verdict.FOREIGN:
            raise NotAJournal(self.path, identity.reason)
        if identity.verdict is _header.Verdict.JOURNAL and identity.user_version > SCHEMA_VERSION:
            raise SchemaTooNew(self.path, identity.user_version, SCHEMA_VERSION)
        if identity.verdict is _header.Verdict.JOURNAL and not self.readonly:
            # A cut file reads its lost pages as zeros, and a write would build on them: refused
            # before SQLite opens it. A read-only open reads what is left (`journal check`).
            try:
                missing = _header.missing_bytes(self.path)
            except OSError as exc:
                raise JournalIOError("open", WriteOutcome.ABSENT, str(exc)) from exc
            if missing:
                raise CorruptJournal(
                    self.path,
                    f"the file is {missing} bytes shorter than its header says (cut short: its last pages are "
                    "gone); the file was left untouched, and `journal check` reads what is left",
                )
        self._ours = identity.verdict is _header.Verdict.JOURNAL
        return identity.verdict

    def _side_files(self) -> tuple[bool, bool]:
        """Whether the -wal and the -shm exist."""
        return os.path.lexists(self.path + "-wal"), os.path.lexists(self.path + "-shm")

    def _missing(self) -> int:
        """How many bytes the file lacks of what its header says (``header.missing_bytes``; 0
        when it cannot be read: the open that follows reports that)."""
        try:
            return _header.missing_bytes(self.path)
        except OSError:
            return 0

    def _probe(self) -> None:
        """For a read-only open: refuse a journal that cannot be read before a connection exists
        that would create its -wal and -shm (G13: a refused file is left as it was).

        SQLite's first read of a WAL file creates both side files if they are missing, and a
        read-only connection never removes them; only then would ``_configure`` find the pages
        malformed. While the -wal holds no commit, the main file is everything committed, so an
        immutable connection (no locks, no side files) reads exactly what the real one would, and
        the same first reads (``_judged``) decide. Otherwise the side files are there already (or
        the -wal must be read through a -shm), and the real connection decides. A refusal stands
        only if the side files are as they were (no writer came meanwhile); any other failure of
        the probe is left for the real open to report.
        """
        before = self._side_files()
        if all(before):
            return  # the real connection creates nothing
        try:
            if _header.wal_has_commits(self.path):
                return
        except OSError:
            return
        uri = "file:" + urllib.parse.quote(self.path) + "?immutable=1"
        try:
            probe = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        except apsw.Error:
            return
        try:
            self._judged(probe)
        except (CorruptJournal, NotAJournal, SchemaTooNew):
            if self._side_files() == before:
                raise
        except JournalError:
            pass
        finally:
            _close_quietly(probe)

    def _judged(self, conn: apsw.Connection) -> int:
        """The file's schema version, once the first reads through ``conn`` show a journal (or an
        empty database); a refusal otherwise. Pages that cannot be read are a damaged journal
        (``CorruptJournal``) when the header names the file ours, else ``NotAJournal``."""
        try:
            app_id = conn.pragma("application_id")
            version = conn.pragma("user_version")
            tables = conn.execute("SELECT count(*) FROM sqlite_schema").get
        except (apsw.NotADBError, apsw.CorruptError) as exc:
            if self._ours:
                missing = self._missing()
                cut = f"; it is {missing} bytes shorter than its header says" if missing else ""
                raise CorruptJournal(self.path, f"unreadable ({exc}{cut}; the file was left untouched)") from exc
            raise NotAJournal(self.path, f"unreadable ({exc})") from exc
        except apsw.Error as exc:
            raise self._translate(exc, "open", outcome=WriteOutcome.ABSENT) from exc
        if app_id != APPLICATION_ID and not (app_id == 0 and version == 0 and tables == 0):
            raise NotAJournal(self.path, "an SQLite database of another application")
        if app_id == APPLICATION_ID and version > SCHEMA_VERSION:
            raise SchemaTooNew(self.path, version, SCHEMA_VERSION)
        return int(version)

    def _identify_by_magic(self) -> _header.Verdict:
        """The check for a custom VFS: the SQLite magic only; ``_configure`` decides the rest."""
        try:
            with open(self.path, "rb") as f:
                header = f.read(len(SQLITE_HEADER))
        except FileNotFoundError:
            return _header.Verdict.NEW
        except OSError as exc:
            raise JournalIOError("open", WriteOutcome.ABSENT, str(exc)) from exc
        if not header:
            return _header.Verdict.NEW
        # A power cut while a new file was being created can leave its first sector unwritten
        # beside a hot rollback journal: SQLite rolls that back on open, so let it.
        torn_new_file = header == bytes(len(header)) and os.path.exists(self.path + "-journal")
        if header != SQLITE_HEADER and not torn_new_file:
            raise NotAJournal(self.path, "not an SQLite database")
        return _header.Verdict.JOURNAL

    def _readable(self, conn: apsw.Connection) -> apsw.Connection:
        """``conn``, or an immutable connection when the -shm cannot be made (a read-only
        directory: a backup, another user's file).

        SQLite reads a WAL file through its -shm: it needs to create one unless both the -wal
        and the -shm already exist. Without them, everything committed is in the main file only
        if the -wal holds no commit; then the file is read as immutable (no locks, no side
        files: a writer changing it meanwhile is not seen consistently, as for any backup).
        """
        try:
            conn.pragma("schema_version")  # the first read opens the -wal and the -shm
            return conn
        except (apsw.CantOpenError, apsw.ReadOnlyError) as exc:
            failure: apsw.Error = exc
        except apsw.Error:
            return conn  # not about the side files: _configure reads again and says what
        try:
            unreadable = _header.wal_has_commits(self.path)
        except OSError:
            unreadable = True
        _close_quietly(conn)
        if unreadable:
            raise JournalIOError(
                "open",
                WriteOutcome.ABSENT,
                f"cannot read {self.path}: its directory is not writable and its -wal holds commits "
                "that may not be in the main file yet; copy the file with its -wal and -shm to a "
                "writable place",
            ) from failure
        uri = "file:" + urllib.parse.quote(self.path) + "?immutable=1"
        try:
            return apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        except apsw.Error as exc:
            raise self._translate(exc, "open", outcome=WriteOutcome.ABSENT) from exc

    def _configure(self, checkpoint_pages: int | None) -> None:
        conn = self._conn
        conn.set_busy_handler(self._busy)
        version = self._judged(conn)
        if self.readonly:
            if version == SCHEMA_VERSION:
                conn.pragma("query_only", True)  # (an older one: once its views are made)
        else:
            # Only now, with the file known to be ours (or empty), may anything write to it.
            mode = conn.pragma("journal_mode", "wal")
            if str(mode).lower() != "wal":
                raise JournalIOError("open", WriteOutcome.ABSENT, f"could not enable WAL (got {mode!r})")
        conn.pragma("synchronous", "FULL" if self.durability is Durability.FULL else "NORMAL")
        conn.pragma("foreign_keys", True)
        conn.pragma("recursive_triggers", False)
        if checkpoint_pages is not None:
            conn.pragma("wal_autocheckpoint", checkpoint_pages)

    def _prepare_schema(self, checkpoint_pages: int | None) -> None:
        version = self._conn.pragma("user_version")
        if version == SCHEMA_VERSION:
            return
        if self.readonly:
            if version in MIGRATIONS:
                # An older journal: the next writer migrates it. Until then this connection sees
                # today's shape through temporary views (nothing is written to the file).
                self._present_as_current(version)
                self._conn.pragma("query_only", True)
                return
            raise NotAJournal(self.path, "an empty database (open it writable once to create it)")
        if version in MIGRATIONS:
            with self.write("migrate_schema") as db:
                version = db.value("PRAGMA user_version")  # again, inside the write lock
                if version > SCHEMA_VERSION:
                    raise SchemaTooNew(self.path, version, SCHEMA_VERSION)
                while version in MIGRATIONS:
                    MIGRATIONS[version](db)
                    version += 1
                    db.execute(f"PRAGMA user_version = {version}")
            return
        with self.write("create_schema") as db:
            # Re-read inside the write lock: another process may have created it meanwhile.
            version = db.value("PRAGMA user_version")
            if version == SCHEMA_VERSION:
                return
            if version > SCHEMA_VERSION:
                raise SchemaTooNew(self.path, version, SCHEMA_VERSION)
            if db.value("SELECT count(*) FROM sqlite_schema"):
                raise NotAJournal(self.path, "an SQLite database of another application")
            db.execute(schema_sql())
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        if checkpoint_pages != 0:
            self._checkpoint_new_file()

    def _present_as_current(self, version: int) -> None:
        """For a read-only connection to a journal older than version 7: temporary objects (in
        the connection's own temp database, never the file) that give its reads today's shape —
        submissions numbered by their rowids; before version 3, turns without an owner; before
        version 6, events without idempotency keys,
        no keyed state, the metas' entries listed from the sessions themselves. (A version older
        than 5 also lacks the compactions table: the transcript reads its tail by folding; a
        version-6 file's state values are JSON text, which the state part reads too.)"""
        if version >= 7:  # versions 7 and 8 differ from 9 only in how recovery writes, and an index
            return
        self._conn.execute("CREATE TEMP VIEW submissions AS SELECT *, rowid AS ordinal FROM main.submissions")
        if version < 3:  # no turn names its owner yet (recovery treats them as before)
            self._conn.execute("CREATE TEMP VIEW turn_journal AS SELECT *, NULL AS owner FROM main.turn_journal")
        if version >= 6:
            return
        self._conn.execute(
            "CREATE TEMP VIEW events AS SELECT session_id, seq, type, data, time_ms, NULL AS key FROM main.events;"
            "CREATE TEMP TABLE state"
            " (id INTEGER PRIMARY KEY, session_id TEXT, key TEXT, at INTEGER, kind TEXT, value BLOB);"
            "CREATE INDEX temp.state_at ON state (session_id, key, at, id);"
            "CREATE TEMP VIEW session_meta AS SELECT s.id AS session_id, m.key AS key, m.type AS type, m.value AS value"
            " FROM main.sessions AS s, json_each(s.meta) AS m"
            " WHERE s.meta IS NOT NULL AND m.type NOT IN ('object', 'array', 'null');"
        )

    def _checkpoint_new_file(self) -> None:
        """Copy a new journal's creation into the main file, so its header names it at once.

        Until then the application id is only in the -wal, and every other opener must read the
        -wal to tell the file from a foreign one (G13). ``checkpoint_pages=0`` (no automatic
        checkpoints) is left alone. A failure is the disk's, and is raised: the creation itself
        is committed, and the next open finds it.
        """
        try:
            self._conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
        except apsw.Error as exc:
            raise self._translate(exc, "open", outcome=WriteOutcome.PRESENT) from exc

    # -- transactions: the primitives under journal.store.base.Transactions ----------------------

    _driver_errors = (apsw.Error,)
    _batch_lost = "SQLite rolled the transaction back"
    _errors_break_batch = False  # SQLite says itself when it gave a transaction up (in_transaction)

    def _begin(self, conn: apsw.Connection, operation: str, *, synced: bool, sessions: Sequence[str] | None) -> None:
        """``BEGIN IMMEDIATE`` (under the store's lock), with ``synchronous=FULL`` first when
        ``synced`` asks more than the journal's durability gives (``_end`` lowers it again).
        ``sessions`` is for a backend whose writers run at once: here every write holds the file."""
        # SQLite fixes a commit's safety level outside the transaction only.
        upgrade = synced and self.durability is not Durability.FULL
        try:
            if upgrade:
                conn.pragma("synchronous", "FULL")
            conn.execute("BEGIN IMMEDIATE")
        except apsw.Error as exc:
            if upgrade:
                self._restore_synchronous()
            raise self._translate(exc, operation, outcome=WriteOutcome.ABSENT) from exc
        self._upgraded = upgrade

    def _end(self) -> None:
        if self._upgraded:
            self._upgraded = False
            self._restore_synchronous()

    def _restore_synchronous(self) -> None:
        try:
            self._conn.pragma("synchronous", "NORMAL")
        except apsw.Error:
            pass  # a failing disk; the next open sets it again

    def _database(self, conn: apsw.Connection, sessions: Sequence[str] | None) -> SqliteDatabase:
        return SqliteDatabase(conn, self.path)

    def _commit(self, conn: apsw.Connection) -> None:
        conn.execute("COMMIT")

    def _rollback(self, conn: apsw.Connection) -> None:
        if not conn.in_transaction:
            return
        try:
            conn.execute("ROLLBACK")
        except apsw.Error:
            pass

    def _autocommit(
        self, conn: apsw.Connection, operation: str, sql: str, bindings: Any, sessions: Sequence[str] | None
    ) -> int:
        """The statement outside ``BEGIN``: SQLite's autocommit transaction takes the write lock
        when it starts (waiting in the busy handler as ``BEGIN IMMEDIATE`` does, since nothing
        was read before it) and commits when it ends, saving two statements of three."""
        try:
            conn.execute(sql, bindings)
        except _UNBINDABLE as exc:  # refused while binding, before the statement ran
            raise _unbindable(exc) from exc
        except apsw.ConstraintError as exc:  # checked before the commit: nothing was written
            raise self._translate(exc, operation, outcome=WriteOutcome.ABSENT) from exc
        return conn.changes()

    def _savepoint(self, conn: apsw.Connection, operation: str, *, synced: bool) -> None:
        if synced:  # SQLite fixes a commit's safety level before its transaction begins
            raise RuntimeError(f"journal: {operation} must be synced, and this batch is not (mark it synced)")
        conn.execute("SAVEPOINT write")

    def _release(self, conn: apsw.Connection) -> None:
        conn.execute("RELEASE write")

    def _rollback_to(self, conn: apsw.Connection) -> None:
        conn.execute("ROLLBACK TO write; RELEASE write")

    def _statement(self, conn: apsw.Connection, sql: str, bindings: Any) -> int:
        conn.execute(sql, bindings)  # a refused statement is undone by SQLite on its own
        return conn.changes()

    def _in_transaction(self, conn: apsw.Connection) -> bool:
        return conn.in_transaction

    def _unsendable(self, exc: BaseException) -> InvalidArgument | None:
        return _unbindable(exc) if isinstance(exc, _UNBINDABLE) else None

    def _commit_error(self, exc: BaseException, operation: str, outcome: WriteOutcome) -> JournalError:
        if isinstance(exc, (apsw.BusyError, apsw.LockedError)) and outcome is WriteOutcome.UNKNOWN:
            # A busy COMMIT (a checkpoint wanting a lock) leaves the transaction open in
            # SQLite; we rolled it back, so nothing was written.
            return JournalBusy(self.busy_timeout_ms)
        return self._translate(exc, operation, outcome=outcome)

    @contextlib.contextmanager
    def read(self) -> Iterator[SqliteDatabase]:
        """One read snapshot (a deferred transaction), or the caller's open write transaction."""
        with self._lock:
            conn = self._checked()
            inside = self._in_txn or conn.in_transaction  # (not narrowed: BEGIN below changes it)
            if inside:
                try:
                    yield SqliteDatabase(conn, self.path)
                except json.JSONDecodeError as exc:
                    raise _undecodable(self.path, exc) from exc
                return
            try:
                conn.execute("BEGIN")
                try:
                    yield SqliteDatabase(conn, self.path)
                except _UNBINDABLE as exc:
                    raise _unbindable(exc) from exc
                except json.JSONDecodeError as exc:
                    raise _undecodable(self.path, exc) from exc
                finally:
                    if conn.in_transaction:
                        conn.execute("COMMIT")
            except apsw.Error as exc:
                raise self._translate(exc, "read", outcome=WriteOutcome.ABSENT) from exc

    def _busy(self, prior_calls: int) -> bool:
        """SQLite's busy handler: wait for the write lock, up to the busy timeout.

        SQLite's own handler sleeps in steps of up to 100 ms, which leaves a freed lock idle;
        this one backs off from 50 µs to 2 ms with jitter, and sleeps in ``time.sleep`` (which
        releases the GIL, so a thread of this process holding the lock can commit meanwhile).
        """
        now = time.monotonic()
        if prior_calls == 0:
            self._busy_since = now
        if (now - self._busy_since) * 1000 >= self.busy_timeout_ms:
            return False
        time.sleep(min(0.00005 * 2 ** min(prior_calls, 6), 0.002) * (0.5 + random.random()))
        return True

    def _translate(self, exc: BaseException, operation: str, *, outcome: WriteOutcome) -> JournalError:
        return _translate(exc, operation, outcome=outcome, path=self.path, busy_timeout_ms=self.busy_timeout_ms)

    def _checked(self, operation: str = "") -> apsw.Connection:
        conn = self._conn
        if conn is None:
            raise JournalClosed()
        return conn

    def integrity_check(self) -> list[str]:
        """SQLite's own verdict on the file: ``["ok"]`` when healthy. A file shorter than its
        header says (cut short) is damaged whatever the pages left show: that comes first."""
        missing = self._missing()
        cut = [f"the file is {missing} bytes shorter than its header says: its last pages are gone"] if missing else []
        try:
            with self.read() as db:
                verdict = [row[0] for row in db.execute("PRAGMA integrity_check")]
        except CorruptJournal as exc:
            if not cut:
                raise
            return [*cut, exc.detail]
        return [*cut, *(line for line in verdict if line != "ok")] if cut else verdict

    def size_bytes(self) -> int:
        """The file and its WAL, in bytes."""
        return sum(os.path.getsize(p) for p in (self.path, self.path + "-wal") if os.path.exists(p))

    def checkpoint(self) -> None:
        """Copy the WAL into the database file (``TRUNCATE`` mode)."""
        with self._lock:
            try:
                self._checked().wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
            except apsw.Error as exc:
                raise self._translate(exc, "checkpoint", outcome=WriteOutcome.UNKNOWN) from exc

    def close(self) -> None:
        """Close the connection. It is closed even if this raises: SQLite's closing checkpoint
        failed on the disk (``JournalIOError``, outcome ``present``: what was committed stays in
        the WAL, and the next open replays it)."""
        with self._lock:
            if self._conn is not None:
                conn, self._conn = self._conn, None  # type: ignore[assignment]
                try:
                    conn.close()
                except apsw.Error as exc:
                    raise self._translate(exc, "close", outcome=WriteOutcome.PRESENT) from exc

    @property
    def closed(self) -> bool:
        return self._conn is None
