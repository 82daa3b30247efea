"""Human-readable text for the command line: a session's log as a transcript, a scan, a plan.

Each renderer returns a list of lines and ``echo`` prints them, escaping each whole line (G14):
stored content, a newline in it included, can never start a line, end one early or reach the
terminal as a control character or a bidi override. Only the breaks between lines are raw.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import click

from journal import Event, Repair, ScanReport
from journal.escape import escape


def echo(*lines: object, err: bool = False) -> None:
    """Print each line escaped: the one way the command line writes text for people."""
    for line in lines:
        click.echo(escape(line), err=err)


def _short(value: Any, width: int = 72) -> str:
    """A value on one line, escaped first so that the width counts what is shown."""
    text = escape(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    return text if len(text) <= width else text[: width - 1] + "…"


def _call(call: dict[str, Any]) -> str:
    arguments = call.get("arguments")
    if isinstance(arguments, dict):
        args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    else:
        args = _short(arguments, 40) if arguments is not None else ""
    return f"{call.get('name')}({args}) [{call.get('id')}]"


def risk_marker(risk: str | None) -> str:
    """The marker shown beside a synthetic result of this risk (empty for none)."""
    if risk == "tool_outcome_unknown":
        return "!! MAY HAVE RUN - verify before retrying"
    if risk == "tool_not_started":
        return "-- did not run"
    return ""


def state_value(value: Any) -> str:
    """A keyed state value on one line: its JSON (escaped, cut short), or its size for bytes."""
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    return _short(json.dumps(value, ensure_ascii=False), 100)  # JSON: "3" and 3 look different


def event_line(event: Event) -> tuple[int, str]:
    """One event as ``(indent, text)``; indent 1 inside a turn's bookkeeping."""
    d = event.data
    t = event.type
    if t == "turn_start":
        return 0, f"turn {d.get('turn')} started"
    if t == "turn_end":
        reason = d.get("reason")
        flag = "  <- closed by recovery after a crash" if reason == "interrupted" else ""
        return 0, f"turn {d.get('turn', '?')} ended: {reason} ({d.get('steps')} steps){flag}"
    if t == "step_start":
        return 1, f"step {d.get('step')}"
    if t == "step_end":
        return 1, f"step {d.get('step')} ended: {d.get('outcome')}"
    if t in ("user_message", "system_message"):
        return 1, f"{t.split('_')[0]:<10} {_short(d.get('content'))}"
    if t == "assistant_message":
        calls = d.get("tool_calls") or []
        text = _short(d.get("content"), 60) if d.get("content") else ""
        parts = [text] + [f"-> {_call(c)}" for c in calls]
        stop = d.get("stop_reason")
        tail = f"  ({stop})" if stop and stop not in ("stop", "tool_use") else ""
        return 1, f"{'assistant':<10} {'; '.join(p for p in parts if p)}{tail}"
    if t == "tool_call":
        extra = "".join(f" {k}={d[k]}" for k in ("effect", "idempotency_key", "request_id") if k in d)
        return 1, f"{'dispatch':<10} {d.get('name')} [{d.get('id')}]{extra}"
    if t in ("tool_result", "tool_result_late"):
        meta = d.get("metadata") or {}
        label = "result" if t == "tool_result" else "late"
        if meta.get("synthetic"):
            return 1, f"{label:<10} [{d.get('tool_call_id')}] {risk_marker(meta.get('risk'))} (synthetic, {meta.get('risk')})"
        error = " (error)" if d.get("is_error") else ""
        return 1, f"{label:<10} [{d.get('tool_call_id')}]{error} {_short(d.get('content'), 60)}"
    if t == "retract":
        reason = f" ({_short(d['reason'], 40)})" if d.get("reason") else ""
        return 1, f"{'retract':<10} message at seq {d.get('seq')} retracted{reason}"
    if t == "operator_resolution":
        return 1, f"{'operator':<10} [{d.get('tool_call_id')}] resolved: {d.get('outcome')} {_short(d.get('note') or '', 40)}"
    return 1, f"{t:<10} {_short(d, 70)}"


def transcript(events: Iterable[Event]) -> list[str]:
    """The log as a readable transcript, turns and steps indented, risks marked, and each
    message a later ``retract`` took back marked as such."""
    events = list(events)
    retracted = {e.data.get("seq"): e.seq for e in events if e.type == "retract"}
    lines = []
    depth = 0
    for event in events:
        indent, text = event_line(event)
        if event.seq in retracted and event.is_surface:
            text += f"  (retracted at seq {retracted[event.seq]})"
        if event.type == "turn_end":
            depth = max(depth - 1, 0)
        pad = "  " * (depth + (indent if event.type not in ("turn_start", "turn_end") else 0))
        lines.append(f"{event.seq:>5}  {pad}{text}")
        if event.type == "turn_start":
            depth += 1
    return lines


def scan_report(report: ScanReport) -> list[str]:
    """The restart scan, one line per piece of unfinished work."""
    if report.clean and not report.queued_submissions:
        return ["clean: no unfinished work"]
    lines = []
    for turn in report.open_turns:
        lines.append(
            f"open turn {turn.turn} in session {turn.session_id} (seq {turn.start_seq}, phase {turn.phase.value}, "
            f"attempt {turn.attempt})" + (f", held by live process {turn.owner}" if turn.held else "")
        )
        for call in turn.owed:
            state = "dispatched, no result" if call.dispatched else "requested, not dispatched"
            lines.append(f"    owes {call.name} [{call.call_id}]: {state}")
    for call in report.pending_calls:
        lines.append(f"dispatched without result: {call.name} [{call.call_id}] in {call.session_id} (seq {call.dispatch_seq})")
    for call in report.indeterminate:
        lines.append(f"indeterminate (awaiting an operator): {call.name} [{call.call_id}] in {call.session_id}")
    for sub in report.stale_submissions:
        lines.append(f"submission {sub.id} ({sub.session_id}): running, lease {sub.reason} (attempt {sub.attempt})")
    for sub in report.queued_submissions:
        lines.append(f"submission {sub.id} ({sub.session_id}): queued")
    return lines


def plan(session_id: str, repairs: Sequence[Repair]) -> list[str]:
    """What recovery would append to one session, with the risk of each synthetic result."""
    if not repairs:
        return [f"{session_id}: nothing to repair"]
    lines = [f"{session_id}: {len(repairs)} repair(s)"]
    for repair in repairs:
        if repair.type == "tool_result":
            risk = repair.risk.value if repair.risk else None
            lines.append(f"    synthetic result for {repair.data.get('name')} [{repair.tool_call_id}]: {risk}  {risk_marker(risk)}")
        else:
            lines.append(f"    turn_end {json.dumps(repair.data)}")
    return lines


def messages(folded: Iterable[Any], *, missing: Iterable[Any] = ()) -> list[str]:
    """The folded transcript, one message a line (risk of synthetic results marked)."""
    lines = []
    for position, message in enumerate(folded):
        if message.role == "assistant" and message.tool_calls:
            body = "; ".join([_short(message.content, 50)] * bool(message.content) + [f"-> {_call(c)}" for c in message.tool_calls])
        elif message.role == "tool":
            marker = risk_marker(message.risk)
            body = f"[{message.tool_call_id}] " + (marker if marker else _short(message.content, 70))
        else:
            body = _short(message.content, 80)
        lines.append(f"{position:>4}  {message.role:<9} {body}")
    for gap in missing:
        lines.append(f"      MISSING result for {gap.name} [{gap.tool_call_id}] (run recovery before sending this)")
    return lines
