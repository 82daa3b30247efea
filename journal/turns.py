"""The turns part: turns, steps and the provider phase (DESIGN §6).

It owns the ``turn_journal`` (whose rows the schema's triggers derive from turn and step events;
this part sets only who drives a turn, and the provider phase), and answers where a turn stands
for the other parts (the open turn, the turn open at a fork point). Ending a turn that a claim
opened settles its submission in the same transaction, by a direct call on the queue part. A
streamed answer's chunks are ``journal.streams``'.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from journal import lineage
from journal.codec import MAX_STREAM_KEY, check_id, check_text
from journal.errors import InvalidArgument, LeaseLost, NoOpenTurn, OpenTurnError, TurnHeld
from journal.model import Event, Phase, StepOutcome, SubmissionState, TurnEndReason, now_ms
from journal.owners import held_elsewhere, lease_owner
from journal.store import Database, Statements, Store

if TYPE_CHECKING:
    from journal.log import Log
    from journal.queue import Queue
    from journal.results import Dispatch, PutResult

TURN_COLUMNS = (
    "session_id, start_seq, turn, phase, attempt, revision, checkpoint_seq, tool_request, "
    "stream_key, steps, step_open, submission_id, end_seq, end_reason, owner"
)


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
    # The process driving the turn (``host:pid:process-start-time``): the turn API's, a claim's,
    # or ``append_many(owned=True)``'s; ``None`` for a turn opened by a plain append.
    owner: str | None = None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> TurnState:
        values = list(row)
        values[3] = Phase(values[3])
        values[7] = None if values[7] is None else json.loads(values[7])
        values[10] = bool(values[10])
        return cls(*values)

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _turn_row_sql(*, open_only: bool) -> str:
    """The read of one turn journal row (``open_only``: if the turn is still open)."""
    where = " AND end_seq IS NULL" if open_only else ""
    return f"SELECT {TURN_COLUMNS} FROM turn_journal WHERE session_id = ? AND start_seq = ?{where}"


def statement_shapes(sql: Statements) -> list[str]:
    """One statement of each shape this module builds at run time (``tests/test_statements.py``
    prepares them on both backends)."""
    return [_turn_row_sql(open_only=False), _turn_row_sql(open_only=True)]


def turn_row_txn(db: Database, session_id: str, start_seq: int, *, open_only: bool = False) -> TurnState | None:
    """The turn journal row of the turn started at ``start_seq`` (only if still open)."""
    row = db.one(_turn_row_sql(open_only=open_only), (session_id, start_seq))
    return None if row is None else TurnState.from_row(row)


def own_turn_txn(db: Database, session_id: str, start_seq: int) -> None:
    """Record this process as the driver of the turn started at ``start_seq`` (inside the
    caller's transaction, as the turn API does when it opens one)."""
    db.execute(
        "UPDATE turn_journal SET owner = ? WHERE session_id = ? AND start_seq = ?",
        (lease_owner(), session_id, start_seq),
    )


def open_turn_txn(db: Database, session_id: str) -> int | None:
    """The start seq of the session's innermost open turn, or ``None``."""
    start: int | None = db.value(db.sql.innermost_open_turn, (session_id,))
    return start


# The latest turn of a session's own log started at or before a seq, and a turn by its start.
_TURN_BEFORE = (
    "SELECT start_seq, end_seq, outer_start, attempt FROM turn_journal WHERE session_id = ? AND start_seq <= ? "
    "ORDER BY start_seq DESC LIMIT 1"
)
_TURN_AT = "SELECT start_seq, end_seq, outer_start, attempt FROM turn_journal WHERE session_id = ? AND start_seq = ?"


def turn_before_txn(db: Database, session_id: str, seq: int) -> tuple[int, int | None, int | None, int] | None:
    """``(start_seq, end_seq, outer_start, attempt)`` of the latest turn of the session's own
    events started at or before ``seq``, or ``None``."""
    row = db.one(_TURN_BEFORE, (session_id, seq))
    return None if row is None else (row[0], row[1], row[2], row[3])


def turn_at_txn(db: Database, session_id: str, start_seq: int) -> tuple[int, int | None, int | None, int] | None:
    """``(start_seq, end_seq, outer_start, attempt)`` of the session's turn started at
    ``start_seq``, or ``None``."""
    row = db.one(_TURN_AT, (session_id, start_seq))
    return None if row is None else (row[0], row[1], row[2], row[3])


def open_turn_at_txn(db: Database, session_id: str, boundary: int) -> int | None:
    """The seq of the innermost turn open just after event ``boundary``, or ``None``.

    Reads the turn journal (whose turn_end pairing is the recovery stack's) of the one session
    that owns ``boundary``: a fork's prefix never holds an open turn (G11), so no turn of an
    ancestor spans a fork point. The cost is a few index lookups, whatever the log's length.
    """
    owner = lineage.owner_of(lineage.chain_txn(db, session_id), boundary)
    row = turn_before_txn(db, owner, boundary)
    while row is not None:
        start, end, outer, _attempt = row
        if end is None or end > boundary:
            return start
        if outer is None:
            return None
        row = db.one(_TURN_AT, (owner, outer))
    return None


def last_turn_number_txn(db: Database, session_id: str) -> int:
    """The number of the session's latest turn (0 if none), read through the fork chain."""
    for owner, lo, hi in lineage.chain_txn(db, session_id):
        row = db.one(
            "SELECT turn FROM turn_journal WHERE session_id = ? AND start_seq >= ? AND start_seq < ? "
            "ORDER BY start_seq DESC LIMIT 1",
            (owner, lo, hi),
        )
        if row is not None:
            return row[0] or 0
    return 0


class ResultCalls(Protocol):
    """What a ``Dispatch`` calls back into (a ``Journal``): ``put_result``, and nothing of the
    facade beyond it."""

    def put_result(
        self,
        session_id: str,
        call_id: str,
        content: Any,
        *,
        is_error: bool = ...,
        name: str | None = ...,
        metadata: dict[str, Any] | None = ...,
    ) -> PutResult: ...


class TurnCalls(ResultCalls, Protocol):
    """What a ``Turn`` calls back into (a ``Journal``): the turn, stream, dispatch and result
    calls, so the handle depends on these few methods, not on the facade."""

    def step_start(self, turn: Turn) -> Event: ...
    def step_end(self, turn: Turn, *, outcome: str = ...) -> Event: ...
    def provider_started(self, turn: Turn, *, stream_key: str | None = ...) -> None: ...
    def save_chunk(self, session_id: str, stream_key: str, index: int, content: str) -> bool: ...
    def record_assistant(self, turn: Turn, content: Any, **fields: Any) -> Event: ...
    def dispatch(
        self,
        session_id: str,
        call_id: str,
        *,
        turn: Turn | None = ...,
        idempotency_key: str | None = ...,
        request_id: str | None = ...,
        effect: str | None = ...,
    ) -> Dispatch: ...
    def turn_end(self, turn: Turn, *, reason: str = ...) -> Event: ...


@attrs.define
class Turn:
    """A handle on an open turn, held by the worker running it.

    ``attempt`` is what the compare-and-set checks; ``step_number`` is the number of the open
    step, if any. The methods are the plain calls of ``Journal`` with this turn filled in.
    """

    journal: TurnCalls = attrs.field(repr=False)
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
        """Whether this handle ended its turn (``complete``/``reject``, a claim's ``fail``)."""
        return self._closed

    def mark_closed(self) -> None:
        self._closed = True


class Turns:
    """The turn and step calls; ``turn_end`` settles a claimed turn's submission."""

    def __init__(self, journal: TurnCalls, store: Store, log: Log, queue: Queue) -> None:
        self._journal = journal  # what the handles call back into
        self._store = store
        self._log = log
        self._queue = queue

    # -- what other parts call inside their transactions ---------------------------------------

    def start_txn(
        self,
        db: Database,
        session_id: str,
        time_ms: int,
        *,
        owner: str,
        submission_id: str | None = None,
        attempt: int = 1,
    ) -> Turn:
        """Open a turn driven by ``owner`` inside the caller's transaction; turns do not nest."""
        open_seq = open_turn_txn(db, session_id)
        if open_seq is None:
            lineage.next_seq_txn(db, session_id)  # SessionNotFound before anything else
        else:
            raise OpenTurnError(open_seq, "turns do not nest: end (or recover) it first")
        number = last_turn_number_txn(db, session_id) + 1
        data: dict[str, Any] = {"turn": number}
        if submission_id is not None:
            data["submission_id"] = submission_id
        event = self._log.append_txn(db, session_id, "turn_start", data, time_ms)
        db.execute(
            "UPDATE turn_journal SET attempt = ?, owner = ? WHERE session_id = ? AND start_seq = ?",
            (attempt, owner, session_id, event.seq),
        )
        return Turn(self._journal, session_id, event.seq, number, attempt=attempt, submission_id=submission_id)

    def hand_over_txn(
        self,
        db: Database,
        session_id: str,
        start_seq: int,
        *,
        attempt: int,
        owner: str | None = None,
        submission_id: str | None = None,
    ) -> None:
        """Give an open turn to a new attempt, which fences every earlier one at once; a claim
        taking it over names itself (owner, submission), the reconciler only fences."""
        db.execute(
            "UPDATE turn_journal SET attempt = ?, owner = coalesce(?, owner), "
            "submission_id = coalesce(?, submission_id), revision = revision + 1 "
            "WHERE session_id = ? AND start_seq = ? AND end_seq IS NULL",
            (attempt, owner, submission_id, session_id, start_seq),
        )

    def handle_txn(
        self, db: Database, session_id: str, start_seq: int, *, attempt: int, submission_id: str | None
    ) -> Turn:
        """A handle on an open turn taken over by a new attempt, with its open step if any."""
        row = turn_row_txn(db, session_id, start_seq)
        assert row is not None
        return Turn(
            self._journal,
            session_id,
            start_seq,
            row.turn or 0,
            attempt=attempt,
            step_number=row.steps if row.step_open else None,
            submission_id=submission_id,
            stream_key=row.stream_key,
        )

    def close_txn(
        self, db: Database, session_id: str, start_seq: int, time_ms: int, *, reason: str, step_outcome: str
    ) -> list[Event]:
        """Close an open turn: its open step with ``step_outcome``, then the turn with ``reason``."""
        row = turn_row_txn(db, session_id, start_seq, open_only=True)
        if row is None:
            return []
        out = []
        if row.step_open:
            data = {"turn": row.turn, "step": row.steps, "outcome": step_outcome}
            out.append(self._log.append_txn(db, session_id, "step_end", data, time_ms))
        data = {"turn": row.turn, "steps": row.steps, "reason": reason}
        out.append(self._log.append_txn(db, session_id, "turn_end", data, time_ms))
        return out

    def forget_txn(self, db: Database, session_id: str) -> None:
        """Delete the session's turn journal (purge)."""
        db.execute("DELETE FROM turn_journal WHERE session_id = ?", (session_id,))

    # -- the turn API --------------------------------------------------------------------------

    def turn_start(self, session_id: str) -> Turn:
        """Open a turn (``turn_start``, numbered from 1 by counting the log's turns)."""
        check_text("session_id", session_id)
        time_ms = now_ms()
        with self._store.write("turn_start", sessions=(session_id,)) as db:
            return self.start_txn(db, session_id, time_ms, owner=lease_owner())

    @contextlib.contextmanager
    def turn(self, session_id: str, *, resume: bool = False) -> Iterator[Turn]:
        """A turn as a context manager: ``turn_end`` (complete) on a normal exit, unless the
        body ended it itself; left OPEN if the body raises, for recovery to close honestly.

        ``resume=True``: continue the session's open turn if it has one (``take_over``: refused
        with ``TurnHeld`` while the process that opened it may still run), else open one."""
        if resume and not isinstance(resume, bool):
            raise InvalidArgument("resume", f"must be True or False, not {resume!r}")
        handle = self._take_over(session_id, missing_ok=True) if resume else None
        if handle is None:
            handle = self.turn_start(session_id)
        yield handle
        if not handle.closed:
            self.turn_end(handle, reason=TurnEndReason.COMPLETE.value)

    def take_over(self, session_id: str) -> Turn:
        """Continue the session's open turn from this process: the turn a process that died
        opened (with the turn API, or a plain ``turn_start`` append).

        In one transaction the turn gets a new attempt driven by this process, which fences the
        old handle (its next write raises ``LeaseLost``). The returned handle has the turn's open
        step, if any (``step_number``); what the turn owes is for the caller to settle — a call
        dispatched without a result MAY have run (``scan()`` lists it; ``put_result`` records
        what is known). Refused with ``TurnHeld`` while the turn's owner may still be running (a
        live process of this host, or a process of another host), or when the turn belongs to
        a claimed submission (``reconcile()`` and ``claim()`` hand those over); ``NoOpenTurn``
        when there is none. The alternative stays ``recover()``, which closes it."""
        handle = self._take_over(session_id, missing_ok=False)
        assert handle is not None
        return handle

    def _take_over(self, session_id: str, *, missing_ok: bool) -> Turn | None:
        check_text("session_id", session_id)
        with self._store.write("take_over", sessions=(session_id,)) as db:
            start_seq = open_turn_txn(db, session_id)
            if start_seq is None:
                lineage.next_seq_txn(db, session_id)  # SessionNotFound first
                if missing_ok:
                    return None
                raise NoOpenTurn(session_id, "take_over needs an open turn")
            row = db.one(
                "SELECT t.attempt, t.owner, t.submission_id, q.state FROM turn_journal AS t "
                "LEFT JOIN submissions AS q ON q.id = t.submission_id WHERE t.session_id = ? AND t.start_seq = ?",
                (session_id, start_seq),
            )
            assert row is not None
            attempt, owner, submission_id, sub_state = row
            if submission_id is not None and sub_state == SubmissionState.RUNNING:
                raise TurnHeld(
                    session_id, start_seq, owner, f"it runs submission {submission_id!r}: reconcile() hands it over"
                )
            if held_elsewhere(owner):
                raise TurnHeld(
                    session_id, start_seq, owner, "that process may still be running (recover(force=True) closes it)"
                )
            self.hand_over_txn(db, session_id, start_seq, attempt=attempt + 1, owner=lease_owner())
            return self.handle_txn(db, session_id, start_seq, attempt=attempt + 1, submission_id=submission_id)

    def _held_txn(self, db: Database, turn: Turn) -> TurnState:
        """The turn's journal row, if the caller still holds it; raises ``LeaseLost`` otherwise."""
        row = turn_row_txn(db, turn.session_id, turn.start_seq)
        if row is None:
            raise LeaseLost(turn.session_id, turn.attempt, f"no turn started at seq {turn.start_seq}")
        if row.attempt != turn.attempt:
            raise LeaseLost(turn.session_id, turn.attempt, f"attempt {row.attempt} holds the turn now")
        if row.end_seq is not None:
            raise LeaseLost(turn.session_id, turn.attempt, f"the turn was closed at seq {row.end_seq}")
        return row

    def step_start(self, turn: Turn) -> Event:
        """Open the next step of the turn."""
        time_ms = now_ms()
        with self._store.write("step_start", sessions=(turn.session_id,)) as db:
            row = self._held_txn(db, turn)
            if row.step_open:
                raise OpenTurnError(turn.start_seq, f"step {row.steps} is still open: end it first")
            data = {"turn": turn.turn, "step": row.steps + 1}
            event = self._log.append_txn(db, turn.session_id, "step_start", data, time_ms)
        turn.step_number = row.steps + 1
        return event

    def step_end(self, turn: Turn, *, outcome: str = "ok") -> Event:
        """Close the open step with ``outcome`` ``ok`` or ``error``; the phase returns to
        ``before_provider``."""
        if outcome not in (StepOutcome.OK.value, StepOutcome.ERROR.value):
            raise InvalidArgument("outcome", f'must be "ok" or "error", not {outcome!r}')
        time_ms = now_ms()
        with self._store.write("step_end", sessions=(turn.session_id,)) as db:
            row = self._held_txn(db, turn)
            if not row.step_open:
                raise NoOpenTurn(turn.session_id, "step_end with no open step")
            data = {"turn": turn.turn, "step": row.steps, "outcome": outcome}
            event = self._log.append_txn(db, turn.session_id, "step_end", data, time_ms)
        turn.step_number = None
        turn.stream_key = None
        return event

    def provider_started(self, turn: Turn, *, stream_key: str | None = None) -> None:
        """Record that the model request is going out (phase ``provider_started``)."""
        if stream_key is not None:
            check_id("stream_key", stream_key, MAX_STREAM_KEY)
        with self._store.write("provider_started", sessions=(turn.session_id,)) as db:
            row = self._held_txn(db, turn)
            if not row.step_open:
                raise NoOpenTurn(turn.session_id, "provider_started outside a step")
            db.execute(
                "UPDATE turn_journal SET phase = 'provider_started', stream_key = ?, revision = revision + 1 "
                "WHERE session_id = ? AND start_seq = ? AND attempt = ? AND end_seq IS NULL "
                "AND phase IN ('before_provider', 'provider_started')",
                (stream_key, turn.session_id, turn.start_seq, turn.attempt),
            )
            if db.changes() != 1:
                raise InvalidArgument("phase", f"provider_started is not allowed in phase {row.phase.value!r}")
        turn.stream_key = stream_key

    def record_assistant(self, /, turn: Turn, content: Any, **fields: Any) -> Event:
        """Append the model's answer. With tool calls, the phase becomes
        ``tool_request_recorded`` and the request is saved, in the same transaction.

        ``stop_reason`` defaults to ``"tool_use"`` when there are tool calls, else ``"stop"``."""
        data = {"content": content, **{k: v for k, v in fields.items() if v is not None}}
        # The classifier reads stop_reason; a caller that leaves it out gets the obvious one.
        data.setdefault("stop_reason", "tool_use" if data.get("tool_calls") else "stop")
        text, copy = self._log.codec.encode_copy("assistant_message", data)
        time_ms = now_ms()
        with self._store.write("assistant", sessions=(turn.session_id,)) as db:
            row = self._held_txn(db, turn)
            if not row.step_open:
                raise NoOpenTurn(turn.session_id, "an assistant message outside a step")
            if row.phase is Phase.TOOL_REQUEST_RECORDED:
                raise InvalidArgument("phase", "this step already recorded a tool request; end the step first")
            seq = self._log.append_text_txn(db, turn.session_id, "assistant_message", text, time_ms)
        return Event(turn.session_id, seq, "assistant_message", copy, time_ms)

    def turn_end(self, turn: Turn, *, reason: str = "complete") -> Event:
        """Close the turn with reason ``complete`` or ``rejected`` (``interrupted`` belongs to
        recovery); a claimed turn's submission is settled in the same transaction. A step still
        open is an error: end it first."""
        if reason not in (TurnEndReason.COMPLETE.value, TurnEndReason.REJECTED.value):
            raise InvalidArgument(
                "reason",
                f'must be "complete" or "rejected" ("interrupted" is written only by recovery), not {reason!r}',
            )
        time_ms = now_ms()
        with self._store.write("turn_end", sessions=(turn.session_id,)) as db:
            row = self._held_txn(db, turn)
            if row.step_open:
                raise OpenTurnError(turn.start_seq, f"step {row.steps} is still open: end it first")
            data = {"turn": turn.turn, "steps": row.steps, "reason": reason}
            event = self._log.append_txn(db, turn.session_id, "turn_end", data, time_ms)
            if turn.submission_id is not None:
                self._queue.settle_txn(db, turn, reason, time_ms)
        turn.mark_closed()
        return event

    def turn_state(self, session_id: str, start_seq: int | None = None) -> TurnState | None:
        """The turn journal row of a session's open turn (or of the turn started at
        ``start_seq``), or ``None``."""
        check_text("session_id", session_id)
        with self._store.read() as db:
            if start_seq is None:
                start_seq = open_turn_txn(db, session_id)
                if start_seq is None:
                    lineage.next_seq_txn(db, session_id)
                    return None
            return turn_row_txn(db, session_id, start_seq)
