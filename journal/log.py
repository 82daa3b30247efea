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
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from journal import state as _state
from journal.codec import Codec, check_int, check_text, short_repr
from journal.errors import (
    AlreadyDispatched,
    BoundaryOutOfRange,
    CountMismatch,
    InvalidArgument,
    InvalidBoundary,
    InvalidEvent,
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
_INSERT_KEYED = "INSERT INTO events (session_id, seq, type, data, time_ms, key) VALUES (?, ?, ?, ?, ?, ?)"
# A keyed append of a session that reads nothing through a parent: the unique index alone then
# keeps one event per key (a fork's inherited keys need the chain read: the slow path).
_INSERT_OWN_KEYED = (
    "INSERT INTO events (session_id, seq, type, data, time_ms, key) SELECT ?1, ?2, ?3, ?4, ?5, ?6 "
    "WHERE (SELECT seed_length FROM sessions WHERE id = ?1) = 0"
)
_KEYED = "SELECT seq, type, data, time_ms FROM events WHERE session_id = ? AND key = ? AND seq >= ? AND seq < ?"
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

# LIMIT of a read with no limit (PostgreSQL refuses SQLite's -1).
_NO_LIMIT = 2**62

# A segment of a session's log: events of `owner` with lo <= seq < hi.
Segment = tuple[str, int, float]
_SEQ_END = 2**63 - 1  # past every seq: the bound of a session's own, open-ended segment


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def check_session_id(session_id: object, name: str = "session_id") -> str:
    """A new session's (or submission's) id: 1-256 printable ASCII characters without spaces."""
    if isinstance(session_id, str):
        check_text(name, session_id)  # a lone surrogate is named as such, as in every other id
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        shown = short_repr(session_id)
        raise InvalidArgument(name, f"must be 1-256 printable ASCII characters without spaces, not {shown}")
    return session_id


def next_seq_txn(db: Database, session_id: str) -> int:
    """The seq the session's next event gets (its event count); raises ``SessionNotFound``
    (``InvalidArgument`` for an id no session can have: every part's first look at a session)."""
    row = db.one(_NEXT, (check_text("session_id", session_id),))
    if row is None:
        raise SessionNotFound(session_id)
    seed_length, last = row
    return seed_length if last is None else last + 1


def chain_txn(db: Database, session_id: str) -> list[Segment]:
    """The segments that make up a session's log, newest owner first."""
    segments: list[Segment] = []
    hi: float = float("inf")
    current: str | None = check_text("session_id", session_id)
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
    db: Database,
    session_id: str,
    type_: str,
    text: str,
    time_ms: int,
    *,
    call_id: str | None = None,
    key: str | None = None,
) -> int:
    """Append one validated event at the session's next seq, inside the caller's transaction."""
    seq = next_seq_in_txn(db, session_id)
    insert_txn(db, session_id, seq, type_, text, time_ms, call_id=call_id, key=key)
    return seq


def keyed_event_txn(db: Database, session_id: str, key: str) -> Event | None:
    """The event of the session's log (inherited ones included) appended with ``key``, marked
    ``existing``; ``None`` if there is none. One index seek per segment of the fork chain."""
    for owner, lo, hi in chain_txn(db, session_id):
        row = db.one(_KEYED, (owner, key, lo, int(min(hi, _SEQ_END))))
        if row is not None:
            seq, type_, text, time_ms = row
            return Event(session_id, seq, type_, json.loads(text), time_ms, key, existing=True)
    return None


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
    key: str | None = None,
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
        if key is None:
            db.execute(_INSERT, (session_id, seq, type_, text, time_ms))
        else:
            db.execute(_INSERT_KEYED, (session_id, seq, type_, text, time_ms, key))
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


# What an imported event is, and where in it a refusal of the append's write path points.
ImportedEvent = tuple[str, int, str, str, int, str | None, str | None]
_IMPORT_FIELDS = {NoOpenTurn: "type", AlreadyDispatched: "data.id", ResultExists: "data.tool_call_id"}


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
        Event(session_id, seq, type_, json.loads(data), t, key)
        for seq, type_, data, t, key in read_rows_txn(db, session_id, since, until)
    ]


