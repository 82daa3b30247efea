"""The PostgreSQL store (DESIGN §16): the only module that talks to psycopg.

``journal.open("postgresql://...")`` gives the same ``Journal`` over this store. A statement
whose text is the same in both dialects is the parts' own; one that differs is PostgreSQL's own
text in ``journal.store.postgres_sql``. ``pg_sql`` translates the placeholder style only.
The schema is ``schema_pg.sql`` (the same tables, keys, CHECKs and triggers, in PL/pgSQL),
stamped in ``journal_meta`` (G13: a database of another application, or a newer schema, is
refused and left untouched).

Transactions keep SQLite's semantics, each by PostgreSQL's own means:

- A write is ``BEGIN`` and a transaction-scoped advisory lock: writers take turns as under
  SQLite's ``BEGIN IMMEDIATE``, on every host, and each statement (READ COMMITTED) sees every
  write committed before the lock was granted. Waiting for the lock is bounded by
  ``lock_timeout`` (the busy timeout): past it, ``JournalBusy``.
- A statement the schema refuses is undone alone (SQLite's statement rollback): each write
  statement inside a transaction runs under a savepoint.
- A read is one ``REPEATABLE READ`` snapshot.
- Durability: ``synchronous_commit = on`` (``"normal"``: ``off``, which, like SQLite's
  NORMAL, survives the client's crash and may lose the last commits to the server's crash).

Errors are translated by SQLSTATE. A lost connection (the server restarted) is reopened by the
next transaction; the write that met it has an unknown outcome unless ``present`` finds it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import threading
from collections.abc import Iterator, Sequence
from decimal import Decimal
from importlib import resources
from typing import Any

import psycopg
from psycopg.adapt import Loader

from journal.derived_batch import DerivedPlan
from journal.errors import (
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
from journal.store.postgres_sql import (
    APPEND_ONE,
    CHANGE_TURNS,
    CLOSE_TURNS,
    DERIVED_BY_ROW,
    DERIVED_BY_STATEMENT,
    DISPATCH_CALLS,
    EVENTS_CONTIGUOUS,
    INSERT_EVENTS,
    OLDER_STATEMENTS,
    OPEN_TURNS,
    REQUEST_CALLS,
    RESOLVE_CALLS,
    RESULT_CALLS,
    STATEMENTS,
)
from journal.store.postgres_sql import PREVIEWS_AT_SQL as PREVIEWS_AT_SQL  # (where they were: tests name them here)
from journal.store.postgres_sql import PREVIEWS_SQL as PREVIEWS_SQL
from journal.store.target import redact, secrets

APPLICATION = "journal"
SCHEMA_VERSION = 9  # the same version as the SQLite file's: the same tables and guarantees
# A schema of version 7 or 8 reads as version 9 does (only recovery's writes and an index
# differ): a read-only open reads it as it is.
DEFAULT_BUSY_TIMEOUT_MS = 10_000


@functools.lru_cache(maxsize=65536)  # every write asks again: a bot's sessions are few and hot
def lock_key(schema: str, session_id: str | None = None) -> int:
    """The advisory lock (a signed 64-bit key) of a journal, one per schema (a database may
    hold several journals), or of one of its sessions. Every host derives the same keys."""
    name = f"journal:{schema}" if session_id is None else f"journal:{schema}:session:{session_id}"
    return int.from_bytes(
        hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big", signed=True
    )


def schema_sql() -> str:
    """The text of ``schema_pg.sql`` as shipped inside the package."""
    return resources.files("journal").joinpath("schema_pg.sql").read_text(encoding="utf-8")


# -- the placeholder style --------------------------------------------------------------------

# A string literal (its ? and % are text), a placeholder, or a % (psycopg's own marker).
_TOKENS = re.compile(r"'(?:[^']|'')*'|\?(\d*)|%")


@functools.lru_cache(maxsize=1024)
def pg_sql(sql: str, *, binary: bool = False) -> tuple[str, tuple[int, ...] | None, bool]:
    """A statement's placeholders in psycopg's style: ``(text, order, writes)``. Only the
    placeholders change: the text is PostgreSQL's already (``journal.store.postgres_sql`` holds
    the statements whose text differs from SQLite's).

    ``?`` becomes ``%s`` (a ``%`` is doubled, inside a string literal too); ``?N`` too, and
    ``order`` then names, for each ``%s``, the 0-based index of the binding it takes. With
    ``binary``, ``%b`` in place of ``%s``: the values go to the server in binary.
    ``writes``: the statement may change rows (it runs under a savepoint inside a transaction)."""
    order: list[int] = []
    numbered = False
    placeholder = "%b" if binary else "%s"

    def token(match: re.Match[str]) -> str:
        nonlocal numbered
        text = match.group(0)
        if text == "%":
            return "%%"
        if text.startswith("'"):
            return text.replace("%", "%%")  # psycopg reads % inside literals too
        if match.group(1):
            numbered = True
            order.append(int(match.group(1)) - 1)
        else:
            order.append(len(order))
        return placeholder

    out = _TOKENS.sub(token, sql)
    first = out.lstrip().split(None, 1)[0].upper() if out.strip() else ""
    writes = first not in ("SELECT", "VALUES")
    return out, (tuple(order) if numbered else None), writes


class _Numeric(Loader):
    """``numeric`` as an int when whole (``sum()`` of bigints is numeric), else a float: the
    parts get the numbers SQLite gives."""

    def load(self, data: Any) -> int | float:
        value = Decimal(bytes(data).decode())
        return int(value) if value == value.to_integral_value() else float(value)


# -- errors ------------------------------------------------------------------------------------

_BUSY = ("40001", "40P01", "55P03", "57014")  # serialization, deadlock, lock timeout, canceled
_REFUSED_CLASS = "23"  # integrity constraint violation
_BAD_VALUE = ("22021", "22P05", "22003", "54000")  # NUL or bad encoding, out of range, too long


def _refused_by_schema(state: str) -> bool:
    """Whether the SQLSTATE is the schema's refusal of a statement (a key, a CHECK, a trigger,
    JSON that is not): undone alone, nothing of it written."""
    return state.startswith(_REFUSED_CLASS) or state in ("JR001", "22P02")


def _statement_refused(state: str) -> bool:
    """Whether the server refused the statement itself (the schema, or a value it cannot hold):
    the statement wrote nothing, whatever else the transaction did."""
    return _refused_by_schema(state) or state in _BAD_VALUE


def _translate(
    exc: BaseException,
    operation: str,
    *,
    outcome: WriteOutcome,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    secret_values: tuple[str, ...] = (),
) -> JournalError:
    """A driver error as the library's error; ``outcome`` is what is known of the write. The
    driver's text is redacted (``secret_values``: the DSN's, wherever the driver quotes them)."""
    if isinstance(exc, JournalError):
        return exc
    state = getattr(exc, "sqlstate", None) or ""
    detail = _detail(exc, secret_values)
    if state == "23505":
        return UniqueViolation(operation, detail)
    if _refused_by_schema(state):
        return SchemaViolation(operation, detail)
    if state in _BAD_VALUE:
        return InvalidArgument("argument", f"PostgreSQL cannot hold it: {detail}")
    if state in _BUSY:
        return JournalBusy(busy_timeout_ms)
    if state == "53100":
        return DiskFull(operation, outcome, detail)
    return JournalIOError(operation, outcome, f"{type(exc).__name__}: {detail}")


def _detail(exc: BaseException, secret_values: tuple[str, ...] = ()) -> str:
    """The first line of a driver error's text, with any DSN secret in it masked."""
    text = str(exc).strip()
    return redact(text.splitlines()[0], secret_values) if text else type(exc).__name__


