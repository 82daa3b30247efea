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
import os
import random
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from typing import Any

import apsw

from journal import crash
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
from journal.store.base import UniqueViolation, lone_surrogate, outcome_after_failed_commit

APPLICATION_ID = 0x4A524E4C  # "JRNL"
# 2: the derived-state triggers became one gate trigger and a view; the seq trigger one lookup.
# 3: the turn journal names the process driving each turn (owner).
# 4: an index on sessions (created_ms, id) pages the listing.
# 5: the compactions table (and its triggers) places each compaction in its transcript.
# 6: idempotency keys, the events-by-type index, the retract type, keyed state, session_meta,
#    compactions with retracts.
SCHEMA_VERSION = 6
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


# Each migration takes a file from its version to the next, inside the opening transaction.
MIGRATIONS: dict[int, Callable[[SqliteDatabase], None]] = {
    1: _migrate_1,
    2: _migrate_2,
    3: _migrate_3,
    4: _migrate_4,
    5: _migrate_5,
}


def _translate(
    exc: apsw.Error, operation: str, *, outcome: WriteOutcome, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS
) -> JournalError:
    """A driver error as the library's error; ``outcome`` is what is known of the write."""
    if isinstance(exc, (apsw.BusyError, apsw.LockedError)):
        return JournalBusy(busy_timeout_ms)
    if isinstance(exc, apsw.FullError):
        return DiskFull(operation, outcome, str(exc))
    if isinstance(exc, (apsw.IOError, apsw.CantOpenError, apsw.ReadOnlyError)):
        return JournalIOError(operation, outcome, str(exc))
    if isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
        return CorruptJournal(operation, str(exc))
    if isinstance(exc, apsw.ConnectionClosedError):
        return JournalClosed()
    if isinstance(exc, apsw.ConstraintError):
        return _refused(exc, operation)
    return JournalIOError(operation, outcome, f"{type(exc).__name__}: {exc}")


def _refused(exc: apsw.ConstraintError, operation: str) -> SchemaViolation:
    """The schema's refusal of a statement; a key conflict says so by its type."""
    kind = UniqueViolation if exc.extendedresult in _KEY_CONFLICTS else SchemaViolation
    return kind(operation, str(exc))


# What apsw raises when it cannot bind a value, before SQLite runs the statement: a string with a
# lone surrogate (no UTF-8 for it), an integer outside 64 bits.
_UNBINDABLE = (UnicodeEncodeError, OverflowError)


def _unbindable(exc: BaseException) -> InvalidArgument:
    """A value SQLite cannot hold, refused as the caller's bad argument (nothing was written)."""
    if isinstance(exc, UnicodeEncodeError):
        return lone_surrogate(exc)
    return InvalidArgument("argument", "an integer is outside SQLite's signed 64-bit range")


def _close_quietly(conn: apsw.Connection) -> None:
    """Close a connection whose disk may be failing (apsw closes it even when close raises)."""
    try:
        conn.close()
    except apsw.Error:
        pass


