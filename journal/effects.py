"""Effect classes, the tool registry, effect-class recovery and the operator path (DESIGN §7(1)).

A tool's author is the only one who knows whether running its tool twice is harmless, so a tool
is registered only with a declared effect class, and each class carries what its recovery needs:

- ``Idempotent(key=...)``: ``key(arguments) -> str`` derives the idempotency key from the
  call's arguments, deterministically. Recovery re-derives it from the **recorded** arguments
  and re-issues the call with it; the provider deduplicates.
- ``Queryable(lookup=...)``: ``lookup(request_id, arguments)`` asks the provider whether the
  request with this id landed: ``Landed(result)`` or ``NeverArrived()``. Recovery records the
  provider's answer, or re-issues with the same request id. A lookup that raises (or answers
  anything else) is treated as Unsafe.
- ``Unsafe()``: never retried, by nothing (there is no flag). After a crash the call becomes
  **indeterminate**: a synthetic result with risk ``tool_outcome_unknown``, the state recorded
  in ``tool_calls``, a row in the ``notifications`` outbox, the operator callback called. An
  operator settles it with ``resolve``.

Tools run outside any database transaction; their results go through the same first-write-wins
insert as live results, so racing recoverers and late real results are harmless (G5, G8, G9).
"""

from __future__ import annotations

import enum
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from journal import log as _log
from journal.errors import InvalidArgument, MissingEffectClass, NotIndeterminate, SchemaViolation, UnregisteredTool
from journal.model import EffectKind, Event, OperatorOutcome, Risk, Vocabulary
from journal.results import PutResult, put_result_txn, requested_call_txn
from journal.scan import IndeterminateCall, PendingCall
from journal.store import Database, Store
from journal.turns import Turn, append_txn
from journal.validate import Codec, encode

__all__ = [
    "EffectAction",
    "EffectClass",
    "EffectKind",
    "EffectRecovery",
    "EffectsMixin",
    "Idempotent",
    "IndeterminateReason",
    "Landed",
    "NeverArrived",
    "Queryable",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "Unsafe",
]

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


# -- effect classes ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Idempotent:
    """Safe to re-issue with the same key: ``key(arguments)`` derives it, deterministically,
    from the call's recorded arguments (never from the time, a counter or a random value)."""

    key: Callable[[Any], str] = attrs.field(validator=attrs.validators.is_callable())
    kind: ClassVar[EffectKind] = EffectKind.IDEMPOTENT

    def derive(self, arguments: Any) -> str:
        """The key for these arguments; ``InvalidArgument`` if the derivation gives no string."""
        key = self.key(arguments)
        if not isinstance(key, str) or not key:
            raise InvalidArgument("key", f"the key derivation must return a non-empty str, not {key!r}")
        return key


@attrs.frozen
class Landed:
    """The provider's answer: the request landed, and this is its result (the tool's output)."""

    result: Any = attrs.field(hash=False)
    is_error: bool = attrs.field(default=False, kw_only=True)


@attrs.frozen
class NeverArrived:
    """The provider's answer: no request with this id ever reached it."""


@attrs.frozen(kw_only=True)
class Queryable:
    """The provider can say whether a request landed: ``lookup(request_id, arguments)`` returns
    ``Landed(result)`` or ``NeverArrived()``. Raising means "cannot tell" (treated as Unsafe)."""

    lookup: Callable[[str, Any], Landed | NeverArrived] = attrs.field(validator=attrs.validators.is_callable())
    kind: ClassVar[EffectKind] = EffectKind.QUERYABLE


@attrs.frozen
class Unsafe:
    """Never retried automatically: after a crash the call becomes indeterminate (G10)."""

    kind: ClassVar[EffectKind] = EffectKind.UNSAFE


EffectClass = Idempotent | Queryable | Unsafe
_EFFECT_CLASSES = (Idempotent, Queryable, Unsafe)


# -- the registry ----------------------------------------------------------------------------------


@attrs.frozen
class ToolContext:
    """What a tool gets besides its arguments: where the call is, and what makes a retry safe.

    An Idempotent tool must pass ``idempotency_key`` to its provider; a Queryable tool must
    send ``request_id`` with its request. ``recovery`` is True when recovery re-issues the call.
    """

    session_id: str
    call_id: str
    name: str
    effect: EffectKind
    idempotency_key: str | None = None
    request_id: str | None = None
    recovery: bool = False


ToolFn = Callable[[Any, ToolContext], Any]
OperatorCallback = Callable[[IndeterminateCall], object]


@attrs.frozen
class Tool:
    """A registered tool: ``fn(arguments, context)`` returns the result's content."""

    name: str
    fn: ToolFn = attrs.field(repr=False)
    effects: EffectClass


