"""Turns, steps and the turn journal: the live loop of DESIGN §6.

Each call is one transaction. The turn journal row of a turn is derived from the log by the
schema's triggers (so a ``turn_start`` written with plain ``append`` opens a turn too); the calls
here add what the log cannot say (``provider_started`` and its stream key) and guard every write
with a compare-and-set on the caller's attempt: a caller whose turn was taken over or closed
(by recovery, or by the reconciler's new attempt) gets ``LeaseLost`` and writes nothing.

A turn whose body raises is left open on purpose: it really did not finish, and recovery closes
it honestly (``turn_end`` with reason ``interrupted``). A step whose body raises is closed with
``outcome: "error"``, and the exception propagates.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import attrs

from journal import log as _log
from journal.errors import InvalidArgument, LeaseLost, NoOpenTurn, OpenTurnError
from journal.model import Event, Phase, StepOutcome, TurnEndReason
from journal.owners import lease_owner
from journal.store import Database, Store
from journal.validate import Codec, check_int, encode_copy

if TYPE_CHECKING:
    from journal.results import Dispatch, PutResult

_JOURNAL_COLUMNS = "attempt, end_seq, phase, step_open, steps, turn, stream_key"


@attrs.define
class Turn:
    """A handle on an open turn, held by the worker running it.

    ``attempt`` is what the compare-and-set checks; ``step_number`` is the number of the open
    step, if any. The methods are the plain calls of ``Journal`` with this turn filled in.
    """

    journal: Any = attrs.field(repr=False)
    session_id: str
    start_seq: int
    turn: int
    attempt: int = 1
    step_number: int | None = None
    submission_id: str | None = None
    stream_key: str | None = None
    _closed: bool = attrs.field(default=False, repr=False)

    def step_start(self) -> Event:
        return self.journal.step_start(self)

    def step_end(self, *, outcome: str = "ok") -> Event:
        return self.journal.step_end(self, outcome=outcome)

    @contextlib.contextmanager
    def step(self) -> Iterator[Turn]:
        """``step_start`` now; ``step_end`` on exit (``outcome: "error"`` if the body raises)."""
        self.step_start()
        try:
            yield self
        except BaseException:
            if self.step_number is not None:
                with contextlib.suppress(LeaseLost):
                    self.step_end(outcome=StepOutcome.ERROR.value)
            raise
        if self.step_number is not None:
            self.step_end()

    def provider_started(self, *, stream_key: str | None = None) -> None:
        self.journal.provider_started(self, stream_key=stream_key)

    def save_chunk(self, index: int, content: str) -> bool:
        if self.stream_key is None:
            raise NoOpenTurn(self.session_id, "save_chunk needs provider_started(stream_key=...) first")
        return self.journal.save_chunk(self.session_id, self.stream_key, index, content)

    def assistant(self, content: Any, **fields: Any) -> Event:
        return self.journal.record_assistant(self, content, **fields)

    def dispatch(self, call_id: str, **fields: Any) -> Dispatch:
        return self.journal.dispatch(self.session_id, call_id, turn=self, **fields)

    def put_result(self, call_id: str, content: Any, **fields: Any) -> PutResult:
        return self.journal.put_result(self.session_id, call_id, content, **fields)

    def complete(self) -> Event:
        return self.journal.turn_end(self, reason=TurnEndReason.COMPLETE.value)

    def reject(self) -> Event:
        return self.journal.turn_end(self, reason=TurnEndReason.REJECTED.value)

    @property
    def closed(self) -> bool:
        """Whether this handle ended its turn (``complete``/``reject``)."""
        return self._closed


def _turn_row_txn(db: Database, turn: Turn) -> tuple[Any, ...]:
    """The turn's journal row, if the caller still holds it; raises ``LeaseLost`` otherwise."""
    row = db.one(
        f"SELECT {_JOURNAL_COLUMNS} FROM turn_journal WHERE session_id = ? AND start_seq = ?",
        (turn.session_id, turn.start_seq),
    )
    if row is None:
        raise LeaseLost(turn.session_id, turn.attempt, f"no turn started at seq {turn.start_seq}")
    attempt, end_seq = row[0], row[1]
    if attempt != turn.attempt:
        raise LeaseLost(turn.session_id, turn.attempt, f"attempt {attempt} holds the turn now")
    if end_seq is not None:
        raise LeaseLost(turn.session_id, turn.attempt, f"the turn was closed at seq {end_seq}")
    return row


def append_txn(db: Database, session_id: str, type_: str, data: dict[str, Any], time_ms: int) -> Event:
    """Append one event inside the caller's transaction (the event is validated here)."""
    text, copy = encode_copy(type_, data)
    seq = _log.append_text_txn(db, session_id, type_, text, time_ms)
    return Event(session_id, seq, type_, copy, time_ms)


