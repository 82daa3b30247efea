"""Recovery planning: what to append so a crashed session's history is honest (DESIGN §7(2)).

Pure functions over one session's log, in seq order: the complete log, or a window of it that
starts at the outermost open turn together with ``Before``, what the log says of the window's
calls before it (the plan is then the same). No I/O; applying the plan is someone else's job.

An orphaned ``turn_start`` (a turn that never got its ``turn_end``) is the crash signal; the
repair is one synthetic ``tool_result`` per call the turn still owes, each with a risk, then a
``turn_end`` with reason ``interrupted``. Nothing else is ever planned, so a clean log (every
turn closed) gets an empty plan even when it has a dangling call (G8).

Detection keys on event types only, never on reasons or metadata, which is what makes planning
the result of a plan come out empty.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, TypeGuard

import attrs

from journal.model import Event, EventType, Risk, TurnEndReason

__all__ = [
    "Before",
    "Repair",
    "interrupted",
    "open_turns",
    "plan",
    "synthetic_head",
    "synthetic_result",
    "synthetic_result_data",
]

_log = logging.getLogger("journal.recovery")

_SOURCE = "recovery"


@attrs.frozen
class Repair:
    """One event recovery wants to append: its ``type`` and ``data``."""

    type: str
    data: dict[str, Any] = attrs.field(hash=False)

    @property
    def tool_call_id(self) -> str | None:
        """The call a synthetic result answers; ``None`` for a ``turn_end``."""
        return self.data.get("tool_call_id") if self.type == EventType.TOOL_RESULT else None

    @property
    def risk(self) -> Risk | None:
        """The risk of a synthetic result; ``None`` for a ``turn_end``."""
        metadata = self.data.get("metadata") if self.type == EventType.TOOL_RESULT else None
        return Risk(metadata["risk"]) if isinstance(metadata, dict) else None


@attrs.frozen
class Before:
    """What the log says, before a window of it, about the calls the window mentions: which
    were sighted (requested or dispatched), dispatched and answered there.

    A window that starts at the outermost open turn, with this, plans what the whole log plans:
    a call sighted before it belongs to no open turn, and the risk rules need only whether a call
    was ever dispatched or answered."""

    sighted: frozenset[str] = frozenset()
    dispatched: frozenset[str] = frozenset()
    answered: frozenset[str] = frozenset()


def open_turns(events: Iterable[Event]) -> list[Event]:
    """The ``turn_start`` events that never got a ``turn_end``, innermost first.

    Turns do not nest, so a healthy log yields at most one; a list is returned so that a
    double-started log can be described rather than refused. A ``turn_end`` closes the innermost
    open turn; one with nothing open is ignored with a warning naming its seq.
    """
    return [turn.start for turn in reversed(_walk(events).open)]


def interrupted(events: Iterable[Event]) -> bool:
    """Whether the log was left mid-turn, i.e. whether a crash needs repairing."""
    return bool(open_turns(events))


def plan(events: Iterable[Event], *, before: Before | None = None) -> list[Repair]:
    """The events recovery would append, in append order, without appending them.

    For each orphaned turn, innermost first: one synthetic ``tool_result`` per owed call (in the
    order the calls were first seen), then its ``turn_end``. A call is owed by the innermost turn
    open at its first sighting (in an assistant message's ``tool_calls`` or a ``tool_call``
    dispatch) when no ``tool_result`` anywhere in the log answers it -- or, if it was first seen
    where no turn stays open (a turn that ended awaiting a human's approval, or no turn), by the
    innermost turn open at its dispatch: the run that resumed it handed it out. Never raises on
    malformed data: what cannot be a call id (a non-string or empty id) is skipped.
    """
    log = _walk(events, before)
    repairs: list[Repair] = []
    for turn in reversed(log.open):
        for call in log.calls.values():
            if call.turn is turn and call.id not in log.answered:
                repairs.append(_synthetic_result(call, _risk(call, log.dispatched)))
        repairs.append(_turn_end(turn))
    return repairs


# -- the walk ------------------------------------------------------------------------------------


@attrs.define(eq=False)
class _Step:
    closed: bool = False


@attrs.define(eq=False)
class _Turn:
    start: Event
    steps: int = 0
    open_steps: list[_Step] = attrs.Factory(list)
    dispatched: set[str] = attrs.Factory(set)


@attrs.define(eq=False)
class _Call:
    id: str
    name: str | None
    turn: _Turn | None  # the innermost turn open at the first sighting
    step: _Step | None  # that turn's open step at the first sighting


@attrs.define(eq=False)
class _Log:
    open: list[_Turn] = attrs.Factory(list)  # a stack: the innermost open turn is last
    calls: dict[str, _Call] = attrs.Factory(dict)  # in the order first seen
    dispatched: set[str] = attrs.Factory(set)
    answered: set[str] = attrs.Factory(set)

    def resume(self, call_id: str) -> None:
        """A call dispatched in an open turn after it was first seen where no turn stays open
        (one that ended, or none) is that turn's now: sighted again here, last in order."""
        known = self.calls.get(call_id)
        if known is not None and (known.turn is None or known.turn not in self.open):
            name = known.name
            del self.calls[call_id]
            self.sight(call_id, name)

    def sight(self, call_id: str, name: object) -> None:
        """Attribute a call to where it was first seen; a later sighting may only name it."""
        known = self.calls.get(call_id)
        if known is not None:
            if known.name is None and isinstance(name, str):
                known.name = name
            return
        turn = self.open[-1] if self.open else None
        step = turn.open_steps[-1] if turn is not None and turn.open_steps else None
        self.calls[call_id] = _Call(call_id, name if isinstance(name, str) else None, turn, step)


def _walk(events: Iterable[Event], before: Before | None = None) -> _Log:
    log = _Log()
    if before is not None:
        for call_id in sorted(before.sighted):
            log.calls[call_id] = _Call(call_id, None, None, None)  # seen outside any open turn
        log.dispatched.update(before.dispatched)
        log.answered.update(before.answered)
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        kind = event.type
        innermost = log.open[-1] if log.open else None
        if kind == EventType.TURN_START:
            log.open.append(_Turn(event))
        elif kind == EventType.TURN_END:
            if innermost is None:
                _log.warning("turn_end at seq %r closes no open turn; ignored", event.seq)
            else:
                log.open.pop()
        elif kind == EventType.STEP_START:
            if innermost is not None:
                innermost.steps += 1
                innermost.open_steps.append(_Step())
        elif kind == EventType.STEP_END:
            # Pairing is structural, like turns: a step_end closes the innermost open step of the
            # innermost open turn; its `step` number is not trusted over the order of the log.
            if innermost is not None and innermost.open_steps:
                innermost.open_steps.pop().closed = True
        elif kind == EventType.ASSISTANT_MESSAGE:
            tool_calls = data.get("tool_calls")
            if isinstance(tool_calls, list):
                for call in tool_calls:
                    if isinstance(call, dict) and _is_id(call.get("id")):
                        log.sight(call["id"], call.get("name"))
        elif kind == EventType.TOOL_CALL:
            dispatched = data.get("id")
            if _is_id(dispatched):
                log.dispatched.add(dispatched)
                if innermost is not None:
                    innermost.dispatched.add(dispatched)
                    log.resume(dispatched)
                log.sight(dispatched, data.get("name"))
        elif kind == EventType.TOOL_RESULT:
            answered = data.get("tool_call_id")
            if _is_id(answered):
                log.answered.add(answered)
    return log


def _is_id(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value != ""


# -- the repairs ---------------------------------------------------------------------------------


def _risk(call: _Call, dispatched: set[str]) -> Risk:
    """DESIGN §7(2), first match wins. When in doubt, say "may have run": wrongly saying "did
    not run" is how a payment is made twice."""
    if call.id in dispatched:  # 1: handed to its executor, no result
        return Risk.TOOL_OUTCOME_UNKNOWN
    turn = call.turn
    if turn is not None and turn.dispatched - {call.id}:  # 2: the turn records others' dispatches
        return Risk.TOOL_NOT_STARTED
    if turn is not None and not turn.dispatched and call.step is not None and call.step.closed:
        # 3: no dispatch bookkeeping at all, but the step closed, so nothing was in flight
        return Risk.TOOL_NOT_STARTED
    return Risk.TOOL_OUTCOME_UNKNOWN  # 4


def _synthetic_result(call: _Call, risk: Risk) -> Repair:
    return synthetic_result(call.id, call.name, risk)


def synthetic_result(call_id: str, name: str | None, risk: Risk, *, source: str = _SOURCE, **extra: Any) -> Repair:
    """The ``tool_result`` that stands in for a call's lost result, saying honestly what is known.

    ``extra`` goes into the metadata (the effect-class recovery marks ``indeterminate``)."""
    return Repair(EventType.TOOL_RESULT.value, synthetic_result_data(call_id, name, risk, source=source, **extra))


def synthetic_result_data(
    call_id: str, name: str | None, risk: Risk, *, source: str = _SOURCE, **extra: Any
) -> dict[str, Any]:
    """The data of ``synthetic_result``: what a writer that builds events itself appends."""
    data: dict[str, Any] = {"tool_call_id": call_id}
    if name is not None:
        data["name"] = name
    data["content"] = _text(call_id, name, risk)
    data["is_error"] = True
    data["metadata"] = {"synthetic": True, "risk": risk.value, "source": source, **extra}
    return data


def _text(call_id: str, name: str | None, risk: Risk) -> str:
    return synthetic_head(call_id, name) + _TAILS[risk]


def synthetic_head(call_id: str, name: str | None) -> str:
    """The part of a synthetic result's content that names the call; the rest is its risk's
    own, the same for every call (a writer that encodes the text itself encodes that once)."""
    tool = f"tool {name!r}" if name is not None else "a tool of unknown name"
    return f"The call {call_id!r} to {tool} was interrupted by a crash and has no result. "


_TAILS = {
    Risk.TOOL_NOT_STARTED: (
        "It was never dispatched: it did not run and had no side effects. "
        "It is safe to call it again if it is still needed."
    ),
    Risk.TOOL_OUTCOME_UNKNOWN: (
        "It MAY have run before the crash, so whether its side effects happened is "
        "unknown. Do not simply call it again: verify before retrying (check whether its "
        "effect took place, or ask the user)."
    ),
}


def _turn_end(turn: _Turn) -> Repair:
    data: dict[str, Any] = {}
    number = turn.start.data.get("turn") if isinstance(turn.start.data, dict) else None
    if isinstance(number, int) and not isinstance(number, bool):
        data["turn"] = number
    data["steps"] = turn.steps
    data["reason"] = TurnEndReason.INTERRUPTED.value
    return Repair(EventType.TURN_END.value, data)
