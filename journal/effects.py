"""The effects part: effect-class recovery and the operator path (DESIGN §7(1), G9, G10).

After a crash, every dispatched call without a result is settled by its tool's declared effect
class (``journal.tools``): an Idempotent call is re-issued with its recorded key, a Queryable one
asked about by its request id, an Unsafe one becomes **indeterminate**: a synthetic result with
risk ``tool_outcome_unknown``, the state recorded in ``tool_calls``, a row in the
``notifications`` outbox (which this part owns), the operator callback called. An operator
settles it with ``resolve``.

Tools run outside any database transaction; their results go through the same first-write-wins
insert as live results, so racing recoverers and late real results are harmless (G5, G8, G9).
"""

from __future__ import annotations

import enum
import json
import logging
from typing import Any

import attrs

from journal import lineage
from journal import log as _log
from journal.errors import InvalidArgument, NotIndeterminate
from journal.log import Log
from journal.model import CallState, EffectKind, Event, OperatorOutcome, Risk, Vocabulary
from journal.results import PendingCall, Results, call_row_txn, pending_calls_txn, put_result_txn, result_seq_txn
from journal.store import Database, Store
from journal.tools import Idempotent, Landed, NeverArrived, OperatorCallback, Queryable, Tool, ToolContext, ToolRegistry

__all__ = ["EffectAction", "EffectRecovery", "Effects", "IndeterminateCall", "IndeterminateReason"]

_logger = logging.getLogger("journal.effects")

SOURCE = "effect_recovery"


class EffectAction(Vocabulary):
    """What effect-class recovery did with one dispatched call."""

    REISSUED = "reissued"  # Idempotent, or Queryable that never arrived: re-issued, result recorded
    LANDED = "landed"  # Queryable: the provider's answer recorded, nothing re-issued
    INDETERMINATE = "indeterminate"  # Unsafe (or could not be made safe): awaiting an operator
    REISSUE_FAILED = "reissue_failed"  # the re-issued tool raised; the call stays dispatched
    UNREGISTERED = "unregistered"  # no tool of that name: left to the close policy
    ALREADY_SETTLED = "already_settled"  # another recoverer (or the tool) got there first


class IndeterminateReason(Vocabulary):
    """Why a call became indeterminate."""

    UNSAFE = "unsafe"  # the tool is declared Unsafe
    LOOKUP_FAILED = "lookup_failed"  # a Queryable lookup raised or gave no clear answer
    NO_REQUEST_ID = "no_request_id"  # a Queryable call dispatched without a recorded request id
    NO_KEY = "no_key"  # an Idempotent call with no recorded key whose key cannot be derived
    EFFECT_CHANGED = "effect_changed"  # dispatched under another effect class than registered now


# -- effect-class recovery -------------------------------------------------------------------------


@attrs.frozen
class EffectRecovery:
    """What effect-class recovery did with one dispatched call.

    ``idempotency_key`` is the key the re-issue used (the recorded one when there is one);
    ``derived_key`` is the key re-derived now from the recorded arguments (``None`` if the
    derivation failed). ``result`` is the call's winning ``tool_result`` after this pass;
    ``appended`` what this pass appended. ``notified`` says whether an operator callback
    returned normally for an indeterminate call.
    """

    session_id: str
    call_id: str
    name: str | None
    action: EffectAction
    effect: EffectKind | None = None
    idempotency_key: str | None = None
    derived_key: str | None = None
    request_id: str | None = None
    reason: IndeterminateReason | None = None
    detail: str | None = None
    result: Event | None = None
    appended: tuple[Event, ...] = ()
    notified: bool = False

    @property
    def key_mismatch(self) -> bool:
        """The recorded key differs from the one the recorded arguments give now (the recorded
        one was used: it is the one the provider saw)."""
        return self.derived_key != self.idempotency_key and self.effect is EffectKind.IDEMPOTENT

    def to_dict(self) -> dict[str, Any]:
        out = attrs.asdict(self, recurse=False)
        out["result"] = None if self.result is None else self.result.to_dict()
        out["appended"] = [e.to_dict() for e in self.appended]
        out["key_mismatch"] = self.key_mismatch
        return {k: (v.value if isinstance(v, enum.Enum) else v) for k, v in out.items()}


