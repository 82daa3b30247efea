"""The log part: sessions, appends, reads and fork. It owns the ``sessions`` and ``events``
tables: every other part appends through ``Log.append_txn`` (validated by the journal's codec)
or inserts already encoded text through ``insert_txn``.

A fork copies nothing: its events with ``seq < seed_length`` are read through its parent (and
the parent's through its own parent), which is safe because events never change (G3).
"""

from __future__ import annotations

import itertools
import json
import re
import time
import uuid
from collections.abc import Iterable
from typing import Any

import attrs

from journal.codec import Codec, check_int
from journal.errors import (
    AlreadyDispatched,
    BoundaryOutOfRange,
    InvalidArgument,
    InvalidBoundary,
    NoOpenTurn,
    OpenTurnError,
    ResultExists,
    SchemaViolation,
    SessionExists,
    SessionNotFound,
)
from journal.model import Event, Session
from journal.store import Database, Store, UniqueViolation
from journal.store.groupcommit import GroupCommit

_SESSION_ID = re.compile(r"[\x21-\x7e]{1,256}")
_OPEN_TURN = "SELECT 1 FROM turn_journal INDEXED BY turn_journal_open WHERE session_id = ? AND end_seq IS NULL"
_INSERT = "INSERT INTO events (session_id, seq, type, data, time_ms) VALUES (?, ?, ?, ?, ?)"
# A result, or a dispatch inside an open turn, of a session that reads nothing through a parent:
# then the schema's unique indexes alone keep one result and one dispatch per call. Otherwise
# the statement inserts nothing, and the append takes the path that checks the fork chain.
_INSERT_OWN_RESULT = (
    "INSERT INTO events (session_id, seq, type, data, time_ms) SELECT ?1, ?2, ?3, ?4, ?5 "
    "WHERE (SELECT seed_length FROM sessions WHERE id = ?1) = 0"
)
_INSERT_OWN_DISPATCH = (
    _INSERT_OWN_RESULT
    + " AND EXISTS (SELECT 1 FROM turn_journal INDEXED BY turn_journal_open WHERE session_id = ?1 AND end_seq IS NULL)"
)
_FAST_INSERTS = {"tool_result": _INSERT_OWN_RESULT, "tool_call": _INSERT_OWN_DISPATCH}
_NEXT = (
    "SELECT s.seed_length, (SELECT max(seq) FROM events WHERE session_id = s.id) "
    "FROM sessions AS s WHERE s.id = ? AND s.purged_ms IS NULL"
)

# A segment of a session's log: events of `owner` with lo <= seq < hi.
Segment = tuple[str, int, float]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def check_session_id(session_id: object) -> str:
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise InvalidArgument("session_id", f"must be 1-256 printable ASCII characters without spaces, not {session_id!r}")
    return session_id


def next_seq_txn(db: Database, session_id: str) -> int:
    """The seq the session's next event gets (its event count); raises ``SessionNotFound``."""
    row = db.one(_NEXT, (session_id,))
    if row is None:
        raise SessionNotFound(session_id)
    seed_length, last = row
    return seed_length if last is None else last + 1


def chain_txn(db: Database, session_id: str) -> list[Segment]:
    """The segments that make up a session's log, newest owner first."""
    segments: list[Segment] = []
    hi: float = float("inf")
    current: str | None = session_id
    while current is not None and hi > 0:
        row = db.one("SELECT parent_id, seed_length FROM sessions WHERE id = ? AND purged_ms IS NULL", (current,))
        if row is None:
            raise SessionNotFound(current)
        parent, seed = row
        if seed < hi:
            segments.append((current, seed, hi))
            hi = seed
        current = parent
    return segments


def owner_of(segments: list[Segment], seq: int) -> str:
    """The session whose own events hold ``seq`` in a chain of segments."""
    for owner, lo, hi in segments:
        if lo <= seq < hi:
            return owner
    return segments[-1][0]


_GUARDED = ("tool_result", "tool_call")


