"""The results part: the dispatch barrier (G6) and first-write-wins results (G5).

It owns the ``tool_calls`` table (whose rows the schema's triggers derive from the log; this part
marks a call indeterminate, for effect-class recovery).

``dispatch`` commits the ``tool_call`` event before it returns, so the tool runs only after a
durable record says it was handed over. ``put_result`` inserts the ``tool_result`` against the
unique index of one result per call; on a conflict it re-reads the winner in the same
transaction and keeps a different loser as a ``tool_result_late`` event: never dropped, never
replacing the first.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import attrs

from journal import lineage
from journal.codec import MAX_CALL_ID, check_id
from journal.errors import (
    AlreadyDispatched,
    InvalidArgument,
    LeaseLost,
    NoOpenTurn,
    ResultExists,
    SchemaViolation,
    UnknownToolCall,
)
from journal.model import CallState, Event, now_ms
from journal.store import Database, Store
from journal.turns import ResultCalls as ResultCalls  # (kept with TurnCalls, which extends it)
from journal.turns import turn_at_txn, turn_before_txn

if TYPE_CHECKING:
    from journal.log import Log
    from journal.turns import Turn

# The seqs that requested, dispatched and answered a call: its own ``tool_calls`` row, with the
# session's seed_length (no row: no such session; NULL seqs: not in its own events).
_OWN_SEQS = (
    "SELECT seed_length, c.requested_seq, c.dispatch_seq, c.result_seq FROM sessions AS s "
    "LEFT JOIN tool_calls AS c ON c.session_id = s.id AND c.call_id = ?2 WHERE s.id = ?1"
)
_SEQS = "SELECT requested_seq, dispatch_seq, result_seq FROM tool_calls WHERE session_id = ? AND call_id = ?"
CallSeqs = tuple[int | None, int | None, int | None]


@attrs.frozen
class PutResult:
    """What ``put_result`` did: ``event`` is the winning ``tool_result`` (this write's when
    ``won``); ``late`` is the ``tool_result_late`` that kept a different losing result."""

    event: Event
    won: bool
    late: Event | None = None


@attrs.define
class Dispatch:
    """A committed dispatch: the ``tool_call`` event, and a way to record the call's result."""

    journal: ResultCalls = attrs.field(repr=False)
    event: Event
    outcome: PutResult | None = None

    @property
    def call_id(self) -> str:
        call_id: str = self.event.data["id"]  # a dispatch's id (the codec checks it)
        return call_id

    @property
    def arguments(self) -> Any:
        return self.event.data.get("arguments")

    def result(self, content: Any, **fields: Any) -> PutResult:
        self.outcome = self.journal.put_result(self.event.session_id, self.call_id, content, **fields)
        return self.outcome

    def __enter__(self) -> Dispatch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        # A tool that raised (or never reported) leaves its call dispatched without a result:
        # that is the honest record ("it may have run"). A raise leaves the turn open too, and
        # recovery says so; a turn closed since lists the call owed until its result comes.
        return None


def inherited_seqs_txn(db: Database, session_id: str, call_id: str) -> CallSeqs:
    """The seqs that requested, dispatched and answered the call in the part of the log a fork
    reads through its ancestors (each below the point where the next one forked)."""
    found: list[int | None] = [None, None, None]
    for owner, _lo, hi in lineage.chain_txn(db, session_id)[1:]:
        row = db.one(_SEQS, (owner, call_id))
        for i, seq in enumerate(row or ()):
            if found[i] is None and seq is not None and seq < hi:
                found[i] = seq
    return found[0], found[1], found[2]


def call_seqs_txn(db: Database, session_id: str, call_id: str) -> CallSeqs:
    """The seqs that requested, dispatched and answered the call, its own first, then through
    the fork chain (one read for a session that is not a fork, or whose own row says all)."""
    row = db.one(_OWN_SEQS, (session_id, call_id))
    if row is None:
        return None, None, None
    seed, requested, dispatched, answered = row
    if seed and None in (requested, dispatched, answered):
        inherited = inherited_seqs_txn(db, session_id, call_id)
        requested, dispatched, answered = (
            own if own is not None else parents for own, parents in zip((requested, dispatched, answered), inherited)
        )
    return requested, dispatched, answered


def result_seq_txn(db: Database, session_id: str, call_id: str) -> int | None:
    """The seq of the call's result (its own or inherited), or ``None``."""
    return call_seqs_txn(db, session_id, call_id)[2]


