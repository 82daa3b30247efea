"""Submissions and leases: the durable input queue (DESIGN §6, §7(3)).

A submission is an input queued for a session. ``claim`` takes the runnable head of a session's
queue (inputs of one session are processed in order), starts an attempt (the count is durable,
so it survives crashes) under a lease, and applies the input — appends it, marks it applied and
opens the turn — in one transaction. ``complete``, ``fail``, ``requeue`` and ``renew`` are
compare-and-sets on the attempt: a worker whose lease was taken over gets ``LeaseLost`` and
writes nothing.

A lease owner is ``host:pid:process-start-time``. A lease held by a process of this host that no
longer exists is expired at once (a restarted bot need not wait); other leases expire by time.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import attrs

from journal import log as _log
from journal.classify import ResumeMode
from journal.errors import InvalidArgument, LeaseLost, SubmissionNotFound
from journal.model import Event, SubmissionState
from journal.owners import lease_owner, owner_is_dead
from journal.scan import SubmissionInfo
from journal.store import Database, Store
from journal.turns import Turn, append_txn, open_turn_txn, start_turn_txn
from journal.validate import MAX_CLOCK_MS, MAX_DURATION_MS, Codec, check_int, check_number

INPUT_TYPES = ("user_message", "system_message", "tool_result")
DEFAULT_LEASE_MS = 60_000

_COLUMNS = (
    "id, session_id, type, data, state, attempt, max_attempts, timeout_s, created_ms, updated_ms, "
    "lease_owner, lease_expires_ms, input_seq, turn_start_seq, resume_mode, outcome"
)


@attrs.frozen
class Submission:
    """One queued input and where its processing stands."""

    id: str
    session_id: str
    type: str
    data: dict[str, Any] = attrs.field(hash=False)
    state: SubmissionState
    attempt: int
    max_attempts: int
    timeout_s: float
    created_ms: int
    updated_ms: int
    lease_owner: str | None
    lease_expires_ms: int | None
    input_seq: int | None
    turn_start_seq: int | None
    resume_mode: ResumeMode | None
    outcome: str | None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Submission:
        values = list(row)
        values[3] = json.loads(values[3])
        values[4] = SubmissionState(values[4])
        values[14] = None if values[14] is None else ResumeMode(values[14])
        return cls(*values)

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self, value_serializer=lambda _i, _f, v: v.value if hasattr(v, "value") else v)


@attrs.define
class Claim:
    """A worker's hold on a running submission: its attempt, its lease and its open turn.

    ``resume`` says how to continue when the reconciler started this attempt after a crash
    (``None`` for a fresh input).
    """

    journal: Any = attrs.field(repr=False)
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


# -- the mixin -------------------------------------------------------------------------------


def _check_lease_ms(lease_ms: object) -> int:
    return check_int("lease_ms", lease_ms, minimum=1, maximum=MAX_DURATION_MS)


def get_submission_txn(db: Database, submission_id: str) -> Submission:
    row = db.one(f"SELECT {_COLUMNS} FROM submissions WHERE id = ?", (submission_id,))
    if row is None:
        raise SubmissionNotFound(submission_id)
    return Submission.from_row(row)


class SubmissionsMixin:
    """``submit``, ``claim``, ``complete``, ``fail``, ``requeue``, ``renew`` on ``Journal``."""

    _store: Store
    _codec: Codec

    def submit(
        self,
        session_id: str,
        type: str,
        data: dict[str, Any],
        *,
        max_attempts: int = 10,
        timeout_s: float = 3600,
        id: str | None = None,
    ) -> Submission:
        """Queue an input for a session (processed in order, one attempt at a time)."""
        if type not in INPUT_TYPES and not (isinstance(type, str) and type.startswith("x.")):
            raise InvalidArgument("type", f"an input is one of {INPUT_TYPES} or an x. type, not {type!r}")
        check_int("max_attempts", max_attempts, minimum=1, maximum=2**31 - 1)
        check_number("timeout_s", timeout_s, minimum=0.001, maximum=MAX_DURATION_MS / 1000)
        text = self._codec.encode(type, data)
        submission_id = uuid.uuid4().hex if id is None else _log.check_session_id(id)
        now = _log.now_ms()
        with self._store.write("submit") as db:
            _log.next_seq_txn(db, session_id)
            db.execute(
                "INSERT INTO submissions (id, session_id, type, data, state, max_attempts, timeout_s, created_ms, "
                "updated_ms) VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?)",
                (submission_id, session_id, type, text, max_attempts, float(timeout_s), now, now),
            )
            return get_submission_txn(db, submission_id)

    def submission(self, submission_id: str) -> Submission:
        """The submission with this id; raises ``SubmissionNotFound``."""
        with self._store.read() as db:
            return get_submission_txn(db, submission_id)

    def submissions(self, session_id: str | None = None, *, state: str | None = None) -> list[Submission]:
        """Submissions, oldest first (optionally of one session, or in one state)."""
        clauses, args = [], []
        if session_id is not None:
            clauses.append("session_id = ?")
            args.append(session_id)
        if state is not None:
            clauses.append("state = ?")
            try:
                args.append(SubmissionState(state).value)
            except ValueError:
                raise InvalidArgument(
                    "state", f"must be one of {[s.value for s in SubmissionState]}, not {state!r}"
                ) from None
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._store.read() as db:
            return [
                Submission.from_row(row)
                for row in db.execute(f"SELECT {_COLUMNS} FROM submissions {where} ORDER BY rowid", args)
            ]

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
        _check_lease_ms(lease_ms)
        if now_ms is not None:
            check_int("now_ms", now_ms, maximum=MAX_CLOCK_MS)
        owner = owner or lease_owner()
        with self._store.write("claim") as db:
            now = now_ms if now_ms is not None else _log.now_ms()
            while True:
                row = db.one(
                    "SELECT q.id FROM submissions AS q WHERE q.state = 'queued' "
                    + ("AND q.session_id = ? " if session_id is not None else "")
                    + "AND NOT EXISTS (SELECT 1 FROM submissions AS r WHERE r.session_id = q.session_id "
                    "AND r.state = 'running') "
                    "AND NOT EXISTS (SELECT 1 FROM submissions AS e INDEXED BY submissions_queued "
                    "WHERE e.session_id = q.session_id AND e.state = 'queued' AND e.rowid < q.rowid) "
                    "ORDER BY q.rowid LIMIT 1",
                    (session_id,) if session_id is not None else (),
                )
                if row is None:
                    return None
                sub = get_submission_txn(db, row[0])
                if sub.attempt >= sub.max_attempts:
                    db.execute(
                        "UPDATE submissions SET state = 'failed', outcome = 'attempts exhausted', updated_ms = ? "
                        "WHERE id = ? AND state = 'queued'",
                        (now, sub.id),
                    )
                    continue
                return self._start_attempt_txn(db, sub, owner, lease_ms, now)

    def _start_attempt_txn(self, db: Database, sub: Submission, owner: str, lease_ms: int, now: int) -> Claim:
        attempt = sub.attempt + 1
        db.execute(
            "UPDATE submissions SET state = 'running', attempt = ?, lease_owner = ?, lease_expires_ms = ?, "
            "updated_ms = ?, resume_mode = NULL WHERE id = ? AND state = 'queued' AND attempt = ?",
            (attempt, owner, now + lease_ms, now, sub.id, sub.attempt),
        )
        assert db.changes() == 1  # inside BEGIN IMMEDIATE nothing else can have moved it
        input_seq = sub.input_seq
        start_seq = open_turn_txn(db, sub.session_id)
        if input_seq is None:
            if start_seq is not None:
                raise LeaseLost(sub.session_id, attempt, f"the session has a turn open at seq {start_seq} (recover it)")
            start_event, number = start_turn_txn(db, sub.session_id, now, owner=owner, submission_id=sub.id, attempt=attempt)
            start_seq = start_event.seq
            data = dict(sub.data)
            if sub.type in ("user_message", "system_message"):
                data["submission_id"] = sub.id
            input_seq = append_txn(db, sub.session_id, sub.type, data, now).seq
        elif start_seq is None:
            start_event, number = start_turn_txn(db, sub.session_id, now, owner=owner, submission_id=sub.id, attempt=attempt)
            start_seq = start_event.seq
        else:
            number = db.value("SELECT turn FROM turn_journal WHERE session_id = ? AND start_seq = ?", (sub.session_id, start_seq))
            db.execute(
                "UPDATE turn_journal SET attempt = ?, submission_id = ?, owner = ?, revision = revision + 1 "
                "WHERE session_id = ? AND start_seq = ? AND end_seq IS NULL",
                (attempt, sub.id, owner, sub.session_id, start_seq),
            )
        db.execute(
            "UPDATE submissions SET input_seq = ?, turn_start_seq = ? WHERE id = ?", (input_seq, start_seq, sub.id)
        )
        step = db.one(
            "SELECT steps, step_open, stream_key FROM turn_journal WHERE session_id = ? AND start_seq = ?",
            (sub.session_id, start_seq),
        )
        turn = Turn(
            self,
            sub.session_id,
            start_seq,
            number or 0,
            attempt=attempt,
            step_number=step[0] if step and step[1] else None,
            submission_id=sub.id,
            stream_key=step[2] if step else None,
        )
        return Claim(self, get_submission_txn(db, sub.id), turn, owner, sub.resume_mode)

    def _held_txn(self, db: Database, claim: Claim) -> Submission:
        sub = get_submission_txn(db, claim.submission.id)
        if sub.state is not SubmissionState.RUNNING or sub.attempt != claim.attempt or sub.lease_owner != claim.owner:
            raise LeaseLost(sub.session_id, claim.attempt, f"the submission is {sub.state.value} at attempt {sub.attempt}")
        return sub

    def renew(self, claim: Claim, *, lease_ms: int = DEFAULT_LEASE_MS) -> None:
        """Extend the claim's lease from now."""
        _check_lease_ms(lease_ms)
        with self._store.write("renew") as db:
            self._held_txn(db, claim)
            now = _log.now_ms()
            db.execute(
                "UPDATE submissions SET lease_expires_ms = ?, updated_ms = ? WHERE id = ? AND attempt = ?",
                (now + lease_ms, now, claim.submission.id, claim.attempt),
            )

    def fail(self, claim: Claim, reason: str) -> None:
        """Give the submission up: it is failed, and its turn (if open) is closed as rejected."""
        if not isinstance(reason, str) or not reason:
            raise InvalidArgument("reason", "must be a non-empty string")
        with self._store.write("fail") as db:
            sub = self._held_txn(db, claim)
            now = _log.now_ms()
            self._close_turn_txn(db, sub, now, reason="rejected")
            db.execute(
                "UPDATE submissions SET state = 'failed', outcome = ?, lease_owner = NULL, lease_expires_ms = NULL, "
                "updated_ms = ? WHERE id = ? AND attempt = ?",
                (reason, now, sub.id, claim.attempt),
            )
        claim.turn._closed = True

    def requeue(self, claim: Claim) -> None:
        """Put the submission back at the head of its queue; the next claim takes its turn over."""
        with self._store.write("requeue") as db:
            sub = self._held_txn(db, claim)
            db.execute(
                "UPDATE submissions SET state = 'queued', lease_owner = NULL, lease_expires_ms = NULL, updated_ms = ? "
                "WHERE id = ? AND attempt = ?",
                (_log.now_ms(), sub.id, claim.attempt),
            )

    def _close_turn_txn(self, db: Database, sub: Submission, now: int, *, reason: str) -> None:
        start = sub.turn_start_seq
        row = None if start is None else db.one(
            "SELECT turn, steps, step_open FROM turn_journal WHERE session_id = ? AND start_seq = ? AND end_seq IS NULL",
            (sub.session_id, start),
        )
        if row is None:
            return
        number, steps, step_open = row
        if step_open:
            append_txn(db, sub.session_id, "step_end", {"turn": number, "step": steps, "outcome": "error"}, now)
        append_txn(db, sub.session_id, "turn_end", {"turn": number, "steps": steps, "reason": reason}, now)

    # -- hooks of the turn and scan modules -------------------------------------------------

    def _settle_submission_txn(self, db: Database, turn: Turn, reason: str, time_ms: int) -> None:
        if turn.submission_id is None:
            return
        db.execute(
            "UPDATE submissions SET state = 'completed', outcome = ?, lease_owner = NULL, lease_expires_ms = NULL, "
            "updated_ms = ? WHERE id = ? AND attempt = ? AND state = 'running'",
            (reason, time_ms, turn.submission_id, turn.attempt),
        )
        if db.changes() != 1:
            raise LeaseLost(turn.session_id, turn.attempt, f"submission {turn.submission_id} is no longer held")

    def _scan_submissions_txn(
        self, db: Database, now_ms: int | None = None
    ) -> tuple[list[SubmissionInfo], list[SubmissionInfo]]:
        now = now_ms if now_ms is not None else _log.now_ms()
        stale = []
        for row in list(
            db.execute(
                "SELECT id, session_id, state, attempt, max_attempts, lease_owner, lease_expires_ms, input_seq "
                "FROM submissions WHERE state = 'running' ORDER BY lease_expires_ms"
            )
        ):
            if row[6] is not None and row[6] <= now:
                stale.append(SubmissionInfo(*row, reason="expired"))
            elif owner_is_dead(row[5]):
                stale.append(SubmissionInfo(*row, reason="owner_dead"))
        queued = [
            SubmissionInfo(*row, reason="queued")
            for row in db.execute(
                "SELECT id, session_id, state, attempt, max_attempts, lease_owner, lease_expires_ms, input_seq "
                "FROM submissions WHERE state = 'queued' ORDER BY session_id, rowid"
            )
        ]
        return stale, queued