def call_id_of(type_: str, data: dict[str, Any]) -> str | None:
    """The tool call a dispatch or a result is about (``None`` for other events)."""
    if type_ == "tool_result":
        return data["tool_call_id"]
    if type_ == "tool_call":
        return data["id"]
    return None


def append_text_txn(
    db: Database, session_id: str, type_: str, text: str, time_ms: int, *, call_id: str | None = None
) -> int:
    """Append one validated event at the session's next seq, inside the caller's transaction."""
    seq = next_seq_in_txn(db, session_id)
    insert_txn(db, session_id, seq, type_, text, time_ms, call_id=call_id)
    return seq


def next_seq_in_txn(db: Database, session_id: str) -> int:
    """``next_seq_txn``, known without a read once this write transaction appended to the
    session (it holds the write lock, so nothing else can have appended since)."""
    seq = db.next_seqs.get(session_id)
    return next_seq_txn(db, session_id) if seq is None else seq


def insert_txn(
    db: Database,
    session_id: str,
    seq: int,
    type_: str,
    text: str,
    time_ms: int,
    *,
    call_id: str | None = None,
    unanswered: bool = False,
) -> None:
    """Insert one validated event, translating the schema's refusals into typed errors.

    For a dispatch or a result, ``call_id`` saves decoding ``text`` again to find the call;
    ``unanswered`` says the caller found, in this transaction, no result for it anywhere."""
    if type_ in _GUARDED and call_id is None:
        call_id = call_id_of(type_, json.loads(text))
    # The unique indexes hold within a session; these lookups extend them through a fork's
    # inherited prefix (a call answered or dispatched in the parent is so in the fork too).
    if type_ == "tool_result" and seq > 0 and not unanswered:
        assert call_id is not None
        if result_seq_txn(db, session_id, call_id) is not None:
            raise ResultExists(session_id, call_id)
    elif type_ == "tool_call" and seq > 0:
        assert call_id is not None
        dispatched = dispatch_seq_txn(db, session_id, call_id)
        if dispatched is not None:
            raise AlreadyDispatched(session_id, call_id, dispatched)
    try:
        db.execute(_INSERT, (session_id, seq, type_, text, time_ms))
        db.next_seqs[session_id] = seq + 1
    except UniqueViolation as exc:
        if type_ == "tool_call":
            assert call_id is not None
            raise AlreadyDispatched(session_id, call_id, dispatch_seq_txn(db, session_id, call_id) or -1) from exc
        if type_ == "tool_result":
            assert call_id is not None
            raise ResultExists(session_id, call_id) from exc
        raise SchemaViolation(f"append of {type_}", exc.detail) from exc
    except SchemaViolation as exc:
        raise SchemaViolation(f"append of {type_}", exc.detail) from exc


def check_dispatch_in_turn_txn(db: Database, session_id: str, type_: str, data: dict[str, Any]) -> None:
    """A ``tool_call`` (a dispatch) written by a plain append needs an open turn in its session:
    recovery closes turns, so a call dispatched outside one would stay owed forever."""
    if type_ == "tool_call" and db.one(_OPEN_TURN, (session_id,)) is None:
        next_seq_txn(db, session_id)  # SessionNotFound first
        dispatched = dispatch_seq_txn(db, session_id, data["id"])
        if dispatched is not None:  # the more useful answer: it can never be dispatched again
            raise AlreadyDispatched(session_id, data["id"], dispatched)
        raise NoOpenTurn(session_id, "a tool_call (a dispatch) is appended only inside an open turn")


def _call_row_txn(db: Database, session_id: str, call_id: str, column: str) -> Any:
    """A column of the call's ``tool_calls`` row, looked up through the fork chain."""
    row = db.one(
        f"SELECT (SELECT {column} FROM tool_calls WHERE session_id = ?1 AND call_id = ?2), seed_length "
        "FROM sessions WHERE id = ?1",
        (session_id, call_id),
    )
    if row is None or row[0] is not None or not row[1]:
        return None if row is None else row[0]
    for owner, _lo, hi in chain_txn(db, session_id)[1:]:
        value = db.value(
            f"SELECT {column} FROM tool_calls WHERE session_id = ? AND call_id = ? AND {column} < ?",
            (owner, call_id, hi),
        )
        if value is not None:
            return value
    return None


