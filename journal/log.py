"""The log part: creating sessions, appends, keyed state writes and fork. It owns the
``sessions`` and ``events`` tables: every other part appends through ``Log.append_txn``
(validated by the journal's codec) or inserts already encoded text through ``Log.insert_txn``.

A fork copies nothing: its events with ``seq < seed_length`` are read through its parent, by
the one walk of the fork chain (``journal.lineage``). The reads are ``journal.reads``', the
listing ``journal.sessions``'. An append of a dispatch or a result asks ``journal.results``
where the call stands and ``journal.turns`` whether a turn is open, through the chain.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from journal import derived_batch
from journal import state as _state
from journal.codec import Codec, check_int, check_text, short_repr
from journal.derived_batch import DerivedPlan
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
)
from journal.lineage import (
    chain_txn,
    next_seq_in_txn,
    next_seq_txn,
    read_events_txn,
    read_rows_txn,
    seed_length_txn,
)
from journal.model import Event, Session
from journal.model import now_ms as now_ms
from journal.results import call_seqs_txn, dispatch_seq_txn, result_seq_txn, same_result
from journal.store import INSERT_EVENT, Database, EventRow, Statements, Store, UniqueViolation
from journal.store.groupcommit import GroupCommit
from journal.turns import open_turn_at_txn, open_turn_txn, own_turn_txn

_SESSION_ID = re.compile(r"[\x21-\x7e]{1,256}")
_INSERT = INSERT_EVENT  # the store's one text of it (journal.store.base)
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
# (A dispatch's also needs its open turn: the store's ``sql.insert_own_dispatch``.)
_FAST_TYPES = frozenset({"tool_result", "tool_call"})


def check_session_id(session_id: object, name: str = "session_id") -> str:
    """A new session's (or submission's) id: 1-256 printable ASCII characters without spaces."""
    if isinstance(session_id, str):
        check_text(name, session_id)  # a lone surrogate is named as such, as in every other id
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        shown = short_repr(session_id)
        raise InvalidArgument(name, f"must be 1-256 printable ASCII characters without spaces, not {shown}")
    return session_id


_GUARDED = ("tool_result", "tool_call")
# The type a plain append checks against the session's innermost open turn (``check_turn``).
_TURN_END = "turn_end"


def call_id_of(type_: str, data: dict[str, Any]) -> str | None:
    """The tool call a dispatch or a result is about (``None`` for other events)."""
    call_id: str | None = None  # (the codec has checked it is text)
    if type_ == "tool_result":
        call_id = data["tool_call_id"]
    elif type_ == "tool_call":
        call_id = data["id"]
    return call_id


def keyed_event_txn(db: Database, session_id: str, key: str) -> Event | None:
    """The event of the session's log (inherited ones included) appended with ``key``, marked
    ``existing``; ``None`` if there is none. One index seek per segment of the fork chain."""
    for owner, lo, hi in chain_txn(db, session_id):
        row = db.one(_KEYED, (owner, key, lo, hi))
        if row is not None:
            seq, type_, text, time_ms = row
            return Event(session_id, seq, type_, json.loads(text), time_ms, key, existing=True)
    return None


# What an imported event is, and where in it a refusal of the append's write path points.
ImportedEvent = tuple[str, int, str, str, int, str | None, str | None]
_IMPORT_FIELDS = {NoOpenTurn: "type", AlreadyDispatched: "data.id", ResultExists: "data.tool_call_id"}


def _fast_insert(sql: Statements, type_: str) -> str:
    """The fast path's INSERT of an event of this type (``_FAST_TYPES``: one that inserts nothing
    for a fork), in the store's dialect."""
    if type_ == "tool_call":
        return sql.insert_own_dispatch
    return _INSERT_OWN_RESULT if type_ == "tool_result" else _INSERT


def _plain_row(session_id: str, seq: int | None, type_: str, text: str, time_ms: int) -> EventRow | None:
    """The row of an append (no key, no expected count) that inserts it alone, with nothing to
    read first, given the guess of the session's next seq: what a writer may insert with others
    in one statement. ``None`` without a guess, or for a dispatch or a result (their own
    statements: ``_fast_insert``), or a turn's end (checked against the open turn)."""
    if seq is None or type_ in _FAST_TYPES or type_ == _TURN_END:
        return None
    return (session_id, seq, type_, text, time_ms)