def open_turn_txn(db: Database, session_id: str) -> int | None:
    """The start seq of the session's innermost open turn, or ``None``."""
    return db.value(
        "SELECT max(start_seq) FROM turn_journal INDEXED BY turn_journal_open WHERE session_id = ? AND end_seq IS NULL",
        (session_id,),
    )


def last_turn_number_txn(db: Database, session_id: str) -> int:
    """The number of the session's latest turn (0 if none), read through the fork chain."""
    for owner, lo, hi in _log.chain_txn(db, session_id):
        row = db.one(
            "SELECT turn FROM turn_journal WHERE session_id = ? AND start_seq >= ? AND start_seq < ? "
            "ORDER BY start_seq DESC LIMIT 1",
            (owner, lo, hi if hi != float("inf") else 2**62),
        )
        if row is not None:
            return row[0] or 0
    return 0


def start_turn_txn(
    db: Database, session_id: str, time_ms: int, *, owner: str, submission_id: str | None = None, attempt: int = 1
) -> tuple[Event, int]:
    """Open a turn driven by ``owner`` inside the caller's transaction; turns do not nest."""
    open_seq = open_turn_txn(db, session_id)
    if open_seq is None:
        _log.next_seq_txn(db, session_id)  # SessionNotFound before anything else
    else:
        raise OpenTurnError(open_seq, "turns do not nest: end (or recover) it first")
    number = last_turn_number_txn(db, session_id) + 1
    data: dict[str, Any] = {"turn": number}
    if submission_id is not None:
        data["submission_id"] = submission_id
    event = append_txn(db, session_id, "turn_start", data, time_ms)
    db.execute(
        "UPDATE turn_journal SET attempt = ?, owner = ? WHERE session_id = ? AND start_seq = ?",
        (attempt, owner, session_id, event.seq),
    )
    return event, number