def call_seqs_txn(db: Database, session_id: str, call_id: str) -> tuple[int | None, int | None, int | None]:
    """The seqs that requested, dispatched and answered the call, through the fork chain (one
    read for a session that is not a fork)."""
    row = db.one(
        "SELECT seed_length, c.requested_seq, c.dispatch_seq, c.result_seq FROM sessions AS s "
        "LEFT JOIN tool_calls AS c ON c.session_id = s.id AND c.call_id = ?2 WHERE s.id = ?1",
        (session_id, call_id),
    )
    if row is None:
        return None, None, None
    seed, requested, dispatched, answered = row
    if seed:
        requested = requested if requested is not None else requested_seq_txn(db, session_id, call_id)
        dispatched = dispatched if dispatched is not None else dispatch_seq_txn(db, session_id, call_id)
        answered = answered if answered is not None else result_seq_txn(db, session_id, call_id)
    return requested, dispatched, answered


def result_seq_txn(db: Database, session_id: str, call_id: str) -> int | None:
    return _call_row_txn(db, session_id, call_id, "result_seq")


def dispatch_seq_txn(db: Database, session_id: str, call_id: str) -> int | None:
    return _call_row_txn(db, session_id, call_id, "dispatch_seq")


def requested_seq_txn(db: Database, session_id: str, call_id: str) -> int | None:
    return _call_row_txn(db, session_id, call_id, "requested_seq")


def read_events_txn(db: Database, session_id: str, since: int = 0, until: float = float("inf")) -> list[Event]:
    """Events with ``since <= seq < until``, read through the fork chain."""
    return [
        Event(session_id, seq, type_, json.loads(data), t) for seq, type_, data, t in read_rows_txn(db, session_id, since, until)
    ]


def read_rows_txn(
    db: Database, session_id: str, since: int = 0, until: float = float("inf")
) -> list[tuple[int, str, str, int]]:
    """The stored rows ``(seq, type, data text, time_ms)`` with ``since <= seq < until``."""
    out: list[tuple[int, str, str, int]] = []
    for owner, lo, hi in reversed(chain_txn(db, session_id)):
        start, stop = max(lo, since), min(hi, until)
        if start >= stop:
            continue
        if stop == float("inf"):
            rows = db.execute(
                "SELECT seq, type, data, time_ms FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq",
                (owner, start),
            )
        else:
            rows = db.execute(
                "SELECT seq, type, data, time_ms FROM events WHERE session_id = ? AND seq >= ? AND seq < ? ORDER BY seq",
                (owner, start, int(stop)),
            )
        out.extend(rows)
    return out


def _stored(db: Database, row: tuple[str, int, str, str, int]) -> bool:
    """Whether this exact event (session, seq, data) is in the file: after a failed commit."""
    session_id, seq, _type, text, _time = row
    return db.value("SELECT data = ? FROM events WHERE session_id = ? AND seq = ?", (text, session_id, seq)) == 1


def insert_session_txn(
    db: Database, session_id: str, created_ms: int, *, meta: str | None = None, parent_id: str | None = None, seed_length: int = 0
) -> None:
    """Insert a session row; ``SessionExists`` if the id is taken (the key decides, not a read)."""
    try:
        db.execute(
            "INSERT INTO sessions (id, parent_id, seed_length, meta, created_ms) VALUES (?, ?, ?, ?, ?)",
            (session_id, parent_id, seed_length, meta, created_ms),
        )
    except UniqueViolation as exc:
        raise SessionExists(session_id) from exc


