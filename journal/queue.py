"""The queue part: submissions, the durable input queue (DESIGN §6, §7(3)).

It owns the ``submissions`` table. A submission is an input queued for a session; its state
moves only through ``transition_txn``, a compare-and-set on its state and attempt, which is the
whole state machine (claim, settle, fail, requeue, the reconciler's decisions)::

    queued ──claim──▶ running ──turn_end / settle──▶ completed
       │                 │ ──fail / reconcile──────▶ failed
       └─attempts used───┴─▶ failed      running ──requeue / new attempt──▶ queued

A lease owner is ``host:pid:process-start-time``. A lease held by a process of this host that no
longer exists is expired at once (a restarted bot need not wait); other leases expire by time.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

import attrs

from journal import lineage
from journal import log as _log
from journal.codec import MAX_DURATION_MS, check_int, check_number, check_text
from journal.errors import InvalidArgument, LeaseLost, SubmissionExists, SubmissionNotFound
from journal.log import Log
from journal.model import StaleReason, SubmissionState
from journal.owners import owner_is_dead
from journal.pure.classify import ResumeMode
from journal.store import Database, Statements, Store, UniqueViolation

if TYPE_CHECKING:
    from journal.claims import Claim
    from journal.turns import Turn

INPUT_TYPES = ("user_message", "system_message", "tool_result")
DEFAULT_LEASE_MS = 60_000

_COLUMNS = (
    "id, session_id, type, data, state, attempt, max_attempts, timeout_s, created_ms, updated_ms, "
    "lease_owner, lease_expires_ms, input_seq, turn_start_seq, resume_mode, outcome"
)
_INFO_COLUMNS = "id, session_id, state, attempt, max_attempts, lease_owner, lease_expires_ms, input_seq"

_Q, _R, _C, _F = SubmissionState.QUEUED, SubmissionState.RUNNING, SubmissionState.COMPLETED, SubmissionState.FAILED
TRANSITIONS = frozenset({(_Q, _R), (_Q, _F), (_R, _C), (_R, _F), (_R, _Q)})
_KEEP: Any = object()  # leave the column as it is


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


@attrs.frozen
class SubmissionInfo:
    """A submission the scan reports: running with an expired or dead lease, or queued."""

    id: str
    session_id: str
    state: SubmissionState
    attempt: int
    max_attempts: int
    lease_owner: str | None
    lease_expires_ms: int | None
    input_seq: int | None
    reason: StaleReason  # why it is listed

    @classmethod
    def from_row(cls, row: tuple[Any, ...], reason: StaleReason) -> SubmissionInfo:
        attempt, max_attempts, owner, expires_ms, input_seq = row[3:8]
        return cls(row[0], row[1], SubmissionState(row[2]), attempt, max_attempts, owner, expires_ms, input_seq, reason)


def check_lease_ms(lease_ms: object) -> int:
    return check_int("lease_ms", lease_ms, minimum=1, maximum=MAX_DURATION_MS)


def _check_submission_id(value: object) -> str:
    """A new submission's id, refused (``InvalidArgument`` naming ``id``) as a submission's."""
    try:
        return _log.check_session_id(value, "id")
    except InvalidArgument as exc:
        raise InvalidArgument("id", f"a submission id {exc.problem}") from None


def get_txn(db: Database, submission_id: str) -> Submission:
    row = db.one(f"SELECT {_COLUMNS} FROM submissions WHERE id = ?", (submission_id,))
    if row is None:
        raise SubmissionNotFound(submission_id)
    return Submission.from_row(row)


def transition_txn(
    db: Database,
    submission_id: str,
    attempt: int,
    *,
    from_: SubmissionState,
    to: SubmissionState,
    now: int,
    lease: tuple[str, int] | None = None,
    outcome: str | None = _KEEP,
    resume_mode: ResumeMode | None = _KEEP,
) -> bool:
    """Move a submission from ``from_`` at ``attempt`` to ``to``: a compare-and-set, so a worker
    whose attempt or state moved on changes nothing (returns False). A claim (to ``running``)
    starts the next attempt under ``lease`` (owner, expiry); leaving ``running`` drops the lease.
    ``outcome`` and ``resume_mode`` are set when given."""
    if (from_, to) not in TRANSITIONS:
        raise AssertionError(f"a submission never goes from {from_.value} to {to.value}")
    owner, expires = lease if lease is not None else (None, None)
    args: list[Any] = [to.value, attempt + 1 if to is _R else attempt, owner, expires, now]
    if outcome is not _KEEP:
        args.append(outcome)
    if resume_mode is not _KEEP:
        args.append(None if resume_mode is None else resume_mode.value)
    db.execute(
        _transition_sql(outcome=outcome is not _KEEP, resume_mode=resume_mode is not _KEEP),
        (*args, submission_id, from_.value, attempt),
    )
    return db.changes() == 1


def _transition_sql(*, outcome: bool, resume_mode: bool) -> str:
    """``transition_txn``'s compare-and-set, setting the outcome and the resume mode too if asked."""
    sets = "state = ?, attempt = ?, lease_owner = ?, lease_expires_ms = ?, updated_ms = ?"
    sets += ", outcome = ?" if outcome else ""
    sets += ", resume_mode = ?" if resume_mode else ""
    return f"UPDATE submissions SET {sets} WHERE id = ? AND state = ? AND attempt = ?"