def dispatch_seq_txn(db: Database, session_id: str, call_id: str) -> int | None:
    """The seq of the call's dispatch (its own or inherited), or ``None``."""
    return call_seqs_txn(db, session_id, call_id)[1]


def same_result(winner: dict[str, Any], loser: dict[str, Any]) -> bool:
    """Whether a second result for a call says the same as the stored one (then it is not kept)."""
    keys = ("content", "is_error", "name", "metadata")
    return all(winner.get(k) == loser.get(k) for k in keys)


def event_at_txn(db: Database, session_id: str, seq: int) -> Event:
    for event in lineage.read_events_txn(db, session_id, seq, seq + 1):
        return event
    raise AssertionError(f"no event at seq {seq} of {session_id!r}")  # pragma: no cover


def requested_call_txn(db: Database, session_id: str, call_id: str) -> dict[str, Any]:
    """The ``{id, name, arguments}`` an assistant message of the session requested."""
    return _requested_txn(db, session_id, call_id)[1]


def _requested_txn(db: Database, session_id: str, call_id: str) -> tuple[int, dict[str, Any]]:
    """The seq of the assistant message that requested the call, and the call itself."""
    seq = call_seqs_txn(db, session_id, call_id)[0]
    if seq is None:
        raise UnknownToolCall(session_id, call_id)
    message = event_at_txn(db, session_id, seq)
    for call in message.data.get("tool_calls") or ():
        if call.get("id") == call_id:
            return seq, call
    raise UnknownToolCall(session_id, call_id)  # pragma: no cover - the trigger read the same list


def _check_turn_txn(db: Database, session_id: str, requested_seq: int, turn: Turn | None) -> None:
    """A call requested inside a turn may be dispatched only while that turn is open (and, with a
    handle, by the attempt that holds it): a turn closed by recovery runs no more tools. One
    exception, with a handle: a call an earlier turn requested and ended without answering (a
    human's approval awaited, as the frameworks pause for one), or one requested outside any
    turn (a framework's run without the journal's turns paused for the approval), is dispatched
    by the open turn that resumes it -- it is recorded there, so a crash inside it is that
    turn's to recover (the planner attributes it so). (Recovery answers every call an
    interrupted turn owes, so no such call is left of a crash.)"""
    row = turn_before_txn(db, session_id, requested_seq)
    start_seq, end_seq, _outer, attempt = row if row is not None else (None, None, None, None)
    inside = row is not None and (end_seq is None or end_seq > requested_seq)
    if not inside and turn is None:
        # Outside a turn nothing would close the call after a crash (recovery closes turns):
        # scan, recover and the provider view could disagree about it, so it never starts.
        raise NoOpenTurn(session_id, "the call was requested outside a turn; dispatch calls inside an open turn")
    if turn is not None:
        if not inside or (start_seq != turn.start_seq and end_seq is not None and end_seq < turn.start_seq):
            row = turn_at_txn(db, session_id, turn.start_seq)  # the resuming turn: held, open
            start_seq, end_seq, _outer, attempt = row if row is not None else (None, None, None, None)
        if start_seq != turn.start_seq:
            raise LeaseLost(session_id, turn.attempt, "the call was not requested in this turn")
        if attempt != turn.attempt:
            raise LeaseLost(session_id, turn.attempt, f"attempt {attempt} holds the turn now")
        if end_seq is not None:
            raise LeaseLost(session_id, turn.attempt, f"the turn was closed at seq {end_seq}")
    elif end_seq is not None:
        raise NoOpenTurn(session_id, f"the turn that requested this call was closed at seq {end_seq}")


@attrs.frozen
class CallRow:
    """One row of ``tool_calls``: where a tool call stands, and what recovery needs of it."""

    session_id: str
    call_id: str
    name: str | None
    state: CallState
    requested_seq: int | None
    dispatch_seq: int | None
    result_seq: int | None
    effect: str | None
    idempotency_key: str | None
    request_id: str | None

    COLUMNS = (
        "session_id, call_id, name, state, requested_seq, dispatch_seq, result_seq, effect, idempotency_key, request_id"
    )

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> CallRow:
        return cls(row[0], row[1], row[2], CallState(row[3]), *row[4:])