# A session's row, in ``Session``'s field order: each subquery is one seek to the end of the
# session's run in the events primary key (session_id, seq), whatever the log's length. A
# session without events of its own has the count it inherits and the time it was created.
_SESSION_ROW = (
    "SELECT s.id, coalesce((SELECT max(seq) + 1 FROM events WHERE session_id = s.id), s.seed_length), "
    "s.created_ms, s.meta, s.parent_id, s.seed_length, "
    "coalesce((SELECT time_ms FROM events WHERE session_id = s.id ORDER BY seq DESC LIMIT 1), s.created_ms) "
    "FROM sessions AS s WHERE s.purged_ms IS NULL"
)
# The listing order is (created_ms, id), the index sessions_created: a page is a seek into it
# and a walk of `limit` entries, never a sort of every session. The page after a session starts
# past its key (a row-value comparison the index serves); LIMIT -1 is no limit.
_LISTING = f"{_SESSION_ROW} ORDER BY s.created_ms, s.id LIMIT ?"
_LISTING_AFTER = (
    f"{_SESSION_ROW} AND (s.created_ms, s.id) > "
    "(SELECT created_ms, id FROM sessions WHERE id = ? AND purged_ms IS NULL) "
    "ORDER BY s.created_ms, s.id LIMIT ?"
)
# After a listed Session: its key is known, so a page follows it even if it was purged since.
_LISTING_AFTER_KEY = f"{_SESSION_ROW} AND (s.created_ms, s.id) > (?, ?) ORDER BY s.created_ms, s.id LIMIT ?"
_EXISTS = "SELECT 1 FROM sessions WHERE id = ? AND purged_ms IS NULL"
_TOTALS = (
    "SELECT count(*), count(s.parent_id), "
    "coalesce(sum((SELECT max(seq) + 1 FROM events WHERE session_id = s.id) - s.seed_length), 0) "
    "FROM sessions AS s WHERE s.purged_ms IS NULL"
)


def _sessions_from_rows(rows: list[tuple[Any, ...]]) -> list[Session]:
    """``Session``s from rows of ``_SESSION_ROW``.

    The metas are decoded by one ``json.loads`` of them all: for a small object, a call of its
    own costs twice the parse, and a listing of 100,000 sessions is measured (DESIGN §11)."""
    texts = [row[3] for row in rows if row[3] is not None]
    if not texts:
        return list(itertools.starmap(Session, rows))
    metas = iter(json.loads("[" + ",".join(texts) + "]"))
    return [
        Session(*row) if row[3] is None else Session(row[0], row[1], row[2], next(metas), row[4], row[5], row[6])
        for row in rows
    ]


def _check_page(limit: object, after: object) -> None:
    """``sessions()``'s paging arguments, refused before anything is read."""
    if limit is not None:
        check_int("limit", limit, minimum=1)
    if after is not None and not isinstance(after, (str, Session)):
        raise InvalidArgument("after", f"must be a session id, a Session or None, not {type(after).__name__}")


@attrs.frozen
class SessionTotals:
    """How many sessions the file holds, how many are forks, and their own events in all."""

    sessions: int
    forks: int
    events: int