def _indeterminate_text(call_id: str, name: str | None, reason: IndeterminateReason, detail: str | None) -> str:
    tool = f"tool {name!r}" if name is not None else "a tool of unknown name"
    why = {
        IndeterminateReason.UNSAFE: "its tool is declared Unsafe (not safe to retry)",
        IndeterminateReason.LOOKUP_FAILED: "the provider could not say whether it landed",
        IndeterminateReason.NO_REQUEST_ID: "no request id was recorded to ask the provider with",
        IndeterminateReason.NO_KEY: "no idempotency key was recorded and none can be derived",
        IndeterminateReason.EFFECT_CHANGED: "its tool's effect class changed since it was dispatched",
    }[reason]
    tail = f" ({detail})" if detail else ""
    return (
        f"The call {call_id!r} to {tool} was interrupted by a crash and has no result, and {why}{tail}. "
        "It MAY have run, so whether its side effects happened is unknown. It will not be retried "
        "automatically; an operator has been notified. Do not simply call it again: verify before retrying."
    )


@attrs.frozen
class IndeterminateCall:
    """An Unsafe call that may have run, awaiting an operator (G10)."""

    session_id: str
    call_id: str
    name: str | None
    dispatch_seq: int | None
    result_seq: int | None
    notification: dict[str, Any] | None = attrs.field(hash=False)


