"""The reconciler part: the resume policy of DESIGN §7(3).

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

from typing import Any

import attrs

from journal import lineage
from journal import log as _log
from journal import queue as _queue
from journal import streams as _streams
from journal.codec import MAX_CLOCK_MS, check_int, check_number
from journal.effects import Effects
from journal.errors import InvalidArgument
from journal.log import Log
from journal.model import DecisionAction, Event, Phase, Risk, StepOutcome, SubmissionState, TurnEndReason
from journal.pure.classify import (
    AdvancedPastInput,
    Completed,
    Resume,
    ResumeMode,
    TerminalError,
    classify_submission_state,
)
from journal.pure.plan import synthetic_result
from journal.queue import Queue, Submission
from journal.recovery import Recovery
from journal.results import call_seqs_txn, put_result_txn
from journal.store import Database, Store
from journal.tools import ToolRegistry
from journal.turns import Turns, TurnState, turn_row_txn

DEFAULT_CONTEXT_WINDOW = 200_000


@attrs.frozen
class Decision:
    """What the reconciler decided for one submission (and what it appended)."""

    submission_id: str
    session_id: str
    action: DecisionAction
    state: str  # the classifier's kind
    attempt: int
    resume_mode: ResumeMode | None = None
    reason: str | None = None
    appended: tuple[Event, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "submission_id": self.submission_id,
            "session_id": self.session_id,
            "action": self.action.value,
            "state": self.state,
            "attempt": self.attempt,
            "resume_mode": None if self.resume_mode is None else self.resume_mode.value,
            "reason": self.reason,
            "appended": [e.to_dict() for e in self.appended],
        }


class Reconciler:
    """``reconcile``."""

    def __init__(
        self, store: Store, log: Log, turns: Turns, queue: Queue, recovery: Recovery, effects: Effects
    ) -> None:
        self._store = store
        self._log = log
        self._turns = turns
        self._queue = queue
        self._recovery = recovery
        self._effects = effects

    def reconcile(
        self,
        *,
        now: float | None = None,
        now_ms: int | None = None,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        registry: ToolRegistry | None = None,
        dry_run: bool = False,
    ) -> list[Decision]:
        """Decide, for every stale running submission, whether to settle, fail, requeue or
        resume it, and make the repairs; one transaction per submission. ``dry_run`` decides
        and makes the repairs in transactions that are rolled back instead of committed.

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
            stale, _queued = self._queue.stale_txn(db, clock_ms)
        if registry is not None and not dry_run:
            for session_id in dict.fromkeys(info.session_id for info in stale):
                self._effects.recover_effects(registry, session_id=session_id)
        decisions = []
        for info in stale:
            with self._store.write("reconcile", commit=not dry_run) as db:
                decisions.append(self._reconcile_txn(db, info.id, clock_ms, context_window))
        return decisions

    def _reconcile_txn(self, db: Database, submission_id: str, now: int, context_window: int) -> Decision:
        sub = _queue.get_txn(db, submission_id)
        state_kind = "pending"
        if not _queue.is_stale(sub, now):
            return Decision(
                sub.id, sub.session_id, DecisionAction.SKIPPED, state_kind, sub.attempt, reason="not stale any more"
            )
        following = None if sub.input_seq is None else lineage.read_events_txn(db, sub.session_id, sub.input_seq + 1)
        if sub.input_seq is not None and not lineage.read_events_txn(
            db, sub.session_id, sub.input_seq, sub.input_seq + 1
        ):
            following = None
        state = classify_submission_state(following, context_window=context_window)
        act = _Act(self, db, sub, now, state.kind)
        turn = (
            None if sub.turn_start_seq is None else turn_row_txn(db, sub.session_id, sub.turn_start_seq, open_only=True)
        )

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
            if (
                turn.phase is Phase.PROVIDER_STARTED
                and turn.stream_key
                and _streams.unconsumed_chunks_txn(db, turn.stream_key)
            ):  # 3
                act.continue_stream(turn)
            elif turn.phase is Phase.TOOL_REQUEST_RECORDED:  # 5
                turn = act.repair_tool_request(turn)
            return act.new_attempt(context_window, turn)  # 4 (and after 3 and 5)
        if isinstance(state, Resume):
            return act.new_attempt(context_window, None)
        return act.fail("interrupted", None)  # 6