class Log:
    """Sessions and their logs: the part every other part appends through."""

    def __init__(self, store: Store, codec: Codec, appends: GroupCommit) -> None:
        self._store = store
        self.codec = codec  # the journal's limits: every part encodes events through it
        self._appends = appends

    def append_txn(self, db: Database, session_id: str, type_: str, data: dict[str, Any], time_ms: int) -> Event:
        """Append one event inside the caller's transaction, validated by the journal's codec."""
        text, copy = self.codec.encode_copy(type_, data)
        seq = append_text_txn(db, session_id, type_, text, time_ms)
        return Event(session_id, seq, type_, copy, time_ms)

    # -- sessions ------------------------------------------------------------------------------

    def create_session(self, id: str | None = None, *, meta: dict[str, Any] | None = None) -> Session:
        """Create an empty session; a generated id is 32 lowercase hex characters."""
        session_id = uuid.uuid4().hex if id is None else check_session_id(id)
        meta_text = None if meta is None else self.codec.encode("x.meta", meta)
        created = now_ms()
        with self._store.write("create_session") as db:
            insert_session_txn(db, session_id, created, meta=meta_text)
        return Session(id=session_id, count=0, created_ms=created, meta=meta)

    def session(self, id: str) -> Session:
        """The session with this id; raises ``SessionNotFound``."""
        with self._store.read() as db:
            row = db.one(f"{_SESSION_ROW} AND s.id = ?", (id,))
        if row is None:
            raise SessionNotFound(id)
        return _sessions_from_rows([row])[0]

    def sessions(self, *, limit: int | None = None, after: str | Session | None = None) -> list[Session]:
        """Sessions oldest first (by ``created_ms``, then id), in one query: all of them, or a
        page of at most ``limit`` starting after the session ``after`` (its id, or a ``Session``
        a page returned).

        Page on with ``after=page[-1]`` until a page is shorter than ``limit``: that goes on even
        if the session was purged meanwhile. Each page is its own snapshot: a session created
        meanwhile may or may not appear, none appears twice. An unknown (or purged) id as
        ``after`` raises ``SessionNotFound``; a bad argument ``InvalidArgument``, before anything
        is read."""
        _check_page(limit, after)
        bound = -1 if limit is None else limit
        with self._store.read() as db:
            if after is None:
                rows = list(db.execute(_LISTING, (bound,)))
            elif isinstance(after, Session):
                rows = list(db.execute(_LISTING_AFTER_KEY, (after.created_ms, after.id, bound)))
            else:
                rows = list(db.execute(_LISTING_AFTER, (after, bound)))
                # Only an empty page can hide an unknown `after`: its key would match nothing.
                if not rows and db.one(_EXISTS, (after,)) is None:
                    raise SessionNotFound(after)
        return _sessions_from_rows(rows)

    def session_totals(self) -> SessionTotals:
        """Sessions, forks and own events counted in one query (``journal stats``), one index
        seek per session and no ``Session`` built."""
        with self._store.read() as db:
            row = db.one(_TOTALS)
        assert row is not None
        return SessionTotals(*row)

    # -- appends -------------------------------------------------------------------------------

    def append(self, session_id: str, type: str, data: dict[str, Any]) -> Event:
        """Append one event durably and return it as stored.

        Appends from several threads at once share commits (group commit): each is atomic and
        durable when it returns, and the fsyncs are shared."""
        text, copy = self.codec.encode_copy(type, data)
        time_ms = now_ms()
        guesses = self._store.next_seqs
        seq = guesses.get(session_id)
        if seq is not None:
            # The common case: this connection wrote the session's last event, so the INSERT
            # alone is the whole transaction. The schema's contiguity trigger refuses a stale seq
            # (another connection appended since); a dispatch or result of a fork, or a dispatch
            # outside a turn, inserts nothing; a second dispatch or result hits a unique index.
            # Each then takes the path below, which reads inside a transaction and says which.
            row = (session_id, seq, type, text, time_ms)
            sql = _FAST_INSERTS.get(type, _INSERT)
            try:
                if self._appends.run_one(sql, row, present=lambda db: _stored(db, row)):
                    guesses[session_id] = seq + 1
                    return Event(session_id, seq, type, copy, time_ms)
            except SchemaViolation:
                guesses.pop(session_id, None)
        written: list[int] = []

        def present(db: Database) -> bool:
            return bool(written) and _stored(db, (session_id, written[0], type, text, time_ms))

        def work(db: Database) -> int:
            seq = db.next_seqs.get(session_id, guesses.get(session_id))
            if seq is None or type in _GUARDED:
                check_dispatch_in_turn_txn(db, session_id, type, copy)
                seq = append_text_txn(db, session_id, type, text, time_ms, call_id=call_id_of(type, copy))
            else:
                try:
                    insert_txn(db, session_id, seq, type, text, time_ms)
                except SchemaViolation:
                    seq = append_text_txn(db, session_id, type, text, time_ms)
            written.append(seq)
            return seq

        seq = self._appends.run(work, present=present)
        return Event(session_id, seq, type, copy, time_ms)

    def append_many(self, session_id: str, items: Iterable[tuple[str, dict[str, Any]]]) -> list[Event]:
        """Append several events in one transaction: all of them or none (G2)."""
        encoded: list[tuple[str, str]] = []
        copies: list[dict[str, Any]] = []
        for index, item in enumerate(items):
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise InvalidArgument(f"items[{index}]", "must be a (type, data) pair")
            text, copy = self.codec.encode_copy(item[0], item[1], index=index)
            encoded.append((item[0], text))
            copies.append(copy)
        if not encoded:
            return []
        time_ms = now_ms()
        with self._store.write("append_many") as db:
            first = next_seq_txn(db, session_id)
            special = any(t in ("tool_result", "tool_call") for t, _ in encoded)
            if special:
                for offset, (type_, text) in enumerate(encoded):
                    check_dispatch_in_turn_txn(db, session_id, type_, copies[offset])
                    insert_txn(db, session_id, first + offset, type_, text, time_ms, call_id=call_id_of(type_, copies[offset]))
            else:
                try:
                    db.executemany(
                        _INSERT,
                        [(session_id, first + i, t, text, time_ms) for i, (t, text) in enumerate(encoded)],
                    )
                except SchemaViolation as exc:
                    raise SchemaViolation("append_many", exc.detail) from exc
                db.next_seqs[session_id] = first + len(encoded)
        return [Event(session_id, first + i, t, copies[i], time_ms) for i, (t, _) in enumerate(encoded)]

    # -- reads ---------------------------------------------------------------------------------

    def events(self, session_id: str, *, since: int | None = None) -> list[Event]:
        """The session's events with ``seq >= since`` (all of them by default), in seq order."""
        start = 0 if since is None else check_int("since", since)
        with self._store.read() as db:
            return read_events_txn(db, session_id, start)

    def count(self, session_id: str) -> int:
        """How many events the session's log holds (inherited ones included)."""
        with self._store.read() as db:
            return next_seq_txn(db, session_id)

    # -- fork ----------------------------------------------------------------------------------

    def fork(self, session_id: str, at: int | str = "last", *, id: str | None = None) -> Session:
        """A new session inheriting the events ``0..at`` of another, in O(1) of its length.

        ``at`` is the seq of the last event to inherit, or ``"last"``. A prefix that ends inside
        an open turn raises ``OpenTurnError`` (recover first, or pick an earlier boundary).
        """
        if at != "last" and (not isinstance(at, int) or isinstance(at, bool) or at < 0):
            raise InvalidBoundary(at)
        fork_id = uuid.uuid4().hex if id is None else check_session_id(id)
        created = now_ms()
        with self._store.write("fork") as db:
            count = next_seq_txn(db, session_id)
            boundary = count - 1 if at == "last" else at
            assert isinstance(boundary, int)
            if boundary >= count:
                raise BoundaryOutOfRange(boundary, count)
            if boundary >= 0:
                open_seq = open_turn_at_txn(db, session_id, boundary)
                if open_seq is not None:
                    raise OpenTurnError(open_seq, f"a fork at seq {boundary} would inherit a half turn")
            insert_session_txn(db, fork_id, created, parent_id=session_id, seed_length=boundary + 1)
        return Session(id=fork_id, count=boundary + 1, created_ms=created, parent_id=session_id, seed_length=boundary + 1)

    # -- what purge and import write -------------------------------------------------------

    def import_session(
        self, session_id: str, meta: str | None, created_ms: int, events: Iterable[tuple[int, str, str, int, str | None]]
    ) -> None:
        """A session row and its events ``(seq, type, text, time_ms, call_id)``, encoded by this
        journal's codec, in one transaction (``journal.transfer`` reads and checks them)."""
        with self._store.write("import") as db:
            insert_session_txn(db, session_id, created_ms, meta=meta)
            for seq, type_, text, time_ms, call_id in events:
                insert_txn(db, session_id, seq, type_, text, time_ms, call_id=call_id)

    def forks_reading_txn(self, db: Database, session_id: str) -> list[tuple[str, int]]:
        """The forks that read events through the session: ``(fork id, seed_length)``."""
        rows = db.execute(
            "SELECT id, seed_length FROM sessions WHERE parent_id = ? AND purged_ms IS NULL ORDER BY id", (session_id,)
        )
        return [(fork_id, seed) for fork_id, seed in rows if seed > 0]

    def detach_fork_txn(self, db: Database, fork_id: str, seed_length: int) -> None:
        """Give a fork its own rows for the events it read through its parent (seqs kept)."""
        rows = read_rows_txn(db, fork_id, 0, seed_length)
        # seed_length 0 first: the schema's contiguity trigger then takes the copied events as the
        # session's own, from seq 0, below the ones it already has.
        db.execute("UPDATE sessions SET parent_id = NULL, seed_length = 0 WHERE id = ?", (fork_id,))
        db.executemany(_INSERT, [(fork_id, seq, type_, data, time_ms) for seq, type_, data, time_ms in rows])

    def erase_txn(self, db: Database, session_id: str, time_ms: int) -> int:
        """Erase a session's row and events (marked purged first: the schema lets only such a
        session's events be deleted); returns how many events went."""
        db.execute("UPDATE sessions SET parent_id = NULL WHERE parent_id = ?", (session_id,))
        db.execute("UPDATE sessions SET purged_ms = ? WHERE id = ?", (time_ms, session_id))
        deleted = db.value("SELECT count(*) FROM events WHERE session_id = ?", (session_id,))
        db.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
        return deleted

    def forget_txn(self, db: Database, session_id: str) -> None:
        """Delete the session's row, last: the derived rows that reference it are gone by now."""
        db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))