def read_rows_txn(
    db: Database, session_id: str, since: int = 0, until: float = float("inf")
) -> list[tuple[int, str, str, int, str | None]]:
    """The stored rows ``(seq, type, data text, time_ms, key)`` with ``since <= seq < until``."""
    out: list[tuple[int, str, str, int]] = []
    for owner, lo, hi in reversed(chain_txn(db, session_id)):
        start, stop = max(lo, since), min(hi, until)
        if start >= stop:
            continue
        if stop == float("inf"):
            rows = db.execute(
                "SELECT seq, type, data, time_ms, key FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq",
                (owner, start),
            )
        else:
            rows = db.execute(
                "SELECT seq, type, data, time_ms, key FROM events WHERE session_id = ? AND seq >= ? AND seq < ? ORDER BY seq",
                (owner, start, int(stop)),
            )
        out.extend(rows)
    return out


def _stored(db: Database, row: tuple[Any, ...]) -> bool:
    """Whether this exact event (session, seq, data) is in the file: after a failed commit."""
    session_id, seq, _type, text = row[:4]
    return db.value("SELECT data = ? FROM events WHERE session_id = ? AND seq = ?", (text, session_id, seq)) == 1


# Types only the engine appends, each through its own call.
_ENGINE_ONLY = {"retract": "retract(session_id)"}


def _refuse_engine_only(type_: str, index: int | None = None) -> None:
    if type_ in _ENGINE_ONLY:
        raise InvalidEvent(
            "type", f"a {type_} event is appended by {_ENGINE_ONLY[type_]}, not by a plain append", index
        )


def same_result(winner: dict[str, Any], loser: dict[str, Any]) -> bool:
    """Whether a second result for a call says the same as the stored one (then it is not kept)."""
    keys = ("content", "is_error", "name", "metadata")
    return all(winner.get(k) == loser.get(k) for k in keys)


def _check_types(types: object) -> tuple[str, ...]:
    if isinstance(types, str) or not isinstance(types, Iterable):
        raise InvalidArgument("types", f"must be a list of event types, not {types!r}")
    out = tuple(types)
    if not out or not all(isinstance(t, str) for t in out):
        raise InvalidArgument("types", f"must be a non-empty list of event type names, not {out!r}")
    return out


def _filtered_txn(
    db: Database, session_id: str, since: int, types: tuple[str, ...] | None, newest_first: bool, limit: int | None
) -> list[Event]:
    """``events()`` with a type filter, an order or a limit. Each segment of the fork chain is
    walked from the chosen end, stopping after ``limit`` rows: for app types one walk of the
    app-types index per type (merged here), else one walk of the log's primary key."""
    order = "DESC" if newest_first else "ASC"
    if types is not None and all(t.startswith("x.") and len(t) > 2 for t in types):
        sql = (
            "SELECT seq, type, data, time_ms, key FROM events INDEXED BY events_app "
            f"WHERE session_id = ? AND type = ? AND type LIKE 'x.%' AND seq >= ? AND seq < ? ORDER BY seq {order} LIMIT ?"
        )
        queries = [(sql, (t,)) for t in dict.fromkeys(types)]
    else:
        kinds = "" if types is None else f" AND type IN ({', '.join('?' * len(types))})"
        sql = (
            f"SELECT seq, type, data, time_ms, key FROM events WHERE session_id = ?{kinds} AND seq >= ? AND seq < ? "
            f"ORDER BY seq {order} LIMIT ?"
        )
        queries = [(sql, tuple(types or ()))]
    segments = chain_txn(db, session_id)
    if not newest_first:
        segments = segments[::-1]
    rows: list[tuple[int, str, str, int, str | None]] = []
    for owner, lo, hi in segments:
        wanted = _NO_LIMIT if limit is None else limit - len(rows)
        if wanted == 0:
            break
        start, stop = max(lo, since), int(min(hi, _SEQ_END))
        if start >= stop:
            continue
        found = [row for sql, kinds in queries for row in db.execute(sql, (owner, *kinds, start, stop, wanted))]
        found.sort(key=lambda row: row[0], reverse=newest_first)
        rows.extend(found if wanted < 0 else found[:wanted])
    return [Event(session_id, seq, t, json.loads(data), ms, key) for seq, t, data, ms, key in rows]