# The viewer's read of a page of events (journal.preview): each event's seq, type, time and size
# in bytes, and its first ?5 fields (one more, to tell there are more) as [key, value, cut]:
# every string, and every object's or array's JSON text, cut to ?4 characters inside SQLite
# (``cut``: 1 when it was), so a page never decodes a whole large event. Of ``tool_calls``, the
# first ?5 calls: each one's id, name and arguments (cut; ``cut`` 1 when its arguments were).
_PREVIEW_COLUMNS = """\
SELECT e.seq, e.type, e.time_ms, octet_length(e.data),
  (SELECT json_group_array(json_array(substr(f.key, 1, ?4), CASE
     WHEN f.calls IS NOT NULL THEN
       json((SELECT json_group_array(CASE WHEN c.type = 'object' THEN json_object(
           'id', substr(c.id, 1, ?4), 'name', substr(c.name, 1, ?4),
           'arguments', CASE WHEN length(c.a) <= ?4 THEN json(c.a) ELSE substr(c.a, 1, ?4) END,
           'cut', length(c.a) > ?4) END)
        FROM (SELECT type, value ->> '$.id' AS id, value ->> '$.name' AS name,
                     substr(value -> '$.arguments', 1, ?4 + 1) AS a
              FROM json_each(f.calls) LIMIT ?5) AS c))
     WHEN f.type = 'true' THEN json('true')
     WHEN f.type = 'false' THEN json('false')
     WHEN f.type = 'text' OR (f.type IN ('object', 'array') AND length(f.head) > ?4) THEN substr(f.head, 1, ?4)
     WHEN f.type IN ('object', 'array') THEN json(f.head)
     ELSE f.head END,
     f.type IN ('text', 'object', 'array') AND length(f.head) > ?4))
   FROM (SELECT key, type,
                CASE WHEN type IN ('text', 'object', 'array') THEN substr(value, 1, ?4 + 1) ELSE value END AS head,
                CASE WHEN key = 'tool_calls' AND type = 'array' THEN value END AS calls
         FROM json_each(e.data) LIMIT ?5 + 1) AS f)
"""
PREVIEWS_SQL = (
    _PREVIEW_COLUMNS + "FROM events AS e WHERE e.session_id = ?1 AND e.seq >= ?2 AND e.seq < ?3 ORDER BY e.seq"
)
# The same cut read of the events at the seqs ?6 (a JSON array) of ?2 <= seq < ?3: the messages a
# viewer's page shows (journal.transcript's cut tail). Driven from the list: one seek a seq.
PREVIEWS_AT_SQL = _PREVIEW_COLUMNS + (
    "FROM json_each(?6) AS w CROSS JOIN events AS e "
    "WHERE e.session_id = ?1 AND e.seq = w.value AND e.seq >= ?2 AND e.seq < ?3 ORDER BY e.seq"
)


# Recovery's set-based path (journal.recovery_batch), SQLite's statement: the open work of a batch
# of sessions (?1: a JSON array of ids), one row per open turn and call it owes (the call columns
# NULL for a turn owing none), read from the derived tables and the open turn's own events only.
# ``simple`` says the turn is the common case that path plans alone: a session that is no fork,
# with this one open turn and no turn after its start (no nesting), every owed call first seen in
# an assistant message of the turn (not first by its dispatch). ``dispatching``: the turn recorded
# a dispatch. A call's ``position`` in its request orders calls requested together; ``name`` is
# the request's name when it is text (NULL: the planner decides).
OPEN_WORK_SQL = """\
WITH batch (sid) AS (SELECT DISTINCT value FROM json_each(?1)),
open_turn AS MATERIALIZED (
  SELECT s.id AS sid, t.start_seq, t.turn, t.steps, t.step_open,
    s.seed_length = 0
    AND (SELECT count(*) FROM turn_journal INDEXED BY turn_journal_open WHERE session_id = s.id AND end_seq IS NULL) = 1
    AND NOT EXISTS (SELECT 1 FROM turn_journal WHERE session_id = s.id AND start_seq > t.start_seq)
    AND NOT EXISTS (SELECT 1 FROM tool_calls INDEXED BY tool_calls_owed
                     WHERE session_id = s.id AND result_seq IS NULL AND dispatch_seq IS NOT NULL
                       AND (requested_seq IS NULL OR dispatch_seq < requested_seq)
                       AND max(dispatch_seq, coalesce(requested_seq, -1)) >= t.start_seq) AS simple,
    (SELECT max(seq) FROM events WHERE session_id = s.id) + 1 AS next_seq,
    EXISTS (SELECT 1 FROM events WHERE session_id = s.id AND seq > t.start_seq AND type = 'tool_call'
             AND json_type(data, '$.id') = 'text' AND data ->> '$.id' <> '') AS dispatching
  FROM batch JOIN sessions AS s ON s.id = batch.sid AND s.purged_ms IS NULL
  JOIN turn_journal AS t INDEXED BY turn_journal_open ON t.session_id = s.id AND t.end_seq IS NULL
)
SELECT o.sid, o.start_seq, o.turn, o.steps, o.step_open, o.simple, o.next_seq, o.dispatching,
       c.call_id, c.requested_seq, c.dispatch_seq, j.key AS position,
       CASE WHEN json_type(j.value, '$.name') = 'text' THEN j.value ->> '$.name' END AS name
FROM open_turn AS o
LEFT JOIN tool_calls AS c INDEXED BY tool_calls_owed
  ON o.simple AND c.session_id = o.sid AND c.result_seq IS NULL AND c.requested_seq >= o.start_seq AND c.call_id <> ''
LEFT JOIN events AS e ON e.session_id = c.session_id AND e.seq = c.requested_seq
LEFT JOIN json_each(e.data, '$.tool_calls') AS j ON j.type = 'object' AND j.value ->> '$.id' = c.call_id
ORDER BY o.sid, o.start_seq, c.requested_seq, j.key"""