def open_turn_at_txn(db: Database, session_id: str, boundary: int) -> int | None:
    """The seq of the innermost turn open just after event ``boundary``, or ``None``.

    Reads the turn journal (whose turn_end pairing is the recovery stack's) of the one session
    that owns ``boundary``: a fork's prefix never holds an open turn (G11), so no turn of an
    ancestor spans a fork point. The cost is a few index lookups, whatever the log's length.
    """
    owner = owner_of(chain_txn(db, session_id), boundary)
    row = db.one(
        "SELECT start_seq, end_seq, outer_start FROM turn_journal WHERE session_id = ? AND start_seq <= ? "
        "ORDER BY start_seq DESC LIMIT 1",
        (owner, boundary),
    )
    while row is not None:
        start, end, outer = row
        if end is None or end > boundary:
            return start
        if outer is None:
            return None
        row = db.one(
            "SELECT start_seq, end_seq, outer_start FROM turn_journal WHERE session_id = ? AND start_seq = ?",
            (owner, outer),
        )
    return None


def read_rows_back_txn(
    db: Database, session_id: str, limit: int, *, types: tuple[str, ...] = ()
) -> list[tuple[int, str, str, int]]:
    """The stored rows ``(seq, type, data text, time_ms)`` of the session's newest ``limit`` events
    (only of ``types``, if given), newest first, read through the fork chain.

    Each segment is one walk down the events primary key that stops after ``limit`` rows, so
    the cost follows ``limit`` (and the rows of other types passed over), not the log's length."""
    kinds = f" AND type IN ({', '.join('?' * len(types))})" if types else ""
    sql = (
        "SELECT seq, type, data, time_ms FROM events WHERE session_id = ? AND seq >= ? AND seq < ?"
        f"{kinds} ORDER BY seq DESC LIMIT ?"
    )
    out: list[tuple[int, str, str, int]] = []
    for owner, lo, hi in chain_txn(db, session_id):
        if len(out) >= limit:
            break
        # 2**63 - 1 is past every seq: the bound of the session's own, open-ended segment.
        out.extend(db.execute(sql, (owner, lo, min(hi, 2**63 - 1), *types, limit - len(out))))
    return out