def _row(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """The row of a query that always returns one (``SELECT current_schema()``)."""
    assert row is not None
    return row


def _bad_value(exc: BaseException) -> InvalidArgument:
    """A value psycopg cannot send (a lone surrogate, a NUL in text): the caller's bad argument,
    refused before anything of it was written."""
    if isinstance(exc, UnicodeEncodeError):
        return lone_surrogate(exc)
    return InvalidArgument("argument", f"PostgreSQL cannot hold it: {exc}")


def _script(conn: psycopg.Connection, before: str, text: str, bindings: Any, after: str) -> psycopg.Cursor:
    """``before; text; after`` as one simple query: one round trip (a prepared statement and a
    pipeline each cost more here), the statement's values bound, and quoted, by psycopg on the
    client. The cursor is left on the statement's own result."""
    cursor = psycopg.ClientCursor(conn)
    cursor.execute(f"{before}; {text}; {after}", () if bindings is None else bindings)
    for _ in range(before.count(";") + 1):
        cursor.nextset()
    return cursor


# psycopg refuses these before sending anything.
_UNSENDABLE = (UnicodeEncodeError, psycopg.DataError)


def _unsent(exc: BaseException) -> bool:
    """Whether psycopg refused a value before sending the statement (the server's own refusals
    of a value are DataErrors too, and carry an SQLSTATE)."""
    return isinstance(exc, _UNSENDABLE) and getattr(exc, "sqlstate", None) is None


# Every kind of object a schema can hold, as the catalog names them. A schema without a stamp
# that holds any of them is another application's (the journal creates its objects and its
# stamp in one transaction). Types count alone: a table's row type and any type's array type
# come with the table or the type.
_OBJECT_KINDS = (
    "tables", "views", "materialized views", "sequences", "foreign tables", "indexes", "composite types",
    "functions", "types", "operators", "operator classes and families", "collations", "conversions",
    "text search objects", "extended statistics", "extensions",
)  # fmt: skip
_CATALOG = """
SELECT
  (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid AND relname = 'journal_meta' AND relkind = 'r'),
  (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid AND relkind IN ('r', 'p')),
  (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid AND relkind = 'v'),
  (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid AND relkind = 'm'),
  (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid AND relkind = 'S'),
  (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid AND relkind = 'f'),
  (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid AND relkind IN ('i', 'I')),
  (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid AND relkind = 'c'),
  (SELECT count(*) FROM pg_proc WHERE pronamespace = n.oid),
  (SELECT count(*) FROM pg_type t WHERE typnamespace = n.oid AND typrelid = 0
      AND NOT EXISTS (SELECT 1 FROM pg_type e WHERE e.typarray = t.oid)),
  (SELECT count(*) FROM pg_operator WHERE oprnamespace = n.oid),
  (SELECT count(*) FROM pg_opclass WHERE opcnamespace = n.oid)
      + (SELECT count(*) FROM pg_opfamily WHERE opfnamespace = n.oid),
  (SELECT count(*) FROM pg_collation WHERE collnamespace = n.oid),
  (SELECT count(*) FROM pg_conversion WHERE connamespace = n.oid),
  (SELECT count(*) FROM pg_ts_config WHERE cfgnamespace = n.oid)
      + (SELECT count(*) FROM pg_ts_dict WHERE dictnamespace = n.oid)
      + (SELECT count(*) FROM pg_ts_parser WHERE prsnamespace = n.oid)
      + (SELECT count(*) FROM pg_ts_template WHERE tmplnamespace = n.oid),
  (SELECT count(*) FROM pg_statistic_ext WHERE stxnamespace = n.oid),
  (SELECT count(*) FROM pg_extension WHERE extnamespace = n.oid)
FROM pg_namespace n WHERE n.nspname = current_schema()
"""
# Two changes to schema_pg.sql that keep its version (its tables, rows and rules are the same),
# made by the first writable open; a read-only open reads the older shape as it is:
# - a version 6 made before session_meta's digests held a btree entry of each whole meta key and
#   value (a long one could not be stored): the index is made again;
# - the column rules of the tables every append writes were table CHECKs until the domains
#   (schema_pg.sql says why): the domains are made, and the tables keep their CHECKs (the same
#   rules). Changing a column's type to a domain rewrites the table under an exclusive lock, which
#   an open must not do to a busy server's events: docs/postgres.md gives the statements an
#   operator runs for the speed (``DOMAIN_COLUMNS``: each table's columns and their domains).
DOMAIN_COLUMNS = {
    "events": {
        "seq": "journal_seq", "type": "journal_event_type", "data": "journal_event_data", "key": "journal_event_key",
    },
    "turn_journal": {
        "phase": "journal_turn_phase", "attempt": "journal_attempt", "revision": "journal_count",
        "tool_request": "journal_json", "steps": "journal_count", "step_open": "journal_flag",
        "end_reason": "journal_turn_end_reason",
    },
    "tool_calls": {"state": "journal_call_state", "effect": "journal_effect"},
}  # fmt: skip


@functools.cache
def _domains() -> dict[str, str]:
    """schema_pg.sql's ``CREATE DOMAIN`` statements, by the domain's name."""
    text = schema_sql()
    return {m.group(1): m.group(0) for m in re.finditer(r"CREATE DOMAIN (\w+) .*?;", text, re.DOTALL)}


# - until journal_json_of, SQL read the events' JSON with a plain ``::json``, which refuses a whole
#   document holding the escape of U+0000 (schema_pg.sql says why): the function is made, the
#   two unique indexes read through it are made again (one pass over the calls' dispatches and
#   results) and the trigger functions that read NEW.data or NEW.meta are replaced. A read-only
#   open of such a schema reads with ``::json`` (``OLDER_STATEMENTS``).
_NUL_SAFE = "to_regprocedure(format('%I.journal_json_of(text)', current_schema())) IS NOT NULL"


def _schema_statement(kind: str, name: str) -> str:
    """schema_pg.sql's statement that creates ``kind`` (``FUNCTION``, ``UNIQUE INDEX``,
    ``TRIGGER``) ``name``; a function's as ``CREATE OR REPLACE``."""
    text = schema_sql()
    found = re.search(rf"CREATE {kind} {name}\b", text)
    assert found is not None, (kind, name)
    start = found.start()
    end = text.index("$$;", start) + 3 if kind == "FUNCTION" else text.index(";", start) + 1
    statement = text[start:end]
    return "CREATE OR REPLACE" + statement[len("CREATE") :] if kind == "FUNCTION" else statement


@functools.cache
def _nul_safe_upgrade() -> str:
    functions = ("journal_json_of", "journal_events_insert", "journal_sessions_meta")
    statements = [
        _schema_statement("FUNCTION", functions[0]),
        "DROP INDEX IF EXISTS events_one_result;",
        _schema_statement("UNIQUE INDEX", "events_one_result"),
        "DROP INDEX IF EXISTS events_one_dispatch;",
        _schema_statement("UNIQUE INDEX", "events_one_dispatch"),
        *(_schema_statement("FUNCTION", name) for name in functions[1:]),
    ]
    return "\n".join(statements)


@functools.cache
def _upgraded_sql() -> str:
    named = " AND ".join(f"to_regtype(format('%I.{name}', current_schema())) IS NOT NULL" for name in _domains())
    meta = "to_regclass(format('%I.session_meta_match', current_schema())) IS NOT NULL"
    return f"SELECT {meta} AND {named} AND {_NUL_SAFE}"


@functools.cache
def _upgrade_sql() -> str:
    domains = "\n".join(
        f"    IF to_regtype(format('%I.{name}', current_schema())) IS NULL THEN\n        {statement}\n    END IF;"
        for name, statement in _domains().items()
    )
    return f"""
ALTER TABLE session_meta DROP CONSTRAINT IF EXISTS session_meta_pkey;
CREATE INDEX IF NOT EXISTS session_meta_match ON session_meta (md5(key), type, md5(value));
CREATE INDEX IF NOT EXISTS session_meta_session ON session_meta (session_id);
DO $upgrade$
BEGIN
{domains}
END $upgrade$;
"""


def _trigger_upgrade() -> str:
    """Version 7 to 8: ``journal_events_insert`` and ``journal_events_contiguous`` as
    schema_pg.sql defines them, and the row trigger made again with its ``WHEN``."""
    functions = [_schema_statement("FUNCTION", name) for name in ("journal_events_insert", "journal_events_contiguous")]
    trigger = _schema_statement("TRIGGER", "events_insert")
    return "\n".join([*functions, "DROP TRIGGER events_insert ON events;", trigger])


# Each migration takes a schema from its version to the next, inside one write transaction (the
# SQLite file's versions: 7 names the submission order ``ordinal``, state values were bytes here
# already; 8: recovery writes a batch's rows with the row trigger off under ``journal.derived``,
# G4 checked and the derived state written by statement, so the trigger is made again; 9: the
# index of the turn boundaries, which no statement read, goes).
MIGRATIONS: dict[int, str] = {
    6: "ALTER TABLE submissions RENAME COLUMN rowid TO ordinal",
    7: _trigger_upgrade(),
    8: "DROP INDEX IF EXISTS events_turns",
}
_READABLE_FROM = 7  # the oldest version a read-only open reads as it is
# journal_meta as schema_pg.sql makes it: a table of that name and another shape is not a stamp.
_META_COLUMNS = [("one", "integer"), ("application", "text"), ("schema_version", "integer")]


# From this many rows an INSERT of columns is bound in binary (``PgDatabase._columns``: three
# round trips) rather than quoted on the client (one): quoting costs ~10 µs a row of ~100 bytes
# and more for longer ones, a round trip ~20 µs here (Dec 3: rounds of 64 appends of the async
# writer 9.0 → 11.8 thousand appends/s; append_many's runs of a few rows between its reads stay
# one round trip).
_BINARY_FROM = 8


class PgDatabase:
    """The handle a transaction's body gets (``journal.store.base.Database``)."""

    __slots__ = ("_conn", "_cursor", "_guarded", "_lock", "next_seqs")
    dialect = "postgresql"
    sql = STATEMENTS  # the statements whose text is PostgreSQL's own (journal.store.statements)
    # A PL/pgSQL call per row costs more than SQLite's sub-program: the plan's few round trips
    # pay off from about 28 deriving events (four 8-event turns; Dec 2, append_many, fsync off).
    plan_derived_from = 28

    def __init__(self, conn: psycopg.Connection, *, guarded: bool, lock: str | None = None) -> None:
        self._conn = conn
        self._cursor: psycopg.Cursor | None = None
        self._guarded = guarded  # inside a write transaction: refusals are undone alone
        self._lock = lock  # the schema, in a write scoped to sessions: lock_session takes more
        self.next_seqs: dict[str, int] = {}

    def lock_session(self, session_id: str) -> None:
        """Take one more session's lock in a write scoped to sessions (a claim takes the one it
        found); a write of the whole journal holds every session already."""
        if self._lock is not None:
            self._conn.execute(f"SELECT pg_advisory_xact_lock({lock_key(self._lock, session_id)})")

    def execute(self, sql: str, bindings: Any = None) -> psycopg.Cursor:
        text, order, writes = pg_sql(sql)
        if order is not None and bindings is not None:
            bindings = [bindings[i] for i in order]
        conn = self._conn
        if writes and self._guarded:
            # Under a savepoint, so that a refusal undoes this statement alone; the three go
            # in one round trip, and after an error the server skips the rest.
            try:
                cursor = _script(conn, "SAVEPOINT statement", text, bindings, "RELEASE statement")
            except BaseException as exc:
                if not _unsent(exc):  # (a value refused while quoting: nothing was sent)
                    self._undo()
                raise self._refused(exc) from exc
        else:
            try:
                cursor = conn.execute(text, bindings)
            except BaseException as exc:
                raise self._refused(exc) from exc
        self._cursor = cursor
        return cursor

    def executemany(self, sql: str, rows: Any) -> psycopg.Cursor:
        text, order, _ = pg_sql(sql)
        if order is not None:
            rows = [[row[i] for i in order] for row in rows]
        cursor = self._conn.cursor()
        with self._statement():
            cursor.executemany(text, rows)
        self._cursor = cursor
        return cursor

    @contextlib.contextmanager
    def _statement(self) -> Iterator[None]:
        """The block as one statement of a write transaction: under a savepoint, so that a
        refusal (translated) undoes the block alone; outside a transaction, just translated."""
        conn = self._conn
        if self._guarded:
            conn.execute("SAVEPOINT statement")
        try:
            yield
        except BaseException as exc:
            if self._guarded:
                self._undo()
            raise self._refused(exc) from exc
        if self._guarded:
            conn.execute("RELEASE statement")

    def insert_events(self, rows: Sequence[EventRow], derived: DerivedPlan | None = None) -> None:
        """One ``INSERT`` of the rows as five arrays (``INSERT_EVENTS``): one execution for the
        batch, under one savepoint, where ``executemany`` executes, and plans, once per row.
        With ``derived`` (their derived state, planned for the batch) the row trigger is off for
        the insert, G4 is checked for the batch at once and the plan's statements write the
        derived state, under the same savepoint; not for a batch a compaction could read (the
        row trigger places those), which keeps the trigger."""
        if not rows:
            return
        columns = [list(column) for column in zip(*rows, strict=True)]
        if derived is None or any(r[2] == "retract" or '"surface_op"' in r[3] for r in rows):
            if len(rows) < _BINARY_FROM:
                self.execute(INSERT_EVENTS, columns)  # one round trip, quoted on the client
            else:
                self._columns([(INSERT_EVENTS, columns)])
            return
        statements: list[tuple[str, Sequence[Any]]] = [
            (DERIVED_BY_STATEMENT, []),
            (INSERT_EVENTS, columns),
            (DERIVED_BY_ROW, []),
            (EVENTS_CONTIGUOUS, columns[:2]),
        ]
        sid = derived.session_id
        opened, changes = derived.opened(), derived.changes()
        if opened:
            statements.append((OPEN_TURNS, [sid, [t[1] for t in opened], [t[2] for t in opened]]))
        if changes:
            statements.append((CHANGE_TURNS, [sid, *(list(c) for c in list(zip(*changes, strict=True))[1:])]))
        bounds = [sid, derived.first, derived.end]
        for present, sql in ((derived.requests, REQUEST_CALLS), (derived.dispatches, DISPATCH_CALLS),
                             (derived.results, RESULT_CALLS)):  # fmt: skip
            if present:
                statements.append((sql, bounds))
        self._columns(statements)

    def insert_repairs(self, rows: Sequence[EventRow], results: Sequence[ResultRow], ends: Sequence[EndRow]) -> None:
        """Recovery's rows, G4's check and, set-based, the derived state they make (the statements
        of ``journal.store.postgres_sql`` from ``DERIVED_BY_STATEMENT`` on), under one savepoint,
        each statement's values whole columns bound in binary (``_columns``)."""
        if not rows:
            return
        columns = [list(c) for c in zip(*rows, strict=True)]
        statements: list[tuple[str, list[list[Any]]]] = [
            (DERIVED_BY_STATEMENT, []),
            (INSERT_EVENTS, columns),
            (DERIVED_BY_ROW, []),
            (EVENTS_CONTIGUOUS, columns[:2]),
        ]
        if results:
            statements.append((RESOLVE_CALLS, [list(c) for c in zip(*results, strict=True)]))
        if ends:
            statements.append((CLOSE_TURNS, [list(c) for c in zip(*ends, strict=True)]))
        self._columns(statements)

    def _columns(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Statements whose values are whole columns (arrays) or single values, in order, under
        one savepoint inside a write transaction, each bound on the server in binary: one round
        trip each.
        (``execute``'s one-round-trip script quotes its values on the client, which for arrays
        costs tens of µs a row; binary costs a few.)"""
        cursor = self._conn.cursor()
        with self._statement():
            for sql, columns in statements:
                text, order, _ = pg_sql(sql, binary=True)
                cursor.execute(text, columns if order is None else [columns[i] for i in order])
        self._cursor = cursor

    def _undo(self) -> None:
        """Undo what the statement did: the server's refusal left the transaction in error; a
        value refused on the client mid-``executemany`` left the rows before it written."""
        if self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                self._conn.execute("ROLLBACK TO SAVEPOINT statement")
                self._conn.execute("RELEASE statement")

    @staticmethod
    def _refused(exc: BaseException) -> BaseException:
        if _unsent(exc):
            return _bad_value(exc)
        if isinstance(exc, psycopg.Error):
            state = exc.sqlstate or ""
            if _statement_refused(state):
                return _translate(exc, "the statement", outcome=WriteOutcome.ABSENT)
        return exc

    def one(self, sql: str, bindings: Any = None) -> tuple[Any, ...] | None:
        return self.execute(sql, bindings).fetchone()

    def value(self, sql: str, bindings: Any = None) -> Any:
        row = self.execute(sql, bindings).fetchone()
        return None if row is None else row[0]

    def changes(self) -> int:
        return 0 if self._cursor is None else max(self._cursor.rowcount, 0)

    @property
    def in_transaction(self) -> bool:
        return self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE


class _OlderPgDatabase(PgDatabase):
    """The handle of a read-only open of a schema made before ``journal_json_of``."""

    __slots__ = ()
    sql = OLDER_STATEMENTS


class PostgresStore(Transactions[psycopg.Connection, PgDatabase]):
    """One connection to one journal in a PostgreSQL database (``journal.store.base.Store``).

    Threads may share a store: a lock serialises transactions on the connection."""

    dialect = "postgresql"
    sql = STATEMENTS

    def __init__(
        self,
        dsn: str,
        *,
        durability: Durability = Durability.FULL,
        readonly: bool = False,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    ) -> None:
        self._dsn = dsn
        self.path = redact(dsn)  # what Journal.path, repr() and every error show
        self._secrets = secrets(dsn)
        self.durability = durability
        self.readonly = readonly
        self.busy_timeout_ms = busy_timeout_ms
        self._lock = threading.RLock()
        self._in_txn = False
        self._batch: SavepointBatch[psycopg.Connection, PgDatabase] | None = None
        self._closed = False
        self.next_seqs: dict[str, int] = {}
        self._conn: psycopg.Connection | None = None
        self.schema = ""
        self._handle: type[PgDatabase] = PgDatabase
        self._conn = self._connect()
        try:
            self._prepare_schema()
        except BaseException:
            self.close()
            raise

    # -- opening -------------------------------------------------------------------------------

    def _connect(self, operation: str = "open") -> psycopg.Connection:
        try:
            conn = psycopg.connect(self._dsn, autocommit=True, application_name="journal")
        except psycopg.Error as exc:
            raise JournalIOError(
                operation,
                WriteOutcome.ABSENT,
                f"cannot connect to {self.path}: {redact(str(exc).strip(), self._secrets)}",
            ) from exc
        try:
            conn.adapters.register_loader("numeric", _Numeric)
            sync = "on" if self.durability is Durability.FULL else "off"
            conn.execute(f"SET synchronous_commit = {sync}")
            conn.execute(f"SET lock_timeout = {int(self.busy_timeout_ms)}")
            if self.readonly:
                conn.execute("SET default_transaction_read_only = on")
            (self.schema,) = _row(conn.execute("SELECT current_schema()").fetchone())
        except psycopg.Error as exc:
            conn.close()
            raise self._translate(exc, "open", outcome=WriteOutcome.ABSENT) from exc
        return conn

    def _stamp(self, conn: psycopg.Connection) -> tuple[str, int] | None:
        """``(application, version)`` from ``journal_meta``, ``None`` if the schema is empty;
        ``NotAJournal`` if it holds any object of another application (G13: every kind counts,
        not tables alone) or a ``journal_meta`` of another shape."""
        # One statement, one snapshot of the catalog: the stamp's table and the others are seen
        # as of the same moment (a journal being created shows both or neither).
        row = conn.execute(_CATALOG).fetchone()
        counts = dict(zip(_OBJECT_KINDS, row[1:], strict=True)) if row is not None else {}
        if row is not None and row[0]:
            return self._read_stamp(conn)
        held = [f"{kind} ({n})" for kind, n in counts.items() if n]
        if held:
            raise NotAJournal(
                self.path, f"a PostgreSQL schema of another application (no journal_meta; it holds {', '.join(held)})"
            )
        return None

    def _read_stamp(self, conn: psycopg.Connection) -> tuple[str, int]:
        """The stamp of a schema that has a ``journal_meta`` table, once its shape is the journal's."""
        columns = conn.execute(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = format('%I.journal_meta', current_schema())::regclass "
            "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
        ).fetchall()
        if [tuple(c) for c in columns] != _META_COLUMNS:
            shape = ", ".join(f"{name} {kind}" for name, kind in columns)
            raise NotAJournal(self.path, f"its journal_meta table is another application's ({shape})")
        rows = conn.execute("SELECT application, schema_version FROM journal_meta LIMIT 2").fetchall()
        if len(rows) != 1:
            raise NotAJournal(self.path, f"its journal_meta table holds {'no row' if not rows else 'several rows'}")
        return rows[0][0], rows[0][1]

    def _check_stamp(self, stamp: tuple[str, int]) -> None:
        application, version = stamp
        if application != APPLICATION:
            raise NotAJournal(self.path, f"a PostgreSQL schema of another application ({application!r})")
        if version > SCHEMA_VERSION:
            raise SchemaTooNew(self.path, version, SCHEMA_VERSION)
        if version < SCHEMA_VERSION and version not in MIGRATIONS:
            raise NotAJournal(self.path, f"a journal schema of version {version}, which no version made")
        if version < _READABLE_FROM and self.readonly:
            raise NotAJournal(self.path, f"a journal schema of version {version}: open it writable once to migrate it")

    def _prepare_schema(self) -> None:
        conn = self._conn
        assert conn is not None
        try:
            stamp = self._stamp(conn)
        except psycopg.Error as exc:
            raise self._translate(exc, "open", outcome=WriteOutcome.ABSENT) from exc
        if stamp is not None:
            self._check_stamp(stamp)
            if not self.readonly:
                self._upgrade(conn)
                if stamp[1] < SCHEMA_VERSION:
                    self._migrate(conn)
            elif not _row(conn.execute(f"SELECT {_NUL_SAFE}").fetchone())[0]:
                self._handle, self.sql = _OlderPgDatabase, OLDER_STATEMENTS  # read as it is
            return
        if self.readonly:
            raise NotAJournal(self.path, "no journal in this database (a read-only open never creates one)")
        with self.write("create_schema"):
            # Again under the write lock: another process may have created it meanwhile.
            stamp = self._stamp(conn)
            if stamp is not None:
                self._check_stamp(stamp)
                return
            conn.execute(schema_sql())
            conn.execute(
                "INSERT INTO journal_meta (application, schema_version) VALUES (%s, %s)", (APPLICATION, SCHEMA_VERSION)
            )

    def _migrate(self, conn: psycopg.Connection) -> None:
        """Bring an older schema to this version, in one transaction (another process may have
        done it meanwhile: the stamp is read again under the write lock)."""
        with self.write("migrate_schema"):
            stamp = self._stamp(conn)
            assert stamp is not None
            self._check_stamp(stamp)
            version = stamp[1]
            while version in MIGRATIONS:
                conn.execute(MIGRATIONS[version])
                version += 1
                conn.execute("UPDATE journal_meta SET schema_version = %s", (version,))

    def _upgrade(self, conn: psycopg.Connection) -> None:
        """Bring a schema of this version made before session_meta's digests or the domains up
        to date (``_upgraded_sql``: its tables and rows are unchanged). A read-only open reads
        the older one as it is (the lookup and the rules are the same)."""
        try:
            (current,) = _row(conn.execute(_upgraded_sql()).fetchone())
        except psycopg.Error as exc:
            raise self._translate(exc, "open", outcome=WriteOutcome.ABSENT) from exc
        if current:
            return
        with self.write("upgrade_schema"):  # idempotent: another process may be doing it too
            conn.execute(_upgrade_sql())
            if not _row(conn.execute(f"SELECT {_NUL_SAFE}").fetchone())[0]:
                conn.execute(_nul_safe_upgrade())

    # -- transactions: the primitives under journal.store.base.Transactions ----------------------

    _driver_errors = (psycopg.Error,)
    _batch_lost = "the transaction was lost"
    # A driver error past a statement's own savepoint (a lost connection, a failed RELEASE) may
    # have taken the transaction with it: the batch gives up.
    _errors_break_batch = True

    def _checked(self, operation: str) -> psycopg.Connection:
        if self._closed:
            raise JournalClosed()
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            # The connection died (the server restarted, the network broke): a new one.
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
            self._conn = None
            self._conn = conn = self._connect(operation)
        return conn

    def _begin_sql(self, sessions: Sequence[str] | None) -> str:
        """``BEGIN`` and the write's locks, as one round trip: the journal's lock exclusive for a
        write of the whole journal (``sessions`` None); else shared, then each session's in a
        fixed order (the keys'), so two writers never wait on each other in a cycle."""
        journal_key = lock_key(self.schema)
        if sessions is None:
            return f"BEGIN; SELECT pg_advisory_xact_lock({journal_key})"
        keys = sorted({lock_key(self.schema, s) for s in sessions})
        return "; ".join(
            ["BEGIN", f"SELECT pg_advisory_xact_lock_shared({journal_key})"]
            + [f"SELECT pg_advisory_xact_lock({key})" for key in keys]
        )

    def _begin(self, conn: psycopg.Connection, operation: str, *, synced: bool, sessions: Sequence[str] | None) -> None:
        """``BEGIN`` and the write's locks (``_begin_sql``); ``synced``: this transaction's COMMIT
        waits for the WAL flush whatever the journal's durability."""
        try:
            conn.execute(self._begin_sql(sessions))
            if synced and self.durability is not Durability.FULL:
                conn.execute("SET LOCAL synchronous_commit = on")
        except psycopg.Error as exc:
            self._rollback(conn)
            raise self._translate(exc, operation, outcome=WriteOutcome.ABSENT) from exc

    def _database(self, conn: psycopg.Connection, sessions: Sequence[str] | None) -> PgDatabase:
        return self._handle(conn, guarded=True, lock=None if sessions is None else self.schema)

    def _commit(self, conn: psycopg.Connection) -> None:
        conn.execute("COMMIT")

    def _autocommit(
        self, conn: psycopg.Connection, operation: str, sql: str, bindings: Any, sessions: Sequence[str] | None
    ) -> int:
        """BEGIN, the locks, the statement and COMMIT in one round trip (a lone append: one
        prepared statement taking the locks, in an implicit transaction). After an error the
        server skips the rest: a refused statement, or a lock not had in time, committed nothing
        (raised translated); any other error (the connection lost) leaves the outcome unknown,
        as a failed COMMIT does."""
        lone_append = sql == INSERT_EVENT and sessions is not None and len(sessions) == 1
        if lone_append:  # one prepared statement that takes the locks itself (APPEND_ONE)
            assert sessions is not None
            sql, bindings = APPEND_ONE, (lock_key(self.schema), lock_key(self.schema, sessions[0]), *bindings)
        text, order, _ = pg_sql(sql)
        if order is not None:
            bindings = [bindings[i] for i in order]
        try:
            if lone_append:
                cursor = conn.execute(text, bindings, prepare=True)
            else:
                cursor = _script(conn, self._begin_sql(sessions), text, bindings, "COMMIT")
        except BaseException as exc:
            if _unsent(exc):
                raise _bad_value(exc) from exc
            state = getattr(exc, "sqlstate", None) or ""
            if isinstance(exc, psycopg.Error) and (_statement_refused(state) or state in _BUSY):
                raise self._translate(exc, operation, outcome=WriteOutcome.ABSENT) from exc
            raise
        return max(cursor.rowcount, 0)

    def _savepoint(self, conn: psycopg.Connection, operation: str, *, synced: bool) -> None:
        conn.execute("SAVEPOINT write")
        if synced:  # undone with the savepoint if the write is
            conn.execute("SET LOCAL synchronous_commit = on")

    def _release(self, conn: psycopg.Connection) -> None:
        conn.execute("RELEASE write")

    def _rollback_to(self, conn: psycopg.Connection) -> None:
        conn.execute("ROLLBACK TO SAVEPOINT write")
        conn.execute("RELEASE write")

    def _statement(self, conn: psycopg.Connection, sql: str, bindings: Any) -> int:
        db = self._handle(conn, guarded=True)  # under a savepoint of its own: refused alone
        db.execute(sql, bindings)
        return db.changes()

    def _in_transaction(self, conn: psycopg.Connection) -> bool:
        return not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def _unsendable(self, exc: BaseException) -> InvalidArgument | None:
        return _bad_value(exc) if _unsent(exc) else None

    def _rollback(self, conn: psycopg.Connection) -> None:
        if conn.closed or conn.broken:
            return
        with contextlib.suppress(psycopg.Error):
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.execute("ROLLBACK")

    @contextlib.contextmanager
    def read(self) -> Iterator[PgDatabase]:
        """One read snapshot, or the caller's open write transaction."""
        with self._lock:
            if self._in_txn:
                # The caller's write transaction (or a crash-point observer of its commit).
                assert self._conn is not None
                try:
                    yield self._handle(self._conn, guarded=True)
                except psycopg.Error as exc:
                    raise self._translate(exc, "read", outcome=WriteOutcome.ABSENT) from exc
                return
            conn = self._checked("read")
            try:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                try:
                    yield self._handle(conn, guarded=False)
                except _UNSENDABLE as exc:
                    if _unsent(exc):
                        raise _bad_value(exc) from exc
                    raise
                finally:
                    self._rollback(conn)
            except psycopg.Error as exc:
                raise self._translate(exc, "read", outcome=WriteOutcome.ABSENT) from exc

    def _translate(self, exc: BaseException, operation: str, *, outcome: WriteOutcome) -> JournalError:
        return _translate(
            exc, operation, outcome=outcome, busy_timeout_ms=self.busy_timeout_ms, secret_values=self._secrets
        )

    # -- upkeep --------------------------------------------------------------------------------

    def integrity_check(self) -> list[str]:
        """``["ok"]`` when the schema is the journal's and every table reads back; the pages
        themselves are the server's to check (``amcheck``)."""
        problems: list[str] = []
        with self.read() as db:
            stamp = db.one("SELECT application, schema_version FROM journal_meta")
            if stamp != (APPLICATION, SCHEMA_VERSION):
                problems.append(f"journal_meta holds {stamp!r}")
            for table in ("sessions", "events", "turn_journal", "tool_calls", "submissions", "state"):
                db.value(f"SELECT count(*) FROM {table}")
        return problems or ["ok"]

    def size_bytes(self) -> int:
        """The journal's tables, with their indexes and TOAST, in bytes."""
        with self.read() as db:
            size: int = db.value(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'"
            )
            return size

    def checkpoint(self) -> None:
        """Nothing to do: the server checkpoints its own write-ahead log."""
        self._checked("checkpoint")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._conn is not None:
                conn, self._conn = self._conn, None
                with contextlib.suppress(psycopg.Error):
                    conn.close()

    @property
    def closed(self) -> bool:
        return self._closed