def check_dispatch_in_turn_txn(db: Database, session_id: str, type_: str, data: dict[str, Any]) -> None:
    """A ``tool_call`` (a dispatch) written by a plain append needs an open turn in its session:
    recovery closes turns, so a call dispatched outside one would stay owed forever."""
    if type_ == "tool_call" and open_turn_txn(db, session_id) is None:
        next_seq_txn(db, session_id)  # SessionNotFound first
        dispatched = dispatch_seq_txn(db, session_id, data["id"])
        if dispatched is not None:  # the more useful answer: it can never be dispatched again
            raise AlreadyDispatched(session_id, data["id"], dispatched)
        raise NoOpenTurn(session_id, "a tool_call (a dispatch) is appended only inside an open turn")


def _stored(db: Database, row: tuple[Any, ...]) -> bool:
    """Whether this exact event (session, seq, data) is in the file: after a failed commit."""
    session_id, seq, _type, text = row[:4]
    same = db.value("SELECT data = ? FROM events WHERE session_id = ? AND seq = ?", (text, session_id, seq))
    return bool(same == 1)


# Types only the engine appends, each through its own call.
_ENGINE_ONLY = {"retract": "retract(session_id)"}


# The types the schema's gate trigger derives state from (an assistant message only with calls).
_DERIVING = frozenset(
    {"turn_start", "turn_end", "step_start", "step_end", "tool_call", "tool_result", "assistant_message"}
)


OpenTurns = list[tuple[int, "int | None"]]
"""A session's open turns, ``(start seq, number)``, by start: as the turn journal holds them."""


def _open_turns_txn(db: Database, session_id: str) -> OpenTurns:
    return [(start, number) for start, number in db.execute(db.sql.open_turn_starts, (session_id,))]


def check_turn(open_turns: OpenTurns, type_: str, data: dict[str, Any], seq: int, index: int | None = None) -> None:
    """A plain ``turn_end`` closes the session's innermost open turn: one naming another turn
    (``turn``) is refused, for the log would say one turn ended while another did (and recovery
    would end the named one again). Else ``open_turns`` is moved past the event at ``seq`` as the
    schema's trigger moves the turn journal. A ``turn_end`` naming no turn, or with no turn open
    (it closes nothing), is written as ever; so is a nested ``turn_start`` (a hand-made log's
    shape, which the planner recovers; ``turn_start()`` refuses to nest)."""
    if type_ == "turn_start":
        open_turns.append((seq, data.get("turn")))
    elif type_ == "turn_end" and open_turns:
        start, number = open_turns[-1]
        named = data.get("turn")
        if number is not None and named is not None and named != number:
            problem = f"the open turn is turn {number} (started at seq {start}), not turn {named}"
            raise InvalidEvent("turn", problem, index)
        open_turns.pop()


def check_turn_end_txn(db: Database, session_id: str, data: dict[str, Any], index: int | None = None) -> None:
    """``check_turn`` of a plain ``turn_end`` against the session's open turns as they are now."""
    check_turn(_open_turns_txn(db, session_id), _TURN_END, data, -1, index)


