"""The claims part: a worker takes a submission, runs its turn, and completes or fails it.

``claim`` takes the runnable head of a session's queue (inputs of one session are processed in
order), starts an attempt (the count is durable, so it survives crashes) under a lease, and
applies the input — appends it, marks it applied and opens the turn — in one transaction. A
submission whose input an earlier attempt applied gets its open turn handed over instead.
``complete`` is the turn's ``turn_end`` (which settles the submission); ``fail`` closes the turn
as rejected and fails the submission; a worker whose lease was taken over gets ``LeaseLost``.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from journal import log as _log
from journal import queue as _queue
from journal.codec import MAX_CLOCK_MS, check_int, check_stored_text
from journal.errors import InvalidArgument, LeaseLost
from journal.log import Log
from journal.model import Event, StepOutcome, SubmissionState, TurnEndReason
from journal.owners import lease_owner
from journal.pure.classify import ResumeMode
from journal.queue import DEFAULT_LEASE_MS, Queue, Submission
from journal.store import Database, Store
from journal.turns import Turn, Turns, open_turn_txn


class ClaimCalls(Protocol):
    """What a ``Claim`` calls back into (a ``Journal``): the queue's calls on a claim."""

    def fail(self, claim: Claim, reason: str) -> None: ...
    def requeue(self, claim: Claim) -> None: ...
    def renew(self, claim: Claim, *, lease_ms: int = ...) -> None: ...


@attrs.define
class Claim:
    """A worker's hold on a running submission: its attempt, its lease and its open turn.

    ``resume`` says how to continue when the reconciler started this attempt after a crash
    (``None`` for a fresh input).
    """

    journal: ClaimCalls = attrs.field(repr=False)
    submission: Submission
    turn: Turn
    owner: str
    resume: ResumeMode | None

    @property
    def attempt(self) -> int:
        return self.submission.attempt

    def complete(self) -> Event:
        return self.turn.complete()

    def reject(self) -> Event:
        return self.turn.reject()

    def fail(self, reason: str) -> None:
        self.journal.fail(self, reason)

    def requeue(self) -> None:
        self.journal.requeue(self)

    def renew(self, *, lease_ms: int = DEFAULT_LEASE_MS) -> None:
        self.journal.renew(self, lease_ms=lease_ms)


class Claims:
    """``claim`` and ``fail``: the calls that span a submission and its turn."""

    def __init__(self, journal: ClaimCalls, store: Store, log: Log, queue: Queue, turns: Turns) -> None:
        self._journal = journal  # what the handles call back into
        self._store = store
        self._log = log
        self._queue = queue
        self._turns = turns

    def claim(
        self,
        *,
        session_id: str | None = None,
        owner: str | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        now_ms: int | None = None,
    ) -> Claim | None:
        """Take the runnable head of a session's queue (of any session's, by default).

        Starts an attempt under a lease and applies the input (appends it, marks it applied,
        opens the turn) in one transaction; a submission whose input was applied by an earlier
        attempt gets its open turn handed over instead. ``None`` when nothing is runnable.
        """
        _queue.check_lease_ms(lease_ms)
        if now_ms is not None:
            check_int("now_ms", now_ms, maximum=MAX_CLOCK_MS)
        if owner is not None:
            check_stored_text("owner", owner)
        owner = owner or lease_owner()
        sql = self._store.sql
        runnable = sql.runnable if session_id is None else sql.runnable_in_session
        # The write is scoped to the one session it finds (an SQLite write holds the file).
        with self._store.write("claim", sessions=()) as db:
            now = now_ms if now_ms is not None else _log.now_ms()
            while True:
                row = db.one(runnable, (session_id,) if session_id is not None else ())
                if row is None:
                    return None
                sub = _queue.get_txn(db, row[0])
                db.lock_session(sub.session_id)
                if sub.attempt < sub.max_attempts:
                    return self._start_attempt_txn(db, sub, owner, lease_ms, now)
                _queue.transition_txn(
                    db, sub.id, sub.attempt, from_=SubmissionState.QUEUED, to=SubmissionState.FAILED, now=now,
                    outcome="attempts exhausted",
                )  # fmt: skip

    def _start_attempt_txn(self, db: Database, sub: Submission, owner: str, lease_ms: int, now: int) -> Claim:
        moved = _queue.transition_txn(
            db, sub.id, sub.attempt, from_=SubmissionState.QUEUED, to=SubmissionState.RUNNING, now=now,
            lease=(owner, now + lease_ms), resume_mode=None,
        )  # fmt: skip
        assert moved  # nothing else can have moved it: BEGIN IMMEDIATE, or the row's lock
        attempt = sub.attempt + 1
        start_seq = open_turn_txn(db, sub.session_id)
        if sub.input_seq is None:
            if start_seq is not None:
                raise LeaseLost(sub.session_id, attempt, f"the session has a turn open at seq {start_seq} (recover it)")
            turn = self._turns.start_txn(db, sub.session_id, now, owner=owner, submission_id=sub.id, attempt=attempt)
            data = dict(sub.data)
            if sub.type in ("user_message", "system_message"):
                data["submission_id"] = sub.id
            input_seq = self._log.append_txn(db, sub.session_id, sub.type, data, now).seq
        elif start_seq is None:
            turn = self._turns.start_txn(db, sub.session_id, now, owner=owner, submission_id=sub.id, attempt=attempt)
            input_seq = sub.input_seq
        else:
            self._turns.hand_over_txn(db, sub.session_id, start_seq, attempt=attempt, owner=owner, submission_id=sub.id)
            turn = self._turns.handle_txn(db, sub.session_id, start_seq, attempt=attempt, submission_id=sub.id)
            input_seq = sub.input_seq
        self._queue.applied_txn(db, sub.id, input_seq=input_seq, turn_start_seq=turn.start_seq)
        return Claim(self._journal, _queue.get_txn(db, sub.id), turn, owner, sub.resume_mode)

    def fail(self, claim: Claim, reason: str) -> None:
        """Give the submission up: it is failed, and its turn (if open) is closed as rejected."""
        if not isinstance(reason, str) or not reason:
            raise InvalidArgument("reason", "must be a non-empty string")
        with self._store.write("fail", sessions=(claim.submission.session_id,)) as db:
            sub = self._queue.held_txn(db, claim)
            now = _log.now_ms()
            if sub.turn_start_seq is not None:
                self._turns.close_txn(
                    db, sub.session_id, sub.turn_start_seq, now,
                    reason=TurnEndReason.REJECTED.value, step_outcome=StepOutcome.ERROR.value,
                )  # fmt: skip
            _queue.transition_txn(
                db,
                sub.id,
                claim.attempt,
                from_=SubmissionState.RUNNING,
                to=SubmissionState.FAILED,
                now=now,
                outcome=reason,
            )
        claim.turn.mark_closed()
