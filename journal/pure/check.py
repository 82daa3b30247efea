"""``journal check``: recompute the derived state from the log and report every disagreement.

The turn journal and the tool-call states are written by the schema's triggers in the same
transaction as the events they follow; this module is the independent second opinion, written
from the log alone in plain Python (a pure fold, then a comparison with what is stored).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import attrs

from journal.model import Event, Phase


@attrs.frozen
class Disagreement:
    """One place where the stored derived state differs from the log."""

    session_id: str
    table: str
    key: str
    field: str
    stored: Any
    derived: Any

    def __str__(self) -> str:
        """One line (a terminal still escapes it): the key and the values cut, runs of white
        space shown as one, so a stored call id cannot stretch the line or pad a fake one."""
        return (
            f"{_shown(self.session_id)}: {self.table}[{_shown(self.key)}].{self.field} is {_shown(repr(self.stored))}, "
            f"the log says {_shown(repr(self.derived))}"
        )


_WHITE = re.compile(r"\s{2,}")
_WIDTH = 64


def _shown(text: str) -> str:
    text = _WHITE.sub(" ", text)
    return text if len(text) <= _WIDTH else text[: _WIDTH - 1] + "…"


def derive_turns(events: Iterable[Event]) -> dict[int, dict[str, Any]]:
    """The turn journal the log implies, keyed by ``start_seq`` (own events only)."""
    turns: dict[int, dict[str, Any]] = {}
    stack: list[int] = []
    for event in events:
        current = turns[stack[-1]] if stack else None
        if event.type == "turn_start":
            number = event.data.get("turn")
            turns[event.seq] = {
                "turn": number if isinstance(number, int) and not isinstance(number, bool) else None,
                "phase": Phase.BEFORE_PROVIDER.value,
                "steps": 0,
                "step_open": 0,
                "end_seq": None,
            }
            stack.append(event.seq)
        elif current is None:
            continue
        elif event.type == "turn_end":
            current.update(phase=Phase.COMMITTED.value, end_seq=event.seq, step_open=0)
            stack.pop()
        elif event.type == "step_start":
            current.update(steps=current["steps"] + 1, step_open=1)
        elif event.type == "step_end":
            current.update(step_open=0, phase=Phase.BEFORE_PROVIDER.value)
        elif event.type == "assistant_message" and event.data.get("tool_calls"):
            current["phase"] = Phase.TOOL_REQUEST_RECORDED.value
    return turns


def derive_calls(events: Iterable[Event]) -> dict[str, dict[str, Any]]:
    """The tool-call rows the log implies (own events only), keyed by call id."""
    calls: dict[str, dict[str, Any]] = {}

    def row(call_id: str) -> dict[str, Any]:
        return calls.setdefault(call_id, {"requested_seq": None, "dispatch_seq": None, "result_seq": None})

    for event in events:
        if event.type == "assistant_message":
            for call in event.data.get("tool_calls") or ():
                entry = row(call["id"])
                if entry["requested_seq"] is None:
                    entry["requested_seq"] = event.seq
        elif event.type == "tool_call":
            row(event.data["id"])["dispatch_seq"] = event.seq
        elif event.type == "tool_result":
            row(event.data["tool_call_id"])["result_seq"] = event.seq
    return calls


def compare(
    session_id: str,
    events: list[Event],
    stored_turns: dict[int, dict[str, Any]],
    stored_calls: dict[str, dict[str, Any]],
) -> list[Disagreement]:
    """Every difference between the stored derived state and the one the log implies."""
    out: list[Disagreement] = []
    derived_turns = derive_turns(events)
    for start in sorted(set(derived_turns) | set(stored_turns)):
        have, want = stored_turns.get(start), derived_turns.get(start)
        if have is None or want is None:
            out.append(Disagreement(session_id, "turn_journal", str(start), "row", have is not None, want is not None))
            continue
        for field, value in want.items():
            stored = have.get(field)
            if field == "phase" and stored == Phase.PROVIDER_STARTED.value and value == Phase.BEFORE_PROVIDER.value:
                continue  # provider_started is recorded only in the journal, never in the log
            if stored != value:
                out.append(Disagreement(session_id, "turn_journal", str(start), field, stored, value))
    derived_calls = derive_calls(events)
    for call_id in sorted(set(derived_calls) | set(stored_calls)):
        have, want = stored_calls.get(call_id), derived_calls.get(call_id)
        if have is None or want is None:
            out.append(Disagreement(session_id, "tool_calls", call_id, "row", have is not None, want is not None))
            continue
        for field, value in want.items():
            if have.get(field) != value:
                out.append(Disagreement(session_id, "tool_calls", call_id, field, have.get(field), value))
    return out