def _reads_settled_txn(
    db: Database, session_id: str, encoded: list[tuple[str, str, str | None]], copies: list[dict[str, Any]]
) -> tuple[bool, OpenTurns | None]:
    """Whether every dispatch and result of the batch would be written as it is, known from one
    read of their calls and one of the open turns: no keyed item, no call dispatched or answered
    twice in the batch, a session that is not a fork, none of its calls dispatched (G6) or
    answered (G5) already, and each dispatch inside a turn open at its place. Then the batch
    needs no read between its items; else each of those items reads as ``append`` does. With it,
    the open turns when they were read (the derived-state plan starts from them)."""
    results: list[str] = []
    dispatches: list[str] = []
    for (type_, _text, key), copy in zip(encoded, copies, strict=True):
        if key is not None:
            return False, None
        if type_ == "tool_result":
            results.append(copy["tool_call_id"])
        elif type_ == "tool_call":
            dispatches.append(copy["id"])
    if not results and not dispatches:
        return True, None
    if len(set(results)) < len(results) or len(set(dispatches)) < len(dispatches):
        return False, None
    if seed_length_txn(db, session_id):
        return False, None  # a fork: its calls are read through the parent too
    calls = {*results, *dispatches}
    known = {c: (d, a) for c, _r, d, a in db.execute(db.sql.call_seqs, (session_id, json.dumps(sorted(calls))))}
    if any(known.get(c, (None, None))[1] is not None for c in results):
        return False, None
    if any(known.get(c, (None, None))[0] is not None for c in dispatches):
        return False, None
    turns = _open_turns_txn(db, session_id)
    open_turns = len(turns)
    for type_, _text, _key in encoded:  # the turn journal as the schema's trigger keeps it
        if type_ == "turn_start":
            open_turns += 1
        elif type_ == "turn_end":
            open_turns = max(open_turns - 1, 0)
        elif type_ == "tool_call" and not open_turns:
            return False, None  # NoOpenTurn, or AlreadyDispatched: the item's own read says which
    return True, turns


def _derived_plan_txn(
    db: Database,
    session_id: str,
    first: int,
    encoded: list[tuple[str, str, str | None]],
    copies: list[dict[str, Any]],
    turns: OpenTurns | None,
) -> DerivedPlan | None:
    """The derived state of a batch written as one insert, planned for the whole batch
    (``journal.derived_batch``) from the session's open turns (``turns``, read here if not
    yet) when it is large enough to gain by it on this backend (``db.plan_derived_from``); else
    ``None``: the schema's trigger keeps it row by row."""
    types = [type_ for type_, _text, _key in encoded]
    if sum(1 for t in types if t in _DERIVING) < db.plan_derived_from:
        return None
    if turns is None:
        turns = _open_turns_txn(db, session_id)
    return derived_batch.plan(session_id, first, types, copies, [start for start, _number in turns])


def checked_append(type_: str, data: object, codec: Codec) -> tuple[str, dict[str, Any]]:
    """A plain append's checks of its event, with nothing written (``InvalidEvent``): the event's
    text and its data's copy. The CLI's ``append --create`` runs them before it creates anything."""
    text, copy = codec.encode_copy(type_, data)
    _refuse_engine_only(type_, copy)
    return text, copy


def _refuse_engine_only(type_: str, data: dict[str, Any], index: int | None = None) -> None:
    if type_ in _ENGINE_ONLY:
        raise InvalidEvent(
            "type", f"a {type_} event is appended by {_ENGINE_ONLY[type_]}, not by a plain append", index
        )
    if type_ == "turn_end" and data.get("reason") == "interrupted":
        # Recovery's mark of a crash (DESIGN §5, §7): a plain append claiming it would make a turn
        # ended on purpose read as one a crash cut short. An import keeps the one it carries.
        problem = '"interrupted" is written only by recovery (recover()); end a turn "complete" or "rejected"'
        raise InvalidEvent("reason", problem, index)


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