def _submissions_sql(*, session: bool, state: bool) -> str:
    """``submissions()``'s read, of one session and in one state if asked, in submission order."""
    clauses = [c for c, wanted in (("session_id = ?", session), ("state = ?", state)) if wanted]
    where = f"WHERE {' AND '.join(clauses)} " if clauses else ""
    return f"SELECT {_COLUMNS} FROM submissions {where}ORDER BY ordinal"


def statement_shapes(sql: Statements) -> list[str]:
    """One statement of each shape this module builds at run time (``tests/test_statements.py``
    prepares them on both backends)."""
    flags = [(a, b) for a in (False, True) for b in (False, True)]
    return [_transition_sql(outcome=a, resume_mode=b) for a, b in flags] + [
        _submissions_sql(session=a, state=b) for a, b in flags
    ]


def is_stale(sub: Submission | SubmissionInfo, now: int) -> bool:
    """Running, and its lease expired or its owner is gone: the reconciler's to decide."""
    expired = sub.lease_expires_ms is not None and sub.lease_expires_ms <= now
    return sub.state is _R and (expired or owner_is_dead(sub.lease_owner))


class Queue:
    """``submit``, the submission reads, ``requeue`` and ``renew``; the state machine."""

    def __init__(self, store: Store, log: Log) -> None:
        self._store = store
        self._log = log

    # -- what other parts call inside their transactions ---------------------------------------

    def settle_txn(self, db: Database, turn: Turn, reason: str, time_ms: int) -> None:
        """Complete the submission whose turn just ended, or raise ``LeaseLost``."""
        assert turn.submission_id is not None
        if not transition_txn(db, turn.submission_id, turn.attempt, from_=_R, to=_C, now=time_ms, outcome=reason):
            raise LeaseLost(turn.session_id, turn.attempt, f"submission {turn.submission_id} is no longer held")

    def applied_txn(self, db: Database, submission_id: str, *, input_seq: int, turn_start_seq: int) -> None:
        """Record where a claim applied the input and which turn processes it."""
        db.execute(
            "UPDATE submissions SET input_seq = ?, turn_start_seq = ? WHERE id = ?",
            (input_seq, turn_start_seq, submission_id),
        )

    def held_txn(self, db: Database, claim: Claim) -> Submission:
        """The claim's submission, if the claim still holds it; raises ``LeaseLost`` otherwise."""
        sub = get_txn(db, claim.submission.id)
        if sub.state is not _R or sub.attempt != claim.attempt or sub.lease_owner != claim.owner:
            raise LeaseLost(
                sub.session_id, claim.attempt, f"the submission is {sub.state.value} at attempt {sub.attempt}"
            )
        return sub

    def stale_txn(self, db: Database, now: int) -> tuple[list[SubmissionInfo], list[SubmissionInfo]]:
        """The running submissions whose lease expired or whose owner is dead, and the queued ones."""
        stale = []
        for row in list(
            db.execute(f"SELECT {_INFO_COLUMNS} FROM submissions WHERE state = 'running' ORDER BY lease_expires_ms")
        ):
            info = SubmissionInfo.from_row(row, StaleReason.EXPIRED)
            if info.lease_expires_ms is not None and info.lease_expires_ms <= now:
                stale.append(info)
            elif owner_is_dead(info.lease_owner):
                stale.append(attrs.evolve(info, reason=StaleReason.OWNER_DEAD))
        queued = [
            SubmissionInfo.from_row(row, StaleReason.QUEUED)
            for row in db.execute(
                f"SELECT {_INFO_COLUMNS} FROM submissions WHERE state = 'queued' ORDER BY session_id, ordinal"
            )
        ]
        return stale, queued

    def forget_txn(self, db: Database, session_id: str) -> None:
        """Delete the session's submissions (purge)."""
        db.execute("DELETE FROM submissions WHERE session_id = ?", (session_id,))

    # -- the queue API -------------------------------------------------------------------------

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
        """Queue an input for a session (processed in order, one attempt at a time).

        ``id``: the submission's id (1-256 printable ASCII characters; a random one by default).
        An id queued before raises ``SubmissionExists``: a retried submit that landed is seen."""
        check_text("session_id", session_id)
        if type not in INPUT_TYPES and not (isinstance(type, str) and type.startswith("x.")):
            raise InvalidArgument("type", f"an input is one of {INPUT_TYPES} or an x. type, not {type!r}")
        check_int("max_attempts", max_attempts, minimum=1, maximum=2**31 - 1)
        check_number("timeout_s", timeout_s, minimum=0.001, maximum=MAX_DURATION_MS / 1000)
        text = self._log.codec.encode(type, data)
        submission_id = uuid.uuid4().hex if id is None else _check_submission_id(id)
        now = _log.now_ms()
        with self._store.write("submit", sessions=(session_id,)) as db:
            lineage.next_seq_txn(db, session_id)
            try:
                db.execute(
                    db.sql.insert_submission,
                    (submission_id, session_id, type, text, max_attempts, float(timeout_s), now, now),
                )
            except UniqueViolation:  # the primary key (the store gives each ordinal once)
                raise SubmissionExists(submission_id) from None
            return get_txn(db, submission_id)

    def submission(self, submission_id: str) -> Submission:
        """The submission with this id; raises ``SubmissionNotFound``."""
        check_text("submission_id", submission_id)
        with self._store.read() as db:
            return get_txn(db, submission_id)

    def submissions(self, session_id: str | None = None, *, state: str | None = None) -> list[Submission]:
        """Submissions, oldest first (optionally of one session, or in one state)."""
        args = []
        if session_id is not None:
            args.append(check_text("session_id", session_id))
        if state is not None:
            try:
                args.append(SubmissionState(state).value)
            except ValueError:
                raise InvalidArgument(
                    "state", f"must be one of {[s.value for s in SubmissionState]}, not {state!r}"
                ) from None
        sql = _submissions_sql(session=session_id is not None, state=state is not None)
        with self._store.read() as db:
            return [Submission.from_row(row) for row in db.execute(sql, args)]

    def renew(self, claim: Claim, *, lease_ms: int = DEFAULT_LEASE_MS) -> None:
        """Extend the claim's lease from now."""
        check_lease_ms(lease_ms)
        with self._store.write("renew", sessions=(claim.submission.session_id,)) as db:
            self.held_txn(db, claim)
            now = _log.now_ms()
            db.execute(
                "UPDATE submissions SET lease_expires_ms = ?, updated_ms = ? WHERE id = ? AND attempt = ?",
                (now + lease_ms, now, claim.submission.id, claim.attempt),
            )

    def requeue(self, claim: Claim) -> None:
        """Put the submission back at the head of its queue; the next claim takes its turn over."""
        with self._store.write("requeue", sessions=(claim.submission.session_id,)) as db:
            sub = self.held_txn(db, claim)
            transition_txn(db, sub.id, claim.attempt, from_=_R, to=_Q, now=_log.now_ms())
