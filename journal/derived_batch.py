"""The derived state of a batch of one session's events, planned once for the batch (issue 27).

The schema's gate trigger keeps the turn journal and the tool-call states row by row: a
sub-program per event, about three times the insert itself. For a batch ``append_many`` writes
in one insert (``journal.log._reads_settled_txn``) this module plans the same state once: which
turn each event applies to (the innermost turn open at its place, as the trigger finds it) and
what the turn's row is after all of them; the store then writes the batch's rows with the
trigger's derived part off and applies the plan in a few statements that read each value from
the stored row exactly as the trigger reads it (``journal.store.sqlite_sql``: ``OPEN_TURN_SQL``,
``CHANGE_TURN_SQL``, the three ``*_CALLS_SQL``). Only the structure is decided here; no value
is copied out of Python's dicts.

``plan`` returns ``None`` where the statements, run kind by kind (requests, then dispatches,
then results), would not end where the trigger's row order does: an ``operator_resolution`` in
the batch, or a call whose dispatch or result comes before its request or whose result comes
before its dispatch. Those batches keep the trigger.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

__all__ = ["DerivedPlan", "TurnChange", "plan"]

_TURN_OPS = frozenset({"turn_start", "turn_end", "step_start", "step_end"})


@attrs.define
class TurnChange:
    """What the batch does to one turn's row: the columns it sets (``None``: left as they were)
    and how many times its counters move. ``tool_request`` is the seq of the assistant message
    whose request the row keeps, ``-1`` when a ``step_end`` cleared it."""

    start_seq: int
    opened: bool  # the batch's own turn_start: its row is inserted first, as the trigger does
    outer_start: int | None = None
    steps: int = 0
    revision: int = 0
    step_open: int | None = None
    phase: str | None = None
    checkpoint_seq: int | None = None
    tool_request: int | None = None
    clear_stream: bool = False
    end_seq: int | None = None

    def row(self, session_id: str) -> tuple[Any, ...]:
        """The bindings of ``CHANGE_TURN_SQL``."""
        return (
            session_id,
            self.start_seq,
            self.steps,
            self.revision,
            self.step_open,
            self.phase,
            self.checkpoint_seq,
            self.tool_request,
            int(self.clear_stream),
            self.end_seq,
        )


@attrs.frozen
class DerivedPlan:
    """The batch's derived state: its seqs ``first .. end - 1``, the turns it opens (start seq
    and the turn open around it) and changes, and which kinds of call rows it writes."""

    session_id: str
    first: int
    end: int
    turns: tuple[TurnChange, ...]
    requests: bool
    dispatches: bool
    results: bool

    def opened(self) -> list[tuple[str, int, int | None]]:
        """The bindings of ``OPEN_TURN_SQL``, one per turn the batch opens."""
        return [(self.session_id, t.start_seq, t.outer_start) for t in self.turns if t.opened]

    def changes(self) -> list[tuple[Any, ...]]:
        return [t.row(self.session_id) for t in self.turns if t.revision]


def _requested_ids(data: dict[str, Any]) -> list[str] | None:
    """The ids the trigger records as requested (objects whose ``id`` is text), or ``None`` when
    the message carries no ``tool_calls`` array."""
    calls = data.get("tool_calls")
    if not isinstance(calls, list):
        return None
    return [c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)]


def plan(
    session_id: str, first: int, types: Sequence[str], datas: Sequence[dict[str, Any]], open_starts: Sequence[int]
) -> DerivedPlan | None:
    """The derived state of these events, appended at seqs ``first ..`` to a session whose open
    turns start at ``open_starts`` (ascending); ``None`` where the trigger must keep it."""
    stack = list(open_starts)
    turns: dict[int, TurnChange] = {}
    answered: set[str] = set()  # calls the batch dispatched or answered: a later request of one is out
    resolved: set[str] = set()
    requests = dispatches = results = False

    def innermost() -> TurnChange | None:
        if not stack:
            return None
        start = stack[-1]
        change = turns.get(start)
        if change is None:
            change = turns[start] = TurnChange(start, opened=False)
        return change

    for n, (type_, data) in enumerate(zip(types, datas, strict=True)):
        seq = first + n
        if type_ in _TURN_OPS:
            if type_ == "turn_start":
                turns[seq] = TurnChange(seq, opened=True, outer_start=stack[-1] if stack else None)
                stack.append(seq)
                continue
            turn = innermost()
            if turn is None:
                continue
            turn.revision += 1
            if type_ == "step_start":
                turn.steps += 1
                turn.step_open = 1
            elif type_ == "step_end":
                turn.step_open, turn.phase, turn.checkpoint_seq = 0, "before_provider", seq
                turn.tool_request, turn.clear_stream = -1, True
            else:  # turn_end
                turn.step_open, turn.phase, turn.end_seq = 0, "committed", seq
                stack.pop()
        elif type_ == "assistant_message":
            ids = _requested_ids(data)
            if ids is None:
                continue
            if any(i in answered for i in ids):
                return None
            requests = requests or bool(ids)
            if data["tool_calls"]:
                turn = innermost()
                if turn is not None:
                    turn.revision += 1
                    turn.phase, turn.tool_request, turn.checkpoint_seq = "tool_request_recorded", seq, seq
        elif type_ == "tool_call":
            call = data["id"]
            if call in resolved:
                return None
            answered.add(call)
            dispatches = True
        elif type_ == "tool_result":
            call = data["tool_call_id"]
            answered.add(call)
            resolved.add(call)
            results = True
        elif type_ == "operator_resolution":
            return None
    return DerivedPlan(session_id, first, first + len(types), tuple(turns.values()), requests, dispatches, results)