class Log:
    """Sessions and their logs: the part every other part appends through."""

    def __init__(self, store: Store, codec: Codec, appends: GroupCommit) -> None:
        self._store = store
        self.codec = codec  # the journal's limits: every part encodes events through it
        self._appends = appends

    def append_txn(self, db: Database, session_id: str, type_: str, data: dict[str, Any], time_ms: int) -> Event:
        """Append one event inside the caller's transaction, validated by the journal's codec."""
        text, copy = self.codec.encode_copy(type_, data)
        seq = self.append_text_txn(db, session_id, type_, text, time_ms)
        return Event(session_id, seq, type_, copy, time_ms)

    def append_text_txn(
        self,
        db: Database,
        session_id: str,
        type_: str,
        text: str,
        time_ms: int,
        *,
        call_id: str | None = None,
        checked: bool = False,
        key: str | None = None,
    ) -> int:
        """Append one validated event at the session's next seq, inside the caller's transaction
        (``checked`` as for ``insert_txn``)."""
        seq = next_seq_in_txn(db, session_id)
        self.insert_txn(db, session_id, seq, type_, text, time_ms, call_id=call_id, checked=checked, key=key)
        return seq

    def insert_txn(
        self,
        db: Database,
        session_id: str,
        seq: int,
        type_: str,
        text: str,
        time_ms: int,
        *,
        call_id: str | None = None,
        checked: bool = False,
        key: str | None = None,
    ) -> None:
        """Insert one validated event, translating the schema's refusals into typed errors.

        For a dispatch or a result, ``call_id`` saves decoding ``text`` again to find the call;
        ``checked`` says the caller found, in this transaction, no dispatch (of a ``tool_call``)
        or no result (of a ``tool_result``) for it anywhere in the fork chain."""
        if type_ in _GUARDED and call_id is None:
            call_id = call_id_of(type_, json.loads(text))
        # The unique indexes hold within a session; this lookup extends them through a fork's
        # inherited prefix (a call answered or dispatched in the parent is so in the fork too).
        if type_ in _GUARDED and seq > 0 and not checked:
            assert call_id is not None
            _requested, dispatched, answered = call_seqs_txn(db, session_id, call_id)
            if type_ == "tool_result" and answered is not None:
                raise ResultExists(session_id, call_id)
            if type_ == "tool_call" and dispatched is not None:
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

    # -- sessions ------------------------------------------------------------------------------

    def create_session(self, id: str | None = None, *, meta: dict[str, Any] | None = None) -> Session:
        """Create an empty session; a generated id is 32 lowercase hex characters."""
        session_id = uuid.uuid4().hex if id is None else check_session_id(id)
        meta_text = None if meta is None else self.codec.encode_meta(meta)
        created = now_ms()
        with self._store.write("create_session", sessions=(session_id,)) as db:
            insert_session_txn(db, session_id, created, meta=meta_text)
        return Session(id=session_id, count=0, created_ms=created, meta=meta)

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
        text, copy = self._encoded(session_id, type, data)
        if key is not None:
            _state.check_key(key)
        if expected_count is not None:
            check_int("expected_count", expected_count)
        time_ms = now_ms()
        guesses = self._store.next_seqs
        seq = guesses.get(session_id)
        fast = seq is not None and expected_count is None and (key is None or type not in _FAST_TYPES)
        if fast and type == _TURN_END:
            # It must not name another turn than the open one: read first, outside a
            # transaction. Sound: the INSERT at the guessed seq succeeds only if nothing was
            # appended since this connection's last write, and only appends move turns.
            with self._store.read() as db:
                try:
                    check_turn_end_txn(db, session_id, copy)
                except InvalidEvent:
                    fast = False  # the path below says why, inside its transaction
        if seq is not None and fast:
            # The common case: this connection wrote the session's last event, so the INSERT
            # alone is the whole transaction. The schema's contiguity trigger refuses a stale seq
            # (another connection appended since); a dispatch or result of a fork, or a dispatch
            # outside a turn, or a keyed event of a fork, inserts nothing; a second dispatch or
            # result, or a stored key, hits a unique index. Each then takes the path below, which
            # reads inside a transaction and says which.
            if key is None:
                row: tuple[Any, ...] = (session_id, seq, type, text, time_ms)
                sql = _fast_insert(self._store.sql, type)
            else:
                row, sql = (session_id, seq, type, text, time_ms, key), _INSERT_OWN_KEYED
            try:
                if self._appends.run_one(sql, row, present=lambda db: _stored(db, row), session=session_id):
                    guesses[session_id] = seq + 1
                    return Event(session_id, seq, type, copy, time_ms, key)
            except SchemaViolation:
                guesses.pop(session_id, None)
        written: list[int] = []  # the seq it was written at, once it is (by ``work`` or the group)

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
            if seq is None or type in _GUARDED or type == _TURN_END or key is not None or expected_count is not None:
                if type == _TURN_END:
                    check_turn_end_txn(db, session_id, copy)
                check_dispatch_in_turn_txn(db, session_id, type, copy)
                seq = self.append_text_txn(db, session_id, type, text, time_ms, call_id=call_id_of(type, copy), key=key)
            else:
                try:
                    self.insert_txn(db, session_id, seq, type, text, time_ms)
                except SchemaViolation:
                    seq = self.append_text_txn(db, session_id, type, text, time_ms)
            written.append(seq)
            return seq

        # A plain append's row, which a group commit may insert with others of its batch in one
        # statement (a refused one lets ``work`` run, in its place, and find out why).
        plain = _plain_row(session_id, seq, type, text, time_ms) if key is None and expected_count is None else None
        done = self._appends.run(work, present=present, session=session_id, row=plain, written=written)
        if isinstance(done, Event):
            return done
        return Event(session_id, done, type, copy, time_ms, key)

    def _encoded(self, session_id: str, type: str, data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """An append's checks before anything is written, and its event's text and copy."""
        check_text("session_id", session_id)
        return checked_append(type, data, self.codec)

    def round_row(
        self, session_id: str, type: str, data: dict[str, Any], guesses: Mapping[str, int]
    ) -> tuple[EventRow, Event] | None:
        """``append(session_id, type, data)``'s row and event when it takes the fast path, for a
        writer that inserts several such rows in one statement (the async writer's round): the
        same checks and errors as ``append``, nothing written. ``guesses``: the session's next
        seq where the caller has rows of it pending, else the store's guess is used. ``None``:
        ``append`` must run itself (no guess of the session's next seq, or a dispatch or a result,
        which have their own statements). A refused insert of the rows says a guess was stale:
        then run each ``append`` itself, which finds out why."""
        text, copy = self._encoded(session_id, type, data)
        seq = guesses.get(session_id, self._store.next_seqs.get(session_id))
        row = _plain_row(session_id, seq, type, text, now_ms())
        return None if row is None else (row, Event(session_id, row[1], type, copy, row[4]))

    def append_many(
        self,
        session_id: str,
        items: Iterable[tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str | None]],
        *,
        expected_count: int | None = None,
        state: Mapping[str, Any] | None = None,
        owned: bool = False,
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
        transaction (``set_state``), dated after the batch's events. ``owned``: a turn the batch
        opens is driven by this process, recorded as the turn API records it (its owner), so
        another process's recovery leaves it alone while this one lives, and closes it once it is gone."""
        check_text("session_id", session_id)
        encoded: list[tuple[str, str, str | None]] = []
        copies: list[dict[str, Any]] = []
        for index, item in enumerate(items):
            if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
                raise InvalidArgument(f"items[{index}]", "must be a (type, data) or (type, data, key) tuple")
            item_key = item[2] if len(item) == 3 else None
            text, copy = self.codec.encode_copy(item[0], item[1], index=index)
            _refuse_engine_only(item[0], copy, index)
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
            out = self._append_items_txn(db, session_id, encoded, copies, time_ms)
            if owned:
                for event in out:
                    if event.type == "turn_start" and not event.existing:
                        own_turn_txn(db, session_id, event.seq)
            if values is not None:
                _state.write_txn(db, session_id, next_seq_in_txn(db, session_id), values)
        return out

    def _append_items_txn(
        self,
        db: Database,
        session_id: str,
        encoded: list[tuple[str, str, str | None]],
        copies: list[dict[str, Any]],
        time_ms: int,
    ) -> list[Event]:
        """A batch's items in order: each one that needs reads (a keyed one, a dispatch, a result)
        alone, in its place; each run of the others as one insert (``insert_events``), written
        before the next item that reads, so that it sees them. When what those reads would find
        is known beforehand (``_reads_settled_txn``), the whole batch is one insert."""
        out: list[Event] = []
        run: list[int] = []
        settled, turns = _reads_settled_txn(db, session_id, encoded, copies)
        if settled and any(type_ == _TURN_END for type_, _text, _key in encoded):
            # Every item is written, in order, from the next seq: its turns are checked before any is.
            moving = list(turns) if turns is not None else _open_turns_txn(db, session_id)
            first = next_seq_in_txn(db, session_id)
            for i, (type_, _text, _key) in enumerate(encoded):
                check_turn(moving, type_, copies[i], first + i, i)

        def flush() -> None:
            if not run:
                return
            first = next_seq_in_txn(db, session_id)
            whole = settled and len(run) == len(encoded)  # settled: the batch is this one run
            derived = _derived_plan_txn(db, session_id, first, encoded, copies, turns) if whole else None
            try:
                rows = [(session_id, first + n, *encoded[i][:2], time_ms) for n, i in enumerate(run)]
                db.insert_events(rows, derived)
            except SchemaViolation as exc:
                raise SchemaViolation("append_many", exc.detail) from exc
            db.next_seqs[session_id] = first + len(run)
            out.extend(Event(session_id, first + n, encoded[i][0], copies[i], time_ms) for n, i in enumerate(run))
            run.clear()

        for i, (type_, text, key) in enumerate(encoded):
            if settled or (key is None and type_ not in _GUARDED and type_ != _TURN_END):
                run.append(i)
                continue
            flush()
            out.append(self._append_item_txn(db, session_id, type_, text, key, copies[i], time_ms, i))
        flush()
        return out

    def _append_item_txn(
        self,
        db: Database,
        session_id: str,
        type_: str,
        text: str,
        key: str | None,
        copy: dict[str, Any],
        time_ms: int,
        index: int | None = None,
    ) -> Event:
        """One item of a batch that needs reads: a keyed one, a dispatch or a result, a turn's
        end."""
        if key is not None:
            found = keyed_event_txn(db, session_id, key)
            if found is not None:
                return found
        if type_ == _TURN_END:
            check_turn_end_txn(db, session_id, copy, index)
        checked = False
        if type_ == "tool_result":
            call_id = copy["tool_call_id"]
            winner_seq = result_seq_txn(db, session_id, call_id)
            if winner_seq is not None:  # G5: the first result stays; a different one is evidence
                (winner,) = read_events_txn(db, session_id, winner_seq, winner_seq + 1)
                if same_result(winner.data, copy):
                    return attrs.evolve(winner, existing=True)
                seq = self.append_text_txn(db, session_id, "tool_result_late", text, time_ms, key=key)
                return Event(session_id, seq, "tool_result_late", copy, time_ms, key)
            checked = True  # no result in the fork chain: the insert need not ask again
        check_dispatch_in_turn_txn(db, session_id, type_, copy)
        seq = self.append_text_txn(
            db, session_id, type_, text, time_ms, call_id=call_id_of(type_, copy), checked=checked, key=key
        )
        return Event(session_id, seq, type_, copy, time_ms, key)

    # -- keyed state -----------------------------------------------------------------------------

    def set_state(self, session_id: str, values: Mapping[str, Any]) -> None:
        """Write keyed state values (each a JSON value or bytes) in one transaction: a new
        version of each key, dated by the session's event count; the others are untouched."""
        check_text("session_id", session_id)
        encoded = _state.encode_values(self.codec, values)
        with self._store.write("set_state", sessions=(session_id,)) as db:
            _state.write_txn(db, session_id, next_seq_txn(db, session_id), encoded)

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
                        self.insert_txn(db, session_id, seq, type_, text, time_ms, call_id=call_id, key=key)
                    except (NoOpenTurn, AlreadyDispatched, ResultExists, SchemaViolation) as exc:
                        raise InvalidEvent(f"{where}: {_IMPORT_FIELDS.get(type(exc), 'event')}", exc.message()) from exc
                for key, at, kind, value in state:
                    _state.write_txn(db, session_id, at, [(key, kind, value)])
                imported += 1
        return imported

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
        deleted: int = db.value("SELECT count(*) FROM events WHERE session_id = ?", (session_id,))
        db.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
        _state.forget_txn(db, session_id)
        return deleted

    def forget_txn(self, db: Database, session_id: str) -> None:
        """Delete the session's row (and its meta's index rows), last: the derived rows that
        reference it are gone by now."""
        db.execute("DELETE FROM session_meta WHERE session_id = ?", (session_id,))
        db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