class SqliteDatabase:
    """A cursor-like handle given to the body of a read or a write.

    ``next_seqs`` collects, for each session this transaction appended to, the seq its next
    event gets; the store keeps them once the transaction has committed (``Store.next_seqs``).
    """

    __slots__ = ("_conn", "next_seqs")
    dialect = "sqlite"
    previews_sql = PREVIEWS_SQL  # the viewer's cut read of events (journal.preview)
    previews_at_sql = PREVIEWS_AT_SQL  # the same, of the events at given seqs (journal.transcript)
    # Differs after another connection committed (compared on one connection): reads no table.
    change_token_sql = "PRAGMA data_version"
    open_work_sql = OPEN_WORK_SQL  # recovery's set-based path reads a batch's open work (journal.recovery_batch)

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn
        self.next_seqs: dict[str, int] = {}

    def execute(self, sql: str, bindings: Any = None) -> apsw.Cursor:
        """Run one statement; the schema's refusal is a ``SchemaViolation`` (``UniqueViolation``
        for a key conflict), raised before anything of the statement stays."""
        try:
            return self._conn.execute(sql, bindings)
        except apsw.ConstraintError as exc:
            raise _refused(exc, "the statement") from exc

    def executemany(self, sql: str, rows: Any) -> apsw.Cursor:
        try:
            return self._conn.executemany(sql, rows)
        except apsw.ConstraintError as exc:
            raise _refused(exc, "the statement") from exc

    def one(self, sql: str, bindings: Any = None) -> tuple[Any, ...] | None:
        """The first row, or ``None``."""
        for row in self._conn.execute(sql, bindings):
            return row
        return None

    def value(self, sql: str, bindings: Any = None) -> Any:
        """The first column of the first row, or ``None``."""
        for row in self._conn.execute(sql, bindings):
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