@attrs.define
class _Act:
    """The writes of one reconciliation, inside its transaction."""

    parts: Reconciler
    db: Database
    sub: Submission
    now: int
    state_kind: str
    appended: list[Event] = attrs.Factory(list)

    def _append(self, type_: str, data: dict[str, Any]) -> Event:
        event = self.parts._log.append_txn(self.db, self.sub.session_id, type_, data, self.now)
        self.appended.append(event)
        return event

    def _decision(
        self, action: DecisionAction, *, mode: ResumeMode | None = None, reason: str | None = None
    ) -> Decision:
        return Decision(
            self.sub.id,
            self.sub.session_id,
            action,
            self.state_kind,
            self.sub.attempt,
            mode,
            reason,
            tuple(self.appended),
        )

    def _leave_running(self, to: SubmissionState, outcome: str | None, mode: ResumeMode | None = None) -> None:
        moved = _queue.transition_txn(
            self.db, self.sub.id, self.sub.attempt, from_=SubmissionState.RUNNING, to=to, now=self.now,
            outcome=outcome, resume_mode=mode,
        )  # fmt: skip
        assert moved  # inside BEGIN IMMEDIATE, after the staleness re-check

    def requeue(self) -> Decision:
        self._leave_running(SubmissionState.QUEUED, None)
        return self._decision(DecisionAction.REQUEUED, reason="the input was never applied")

    def settle(self, outcome: str, turn: TurnState | None) -> Decision:
        if turn is not None:
            complete, ok = TurnEndReason.COMPLETE.value, StepOutcome.OK.value
            closed = self.parts._turns.close_txn(
                self.db, self.sub.session_id, turn.start_seq, self.now, reason=complete, step_outcome=ok
            )
            self.appended.extend(closed)
        self._leave_running(SubmissionState.COMPLETED, outcome)
        return self._decision(DecisionAction.SETTLED, reason=outcome)

    def fail(self, reason: str, turn: TurnState | None) -> Decision:
        before = len(self.appended)
        if turn is not None:
            self.appended.extend(self.parts._recovery.apply_plan_txn(self.db, self.sub.session_id, self.now))
        interrupted = [e.data["tool_call_id"] for e in self.appended[before:] if e.type == "tool_result"]
        self._append(
            "submission_interrupted", {"submission_id": self.sub.id, "tool_call_ids": interrupted, "reason": reason}
        )
        self._leave_running(SubmissionState.FAILED, reason)
        return self._decision(DecisionAction.FAILED, reason=reason)

    def continue_stream(self, turn: TurnState) -> None:
        assert turn.stream_key is not None
        chunks = _streams.unconsumed_chunks_txn(self.db, turn.stream_key)
        self._append("assistant_message", {"content": "".join(chunks), "stop_reason": "aborted"})
        self._append("stream_interrupted", {"stream_key": turn.stream_key, "chunks": len(chunks)})
        self._append("stream_continued", {"stream_key": turn.stream_key})
        _streams.consume_chunks_txn(self.db, turn.stream_key)

    def repair_tool_request(self, turn: TurnState) -> TurnState:
        """Synthetic results for the request's calls still without one; the step closed."""
        for call in _calls(turn.tool_request):
            _requested, dispatched, answered = call_seqs_txn(self.db, self.sub.session_id, call["id"])
            if answered is not None:
                continue
            risk = Risk.TOOL_OUTCOME_UNKNOWN if dispatched is not None else Risk.TOOL_NOT_STARTED
            repair = synthetic_result(call["id"], call.get("name"), risk, source="reconciler")
            text = self.parts._log.codec.encode("tool_result", repair.data)
            outcome = put_result_txn(self.db, self.parts._log, self.sub.session_id, call["id"], text, self.now)
            if outcome.won:
                self.appended.append(outcome.event)
        if turn.step_open:
            self._append("step_end", {"turn": turn.turn, "step": turn.steps, "outcome": StepOutcome.ERROR.value})
        return attrs.evolve(turn, step_open=False)

    def new_attempt(self, context_window: int, turn: TurnState | None) -> Decision:
        following = lineage.read_events_txn(self.db, self.sub.session_id, (self.sub.input_seq or 0) + 1)
        state = classify_submission_state(following, context_window=context_window)
        mode = state.mode if isinstance(state, Resume) else ResumeMode.INPUT_ONLY
        if turn is not None:
            # Fence the crashed worker now: the turn belongs to the attempt the next claim starts.
            self.parts._turns.hand_over_txn(self.db, self.sub.session_id, turn.start_seq, attempt=self.sub.attempt + 1)
        self._leave_running(SubmissionState.QUEUED, None, mode)
        return self._decision(DecisionAction.NEW_ATTEMPT, mode=mode)


def _calls(tool_request: list[Any] | None) -> list[dict[str, Any]]:
    if not isinstance(tool_request, list):
        return []
    return [c for c in tool_request if isinstance(c, dict) and isinstance(c.get("id"), str)]
