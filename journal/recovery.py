"""The recovery part: the restart scan and close-policy recovery (DESIGN §7).

``scan()`` is read-only and reads, in a fixed number of queries, only the partial indexes of
unfinished work (open turns with the calls they owe, unresolved calls, running and queued
submissions, indeterminate calls), so its cost grows with that work and not with the file (G7).

``recover()`` applies the pure planner (``journal.pure.plan``, re-exported here) to each session
the scan names. A session is planned from its open work only: the events from its outermost open
turn onwards, and what ``tool_calls`` says of their calls before that (``Before``); the rest of
its history is never read, so recovery costs what was interrupted, not how long the session is.
Sessions are recovered in batches, one transaction (one fsync) each, every session re-planned
inside it: running it twice, or from two processes at once, appends one repair (G8), and a crash
leaves each session of a batch either repaired or untouched. Inside a batch, the common case (one
open turn, no fork, no nesting) is planned and written for all its sessions at once in a few
statements (``journal.recovery_batch``, which appends exactly what the planner plans); the other
sessions of the batch go through the planner, one by one, in the same transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs

from journal import lineage
from journal import log as _log
from journal.bulk import paused_collector
from journal.codec import check_text
from journal.effects import Effects, IndeterminateCall
from journal.errors import InvalidArgument, SessionNotFound
from journal.log import Log
from journal.model import Event, Phase, SubmissionState, Vocabulary
from journal.owners import held_elsewhere
from journal.pure.plan import Before, Repair, interrupted, open_turns, plan, synthetic_result
from journal.queue import Queue, SubmissionInfo
from journal.recovery_batch import Repaired, recover_common_txn
from journal.results import PendingCall, event_at_txn, inherited_seqs_txn, pending_calls_txn, put_result_txn
from journal.store import Database, Store
from journal.tools import OperatorCallback, ToolRegistry

__all__ = [
    "Before",
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


@attrs.frozen(eq=False, repr=False)
class RecoveryResult:
    """What ``recover`` appended to one session.

    The events of a session the set-based path repaired are built when ``appended`` is first
    read (a restart that only counts its repairs builds none: ``count``); equal, hashed and shown
    by what it appended as any other result."""

    session_id: str
    _appended: tuple[Event, ...] | Repaired = attrs.field(alias="appended")
    live_owner: str | None = None  # set when the turn's owner may still be driving it: nothing appended

    @property
    def appended(self) -> tuple[Event, ...]:
        value = self._appended
        if not isinstance(value, tuple):
            value = value.events()
            object.__setattr__(self, "_appended", value)  # built once, kept (the result is frozen)
        return value

    @property
    def count(self) -> int:
        """How many events were appended, without building them."""
        return len(self._appended)

    def _key(self) -> tuple[str, tuple[Event, ...], str | None]:
        return (self.session_id, self.appended, self.live_owner)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        owner = self.live_owner
        return f"RecoveryResult(session_id={self.session_id!r}, appended={self.appended!r}, live_owner={owner!r})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "appended": [e.to_dict() for e in self.appended],
            "live_owner": self.live_owner,
        }


_OWN_EVENTS_FROM = "SELECT seq, type, data, time_ms FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq"


def _held(
    owner: str | None, sub_state: str | None, lease_owner: str | None, lease_expires_ms: int | None, now: int
) -> bool:
    """Whether a turn's owner may still be driving it. A claimed turn is held while its lease
    is (the same owner, not expired, not dead); a turn of the turn API while its process lives."""
    if sub_state is not None and (
        sub_state != SubmissionState.RUNNING or lease_owner != owner or (lease_expires_ms or 0) <= now
    ):
        return False
    return held_elsewhere(owner)


def held_by_txn(db: Database, session_ids: list[str], now: int) -> dict[str, str]:
    """The sessions among these with an open turn whose owner may still be driving it, and that
    owner: one statement, whatever the number of sessions."""
    held: dict[str, str] = {}
    rows = db.execute(db.sql.owned_open_turns_of, (json.dumps(session_ids),))
    for session_id, _start, _turn, _phase, _attempt, _sub, owner, sub_state, lease_owner, expires_ms in rows:
        if session_id not in held and _held(owner, sub_state, lease_owner, expires_ms, now):
            held[session_id] = owner
    return held


_PHASES = {phase.value: phase for phase in Phase}


def open_turns_txn(db: Database) -> list[OpenTurn]:
    """Every open turn with the calls it still owes (one statement). A row is the turn's ten
    columns then one owed call's four (NULL when it owes none); a turn's rows come together."""
    now = _log.now_ms()
    turns: list[OpenTurn] = []
    owed: list[OwedCall] = []
    head: tuple[Any, ...] | None = None
    for row in db.execute(db.sql.open_turns_owing):
        if head is None or row[1] != head[1] or row[0] != head[0]:
            if head is not None:
                turns.append(_open_turn(head, _in_request_order(db, head[0], owed), now))
            head, owed = row, []
        if row[10] is not None:
            owed.append(OwedCall(row[10], row[11], row[12], row[13]))
    if head is not None:
        turns.append(_open_turn(head, _in_request_order(db, head[0], owed), now))
    return turns


def _in_request_order(db: Database, session_id: str, owed: list[OwedCall]) -> list[OwedCall]:
    """``owed`` (in the order of the seqs they were asked at) with the calls one message asked
    for in that message's order, as recovery answers them (the statement orders them by id):
    the message read only when it asked for more than one of them."""
    asked = [c.requested_seq for c in owed if c.requested_seq is not None]
    if len(asked) == len(set(asked)):
        return owed
    places: dict[tuple[int, str], int] = {}
    for seq in {s for s in asked if asked.count(s) > 1}:
        calls = event_at_txn(db, session_id, seq).data.get("tool_calls") or ()
        for place, call in enumerate(calls):
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                places.setdefault((seq, call["id"]), place)

    def order(call: OwedCall) -> tuple[int, int, str]:  # the statement's key, the place before the id
        first = call.requested_seq if call.requested_seq is not None else call.dispatch_seq
        return (first or 0, places.get((first or 0, call.call_id), 0), call.call_id)

    return sorted(owed, key=order)


def _open_turn(head: tuple[Any, ...], owed: list[OwedCall], now: int) -> OpenTurn:
    sid, start, number, phase, attempt, sub_id, owner, sub_state, lease_owner, expires_ms = head[:10]
    held = owner is not None and _held(owner, sub_state, lease_owner, expires_ms, now)  # None holds nothing
    return OpenTurn(sid, start, number, _PHASES[phase], attempt, sub_id, tuple(owed), owner, held)


def before_txn(db: Database, session_id: str, start: int, call_ids: set[str], *, fork: bool) -> Before:
    """What the log says before seq ``start`` of these calls: read from ``tool_calls`` (through
    the fork chain for a fork), never from the events."""
    seqs = {
        call_id: (requested, dispatched, answered)
        for call_id, requested, dispatched, answered in db.execute(
            db.sql.call_seqs, (session_id, json.dumps(sorted(call_ids)))
        )
    }
    if fork:
        # A fork: its parent's log (up to the fork point) comes before all of its own events.
        for call_id in call_ids:
            inherited = inherited_seqs_txn(db, session_id, call_id)
            own = seqs.get(call_id, (None, None, None))
            seqs[call_id] = tuple(i if i is not None else o for i, o in zip(inherited, own))  # type: ignore[assignment]

    def earlier(*found: int | None) -> bool:
        return any(seq is not None and seq < start for seq in found)

    return Before(
        sighted=frozenset(c for c, (r, d, _a) in seqs.items() if earlier(r, d)),
        dispatched=frozenset(c for c, (_r, d, _a) in seqs.items() if earlier(d)),
        answered=frozenset(c for c, (_r, _d, a) in seqs.items() if earlier(a)),
    )


def plan_txn(db: Database, session_id: str) -> list[Repair]:
    """The session's repairs, planned from its open work: the events from the outermost open turn
    on, and ``before_txn``. ``SessionNotFound`` for an unknown session."""
    row = db.one(db.sql.outermost_open, (session_id,))
    if row is None:
        raise SessionNotFound(session_id)
    seed, start = row
    if start is None:
        return []
    # A fork's inherited prefix never holds an open turn (G11): the window is the session's own.
    events = [
        Event(session_id, r[0], r[1], json.loads(r[2]), r[3]) for r in db.execute(_OWN_EVENTS_FROM, (session_id, start))
    ]
    repairs = plan(events)
    # Only a call the window alone says is owed can be changed by the log before it: sighted or
    # answered there, it is owed by no open turn. Ask tool_calls about those calls only.
    owed = {r.tool_call_id for r in repairs if r.tool_call_id is not None}
    if not owed:
        return repairs
    before = before_txn(db, session_id, start, owed, fork=seed > 0)
    return repairs if before == Before() else plan(events, before=before)


ProgressCallback = Callable[[int, int], object]
DEFAULT_BATCH_SESSIONS = 500


class Recovery:
    """``scan``, ``plan``, ``plan_recovery`` and close-policy ``recover``."""

    def __init__(self, store: Store, log: Log, queue: Queue, effects: Effects) -> None:
        self._store = store
        self._log = log
        self._queue = queue
        self._effects = effects
        self.batch_sessions = DEFAULT_BATCH_SESSIONS  # sessions recovered per transaction
        # The common case planned and written for a whole batch at once (journal.recovery_batch);
        # False: the planner for every session (the oracle the tests and bench/ compare it with).
        self.set_based = True

    def scan(self) -> ScanReport:
        """A read-only report of all unfinished work (runs on a read-only journal too)."""
        with self._store.read() as db, paused_collector():
            stale, queued = self._queue.stale_txn(db, _log.now_ms())
            return ScanReport(
                open_turns=tuple(open_turns_txn(db)),
                pending_calls=tuple(pending_calls_txn(db)),
                indeterminate=tuple(self._effects.indeterminate_txn(db)),
                stale_submissions=tuple(stale),
                queued_submissions=tuple(queued),
            )

    def open_turns(self, session_id: str) -> list[Event]:
        """The session's ``turn_start`` events that never got a ``turn_end``, innermost first."""
        with self._store.read() as db:
            events = lineage.read_events_txn(db, session_id)
        return open_turns(events)

    def interrupted(self, session_id: str) -> bool:
        """Whether the session was left mid-turn (a crash to repair)."""
        return bool(self.open_turns(session_id))

    def plan(self, session_id: str) -> list[Repair]:
        """What ``recover`` would append to the session, without appending it."""
        check_text("session_id", session_id)
        with self._store.read() as db:
            return plan_txn(db, session_id)

    def plan_recovery(self, session_id: str | None = None, *, force: bool = False) -> list[RecoveryPlan]:
        """What ``recover(session_id, force=force)`` would append, session by session, from one
        read snapshot; writes nothing (it runs on a read-only journal too)."""
        with self._store.read() as db:
            now = _log.now_ms()
            if session_id is None:
                targets = list(dict.fromkeys(t.session_id for t in open_turns_txn(db)))
            else:
                lineage.next_seq_txn(db, session_id)  # SessionNotFound for an unknown id
                targets = [session_id]
            held = {} if force else held_by_txn(db, targets, now)
            return [
                RecoveryPlan(sid, (), live_owner=held[sid])
                if sid in held
                else RecoveryPlan(sid, tuple(plan_txn(db, sid)))
                for sid in targets
            ]

    def recover(
        self,
        session_id: str | None = None,
        *,
        policy: str = "close",
        registry: ToolRegistry | None = None,
        on_indeterminate: OperatorCallback | None = None,
        force: bool = False,
        on_progress: ProgressCallback | None = None,
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

        Sessions are recovered in batches, one transaction each; ``on_progress(done, total)`` is
        called after each batch commits.
        """
        if session_id is not None:
            check_text("session_id", session_id)
        if policy != "close":
            raise InvalidArgument(
                "policy", f'only "close" is a recovery policy (use reconcile() to resume), not {policy!r}'
            )
        report = self.scan() if registry is not None and not force else None
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
        # Effect recovery closes no turn, so the turns open before it are the targets.
        if session_id is not None:
            targets = [session_id]
        elif report is not None:
            targets = report.sessions
        else:
            with self._store.read() as db:
                targets = [sid for (sid,) in db.execute(db.sql.interrupted_sessions)]
        results: list[RecoveryResult] = []
        size = max(1, self.batch_sessions)
        with paused_collector():  # the results kept grow with every batch (journal.bulk)
            for first in range(0, len(targets), size):
                batch = targets[first : first + size]
                results.extend(self._recover_batch(batch, force=force, scanned=session_id is None))
                if on_progress is not None:
                    on_progress(len(results), len(targets))
        return results

    def _recover_batch(self, session_ids: list[str], *, force: bool, scanned: bool) -> list[RecoveryResult]:
        """Recover these sessions in one transaction, each re-planned inside it. A session the
        scan named that was purged since has nothing left to recover (``scanned``); a session
        the caller named must exist."""
        time_ms = _log.now_ms()
        out = []
        with self._store.write("recover") as db:
            held = {} if force else held_by_txn(db, session_ids, time_ms)
            # The common case, the whole batch in a few statements; the planner for the rest.
            free = [sid for sid in session_ids if sid not in held] if self.set_based else []
            common, _rest = recover_common_txn(db, self._log.codec, free, time_ms)
            for sid in session_ids:
                if sid in held:
                    out.append(RecoveryResult(sid, (), live_owner=held[sid]))
                    continue
                if sid in common:
                    out.append(RecoveryResult(sid, common[sid]))
                    continue
                try:
                    appended = self.apply_plan_txn(db, sid, time_ms)
                except SessionNotFound:
                    if not scanned:
                        raise
                    appended = []  # raised by the planning read, before anything of it was written
                out.append(RecoveryResult(sid, tuple(appended)))
        return out

    def apply_plan_txn(self, db: Database, session_id: str, time_ms: int) -> list[Event]:
        """Plan the session's repairs from its open work, inside the caller's transaction, and
        append them."""
        appended: list[Event] = []
        for repair in plan_txn(db, session_id):
            if repair.type == "tool_result":
                text, data = self._log.codec.encode_copy("tool_result", repair.data)
                outcome = put_result_txn(
                    db, self._log, session_id, repair.data["tool_call_id"], text, time_ms, data=data
                )
                if outcome.won:
                    appended.append(outcome.event)
            else:
                appended.append(self._log.append_txn(db, session_id, repair.type, repair.data, time_ms))
        return appended
