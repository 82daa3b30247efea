"""The reconciler: the resume policy of DESIGN §7(3).

For each running submission whose lease expired or whose owner is dead, one ``BEGIN IMMEDIATE``
transaction re-checks that it is still stale (the compare-and-set that makes two reconcilers
yield one repair), classifies the events after its input with the pure classifier, and acts:

1. classified completed → settle it (finished work is never thrown away, whatever its budget);
2. attempts used up, or past its timeout → fail it;
3. phase ``provider_started`` with saved stream chunks not yet consumed → the partial answer
   becomes an aborted assistant message with ``stream_interrupted`` + ``stream_continued``;
   new attempt;
4. phase ``before_provider``/``provider_started`` with the input applied → new attempt;
5. phase ``tool_request_recorded`` → synthetic results for the request's calls still without
   one (first write wins), the step closed (phase back to ``before_provider``); new attempt;
6. input never applied → requeue; anything else → fail with a ``submission_interrupted`` signal.

A new attempt puts the submission back in its queue with the mode to resume in, and fences the
crashed worker at once (its turn now belongs to the next attempt, so its writes get
``LeaseLost``). The engine never calls a model: the caller's worker claims the new attempt.
Effect-class recovery (when a registry is given) runs first, outside any transaction.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from journal import log as _log
from journal.classify import (
    AdvancedPastInput,
    Completed,
    Resume,
    ResumeMode,
    TerminalError,
    classify_submission_state,
)
from journal.errors import InvalidArgument
from journal.model import Event, Phase, Risk
from journal.recovery import synthetic_result
from journal.results import put_result_txn
from journal.scan import apply_plan_txn
from journal.store import Database, Store
from journal.owners import owner_is_dead
from journal.submissions import Submission, get_submission_txn
from journal.turns import append_txn
from journal.validate import MAX_CLOCK_MS, check_int, check_number, encode

DEFAULT_CONTEXT_WINDOW = 200_000


@attrs.frozen
class Decision:
    """What the reconciler decided for one submission (and what it appended)."""

    submission_id: str
    session_id: str
    action: str  # settled | failed | requeued | new_attempt | skipped
    state: str  # the classifier's kind
    attempt: int
    resume_mode: ResumeMode | None = None
    reason: str | None = None
    appended: tuple[Event, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "submission_id": self.submission_id,
            "session_id": self.session_id,
            "action": self.action,
            "state": self.state,
            "attempt": self.attempt,
            "resume_mode": None if self.resume_mode is None else self.resume_mode.value,
            "reason": self.reason,
            "appended": [e.to_dict() for e in self.appended],
        }


class _DryRun(Exception):
    def __init__(self, decision: Decision) -> None:
        super().__init__(decision)
        self.decision = decision


class ReconcileMixin:
    """``reconcile`` on ``Journal``."""

    _store: Store

    def reconcile(
        self,
        *,
        now: float | None = None,
        now_ms: int | None = None,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        registry: Any = None,
        dry_run: bool = False,
    ) -> list[Decision]:
        """Decide, for every stale running submission, whether to settle, fail, requeue or
        resume it, and make the repairs; one transaction per submission. ``dry_run`` decides
        and rolls everything back.

        The clock (for lease expiry and timeouts) is the current time, or ``now`` in seconds
        since the epoch (as ``time.time()``), or ``now_ms`` in milliseconds."""
        check_int("context_window", context_window, minimum=1, maximum=2**53)
        if now is not None and now_ms is not None:
            raise InvalidArgument("now", "give now (seconds) or now_ms, not both")
        if now is not None:
            now_ms = int(check_number("now", now, minimum=0, maximum=MAX_CLOCK_MS / 1000) * 1000)
        elif now_ms is not None:
            check_int("now_ms", now_ms, maximum=MAX_CLOCK_MS)
        clock_ms = now_ms if now_ms is not None else _log.now_ms()
        with self._store.read() as db:
            stale, _queued = self._scan_submissions_txn(db, clock_ms)  # type: ignore[attr-defined]
        if registry is not None and not dry_run:
            for session_id in dict.fromkeys(info.session_id for info in stale):
                self.recover_effects(registry, session_id=session_id)  # type: ignore[attr-defined]
        decisions = []
        for info in stale:
            try:
                with self._store.write("reconcile") as db:
                    decision = _reconcile_txn(db, info.id, clock_ms, context_window)
                    if dry_run:
                        raise _DryRun(decision)
            except _DryRun as planned:
                decision = planned.decision
            decisions.append(decision)
        return decisions


def _is_stale(sub: Submission, now: int) -> bool:
    expired = sub.lease_expires_ms is not None and sub.lease_expires_ms <= now
    return sub.state.value == "running" and (expired or owner_is_dead(sub.lease_owner))


def _reconcile_txn(db: Database, submission_id: str, now: int, context_window: int) -> Decision:
    sub = get_submission_txn(db, submission_id)
    state_kind = "pending"
    if not _is_stale(sub, now):
        return Decision(sub.id, sub.session_id, "skipped", state_kind, sub.attempt, reason="not stale any more")
    following = None if sub.input_seq is None else _log.read_events_txn(db, sub.session_id, sub.input_seq + 1)
    if sub.input_seq is not None and not _log.read_events_txn(db, sub.session_id, sub.input_seq, sub.input_seq + 1):
        following = None
    state = classify_submission_state(following, context_window=context_window)
    state_kind = state.kind
    act = _Act(db, sub, now, state_kind)
    turn = _open_turn_row(db, sub)

    if sub.input_seq is None:
        return act.requeue()
    if isinstance(state, (Completed, AdvancedPastInput)):  # 1
        return act.settle("completed" if isinstance(state, Completed) else "advanced_past_input", turn)
    if sub.attempt >= sub.max_attempts:  # 2
        return act.fail("attempts exhausted", turn)
    if now > sub.created_ms + sub.timeout_s * 1000:
        return act.fail("timed out", turn)
    if isinstance(state, TerminalError):
        return act.fail(f"terminal error: {state.reason}", turn)
    if turn is not None:
        phase, stream_key = Phase(turn["phase"]), turn["stream_key"]
        if phase is Phase.PROVIDER_STARTED and stream_key and _unconsumed_chunks(db, stream_key):  # 3
            act.continue_stream(turn)
        elif phase is Phase.TOOL_REQUEST_RECORDED:  # 5
            act.repair_tool_request(turn)
        return act.new_attempt(context_window, turn)  # 4 (and after 3 and 5)
    if isinstance(state, Resume):
        return act.new_attempt(context_window, None)
    return act.fail("interrupted", None)  # 6


def _open_turn_row(db: Database, sub: Submission) -> dict[str, Any] | None:
    if sub.turn_start_seq is None:
        return None
    row = db.one(
        "SELECT start_seq, turn, phase, steps, step_open, stream_key, tool_request FROM turn_journal "
        "WHERE session_id = ? AND start_seq = ? AND end_seq IS NULL",
        (sub.session_id, sub.turn_start_seq),
    )
    keys = ("start_seq", "turn", "phase", "steps", "step_open", "stream_key", "tool_request")
    return None if row is None else dict(zip(keys, row))


def _unconsumed_chunks(db: Database, stream_key: str) -> list[str]:
    return [
        row[0]
        for row in db.execute(
            "SELECT content FROM stream_chunks WHERE stream_key = ? AND consumed = 0 ORDER BY idx", (stream_key,)
        )
    ]


@attrs.define
class _Act:
    """The writes of one reconciliation, inside its transaction."""

    db: Database
    sub: Submission
    now: int
    state_kind: str
    appended: list[Event] = attrs.Factory(list)

    def _append(self, type_: str, data: dict[str, Any]) -> Event:
        event = append_txn(self.db, self.sub.session_id, type_, data, self.now)
        self.appended.append(event)
        return event

    def _decision(self, action: str, *, mode: ResumeMode | None = None, reason: str | None = None) -> Decision:
        return Decision(
            self.sub.id, self.sub.session_id, action, self.state_kind, self.sub.attempt, mode, reason, tuple(self.appended)
        )

    def _set_state(self, state: str, outcome: str | None, mode: ResumeMode | None = None) -> None:
        self.db.execute(
            "UPDATE submissions SET state = ?, outcome = ?, resume_mode = ?, lease_owner = NULL, "
            "lease_expires_ms = NULL, updated_ms = ? WHERE id = ? AND attempt = ? AND state = 'running'",
            (state, outcome, None if mode is None else mode.value, self.now, self.sub.id, self.sub.attempt),
        )
        assert self.db.changes() == 1

    def _close_step(self, turn: dict[str, Any], outcome: str) -> None:
        if turn["step_open"]:
            self._append("step_end", {"turn": turn["turn"], "step": turn["steps"], "outcome": outcome})
            turn["step_open"] = 0

    def requeue(self) -> Decision:
        self._set_state("queued", None)
        return self._decision("requeued", reason="the input was never applied")

    def settle(self, outcome: str, turn: dict[str, Any] | None) -> Decision:
        if turn is not None:
            self._close_step(turn, "ok")
            self._append("turn_end", {"turn": turn["turn"], "steps": turn["steps"], "reason": "complete"})
        self._set_state("completed", outcome)
        return self._decision("settled", reason=outcome)

    def fail(self, reason: str, turn: dict[str, Any] | None) -> Decision:
        before = len(self.appended)
        if turn is not None:
            self.appended.extend(apply_plan_txn(self.db, self.sub.session_id, self.now))
        interrupted = [e.data["tool_call_id"] for e in self.appended[before:] if e.type == "tool_result"]
        self._append(
            "submission_interrupted", {"submission_id": self.sub.id, "tool_call_ids": interrupted, "reason": reason}
        )
        self._set_state("failed", reason)
        return self._decision("failed", reason=reason)

    def continue_stream(self, turn: dict[str, Any]) -> None:
        chunks = _unconsumed_chunks(self.db, turn["stream_key"])
        self._append("assistant_message", {"content": "".join(chunks), "stop_reason": "aborted"})
        self._append("stream_interrupted", {"stream_key": turn["stream_key"], "chunks": len(chunks)})
        self._append("stream_continued", {"stream_key": turn["stream_key"]})
        self.db.execute("UPDATE stream_chunks SET consumed = 1 WHERE stream_key = ? AND consumed = 0", (turn["stream_key"],))

    def repair_tool_request(self, turn: dict[str, Any]) -> None:
        for call in _calls(turn["tool_request"]):
            if _log.result_seq_txn(self.db, self.sub.session_id, call["id"]) is not None:
                continue
            dispatched = _log.dispatch_seq_txn(self.db, self.sub.session_id, call["id"]) is not None
            risk = Risk.TOOL_OUTCOME_UNKNOWN if dispatched else Risk.TOOL_NOT_STARTED
            repair = synthetic_result(call["id"], call.get("name"), risk, source="reconciler")
            outcome = put_result_txn(
                self.db, self.sub.session_id, call["id"], encode("tool_result", repair.data), self.now
            )
            if outcome.won:
                self.appended.append(outcome.event)
        self._close_step(turn, "error")

    def new_attempt(self, context_window: int, turn: dict[str, Any] | None) -> Decision:
        following = _log.read_events_txn(self.db, self.sub.session_id, (self.sub.input_seq or 0) + 1)
        state = classify_submission_state(following, context_window=context_window)
        mode = state.mode if isinstance(state, Resume) else ResumeMode.INPUT_ONLY
        if turn is not None:
            # Fence the crashed worker now: the turn belongs to the attempt the next claim starts.
            self.db.execute(
                "UPDATE turn_journal SET attempt = ?, revision = revision + 1 WHERE session_id = ? AND start_seq = ? "
                "AND end_seq IS NULL",
                (self.sub.attempt + 1, self.sub.session_id, turn["start_seq"]),
            )
        self._set_state("queued", None, mode)
        return self._decision("new_attempt", mode=mode)


def _calls(tool_request: str | None) -> list[dict[str, Any]]:
    if not tool_request:
        return []
    calls = json.loads(tool_request)
    return [c for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)] if isinstance(calls, list) else []