def insert_session_txn(
    db: Database,
    session_id: str,
    created_ms: int,
    *,
    meta: str | None = None,
    parent_id: str | None = None,
    seed_length: int = 0,
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
# past its key (a row-value comparison the index serves; after a listed Session its key is
# known, so a page follows it even if it was purged since); no limit is _NO_LIMIT. A meta filter
# is a set of sessions found through session_meta's key, sorted for the page.
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


def _session_filters(meta: object, prefix: object, parent_id: object, dialect: str = "sqlite") -> tuple[str, list[Any]]:
    """The WHERE terms (and their arguments) of ``sessions(meta=, prefix=, parent_id=)``,
    refused when bad."""
    where, args = "", []
    if parent_id is not None:
        where += " AND s.parent_id = ?"
        args.append(check_session_id(parent_id))
    if meta is not None:
        if not isinstance(meta, Mapping) or not meta:
            raise InvalidArgument("meta", f"must be a non-empty mapping of meta keys to values, not {meta!r}")
        for key, value in meta.items():
            if not isinstance(key, str):
                raise InvalidArgument("meta", f"keys are strings, not {key!r}")
            check_text("meta", key)
            where += " AND s.id IN (SELECT session_id FROM session_meta WHERE key = ? AND type = ? AND value = ?)"
            type_, scalar = _json_scalar(value)
            # PostgreSQL's session_meta keeps each value as its text (schema_pg.sql).
            args += [key, type_, scalar if dialect == "sqlite" else _meta_text(scalar)]
    if prefix is not None:
        if not isinstance(prefix, str) or not prefix:
            raise InvalidArgument("prefix", f"must be a non-empty string, not {prefix!r}")
        check_text("prefix", prefix)
        # Ids are printable ASCII: every id that starts with the prefix sorts below prefix + DEL.
        where += " AND s.id >= ? AND s.id < ?"
        args += [prefix, prefix + "\x7f"]
    return where, args


def _json_scalar(value: object) -> tuple[str, Any]:
    """How ``json_each`` types and gives a meta value: ``(type, value)``."""
    if isinstance(value, bool):
        return ("true", 1) if value else ("false", 0)
    if isinstance(value, int):
        return "integer", value
    if isinstance(value, float):
        return "real", value
    if isinstance(value, str):
        return "text", check_text("meta", value)
    raise InvalidArgument("meta", f"values are strings, numbers or booleans, not {value!r}")


def _meta_text(value: object) -> str:
    """A meta value as PostgreSQL's session_meta holds it: as its JSON text, a string unquoted."""
    return value if isinstance(value, str) else json.dumps(value)


def _check_page(limit: object, after: object) -> None:
    """``sessions()``'s paging arguments, refused before anything is read."""
    if limit is not None:
        check_int("limit", limit, minimum=1)
    if after is not None and not isinstance(after, (str, Session)):
        raise InvalidArgument("after", f"must be a session id, a Session or None, not {type(after).__name__}")
    if isinstance(after, str):
        check_text("after", after)


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
        meta_text = None if meta is None else self.codec.encode_meta(meta)
        created = now_ms()
        with self._store.write("create_session", sessions=(session_id,)) as db:
            insert_session_txn(db, session_id, created, meta=meta_text)
        return Session(id=session_id, count=0, created_ms=created, meta=meta)

    def session(self, id: str) -> Session:
        """The session with this id; raises ``SessionNotFound``."""
        check_text("session_id", id)
        with self._store.read() as db:
            row = db.one(f"{_SESSION_ROW} AND s.id = ?", (id,))
        if row is None:
            raise SessionNotFound(id)
        return _sessions_from_rows([row])[0]

    def sessions(
        self,
        *,
        limit: int | None = None,
        after: str | Session | None = None,
        meta: Mapping[str, Any] | None = None,
        prefix: str | None = None,
        parent_id: str | None = None,
    ) -> list[Session]:
        """Sessions oldest first (by ``created_ms``, then id), in one query: all of them, or a
        page of at most ``limit`` starting after the session ``after`` (its id, or a ``Session``
        a page returned).

        ``meta``: only sessions whose meta holds each of these top-level entries (a string,
        number or boolean, compared as JSON values: 3 is not 3.0 nor "3"), found through an
        index of the metas' entries. ``prefix``: only sessions whose id starts with it.
        ``parent_id``: only the forks of that session (through the index of fork parents).

        Page on with ``after=page[-1]`` until a page is shorter than ``limit``: that goes on even
        if the session was purged meanwhile. Each page is its own snapshot: a session created
        meanwhile may or may not appear, none appears twice. An unknown (or purged) id as
        ``after`` raises ``SessionNotFound``; a bad argument ``InvalidArgument``, before anything
        is read."""
        _check_page(limit, after)
        where, args = _session_filters(meta, prefix, parent_id, self._store.dialect)
        if isinstance(after, Session):
            where += " AND (s.created_ms, s.id) > (?, ?)"
            args += [after.created_ms, after.id]
        elif after is not None:
            where += (
                " AND (s.created_ms, s.id) > (SELECT created_ms, id FROM sessions WHERE id = ? AND purged_ms IS NULL)"
            )
            args.append(after)
        sql = f"{_SESSION_ROW}{where} ORDER BY s.created_ms, s.id LIMIT ?"
        with self._store.read() as db:
            rows = list(db.execute(sql, (*args, _NO_LIMIT if limit is None else limit)))
            # Only an empty page can hide an unknown `after`: its key would match nothing.
            if not rows and isinstance(after, str) and db.one(_EXISTS, (after,)) is None:
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

    def append(
        self,
        session_id: str,
        type: str,
        data: dict[str, Any],
        *,
        key: str | None = None,
        expected_count: int | None = None,
    ) -> Event:
        """Append one event durably and return it as stored.

        ``key``: an idempotency key, unique in the session's log: if an event with this key is
        already there, it is returned (``.existing`` is True) and nothing is written.
        ``expected_count``: append only if the session holds exactly that many events, else
        raise ``CountMismatch`` (compare-and-append; a stored key is answered first, so a retried
        conditional append returns its event).

        Appends from several threads at once share commits (group commit): each is atomic and
        durable when it returns, and the fsyncs are shared."""
        check_text("session_id", session_id)
        text, copy = self.codec.encode_copy(type, data)
        _refuse_engine_only(type)
        if key is not None:
            _state.check_key(key)
        if expected_count is not None:
            check_int("expected_count", expected_count)
        time_ms = now_ms()
        guesses = self._store.next_seqs
        seq = guesses.get(session_id)
        if seq is not None and expected_count is None and (key is None or type not in _FAST_INSERTS):
            # The common case: this connection wrote the session's last event, so the INSERT
            # alone is the whole transaction. The schema's contiguity trigger refuses a stale seq
            # (another connection appended since); a dispatch or result of a fork, or a dispatch
            # outside a turn, or a keyed event of a fork, inserts nothing; a second dispatch or
            # result, or a stored key, hits a unique index. Each then takes the path below, which
            # reads inside a transaction and says which.
            if key is None:
                row: tuple[Any, ...] = (session_id, seq, type, text, time_ms)
                sql = _FAST_INSERTS.get(type, _INSERT)
            else:
                row, sql = (session_id, seq, type, text, time_ms, key), _INSERT_OWN_KEYED
            try:
                if self._appends.run_one(sql, row, present=lambda db: _stored(db, row), session=session_id):
                    guesses[session_id] = seq + 1
                    return Event(session_id, seq, type, copy, time_ms, key)
            except SchemaViolation:
                guesses.pop(session_id, None)
        written: list[int] = []

        def present(db: Database) -> bool:
            return bool(written) and _stored(db, (session_id, written[0], type, text, time_ms))

        def work(db: Database) -> int | Event:
            if key is not None:
                found = keyed_event_txn(db, session_id, key)
                if found is not None:
                    return found
            if expected_count is not None:
                count = next_seq_txn(db, session_id)
                if count != expected_count:
                    raise CountMismatch(session_id, expected_count, count)
            seq = db.next_seqs.get(session_id, guesses.get(session_id))
            if seq is None or type in _GUARDED or key is not None or expected_count is not None:
                check_dispatch_in_turn_txn(db, session_id, type, copy)
                seq = append_text_txn(db, session_id, type, text, time_ms, call_id=call_id_of(type, copy), key=key)
            else:
                try:
                    insert_txn(db, session_id, seq, type, text, time_ms)
                except SchemaViolation:
                    seq = append_text_txn(db, session_id, type, text, time_ms)
            written.append(seq)
            return seq

        done = self._appends.run(work, present=present, session=session_id)
        if isinstance(done, Event):
            return done
        return Event(session_id, done, type, copy, time_ms, key)

    def append_many(
        self,
        session_id: str,
        items: Iterable[tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str | None]],
        *,
        expected_count: int | None = None,
        state: Mapping[str, Any] | None = None,
    ) -> list[Event]:
        """Append several events in one transaction: all of them or none (G2).

        An item is ``(type, data)`` or ``(type, data, key)``. An item whose key is already in the
        session's log (or earlier in the batch) is not written: its place in the result holds
        the stored event (``.existing``). A ``tool_result`` for a call that already has one
        follows G5 as ``put_result`` does: the same result again is not written (the stored one
        is returned, ``.existing``), another is kept as ``tool_result_late``. The rest are
        written, contiguously, in the batch's one transaction.

        ``expected_count``: write only if the session holds exactly that many events (else
        ``CountMismatch``, nothing written). ``state``: keyed state written in the same
        transaction (``set_state``), dated after the batch's events."""
        check_text("session_id", session_id)
        encoded: list[tuple[str, str, str | None]] = []
        copies: list[dict[str, Any]] = []
        for index, item in enumerate(items):
            if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
                raise InvalidArgument(f"items[{index}]", "must be a (type, data) or (type, data, key) tuple")
            item_key = item[2] if len(item) == 3 else None
            text, copy = self.codec.encode_copy(item[0], item[1], index=index)
            _refuse_engine_only(item[0], index)
            if item_key is not None:
                _state.check_key(item_key, f"items[{index}] key")
            encoded.append((item[0], text, item_key))
            copies.append(copy)
        if expected_count is not None:
            check_int("expected_count", expected_count)
        values = None if state is None else _state.encode_values(self.codec, state)
        if not encoded and values is None:
            return []
        time_ms = now_ms()
        with self._store.write("append_many", sessions=(session_id,)) as db:
            first = next_seq_txn(db, session_id)
            if expected_count is not None and first != expected_count:
                raise CountMismatch(session_id, expected_count, first)
            db.next_seqs[session_id] = first  # read under the write lock: the items need not read it again
            plain = not any(k is not None or t in _GUARDED for t, _, k in encoded)
            if plain:
                try:
                    db.executemany(
                        _INSERT, [(session_id, first + i, t, text, time_ms) for i, (t, text, _) in enumerate(encoded)]
                    )
                except SchemaViolation as exc:
                    raise SchemaViolation("append_many", exc.detail) from exc
                db.next_seqs[session_id] = first + len(encoded)
                out = [Event(session_id, first + i, t, copies[i], time_ms) for i, (t, _, _) in enumerate(encoded)]
            else:
                out = [
                    self._append_item_txn(db, session_id, *encoded[i], copies[i], time_ms) for i in range(len(encoded))
                ]
            if values is not None:
                _state.write_txn(db, session_id, next_seq_in_txn(db, session_id), values)
        return out

    def _append_item_txn(
        self, db: Database, session_id: str, type_: str, text: str, key: str | None, copy: dict[str, Any], time_ms: int
    ) -> Event:
        """One item of a batch that needs reads: a keyed one, a dispatch or a result."""
        if key is not None:
            found = keyed_event_txn(db, session_id, key)
            if found is not None:
                return found
        if type_ == "tool_result":
            call_id = copy["tool_call_id"]
            winner_seq = result_seq_txn(db, session_id, call_id)
            if winner_seq is not None:  # G5: the first result stays; a different one is evidence
                (winner,) = read_events_txn(db, session_id, winner_seq, winner_seq + 1)
                if same_result(winner.data, copy):
                    return attrs.evolve(winner, existing=True)
                seq = append_text_txn(db, session_id, "tool_result_late", text, time_ms, key=key)
                return Event(session_id, seq, "tool_result_late", copy, time_ms, key)
        check_dispatch_in_turn_txn(db, session_id, type_, copy)
        seq = append_text_txn(db, session_id, type_, text, time_ms, call_id=call_id_of(type_, copy), key=key)
        return Event(session_id, seq, type_, copy, time_ms, key)

    # -- keyed state -----------------------------------------------------------------------------

    def set_state(self, session_id: str, values: Mapping[str, Any]) -> None:
        """Write keyed state values (each a JSON value or bytes) in one transaction: a new
        version of each key, dated by the session's event count; the others are untouched."""
        check_text("session_id", session_id)
        encoded = _state.encode_values(self.codec, values)
        with self._store.write("set_state", sessions=(session_id,)) as db:
            _state.write_txn(db, session_id, next_seq_txn(db, session_id), encoded)

    def state(self, session_id: str, *, keys: Iterable[str] | None = None, as_of: int | None = None) -> dict[str, Any]:
        """The session's keyed state: the latest value of each key (of ``keys``, or every key),
        or as it stood right after event ``as_of`` (a fork's as of its fork point, then its own)."""
        check_text("session_id", session_id)
        wanted = (
            None if keys is None else [_state.check_key(k, "keys") for k in ([keys] if isinstance(keys, str) else keys)]
        )
        if as_of is not None:
            check_int("as_of", as_of)
        with self._store.read() as db:
            return _state.read_txn(db, chain_txn(db, session_id), wanted, as_of)

    # -- reads ---------------------------------------------------------------------------------

    def events(
        self,
        session_id: str,
        *,
        since: int | None = None,
        types: Iterable[str] | None = None,
        newest_first: bool = False,
        limit: int | None = None,
    ) -> list[Event]:
        """The session's events with ``seq >= since`` (all of them by default), in seq order.

        ``types``: only events of these types. ``newest_first``: from the end of the log.
        ``limit``: at most that many. App (``x.``) types are read through their index; the
        engine's own types by a walk of the log from the chosen end that stops after ``limit``."""
        check_text("session_id", session_id)
        start = 0 if since is None else check_int("since", since)
        kinds = None if types is None else _check_types(types)
        if limit is not None:
            check_int("limit", limit)
        if not isinstance(newest_first, bool):
            raise InvalidArgument("newest_first", f"must be True or False, not {newest_first!r}")
        with self._store.read() as db:
            if kinds is None and not newest_first and limit is None:
                return read_events_txn(db, session_id, start)
            return _filtered_txn(db, session_id, start, kinds, newest_first, limit)

    def count(self, session_id: str) -> int:
        """How many events the session's log holds (inherited ones included)."""
        check_text("session_id", session_id)
        with self._store.read() as db:
            return next_seq_txn(db, session_id)

    # -- fork ----------------------------------------------------------------------------------

    def fork(
        self, session_id: str, at: int | str = "last", *, id: str | None = None, meta: dict[str, Any] | None = None
    ) -> Session:
        """A new session inheriting the events ``0..at`` of another, in O(1) of its length, and
        its keyed state as it stood there (a copy of each key's value: O(keys)).

        ``at`` is the seq of the last event to inherit, or ``"last"``. A prefix that ends inside
        an open turn raises ``OpenTurnError`` (recover first, or pick an earlier boundary).
        ``meta`` is the fork's own (listed and filtered like any session's).
        """
        if at != "last" and (not isinstance(at, int) or isinstance(at, bool) or at < 0):
            raise InvalidBoundary(at)
        check_text("session_id", session_id)
        fork_id = uuid.uuid4().hex if id is None else check_session_id(id)
        meta_text = None if meta is None else self.codec.encode_meta(meta)
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
            insert_session_txn(db, fork_id, created, meta=meta_text, parent_id=session_id, seed_length=boundary + 1)
            _state.snapshot_txn(db, chain_txn(db, session_id), fork_id, boundary + 1)
        return Session(
            id=fork_id,
            count=boundary + 1,
            created_ms=created,
            meta=meta,
            parent_id=session_id,
            seed_length=boundary + 1,
        )

    # -- what purge and import write -------------------------------------------------------

    def import_sessions(
        self,
        sessions: Iterable[tuple[str, str | None, int, list[ImportedEvent], list[tuple[str, int, str, Any]]]],
    ) -> int:
        """Write sessions read by ``journal.transfer`` in one transaction, all or nothing (G2);
        returns how many. Each is ``(id, meta text, created_ms, events, state versions)``: events
        ``(where, seq, type, text, time_ms, call_id, key)`` encoded by this journal's codec, state
        versions ``(key, at, kind, stored value)``.

        ``sessions`` may be a generator that reads and checks its input as the transaction goes
        (a refusal it raises rolls everything back). Each event takes the append's write path:
        a dispatch only inside an open turn, one dispatch and one result per call, the schema's
        contiguity and derived-state triggers; a refusal there is ``InvalidEvent`` naming
        ``where`` (the line), raised from the append's own error."""
        imported = 0
        with self._store.write("import") as db:
            for session_id, meta, created_ms, events, state in sessions:
                insert_session_txn(db, session_id, created_ms, meta=meta)
                for where, seq, type_, text, time_ms, call_id, key in events:
                    try:
                        if type_ == "tool_call":
                            check_dispatch_in_turn_txn(db, session_id, type_, {"id": call_id})
                        insert_txn(db, session_id, seq, type_, text, time_ms, call_id=call_id, key=key)
                    except (NoOpenTurn, AlreadyDispatched, ResultExists, SchemaViolation) as exc:
                        raise InvalidEvent(f"{where}: {_IMPORT_FIELDS.get(type(exc), 'event')}", exc.message()) from exc
                for key, at, kind, value in state:
                    _state.write_txn(db, session_id, at, [(key, kind, value)])
                imported += 1
        return imported

    def state_history(self, session_id: str) -> list[tuple[str, int, Any]]:
        """Every version of the session's keyed state ``(key, at, value)``, oldest first, its
        inherited ones included (what an export writes)."""
        with self._store.read() as db:
            return _state.history_txn(db, chain_txn(db, session_id))

    def forks_reading_txn(self, db: Database, session_id: str) -> list[tuple[str, int]]:
        """The forks that read events through the session: ``(fork id, seed_length)``."""
        rows = db.execute(
            "SELECT id, seed_length FROM sessions WHERE parent_id = ? AND purged_ms IS NULL ORDER BY id", (session_id,)
        )
        return [(fork_id, seed) for fork_id, seed in rows if seed > 0]

    def detach_fork_txn(self, db: Database, fork_id: str, seed_length: int) -> None:
        """Give a fork its own rows for the events it read through its parent (seqs kept)."""
        rows = read_rows_txn(db, fork_id, 0, seed_length)
        _state.copy_inherited_txn(db, chain_txn(db, fork_id), fork_id)
        # seed_length 0 first: the schema's contiguity trigger then takes the copied events as the
        # session's own, from seq 0, below the ones it already has.
        db.execute("UPDATE sessions SET parent_id = NULL, seed_length = 0 WHERE id = ?", (fork_id,))
        db.executemany(_INSERT_KEYED, [(fork_id, *row) for row in rows])

    def erase_txn(self, db: Database, session_id: str, time_ms: int) -> int:
        """Erase a session's row and events (marked purged first: the schema lets only such a
        session's events be deleted); returns how many events went."""
        db.execute("UPDATE sessions SET parent_id = NULL WHERE parent_id = ?", (session_id,))
        db.execute("UPDATE sessions SET purged_ms = ? WHERE id = ?", (time_ms, session_id))
        deleted = db.value("SELECT count(*) FROM events WHERE session_id = ?", (session_id,))
        db.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
        _state.forget_txn(db, session_id)
        return deleted

    def forget_txn(self, db: Database, session_id: str) -> None:
        """Delete the session's row (and its meta's index rows), last: the derived rows that
        reference it are gone by now."""
        db.execute("DELETE FROM session_meta WHERE session_id = ?", (session_id,))
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