class _Batch:
    """The writes inside one ``SqliteStore.batch`` transaction."""

    def __init__(self, store: SqliteStore, conn: apsw.Connection, *, synced: bool) -> None:
        self._store = store
        self._conn = conn
        self._synced = synced  # the COMMIT will survive power loss
        self._open = False  # a savepoint is open

    @property
    def broken(self) -> bool:
        """Whether SQLite rolled the whole transaction back (after a full disk or an I/O
        error): nothing written in it stays, and nothing more can be."""
        return not self._conn.in_transaction

    @contextlib.contextmanager
    def savepoint(self, operation: str, *, synced: bool, commit: bool) -> Iterator[SqliteDatabase]:
        """One write inside the batch: kept if its body returns, undone alone if it raises."""
        if self._open:
            raise RuntimeError("journal: nested write transaction (use a *_txn helper)")
        if synced and not self._synced:
            raise RuntimeError(f"journal: {operation} must be synced, and this batch is not (mark it synced)")
        conn = self._conn
        try:
            conn.execute("SAVEPOINT write")
        except apsw.Error as exc:
            raise self._store._translate(exc, operation, outcome=WriteOutcome.ABSENT) from exc
        self._open = True
        db = SqliteDatabase(conn)
        try:
            try:
                yield db
            except _UNBINDABLE as exc:
                self._undo()
                raise _unbindable(exc) from exc
            except BaseException:
                self._undo()
                raise
            if not commit:
                self._undo()
                return
            conn.execute("RELEASE write")
            # A guess until the batch commits; a failed batch clears every guess.
            self._store.next_seqs.update(db.next_seqs)
        except apsw.Error as exc:
            raise self._store._translate(exc, operation, outcome=WriteOutcome.ABSENT) from exc
        finally:
            self._open = False

    def statement(self, operation: str, sql: str, bindings: Any) -> int:
        """One statement inside the batch: a refused one is undone by SQLite on its own."""
        try:
            self._conn.execute(sql, bindings)
        except _UNBINDABLE as exc:  # refused while binding, before the statement ran
            raise _unbindable(exc) from exc
        except apsw.Error as exc:
            raise self._store._translate(exc, operation, outcome=WriteOutcome.ABSENT) from exc
        return self._conn.changes()

    def _undo(self) -> None:
        if self._conn.in_transaction:  # else SQLite rolled everything back on its own
            try:
                self._conn.execute("ROLLBACK TO write; RELEASE write")
            except apsw.Error:
                pass  # the batch is broken; its COMMIT will tell