@attrs.frozen
class ToolStats:
    """One tool's calls at a glance (``Journal.tool_stats``): ``calls`` (each call id once per
    session), ``results`` (answered, real or synthetic), ``errors`` (real results marked
    ``is_error``), ``may_have_run`` and ``did_not_run`` (recovery's synthetic results by risk),
    ``indeterminate`` (awaiting an operator), and the p50 and p95 of the time from dispatch to a
    real result, in ms (nearest rank; ``None`` without any)."""

    name: str
    calls: int
    results: int
    errors: int
    may_have_run: int
    did_not_run: int
    indeterminate: int
    p50_ms: int | None
    p95_ms: int | None

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


TOOL_STATS_LIMIT = 1000  # tool names a statistics read returns at most (the most called)


@attrs.frozen
class PendingCall:
    """A dispatched call without a result: it may have run."""

    session_id: str
    call_id: str
    name: str | None
    dispatch_seq: int
    effect: str | None
    idempotency_key: str | None
    request_id: str | None


def pending_calls_txn(db: Database) -> list[PendingCall]:
    """Every dispatched call without a result: it may have run (the partial index of them)."""
    return [
        PendingCall(*row)
        for row in db.execute(
            "SELECT session_id, call_id, name, dispatch_seq, effect, idempotency_key, request_id "
            "FROM tool_calls WHERE state = 'dispatched' ORDER BY session_id, dispatch_seq"
        )
    ]


def call_row_txn(db: Database, session_id: str, call_id: str) -> CallRow | None:
    """The session's own ``tool_calls`` row of the call (not one inherited through a fork)."""
    row = db.one(
        f"SELECT {CallRow.COLUMNS} FROM tool_calls WHERE session_id = ? AND call_id = ?", (session_id, call_id)
    )
    return None if row is None else CallRow.from_row(row)


