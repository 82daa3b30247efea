"""The recovery part: the restart scan and close-policy recovery (DESIGN §7).

``scan()`` is read-only and reads only the partial indexes of unfinished work (open turns,
unresolved calls, running and queued submissions, indeterminate calls), so its cost grows with
that work and not with the file (G7). ``recover()`` applies the pure planner
(``journal.pure.plan``, re-exported here) to each session the scan names, one transaction per
session, with results going through the same first-write-wins insert as live ones: running it
twice, or from two processes at once, appends one repair (G8).
"""

from __future__ import annotations

from typing import Any

import attrs

from journal import log as _log
from journal.effects import Effects, IndeterminateCall, OperatorCallback
from journal.errors import InvalidArgument
from journal.log import Log
from journal.model import CallState, Event, Phase, SubmissionState, Vocabulary
from journal.owners import held_elsewhere
from journal.pure.plan import Repair, interrupted, open_turns, plan, synthetic_result
from journal.queue import Queue, SubmissionInfo
from journal.results import PendingCall, calls_in_state_txn, put_result_txn
from journal.store import Database, Store
from journal.tools import ToolRegistry

__all__ = [
    "OpenTurn",
    "OwedCall",
    "Recovery",
    "RecoveryPlan",
    "RecoveryResult",
    "Repair",
    "ScanReport",
    "interrupted",
    "open_turns",
    "plan",
    "synthetic_result",
]


@attrs.frozen
class OwedCall:
    """A tool call an open turn still owes a result for."""

    call_id: str
    name: str | None
    requested_seq: int | None
    dispatch_seq: int | None

    @property
    def dispatched(self) -> bool:
        return self.dispatch_seq is not None


@attrs.frozen
class OpenTurn:
    """A turn that started and never ended: after a restart, the crash signal."""

    session_id: str
    start_seq: int
    turn: int | None
    phase: Phase
    attempt: int
    submission_id: str | None
    owed: tuple[OwedCall, ...]
    owner: str | None = None  # the process driving it (host:pid:start), if recorded
    held: bool = False  # that process may still be driving it: recover() leaves it unless forced


@attrs.frozen
class ScanReport:
    """Everything unfinished in the file."""

    open_turns: tuple[OpenTurn, ...]
    pending_calls: tuple[PendingCall, ...]
    indeterminate: tuple[IndeterminateCall, ...]
    stale_submissions: tuple[SubmissionInfo, ...] = ()
    queued_submissions: tuple[SubmissionInfo, ...] = ()

    @property
    def clean(self) -> bool:
        return not (self.open_turns or self.pending_calls or self.indeterminate or self.stale_submissions)

    @property
    def sessions(self) -> list[str]:
        """The sessions with an open turn, in the order found."""
        return list(dict.fromkeys(t.session_id for t in self.open_turns))

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self, value_serializer=_serialize)


def _serialize(_inst: Any, _field: Any, value: Any) -> Any:
    return value.value if isinstance(value, Vocabulary) else value


@attrs.frozen
class RecoveryPlan:
    """What ``recover`` would append to one session, planned without writing anything."""

    session_id: str
    repairs: tuple[Repair, ...]
    live_owner: str | None = None  # set when the turn's owner may still be driving it: nothing planned

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "repairs": [{"type": r.type, "data": r.data} for r in self.repairs],
            "live_owner": self.live_owner,
        }


@attrs.frozen
class RecoveryResult:
    """What ``recover`` appended to one session."""

    session_id: str
    appended: tuple[Event, ...]
    live_owner: str | None = None  # set when the turn's owner may still be driving it: nothing appended

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "appended": [e.to_dict() for e in self.appended],
            "live_owner": self.live_owner,
        }


_OPEN_TURNS = (
    "SELECT t.session_id, t.start_seq, t.turn, t.phase, t.attempt, t.submission_id, t.owner, "
    "q.state, q.lease_owner, q.lease_expires_ms FROM turn_journal AS t "
    "LEFT JOIN submissions AS q ON q.id = t.submission_id WHERE t.end_seq IS NULL"
)


def _held(owner: str | None, sub_state: str | None, lease_owner: str | None, lease_expires_ms: int | None, now: int) -> bool:
    """Whether a turn's owner may still be driving it. A claimed turn is held while its lease
    is (the same owner, not expired, not dead); a turn of the turn API while its process lives."""
    if sub_state is not None and (sub_state != SubmissionState.RUNNING or lease_owner != owner or (lease_expires_ms or 0) <= now):
        return False
    return held_elsewhere(owner)


def held_by_txn(db: Database, session_id: str, now: int) -> str | None:
    """The owner that may still be driving an open turn of the session, or ``None``."""
    for _sid, _start, _turn, _phase, _attempt, _sub, owner, *lease in db.execute(_OPEN_TURNS + " AND t.session_id = ?", (session_id,)):
        if _held(owner, *lease, now):
            return owner
    return None


def open_turns_txn(db: Database) -> list[OpenTurn]:
    turns = []
    now = _log.now_ms()
    rows = list(db.execute(_OPEN_TURNS + " ORDER BY t.session_id, t.start_seq"))
    for session_id, start_seq, turn, phase, attempt, submission_id, owner, *lease in rows:
        owed = tuple(
            OwedCall(call_id, name, requested_seq, dispatch_seq)
            for call_id, name, requested_seq, dispatch_seq in db.execute(
                "SELECT call_id, name, requested_seq, dispatch_seq FROM tool_calls INDEXED BY tool_calls_owed "
                "WHERE session_id = ? AND result_seq IS NULL "
                "AND coalesce(requested_seq, dispatch_seq) >= ? ORDER BY coalesce(requested_seq, dispatch_seq), call_id",
                (session_id, start_seq),
            )
        )
        held = _held(owner, *lease, now)
        turns.append(OpenTurn(session_id, start_seq, turn, Phase(phase), attempt, submission_id, owed, owner, held))
    return turns