class ToolRegistry:
    """The tools an agent may run, each with its declared effect class.

    ``on_indeterminate`` is the operator callback: called (after the commit) with an
    ``IndeterminateCall`` for each call recovery makes indeterminate.
    """

    def __init__(self, *, on_indeterminate: OperatorCallback | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self.on_indeterminate = on_indeterminate

    if TYPE_CHECKING:
        # For a type checker `effects` is required; at run time a missing one is a typed error.
        def register(self, name: str, fn: ToolFn, *, effects: EffectClass) -> Tool: ...

    else:

        def register(self, name, fn, *, effects=None):
            """Register ``fn`` under ``name`` with its effect class (there is no default).

            A missing effect class (or ``None``, or anything that is not ``Idempotent``,
            ``Queryable`` or ``Unsafe``) raises ``MissingEffectClass``.
            """
            return self._register(name, fn, effects)

    def _register(self, name: str, fn: ToolFn, effects: object) -> Tool:
        if not isinstance(name, str) or not name:
            raise InvalidArgument("name", f"must be a non-empty string, not {name!r}")
        if effects is Unsafe:
            effects = Unsafe()  # Unsafe carries nothing: the class itself declares it as well
        if not isinstance(effects, _EFFECT_CLASSES):
            raise MissingEffectClass(name)
        if not callable(fn):
            raise InvalidArgument("fn", f"must be callable as fn(arguments, context), not {fn!r}")
        if name in self._tools:
            raise InvalidArgument("name", f"a tool {name!r} is already registered")
        tool = Tool(name, fn, effects)
        self._tools[name] = tool
        return tool

    def tool(self, name: str) -> Tool:
        """The tool registered under ``name``; raises ``UnregisteredTool``."""
        try:
            return self._tools[name]
        except KeyError:
            raise UnregisteredTool(name) from None

    def get(self, name: str | None) -> Tool | None:
        return self._tools.get(name) if name is not None else None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def call(self, journal: EffectsMixin, where: str | Turn, call_id: str) -> PutResult:
        """Run a requested tool call through the journal: dispatch, run, record the result.

        ``where`` is the open ``Turn`` that requested the call (its lease is checked) or a
        session id. The dispatch records what recovery will need (the effect class, the derived
        idempotency key or a new request id) and is committed before the tool runs (G6); the
        tool runs outside any transaction; its result goes through ``put_result`` (G5). Nothing
        is written if the tool is not registered (``UnregisteredTool``) or its key cannot be
        derived. If the tool raises, the exception propagates and the call stays dispatched
        without a result: it may have run, and recovery settles it by its effect class.
        """
        turn = where if isinstance(where, Turn) else None
        session_id = where.session_id if isinstance(where, Turn) else where
        request = journal._requested_call(session_id, call_id)
        tool = self.tool(request.get("name"))  # UnregisteredTool: nothing is written
        effects = tool.effects
        key = effects.derive(request.get("arguments")) if isinstance(effects, Idempotent) else None
        # Random, not derived from the call id: a fork re-dispatching an inherited call must not
        # be taken by the provider for the parent's request.
        request_id = uuid.uuid4().hex if isinstance(effects, Queryable) else None
        dispatch = journal.dispatch(  # type: ignore[attr-defined]
            session_id, call_id, turn=turn, idempotency_key=key, request_id=request_id, effect=effects.kind.value
        )
        context = ToolContext(session_id, call_id, tool.name, effects.kind, key, request_id)
        content = tool.fn(dispatch.arguments, context)
        return dispatch.result(content, name=tool.name)


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


class EffectsMixin:
    """Effect-class recovery and the operator path on ``Journal``."""

    _store: Store
    _codec: Codec

    def _requested_call(self, session_id: str, call_id: str) -> dict[str, Any]:
        """The ``{id, name, arguments}`` an assistant message of the session requested."""
        with self._store.read() as db:
            _log.next_seq_txn(db, session_id)  # SessionNotFound first
            return requested_call_txn(db, session_id, call_id)

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
            self.session(session_id)  # type: ignore[attr-defined]  # SessionNotFound before anything
        callbacks = [cb for cb in (registry.on_indeterminate, on_indeterminate) if cb is not None]
        self._deliver_pending(callbacks, session_id)
        pending = [p for p in self.scan().pending_calls if session_id is None or p.session_id == session_id]  # type: ignore[attr-defined]
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
            (dispatched,) = _log.read_events_txn(db, call.session_id, call.dispatch_seq, call.dispatch_seq + 1)
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
        except Exception as exc:  # noqa: BLE001 - the author's code; the recorded key decides
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
            answer = effects.lookup(base.request_id, arguments)
        except Exception as exc:  # noqa: BLE001 - a failing lookup is "cannot tell": Unsafe
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
        except Exception as exc:  # noqa: BLE001 - reported; the call stays dispatched, safe to retry later
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
        text = self._codec.encode("tool_result", data)
        time_ms = _log.now_ms()
        with self._store.write(SOURCE) as db:
            put = put_result_txn(db, outcome.session_id, outcome.call_id, text, time_ms)
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
        text = encode("tool_result", data)
        time_ms = _log.now_ms()
        outcome = attrs.evolve(outcome, action=EffectAction.INDETERMINATE, reason=reason, detail=detail)
        with self._store.write(SOURCE) as db:
            row = db.one(
                "SELECT state, dispatch_seq FROM tool_calls WHERE session_id = ? AND call_id = ?", (session_id, call_id)
            )
            if row is None or row[0] != "dispatched" or _log.result_seq_txn(db, session_id, call_id) is not None:
                # Settled meanwhile (another recoverer, or the tool's own late result): a
                # synthetic result must never become a tool_result_late next to a real one.
                return attrs.evolve(outcome, action=EffectAction.ALREADY_SETTLED, reason=None, detail=None), None
            put = put_result_txn(db, session_id, call_id, text, time_ms)
            assert put.won
            # The result trigger just set 'resolved'; the compare-and-set on that very result
            # makes the call indeterminate instead, in the same transaction.
            db.execute(
                "UPDATE tool_calls SET state = 'indeterminate' "
                "WHERE session_id = ? AND call_id = ? AND result_seq = ? AND state = 'resolved'",
                (session_id, call_id, put.event.seq),
            )
            state = db.value("SELECT state FROM tool_calls WHERE session_id = ? AND call_id = ?", (session_id, call_id))
            if state != "indeterminate":  # the schema's triggers changed under us: refuse, roll back
                raise SchemaViolation(
                    "effect_recovery", f"the call's state is {state!r} after its indeterminate result"
                )
            note = {"name": outcome.name, "reason": reason.value, "risk": risk, "effect": outcome.effect and outcome.effect.value,
                    "dispatch_seq": row[1], "result_seq": put.event.seq}  # fmt: skip
            for field, value in (
                ("detail", detail),
                ("idempotency_key", outcome.idempotency_key),
                ("request_id", outcome.request_id),
            ):
                if value is not None:
                    note[field] = value
            db.execute(
                "INSERT INTO notifications (session_id, call_id, kind, data, created_ms) VALUES (?, ?, 'indeterminate', ?, ?) "
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
            db.execute(
                "UPDATE notifications SET data = json_set(data, '$.delivered_ms', ?) "
                "WHERE id = ? AND data ->> '$.delivered_ms' IS NULL",
                (_log.now_ms(), notice.notification["id"]),
            )
        return True

    def _deliver_pending(self, callbacks: list[OperatorCallback], session_id: str | None) -> None:
        """Deliver the notifications an earlier run committed but never delivered."""
        if not callbacks:
            return
        with self._store.read() as db:
            rows = list(
                db.execute(
                    "SELECT session_id, call_id FROM notifications INDEXED BY notifications_pending "
                    "WHERE acked_ms IS NULL AND data ->> '$.delivered_ms' IS NULL ORDER BY created_ms, id"
                )
            )
            notices = [_indeterminate_call_txn(db, s, c) for s, c in rows if session_id is None or s == session_id]
        for notice in notices:
            if notice is not None:
                self._deliver(callbacks, notice)

    # -- the operator path -------------------------------------------------------------------------

    def indeterminate(self, session_id: str | None = None) -> list[IndeterminateCall]:
        """The calls awaiting an operator (G10), with their notifications; oldest first per session."""
        if session_id is not None:
            self.session(session_id)  # type: ignore[attr-defined]
        calls = self.scan().indeterminate  # type: ignore[attr-defined]
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
        self._codec.encode("operator_resolution", data)  # validated before anything is written (G12)
        time_ms = _log.now_ms()
        with self._store.write("resolve") as db:
            _log.next_seq_txn(db, session_id)
            state = db.value("SELECT state FROM tool_calls WHERE session_id = ? AND call_id = ?", (session_id, call_id))
            if state != "indeterminate":
                raise NotIndeterminate(session_id, call_id)
            event = append_txn(db, session_id, "operator_resolution", data, time_ms)
        return event


def _indeterminate_call_txn(db: Database, session_id: str, call_id: str) -> IndeterminateCall | None:
    row = db.one(
        "SELECT name, dispatch_seq, result_seq FROM tool_calls WHERE session_id = ? AND call_id = ? AND state = 'indeterminate'",
        (session_id, call_id),
    )
    if row is None:
        return None
    note = db.one(
        "SELECT id, data, created_ms, acked_ms FROM notifications WHERE session_id = ? AND call_id = ? AND kind = 'indeterminate'",
        (session_id, call_id),
    )
    notification = None
    if note is not None:
        notification = {"id": note[0], "data": json.loads(note[1]), "created_ms": note[2], "acked_ms": note[3]}
    return IndeterminateCall(session_id, call_id, row[0], row[1], row[2], notification)