class Effects:
    """``recover_effects``, ``indeterminate`` and ``resolve``."""

    def __init__(self, store: Store, log: Log, results: Results) -> None:
        self._store = store
        self._log = log
        self._results = results

    def indeterminate_txn(self, db: Database) -> list[IndeterminateCall]:
        """Every call awaiting an operator, with its notification (one statement); oldest first
        per session."""
        rows = db.execute(db.sql.indeterminate_calls)
        out = []
        for session_id, call_id, name, dispatch_seq, result_seq, *note in rows:
            notification = None if note[0] is None else _notification(*note)
            out.append(IndeterminateCall(session_id, call_id, name, dispatch_seq, result_seq, notification))
        return out

    def forget_txn(self, db: Database, session_id: str) -> None:
        """Delete the session's notifications (purge)."""
        db.execute("DELETE FROM notifications WHERE session_id = ?", (session_id,))

    def recover_effects(
        self,
        registry: ToolRegistry,
        *,
        session_id: str | None = None,
        on_indeterminate: OperatorCallback | None = None,
    ) -> list[EffectRecovery]:
        """Settle every dispatched call without a result by its tool's effect class (§7(1)).

        Run it at restart, before the close policy or the reconciler (``recover(registry=...)``
        does): it treats every dispatched call without a result as interrupted. Calls of tools
        the registry does not know are left alone (the close policy marks them "may have run").
        Each recorded result or indeterminate state is one transaction (operation
        ``effect_recovery``); tools run outside any transaction. Running it twice appends nothing
        the second time. Operator callbacks (the registry's and ``on_indeterminate``) are called
        after the commit; a notification whose callback never returned (a crash, an exception)
        is delivered again by the next run: at least once.
        """
        if session_id is not None:
            with self._store.read() as db:
                lineage.next_seq_txn(db, session_id)  # SessionNotFound before anything
        callbacks = [cb for cb in (registry.on_indeterminate, on_indeterminate) if cb is not None]
        self._deliver_pending(callbacks, session_id)
        with self._store.read() as db:
            pending = [p for p in pending_calls_txn(db) if session_id is None or p.session_id == session_id]
        out = []
        for call in pending:
            outcome, notice = self._recover_call(registry, call)
            if notice is not None:
                outcome = attrs.evolve(outcome, notified=self._deliver(callbacks, notice))
            out.append(outcome)
        return out

    def _recover_call(
        self, registry: ToolRegistry, call: PendingCall
    ) -> tuple[EffectRecovery, IndeterminateCall | None]:
        tool = registry.get(call.name)
        if tool is None:
            return EffectRecovery(call.session_id, call.call_id, call.name, EffectAction.UNREGISTERED), None
        with self._store.read() as db:
            (dispatched,) = lineage.read_events_txn(db, call.session_id, call.dispatch_seq, call.dispatch_seq + 1)
        recorded = dispatched.data
        arguments = recorded.get("arguments")
        effects = tool.effects
        base = EffectRecovery(
            call.session_id, call.call_id, tool.name, EffectAction.INDETERMINATE, effect=effects.kind,
            idempotency_key=recorded.get("idempotency_key"), request_id=recorded.get("request_id"),
        )  # fmt: skip
        if recorded.get("effect") not in (None, effects.kind.value):
            # Dispatched as something else: whatever made a retry safe then (a key, a request
            # id) may not have been given to the provider. Only an operator can tell.
            detail = f"dispatched as {recorded['effect']}, registered as {effects.kind.value}"
            return self._make_indeterminate(base, IndeterminateReason.EFFECT_CHANGED, detail)
        if isinstance(effects, Idempotent):
            return self._recover_idempotent(tool, effects, base, arguments)
        if isinstance(effects, Queryable):
            return self._recover_queryable(tool, effects, base, arguments)
        return self._make_indeterminate(base, IndeterminateReason.UNSAFE, None)

    def _recover_idempotent(
        self, tool: Tool, effects: Idempotent, base: EffectRecovery, arguments: Any
    ) -> tuple[EffectRecovery, IndeterminateCall | None]:
        try:
            derived: str | None = effects.derive(arguments)
        except Exception as exc:
            _logger.warning("key derivation for %s/%s failed: %r", base.session_id, base.call_id, exc)
            derived = None
        key = base.idempotency_key or derived
        if key is None:
            return self._make_indeterminate(base, IndeterminateReason.NO_KEY, "the key derivation failed")
        if base.idempotency_key is not None and derived != base.idempotency_key:
            _logger.warning(
                "%s/%s: the recorded idempotency key %r differs from the re-derived %r; using the recorded one",
                base.session_id, base.call_id, base.idempotency_key, derived,
            )  # fmt: skip
        outcome = attrs.evolve(base, idempotency_key=key, derived_key=derived)
        return self._reissue(tool, outcome, arguments), None

    def _recover_queryable(
        self, tool: Tool, effects: Queryable, base: EffectRecovery, arguments: Any
    ) -> tuple[EffectRecovery, IndeterminateCall | None]:
        if base.request_id is None:
            return self._make_indeterminate(base, IndeterminateReason.NO_REQUEST_ID, None)
        try:
            answer: object = effects.lookup(base.request_id, arguments)  # the user's code: anything may come back
        except Exception as exc:
            return self._make_indeterminate(base, IndeterminateReason.LOOKUP_FAILED, f"lookup raised {exc!r}")
        if isinstance(answer, Landed):
            outcome = attrs.evolve(base, action=EffectAction.LANDED)
            return self._record(outcome, answer.result, is_error=answer.is_error), None
        if isinstance(answer, NeverArrived):
            return self._reissue(tool, base, arguments), None
        return self._make_indeterminate(base, IndeterminateReason.LOOKUP_FAILED, f"lookup returned {answer!r}")

    def _reissue(self, tool: Tool, outcome: EffectRecovery, arguments: Any) -> EffectRecovery:
        """Run the tool again with the recorded key / request id, outside any transaction."""
        context = ToolContext(
            outcome.session_id, outcome.call_id, tool.name, tool.effects.kind,
            outcome.idempotency_key, outcome.request_id, recovery=True,
        )  # fmt: skip
        try:
            content = tool.fn(arguments, context)
        except Exception as exc:
            return attrs.evolve(outcome, action=EffectAction.REISSUE_FAILED, detail=repr(exc))
        return self._record(attrs.evolve(outcome, action=EffectAction.REISSUED), content, is_error=False)

    def _record(self, outcome: EffectRecovery, content: Any, *, is_error: bool) -> EffectRecovery:
        """Record a real result found by recovery, first write wins (one transaction)."""
        data: dict[str, Any] = {"tool_call_id": outcome.call_id, "content": content}
        if outcome.name is not None:
            data["name"] = outcome.name
        if is_error:
            data["is_error"] = True
        data["metadata"] = {"source": SOURCE, "action": outcome.action.value}
        text = self._log.codec.encode("tool_result", data)
        time_ms = _log.now_ms()
        with self._store.write(SOURCE) as db:
            put = put_result_txn(db, self._log, outcome.session_id, outcome.call_id, text, time_ms)
        appended = tuple(e for e in ((put.event if put.won else None), put.late) if e is not None)
        return attrs.evolve(outcome, result=put.event, appended=appended)

    def _make_indeterminate(
        self, outcome: EffectRecovery, reason: IndeterminateReason, detail: str | None
    ) -> tuple[EffectRecovery, IndeterminateCall | None]:
        """In one transaction: the synthetic result, the state, the notification (G10)."""
        session_id, call_id = outcome.session_id, outcome.call_id
        risk = Risk.TOOL_OUTCOME_UNKNOWN.value
        data: dict[str, Any] = {"tool_call_id": call_id}
        if outcome.name is not None:
            data["name"] = outcome.name
        data["content"] = _indeterminate_text(call_id, outcome.name, reason, detail)
        data["is_error"] = True
        data["metadata"] = {
            "synthetic": True,
            "risk": risk,
            "source": SOURCE,
            "indeterminate": True,
            "reason": reason.value,
        }
        text = self._log.codec.encode("tool_result", data)
        time_ms = _log.now_ms()
        outcome = attrs.evolve(outcome, action=EffectAction.INDETERMINATE, reason=reason, detail=detail)
        with self._store.write(SOURCE) as db:
            row = call_row_txn(db, session_id, call_id)
            if (
                row is None
                or row.state is not CallState.DISPATCHED
                or result_seq_txn(db, session_id, call_id) is not None
            ):
                # Settled meanwhile (another recoverer, or the tool's own late result): a
                # synthetic result must never become a tool_result_late next to a real one.
                return attrs.evolve(outcome, action=EffectAction.ALREADY_SETTLED, reason=None, detail=None), None
            put = put_result_txn(db, self._log, session_id, call_id, text, time_ms)
            assert put.won
            # The result trigger just set 'resolved'; the compare-and-set on that very result
            # makes the call indeterminate instead, in the same transaction.
            self._results.mark_indeterminate_txn(db, session_id, call_id, put.event.seq)
            note = {"name": outcome.name, "reason": reason.value, "risk": risk,
                    "effect": outcome.effect and outcome.effect.value,
                    "dispatch_seq": row.dispatch_seq, "result_seq": put.event.seq}  # fmt: skip
            for field, value in (
                ("detail", detail),
                ("idempotency_key", outcome.idempotency_key),
                ("request_id", outcome.request_id),
            ):
                if value is not None:
                    note[field] = value
            db.execute(
                "INSERT INTO notifications (session_id, call_id, kind, data, created_ms) "
                "VALUES (?, ?, 'indeterminate', ?, ?) "
                "ON CONFLICT (session_id, call_id, kind) DO NOTHING",
                (session_id, call_id, json.dumps(note, separators=(",", ":")), time_ms),
            )
            notice = _indeterminate_call_txn(db, session_id, call_id)
        return attrs.evolve(outcome, result=put.event, appended=(put.event,)), notice

    # -- notifications (a durable outbox; the callback is delivered at least once) ----------------

    def _deliver(self, callbacks: list[OperatorCallback], notice: IndeterminateCall) -> bool:
        if not callbacks:
            return False
        for callback in callbacks:
            try:
                callback(notice)
            except Exception:  # the row stays undelivered; the next run delivers it again
                _logger.exception("operator callback failed for %s/%s", notice.session_id, notice.call_id)
                return False
        assert notice.notification is not None
        with self._store.write("notify") as db:
            db.execute(db.sql.mark_delivered, (_log.now_ms(), notice.notification["id"]))
        return True

    def _deliver_pending(self, callbacks: list[OperatorCallback], session_id: str | None) -> None:
        """Deliver the notifications an earlier run committed but never delivered."""
        if not callbacks:
            return
        with self._store.read() as db:
            rows = list(db.execute(db.sql.undelivered))
            notices = [_indeterminate_call_txn(db, s, c) for s, c in rows if session_id is None or s == session_id]
        for notice in notices:
            if notice is not None:
                self._deliver(callbacks, notice)

    # -- the operator path -------------------------------------------------------------------------

    def indeterminate(self, session_id: str | None = None) -> list[IndeterminateCall]:
        """The calls awaiting an operator (G10), with their notifications; oldest first per session."""
        if session_id is not None:
            with self._store.read() as db:
                lineage.next_seq_txn(db, session_id)  # SessionNotFound before anything
        with self._store.read() as db:
            calls = self.indeterminate_txn(db)
        return [c for c in calls if session_id is None or c.session_id == session_id]

    def resolve(
        self, session_id: str, call_id: str, *, outcome: str | OperatorOutcome, note: str | None = None
    ) -> Event:
        """Record an operator's finding for an indeterminate call: it ``ran`` or ``did_not_run``.

        Appends an ``operator_resolution`` event; in the same transaction the call's state
        becomes ``resolved`` and its notification is acknowledged. A call that is not awaiting an
        operator raises ``NotIndeterminate`` (so two operators resolving at once record one
        resolution). The call's synthetic result stays: the log is append-only; a retry is a new
        tool call the agent makes.
        """
        values = {o.value for o in OperatorOutcome}
        if outcome not in values:
            raise InvalidArgument("outcome", f"must be one of {sorted(values)}, not {outcome!r}")
        if note is not None and not isinstance(note, str):
            raise InvalidArgument("note", f"must be a string, not {type(note).__name__}")
        data: dict[str, Any] = {"tool_call_id": call_id, "outcome": OperatorOutcome(outcome).value}
        if note is not None:
            data["note"] = note
        self._log.codec.encode("operator_resolution", data)  # validated before anything is written (G12)
        time_ms = _log.now_ms()
        with self._store.write("resolve") as db:
            lineage.next_seq_txn(db, session_id)
            row = call_row_txn(db, session_id, call_id)
            if row is None or row.state is not CallState.INDETERMINATE:
                raise NotIndeterminate(session_id, call_id)
            return self._log.append_txn(db, session_id, "operator_resolution", data, time_ms)


def _notification(note_id: int, data: str, created_ms: int, acked_ms: int | None) -> dict[str, Any]:
    return {"id": note_id, "data": json.loads(data), "created_ms": created_ms, "acked_ms": acked_ms}


def _notification_txn(db: Database, session_id: str, call_id: str) -> dict[str, Any] | None:
    row = db.one(
        "SELECT id, data, created_ms, acked_ms FROM notifications "
        "WHERE session_id = ? AND call_id = ? AND kind = 'indeterminate'",
        (session_id, call_id),
    )
    return None if row is None else _notification(*row)


def _indeterminate_call_txn(db: Database, session_id: str, call_id: str) -> IndeterminateCall | None:
    row = call_row_txn(db, session_id, call_id)
    if row is None or row.state is not CallState.INDETERMINATE:
        return None
    notification = _notification_txn(db, session_id, call_id)
    return IndeterminateCall(session_id, call_id, row.name, row.dispatch_seq, row.result_seq, notification)