class Recovery:
    """``scan``, ``plan``, ``plan_recovery`` and close-policy ``recover``."""

    def __init__(self, store: Store, log: Log, queue: Queue, effects: Effects) -> None:
        self._store = store
        self._log = log
        self._queue = queue
        self._effects = effects

    def scan(self) -> ScanReport:
        """A read-only report of all unfinished work (runs on a read-only journal too)."""
        with self._store.read() as db:
            stale, queued = self._queue.stale_txn(db, _log.now_ms())
            return ScanReport(
                open_turns=tuple(open_turns_txn(db)),
                pending_calls=tuple(PendingCall.from_call(c) for c in calls_in_state_txn(db, CallState.DISPATCHED)),
                indeterminate=tuple(self._effects.indeterminate_txn(db)),
                stale_submissions=tuple(stale),
                queued_submissions=tuple(queued),
            )

    def open_turns(self, session_id: str) -> list[Event]:
        """The session's ``turn_start`` events that never got a ``turn_end``, innermost first."""
        return open_turns(self._log.events(session_id))

    def interrupted(self, session_id: str) -> bool:
        """Whether the session was left mid-turn (a crash to repair)."""
        return bool(self.open_turns(session_id))

    def plan(self, session_id: str) -> list[Repair]:
        """What ``recover`` would append to the session, without appending it."""
        return plan(self._log.events(session_id))

    def plan_recovery(self, session_id: str | None = None, *, force: bool = False) -> list[RecoveryPlan]:
        """What ``recover(session_id, force=force)`` would append, session by session, from one
        read snapshot; writes nothing (it runs on a read-only journal too)."""
        with self._store.read() as db:
            now = _log.now_ms()
            if session_id is None:
                targets = list(dict.fromkeys(t.session_id for t in open_turns_txn(db)))
            else:
                _log.next_seq_txn(db, session_id)  # SessionNotFound for an unknown id
                targets = [session_id]
            plans = []
            for sid in targets:
                holder = None if force else held_by_txn(db, sid, now)
                repairs = () if holder is not None else tuple(plan(_log.read_events_txn(db, sid)))
                plans.append(RecoveryPlan(sid, repairs, live_owner=holder))
            return plans

    def recover(
        self,
        session_id: str | None = None,
        *,
        policy: str = "close",
        registry: ToolRegistry | None = None,
        on_indeterminate: OperatorCallback | None = None,
        force: bool = False,
    ) -> list[RecoveryResult]:
        """Close what a crash left open, by appending (never truncating).

        With a tool ``registry``, effect-class recovery runs first (DESIGN §7(1)): idempotent
        and queryable calls are finished for real, unsafe ones become indeterminate. Then the
        close policy: with no ``session_id``, every session the scan names is recovered, each in
        one transaction with the plan computed inside it, so concurrent recoverers produce one
        repair.

        A turn whose owner may still be driving it (another process of this host that is alive,
        a process of another host, or a claim whose lease holds) is not a crash: its session is
        left alone, and its result says who holds it (``live_owner``). ``force=True`` closes it
        all the same. Turns opened by this process are closed (it is not driving them while it
        recovers), as are turns opened by a plain append, which record no owner.
        """
        if policy != "close":
            raise InvalidArgument("policy", f'only "close" is a recovery policy (use reconcile() to resume), not {policy!r}')
        report = self.scan() if session_id is None or (registry is not None and not force) else None
        if registry is not None:
            held = set() if force or report is None else {t.session_id for t in report.open_turns if t.held}
            if not held:
                self._effects.recover_effects(registry, session_id=session_id, on_indeterminate=on_indeterminate)
            else:
                # Effect recovery may re-issue a call: never while the turn's owner may run it.
                assert report is not None
                pending = [session_id] if session_id is not None else [c.session_id for c in report.pending_calls]
                for sid in dict.fromkeys(s for s in pending if s not in held):
                    self._effects.recover_effects(registry, session_id=sid, on_indeterminate=on_indeterminate)
        # Effect recovery closes no turn, so the scan taken before it still names the targets.
        targets = [session_id] if session_id is not None else report.sessions if report is not None else []
        return [self._recover_session(sid, force=force) for sid in targets]

    def _recover_session(self, session_id: str, *, force: bool) -> RecoveryResult:
        time_ms = _log.now_ms()
        with self._store.write("recover") as db:
            holder = None if force else held_by_txn(db, session_id, time_ms)
            if holder is not None:
                _log.next_seq_txn(db, session_id)  # SessionNotFound for an unknown id
                return RecoveryResult(session_id, (), live_owner=holder)
            appended = self.apply_plan_txn(db, session_id, time_ms)
        return RecoveryResult(session_id, tuple(appended))

    def apply_plan_txn(self, db: Database, session_id: str, time_ms: int) -> list[Event]:
        """Plan the session's repairs from its log, inside the caller's transaction, and append them."""
        appended: list[Event] = []
        for repair in plan(_log.read_events_txn(db, session_id)):
            if repair.type == "tool_result":
                text = self._log.codec.encode("tool_result", repair.data)
                outcome = put_result_txn(db, session_id, repair.data["tool_call_id"], text, time_ms)
                if outcome.won:
                    appended.append(outcome.event)
            else:
                appended.append(self._log.append_txn(db, session_id, repair.type, repair.data, time_ms))
        return appended