class SqliteStore:
    """One connection to one journal file, with the pragmas of DESIGN §4.

    Threads may share a store: a lock serialises transactions on the connection, so two threads
    never interleave statements inside one transaction.
    """

    dialect = "sqlite"

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
        self._batch: _Batch | None = None  # set while a batch (``batch``) holds the transaction
        # The seq each session's next event gets, as this connection last committed it. Another
        # connection may have appended since: it is a guess, and the schema's contiguity trigger
        # refuses an insert at a stale one (the caller then reads the seq in its transaction).
        self.next_seqs: dict[str, int] = {}
        self._busy_since = 0.0
        self._conn = self._connect(vfs)
        try:
            self._configure(checkpoint_pages)
            self._prepare_schema(checkpoint_pages)
        except BaseException as exc:
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
        flags = apsw.SQLITE_OPEN_READONLY if self.readonly else apsw.SQLITE_OPEN_READWRITE
        try:
            kwargs: dict[str, Any] = {"flags": flags}
            if vfs is not None:
                kwargs["vfs"] = vfs
            conn = apsw.Connection(self.path, **kwargs)
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
        return identity.verdict

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
        try:
            app_id = conn.pragma("application_id")
            version = conn.pragma("user_version")
            tables = conn.execute("SELECT count(*) FROM sqlite_schema").get
        except (apsw.NotADBError, apsw.CorruptError) as exc:
            raise NotAJournal(self.path, f"unreadable ({exc})") from exc
        except apsw.Error as exc:
            raise self._translate(exc, "open", outcome=WriteOutcome.ABSENT) from exc
        if app_id != APPLICATION_ID and not (app_id == 0 and version == 0 and tables == 0):
            raise NotAJournal(self.path, "an SQLite database of another application")
        if app_id == APPLICATION_ID and version > SCHEMA_VERSION:
            raise SchemaTooNew(self.path, version, SCHEMA_VERSION)
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
        """For a read-only connection to a journal older than version 6: temporary objects (in
        the connection's own temp database, never the file) that give its reads today's shape —
        events without idempotency keys, no keyed state, the metas' entries listed from the
        sessions themselves. (A version older than 5 also lacks the compactions table: the
        transcript reads its tail by folding.)"""
        if version >= 6:
            return
        self._conn.execute(
            "CREATE TEMP VIEW events AS SELECT session_id, seq, type, data, time_ms, NULL AS key FROM main.events;"
            "CREATE TEMP TABLE state (id INTEGER PRIMARY KEY, session_id TEXT, key TEXT, at INTEGER, kind TEXT, value BLOB);"
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

    # -- transactions --------------------------------------------------------------------------

    @contextlib.contextmanager
    def write(
        self,
        operation: str,
        *,
        present: Callable[[SqliteDatabase], bool] | None = None,
        synced: bool = False,
        commit: bool = True,
        sessions: Sequence[str] | None = None,
    ) -> Iterator[SqliteDatabase]:
        """One ``BEGIN IMMEDIATE`` transaction, committed when the body returns (rolled back
        instead with ``commit=False``: a dry run sees its own writes, and nothing stays).

        If the body raises, the transaction is rolled back and the error propagates (a driver
        error translated, with outcome ``absent``). If COMMIT itself raises, the outcome is
        unknown (DESIGN §4); ``present`` may re-read to say the write is there after all.
        ``synced`` makes this commit survive power loss even under ``durability="normal"`` (the
        dispatch barrier needs it: a tool must never run on a record a power cut can take).
        ``sessions`` is for a backend whose writers run at once: here every write holds the file.
        """
        with self._lock:
            conn = self._checked()
            if self._batch is not None:
                with self._batch.savepoint(operation, synced=synced, commit=commit) as db:
                    yield db
                return
            upgrade = self._begin(conn, operation, synced=synced)
            db = SqliteDatabase(conn)
            try:
                try:
                    yield db
                except _UNBINDABLE as exc:
                    self._rollback()
                    raise _unbindable(exc) from exc
                except BaseException:
                    self._rollback()
                    raise
                if not commit:
                    self._rollback()
                    return
                if crash.armed():
                    crash.reached(f"{operation}.before_commit")
                try:
                    conn.execute("COMMIT")
                except apsw.Error as exc:
                    self._rollback()
                    self.next_seqs.clear()  # the outcome is not known: guess again
                    raise self._commit_failed(exc, operation, present) from exc
                self.next_seqs.update(db.next_seqs)
                if crash.armed():
                    crash.reached(f"{operation}.after_commit")
            except apsw.Error as exc:
                raise self._translate(exc, operation, outcome=WriteOutcome.ABSENT) from exc
            finally:
                self._in_txn = False
                if upgrade:
                    self._restore_synchronous()

    def write_one(
        self,
        operation: str,
        sql: str,
        bindings: Any,
        *,
        present: Callable[[SqliteDatabase], bool] | None = None,
        sessions: Sequence[str] | None = None,
    ) -> int | None:
        """Run one statement as a transaction of its own and return how many rows it changed;
        ``None`` if it did not run because another thread holds the connection or a crash point
        is armed (then use ``write``).

        A single statement outside ``BEGIN`` is SQLite's autocommit transaction: it takes the
        write lock when it starts (waiting in the busy handler as ``BEGIN IMMEDIATE`` does, since
        nothing was read before it) and commits when it ends, saving two statements of three.
        An error cannot be placed before or after the commit, so one that is not a refusal by
        the schema has the outcome of a failed COMMIT: unknown, unless ``present`` finds the
        write. ``write`` has the commit boundary that crash points name.
        """
        if self._batch is not None and self._lock.acquire(False):  # the batch's own thread
            try:
                return self._batch.statement(operation, sql, bindings)
            finally:
                self._lock.release()
        if crash.armed() or not self._lock.acquire(False):
            return None
        try:
            conn = self._conn
            if conn is None:
                raise JournalClosed()
            if self._in_txn:
                raise RuntimeError("journal: nested write transaction (use a *_txn helper)")
            try:
                conn.execute(sql, bindings)
            except _UNBINDABLE as exc:  # refused while binding, before the statement ran
                raise _unbindable(exc) from exc
            except apsw.ConstraintError as exc:  # checked before the commit: nothing was written
                raise self._translate(exc, operation, outcome=WriteOutcome.ABSENT) from exc
            except apsw.Error as exc:
                self._rollback()
                self.next_seqs.clear()
                raise self._commit_failed(exc, operation, present) from exc
            return conn.changes()
        finally:
            self._lock.release()

    @contextlib.contextmanager
    def batch(self, operation: str, *, synced: bool = False) -> Iterator[_Batch]:
        """One ``BEGIN IMMEDIATE`` transaction that many writes share: the async face's writer.

        Until the body returns, each ``write`` (on this thread) is a savepoint inside it, and a
        ``write_one`` a statement inside it: a write that fails is undone alone and the others
        stay (G2). The one COMMIT at the end makes them all durable at once; its crash points
        are ``<operation>.before_commit`` and ``<operation>.after_commit`` (the writes inside
        name none). If the body raises, or SQLite itself rolled the transaction back after an
        I/O error (``_Batch.broken``), every write in it is gone. ``synced`` as for ``write``.
        """
        with self._lock:
            conn = self._checked()
            upgrade = self._begin(conn, operation, synced=synced)
            batch = self._batch = _Batch(self, conn, synced=synced or self.durability is Durability.FULL)
            try:
                try:
                    yield batch
                except BaseException:
                    self._rollback()
                    self.next_seqs.clear()
                    raise
                if batch.broken:
                    self.next_seqs.clear()
                    raise JournalIOError(operation, WriteOutcome.ABSENT, "SQLite rolled the transaction back")
                if crash.armed():
                    crash.reached(f"{operation}.before_commit")
                try:
                    conn.execute("COMMIT")
                except apsw.Error as exc:
                    self._rollback()
                    self.next_seqs.clear()
                    raise self._commit_failed(exc, operation, None) from exc
                if crash.armed():
                    crash.reached(f"{operation}.after_commit")
            finally:
                self._batch = None
                self._in_txn = False
                if upgrade:
                    self._restore_synchronous()

    def _begin(self, conn: apsw.Connection, operation: str, *, synced: bool) -> bool:
        """``BEGIN IMMEDIATE`` (under the store's lock), with ``synchronous=FULL`` first when
        ``synced`` asks more than the journal's durability gives; whether it was raised."""
        if self._in_txn:
            raise RuntimeError("journal: nested write transaction (use a *_txn helper)")
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
        self._in_txn = True
        return upgrade

    def _restore_synchronous(self) -> None:
        try:
            self._conn.pragma("synchronous", "NORMAL")
        except apsw.Error:
            pass  # a failing disk; the next open sets it again

    def _commit_failed(
        self, exc: apsw.Error, operation: str, present: Callable[[SqliteDatabase], bool] | None
    ) -> JournalError:
        outcome = outcome_after_failed_commit(self, present)
        if isinstance(exc, (apsw.BusyError, apsw.LockedError)) and outcome is WriteOutcome.UNKNOWN:
            # A busy COMMIT (a checkpoint wanting a lock) leaves the transaction open in
            # SQLite; we rolled it back, so nothing was written.
            return JournalBusy(self.busy_timeout_ms)
        return self._translate(exc, operation, outcome=outcome)

    def _rollback(self) -> None:
        if not self._conn.in_transaction:
            return
        try:
            self._conn.execute("ROLLBACK")
        except apsw.Error:
            pass

    @contextlib.contextmanager
    def read(self) -> Iterator[SqliteDatabase]:
        """One read snapshot (a deferred transaction), or the caller's open write transaction."""
        with self._lock:
            conn = self._checked()
            if self._in_txn or conn.in_transaction:
                yield SqliteDatabase(conn)
                return
            try:
                conn.execute("BEGIN")
                try:
                    yield SqliteDatabase(conn)
                except _UNBINDABLE as exc:
                    raise _unbindable(exc) from exc
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

    def _translate(self, exc: apsw.Error, operation: str, *, outcome: WriteOutcome) -> JournalError:
        return _translate(exc, operation, outcome=outcome, busy_timeout_ms=self.busy_timeout_ms)

    def _checked(self) -> apsw.Connection:
        conn = self._conn
        if conn is None:
            raise JournalClosed()
        return conn

    def integrity_check(self) -> list[str]:
        """SQLite's own verdict on the file: ``["ok"]`` when healthy."""
        with self.read() as db:
            return [row[0] for row in db.execute("PRAGMA integrity_check")]

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