class TurnsMixin:
    """The turn and step calls of ``Journal``."""

    _store: Store
    _codec: Codec

    def turn_start(self, session_id: str) -> Turn:
        """Open a turn (``turn_start``, numbered from 1 by counting the log's turns)."""
        time_ms = _log.now_ms()
        with self._store.write("turn_start") as db:
            event, number = start_turn_txn(db, session_id, time_ms, owner=lease_owner())
        return Turn(self, session_id, event.seq, number)

    @contextlib.contextmanager
    def turn(self, session_id: str) -> Iterator[Turn]:
        """A turn as a context manager: ``turn_end`` (complete) on a normal exit, unless the
        body ended it itself; left OPEN if the body raises, for recovery to close honestly."""
        handle = self.turn_start(session_id)
        yield handle
        if not handle.closed:
            self.turn_end(handle, reason=TurnEndReason.COMPLETE.value)

    def step_start(self, turn: Turn) -> Event:
        """Open the next step of the turn."""
        time_ms = _log.now_ms()
        with self._store.write("step_start") as db:
            row = _turn_row_txn(db, turn)
            if row[3]:
                raise OpenTurnError(turn.start_seq, f"step {row[4]} is still open: end it first")
            event = append_txn(db, turn.session_id, "step_start", {"turn": turn.turn, "step": row[4] + 1}, time_ms)
        turn.step_number = row[4] + 1
        return event

    def step_end(self, turn: Turn, *, outcome: str = "ok") -> Event:
        """Close the open step with ``outcome`` ``ok`` or ``error``; the phase returns to
        ``before_provider``."""
        if outcome not in (StepOutcome.OK.value, StepOutcome.ERROR.value):
            raise InvalidArgument("outcome", f'must be "ok" or "error", not {outcome!r}')
        time_ms = _log.now_ms()
        with self._store.write("step_end") as db:
            row = _turn_row_txn(db, turn)
            if not row[3]:
                raise NoOpenTurn(turn.session_id, "step_end with no open step")
            event = append_txn(
                db, turn.session_id, "step_end", {"turn": turn.turn, "step": row[4], "outcome": outcome}, time_ms
            )
        turn.step_number = None
        turn.stream_key = None
        return event

    def provider_started(self, turn: Turn, *, stream_key: str | None = None) -> None:
        """Record that the model request is going out (phase ``provider_started``)."""
        if stream_key is not None and (not isinstance(stream_key, str) or not stream_key):
            raise InvalidArgument("stream_key", "must be a non-empty string")
        with self._store.write("provider_started") as db:
            row = _turn_row_txn(db, turn)
            if not row[3]:
                raise NoOpenTurn(turn.session_id, "provider_started outside a step")
            db.execute(
                "UPDATE turn_journal SET phase = 'provider_started', stream_key = ?, revision = revision + 1 "
                "WHERE session_id = ? AND start_seq = ? AND attempt = ? AND end_seq IS NULL "
                "AND phase IN ('before_provider', 'provider_started')",
                (stream_key, turn.session_id, turn.start_seq, turn.attempt),
            )
            if db.changes() != 1:
                raise InvalidArgument("phase", f"provider_started is not allowed in phase {row[2]!r}")
        turn.stream_key = stream_key

    def record_assistant(self, turn: Turn, content: Any, **fields: Any) -> Event:
        """Append the model's answer. With tool calls, the phase becomes
        ``tool_request_recorded`` and the request is saved, in the same transaction.

        ``stop_reason`` defaults to ``"tool_use"`` when there are tool calls, else ``"stop"``."""
        data = {"content": content, **{k: v for k, v in fields.items() if v is not None}}
        # The classifier reads stop_reason; a caller that leaves it out gets the obvious one.
        data.setdefault("stop_reason", "tool_use" if data.get("tool_calls") else "stop")
        text, copy = self._codec.encode_copy("assistant_message", data)
        time_ms = _log.now_ms()
        with self._store.write("assistant") as db:
            row = _turn_row_txn(db, turn)
            if not row[3]:
                raise NoOpenTurn(turn.session_id, "an assistant message outside a step")
            if row[2] == Phase.TOOL_REQUEST_RECORDED.value:
                raise InvalidArgument("phase", "this step already recorded a tool request; end the step first")
            seq = _log.next_seq_txn(db, turn.session_id)
            _log.insert_txn(db, turn.session_id, seq, "assistant_message", text, time_ms)
        return Event(turn.session_id, seq, "assistant_message", copy, time_ms)

    def turn_end(self, turn: Turn, *, reason: str = "complete") -> Event:
        """Close the turn with reason ``complete`` or ``rejected`` (``interrupted`` belongs to
        recovery). A step still open is an error: end it first."""
        if reason not in (TurnEndReason.COMPLETE.value, TurnEndReason.REJECTED.value):
            raise InvalidArgument(
                "reason", f'must be "complete" or "rejected" ("interrupted" is written only by recovery), not {reason!r}'
            )
        time_ms = _log.now_ms()
        with self._store.write("turn_end") as db:
            row = _turn_row_txn(db, turn)
            if row[3]:
                raise OpenTurnError(turn.start_seq, f"step {row[4]} is still open: end it first")
            event = append_txn(
                db, turn.session_id, "turn_end", {"turn": turn.turn, "steps": row[4], "reason": reason}, time_ms
            )
            self._settle_submission_txn(db, turn, reason, time_ms)
        turn._closed = True
        return event

    def save_chunk(self, session_id: str, stream_key: str, index: int, content: str) -> bool:
        """Save one streamed segment under ``(stream_key, index)``; the first write wins.

        Returns whether this write won. Chunks let the reconciler turn a half-streamed answer
        into an aborted assistant message after a crash.
        """
        if not isinstance(stream_key, str) or not stream_key:
            raise InvalidArgument("stream_key", "must be a non-empty string")
        check_int("index", index)
        if not isinstance(content, str):
            raise InvalidArgument("content", f"must be a string, not {type(content).__name__}")
        with self._store.write("save_chunk") as db:
            _log.next_seq_txn(db, session_id)
            db.execute(
                "INSERT INTO stream_chunks (stream_key, idx, session_id, content, time_ms) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (stream_key, idx) DO NOTHING",
                (stream_key, index, session_id, content, _log.now_ms()),
            )
            return db.changes() == 1

    def stream_chunks(self, stream_key: str) -> list[str]:
        """The saved segments of a stream, in index order."""
        with self._store.read() as db:
            return [row[0] for row in db.execute("SELECT content FROM stream_chunks WHERE stream_key = ? ORDER BY idx", (stream_key,))]

    def _settle_submission_txn(self, db: Database, turn: Turn, reason: str, time_ms: int) -> None:
        """Hook for the submissions module: settle the turn's submission in the same transaction."""

    def turn_state(self, session_id: str, start_seq: int | None = None) -> TurnState | None:
        """The turn journal row of a session's open turn (or of the turn started at
        ``start_seq``), or ``None``."""
        with self._store.read() as db:
            if start_seq is None:
                start_seq = open_turn_txn(db, session_id)
                if start_seq is None:
                    _log.next_seq_txn(db, session_id)
                    return None
            row = db.one(
                "SELECT session_id, start_seq, turn, phase, attempt, revision, checkpoint_seq, tool_request, "
                "stream_key, steps, step_open, submission_id, end_seq, end_reason "
                "FROM turn_journal WHERE session_id = ? AND start_seq = ?",
                (session_id, start_seq),
            )
        return None if row is None else TurnState.from_row(row)


@attrs.frozen
class TurnState:
    """One row of the turn journal: how far a turn got."""

    session_id: str
    start_seq: int
    turn: int | None
    phase: Phase
    attempt: int
    revision: int
    checkpoint_seq: int
    tool_request: list[dict[str, Any]] | None = attrs.field(hash=False)
    stream_key: str | None
    steps: int
    step_open: bool
    submission_id: str | None
    end_seq: int | None
    end_reason: str | None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> TurnState:
        values = list(row)
        values[3] = Phase(values[3])
        values[7] = None if values[7] is None else json.loads(values[7])
        values[10] = bool(values[10])
        return cls(*values)

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)