class Results:
    """``dispatch`` and ``put_result``."""

    def __init__(self, journal: ResultCalls, store: Store, log: Log) -> None:
        self._journal = journal  # what the handles call back into
        self._store = store
        self._log = log

    def mark_indeterminate_txn(self, db: Database, session_id: str, call_id: str, result_seq: int) -> None:
        """The call answered by the synthetic result at ``result_seq`` awaits an operator (G10):
        a compare-and-set on that very result, refused unless it lands."""
        db.execute(
            "UPDATE tool_calls SET state = 'indeterminate' "
            "WHERE session_id = ? AND call_id = ? AND result_seq = ? AND state = 'resolved'",
            (session_id, call_id, result_seq),
        )
        row = call_row_txn(db, session_id, call_id)
        if row is None or row.state is not CallState.INDETERMINATE:  # the triggers changed under us: roll back
            state = None if row is None else row.state.value
            raise SchemaViolation("effect_recovery", f"the call's state is {state!r} after its indeterminate result")

    def forget_txn(self, db: Database, session_id: str) -> None:
        """Delete the session's tool-call states (purge)."""
        db.execute("DELETE FROM tool_calls WHERE session_id = ?", (session_id,))

    def tool_stats(self, session_id: str | None = None, *, limit: int = TOOL_STATS_LIMIT) -> list[ToolStats]:
        """Per tool name, most called first, at most ``limit`` names: what ``ToolStats`` says,
        over every session or over one (its own calls: a fork's inherited ones are its
        parent's). One statement over ``tool_calls`` and the dispatch and result events."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= TOOL_STATS_LIMIT:
            raise InvalidArgument("limit", f"must be an int from 1 to {TOOL_STATS_LIMIT}, not {limit!r}")
        with self._store.read() as db:
            if session_id is not None:
                lineage.seed_length_txn(db, session_id)  # SessionNotFound for an unknown id
            rows = list(db.execute(db.sql.tool_stats, (session_id, limit)))
        return [
            ToolStats(
                str(r[0]),
                int(r[1]),
                int(r[2]),
                int(r[3] or 0),
                int(r[4] or 0),
                int(r[5] or 0),
                int(r[6] or 0),
                _ms(r[7]),
                _ms(r[8]),
            )
            for r in rows
        ]

    def requested_call(self, session_id: str, call_id: str) -> dict[str, Any]:
        """The ``{id, name, arguments}`` an assistant message of the session requested."""
        with self._store.read() as db:
            lineage.next_seq_txn(db, session_id)  # SessionNotFound first
            return requested_call_txn(db, session_id, call_id)

    def dispatch(
        self,
        session_id: str,
        call_id: str,
        *,
        turn: Turn | None = None,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        effect: str | None = None,
    ) -> Dispatch:
        """Record that a requested tool call is handed to its executor, durably, before it runs.

        The commit is synced to disk even under ``durability="normal"`` (one fsync per tool
        call): a power cut never takes the record of a dispatch whose tool then ran.

        The ``tool_call`` event carries the call's name and recorded arguments. Dispatching a
        call twice raises ``AlreadyDispatched`` (a call never runs twice); a call that already
        has a result raises ``ResultExists``; a call no assistant message requested raises
        ``UnknownToolCall``. Use the returned ``Dispatch`` as a context manager and call
        ``.result(...)`` inside it.
        """
        check_id("call_id", call_id, MAX_CALL_ID)
        time_ms = now_ms()
        # Synced even under durability="normal": the tool runs next, and a power cut must not
        # take the record of a dispatch whose side effect stays (G6).
        with self._store.write("dispatch", synced=True, sessions=(session_id,)) as db:
            requested_seq, call = _requested_txn(db, session_id, call_id)
            _requested, dispatched, answered = call_seqs_txn(db, session_id, call_id)
            if dispatched is not None:
                raise AlreadyDispatched(session_id, call_id, dispatched)
            if answered is not None:
                raise ResultExists(session_id, call_id)
            _check_turn_txn(db, session_id, requested_seq, turn)
            data: dict[str, Any] = {"id": call_id, "name": call.get("name")}
            if "arguments" in call:
                data["arguments"] = call["arguments"]
            for key, value in (("idempotency_key", idempotency_key), ("request_id", request_id), ("effect", effect)):
                if value is not None:
                    data[key] = value
            text = self._log.codec.encode("tool_call", data)
            seq = lineage.next_seq_txn(db, session_id)
            self._log.insert_txn(db, session_id, seq, "tool_call", text, time_ms, call_id=call_id, checked=True)
        return Dispatch(self._journal, Event(session_id, seq, "tool_call", json.loads(text), time_ms))

    def put_result(
        self,
        session_id: str,
        call_id: str,
        content: Any,
        *,
        is_error: bool = False,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> PutResult:
        """Record a tool call's result; the first one written wins (G5).

        A later result never replaces the first: ``.won`` is False, ``.event`` is the winner,
        and a loser with different content is kept as a ``tool_result_late`` event (``.late``).
        Writing the very same result again is harmless and writes nothing.
        """
        data: dict[str, Any] = {"tool_call_id": call_id, "content": content}
        if name is not None:
            data["name"] = name
        if is_error is not False:  # anything else is the codec's to refuse, as append refuses it
            data["is_error"] = is_error
        if metadata is not None:
            data["metadata"] = metadata
        text = self._log.codec.encode("tool_result", data)
        time_ms = now_ms()
        with self._store.write("put_result", sessions=(session_id,)) as db:
            outcome = put_result_txn(db, self._log, session_id, call_id, text, time_ms)
        return outcome


def put_result_txn(
    db: Database,
    log: Log,
    session_id: str,
    call_id: str,
    text: str,
    time_ms: int,
    *,
    data: dict[str, Any] | None = None,
) -> PutResult:
    """First-write-wins insert of an encoded ``tool_result`` inside the caller's transaction,
    appended through ``log`` (``data``: what ``text`` decodes to, when the caller has it)."""
    requested, dispatched, winner_seq = call_seqs_txn(db, session_id, call_id)
    if requested is None and dispatched is None:
        raise UnknownToolCall(session_id, call_id)
    seq = lineage.next_seq_in_txn(db, session_id)
    if winner_seq is None:
        # No result anywhere, read in this transaction: the unique index keeps it first.
        log.insert_txn(db, session_id, seq, "tool_result", text, time_ms, call_id=call_id, checked=True)
        return PutResult(
            Event(session_id, seq, "tool_result", json.loads(text) if data is None else data, time_ms), won=True
        )
    winner = event_at_txn(db, session_id, winner_seq)
    loser = json.loads(text)
    if same_result(winner.data, loser):
        return PutResult(winner, won=False)
    # The loser's data, verbatim: it was validated as a result already (under the journal's size
    # limit), and a late result's one required field is a result's too.
    log.insert_txn(db, session_id, seq, "tool_result_late", text, time_ms)
    return PutResult(winner, won=False, late=Event(session_id, seq, "tool_result_late", loser, time_ms))


def _ms(value: Any) -> int | None:
    return None if value is None else int(value)
