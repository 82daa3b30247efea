"""Human-readable text for the command line: a session's log as a transcript, a scan, a plan.

Each renderer returns a list of lines and ``echo`` prints them, escaping each whole line (G14):
stored content, a newline in it included, can never start a line, end one early or reach the
terminal as a control character or a bidi override. Only the breaks between lines are raw.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import click

from journal import Event, Repair, ScanReport
from journal.escape import escape


def echo(*lines: object, err: bool = False) -> None:
    """Print each line escaped: the one way the command line writes text for people."""
    for line in lines:
        click.echo(escape(line), err=err)


# How much of a stored string a line shows: a tool's name, an id (a call's, a session's, a
# submission's), one argument's value, all of a call's arguments, any other short field.
NAME_WIDTH = 40
ID_WIDTH = 80  # an adapter's hashed session id (LangGraph's `lg~` and a SHA-256: 67) is shown whole
ARG_WIDTH = 40
ARGS_WIDTH = 100
FIELD_WIDTH = 40
_SPACES = re.compile(" {2,}")


def cut(value: Any, width: int = FIELD_WIDTH) -> str:
    """A stored value on one line, at most ``width`` characters: escaped (G14), runs of spaces
    shown as one, then cut with an ellipsis.

    Every stored string a line shows goes through here (content, names, ids, arguments), so no
    value can push a forged line onto a terminal's next row: 300 spaces and then ``MAY HAVE RUN``
    in a tool's name wraps to look like a line of its own, unless it is cut. Escaping first makes
    the width count what is shown."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):  # not JSON (a damaged file's value): its repr
            text = repr(value)
    text = _SPACES.sub(" ", escape(text))
    return text if len(text) <= width else text[: width - 1] + "…"


def cut_name(value: Any) -> str:
    """A tool's (or an event type's) name as a line shows it."""
    return cut(value, NAME_WIDTH)


def cut_id(value: Any) -> str:
    """An id (a call's, a session's, a submission's, a lease owner's) as a line shows it."""
    return cut(value, ID_WIDTH)


def _call(call: dict[str, Any]) -> str:
    arguments = call.get("arguments")
    if isinstance(arguments, dict):
        args = ", ".join(f"{cut(k, NAME_WIDTH)}={cut(json_text(v), ARG_WIDTH)}" for k, v in arguments.items())
        args = cut(args, ARGS_WIDTH)
    else:
        args = cut(arguments, ARG_WIDTH) if arguments is not None else ""
    return f"{cut(call.get('name'), NAME_WIDTH)}({args}) [{cut(call.get('id'), ID_WIDTH)}]"


def json_text(value: Any) -> str:
    """A value as JSON text (a string quoted: "3" and 3 look different)."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


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
    return cut(json_text(value), 100)  # JSON: "3" and 3 look different


def event_line(event: Event) -> tuple[int, str]:
    """One event as ``(indent, text)``; indent 1 inside a turn's bookkeeping."""
    d = event.data
    t = event.type
    if t == "turn_start":
        return 0, f"turn {cut(d.get('turn'))} started"
    if t == "turn_end":
        reason = d.get("reason")
        flag = "  <- closed by recovery after a crash" if reason == "interrupted" else ""
        return 0, f"turn {cut(d.get('turn', '?'))} ended: {cut(reason)} ({cut(d.get('steps'))} steps){flag}"
    if t == "step_start":
        return 1, f"step {cut(d.get('step'))}"
    if t == "step_end":
        return 1, f"step {cut(d.get('step'))} ended: {cut(d.get('outcome'))}"
    if t in ("user_message", "system_message"):
        return 1, f"{t.split('_')[0]:<10} {cut(d.get('content'))}"
    if t == "assistant_message":
        found = d.get("tool_calls")
        calls: list[Any] = found if isinstance(found, list) else []
        text = cut(d.get("content"), 60) if d.get("content") else ""
        parts = [text] + [f"-> {_call(c) if isinstance(c, dict) else cut(c)}" for c in calls]
        stop = d.get("stop_reason")
        tail = f"  ({cut(stop)})" if stop and stop not in ("stop", "tool_use") else ""
        return 1, f"{'assistant':<10} {'; '.join(p for p in parts if p)}{tail}"
    if t == "tool_call":
        extra = "".join(f" {k}={cut(d[k])}" for k in ("effect", "idempotency_key", "request_id") if k in d)
        return 1, f"{'dispatch':<10} {cut_name(d.get('name'))} [{cut_id(d.get('id'))}]{extra}"
    if t in ("tool_result", "tool_result_late"):
        given = d.get("metadata")
        meta: dict[str, Any] = given if isinstance(given, dict) else {}
        label = "result" if t == "tool_result" else "late"
        if meta.get("synthetic"):
            risk = meta.get("risk")
            return 1, f"{label:<10} [{cut_id(d.get('tool_call_id'))}] {risk_marker(risk)} (synthetic, {cut(risk)})"
        error = " (error)" if d.get("is_error") else ""
        return 1, f"{label:<10} [{cut_id(d.get('tool_call_id'))}]{error} {cut(d.get('content'), 60)}"
    if t == "retract":
        reason = f" ({cut(d['reason'], 40)})" if d.get("reason") else ""
        return 1, f"{'retract':<10} message at seq {cut(d.get('seq'))} retracted{reason}"
    if t == "operator_resolution":
        note = cut(d.get("note") or "", 40)
        return 1, f"{'operator':<10} [{cut_id(d.get('tool_call_id'))}] resolved: {cut(d.get('outcome'))} {note}"
    return 1, f"{cut(t, NAME_WIDTH):<10} {cut(d, 70)}"


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
            f"open turn {turn.turn} in session {cut_id(turn.session_id)} "
            f"(seq {turn.start_seq}, phase {turn.phase.value}, attempt {turn.attempt})"
            + (f", held by live process {cut(turn.owner)}" if turn.held else "")
        )
        for call in turn.owed:
            state = "dispatched, no result" if call.dispatched else "requested, not dispatched"
            lines.append(f"    owes {cut_name(call.name)} [{cut_id(call.call_id)}]: {state}")
    for pending in report.pending_calls:
        where = f"in {cut_id(pending.session_id)} (seq {pending.dispatch_seq})"
        lines.append(f"dispatched without result: {cut_name(pending.name)} [{cut_id(pending.call_id)}] {where}")
    for unknown in report.indeterminate:
        lines.append(
            f"indeterminate (awaiting an operator): {cut_name(unknown.name)} [{cut_id(unknown.call_id)}] "
            f"in {cut_id(unknown.session_id)}"
        )
    for sub in report.stale_submissions:
        lines.append(
            f"submission {cut_id(sub.id)} ({cut_id(sub.session_id)}): running, "
            f"lease {cut(sub.reason)} (attempt {sub.attempt})"
        )
    for sub in report.queued_submissions:
        lines.append(f"submission {cut_id(sub.id)} ({cut_id(sub.session_id)}): queued")
    return lines


def plan(session_id: str, repairs: Sequence[Repair]) -> list[str]:
    """What recovery would append to one session, with the risk of each synthetic result."""
    if not repairs:
        return [f"{cut_id(session_id)}: nothing to repair"]
    lines = [f"{cut_id(session_id)}: {len(repairs)} repair(s)"]
    for repair in repairs:
        if repair.type == "tool_result":
            risk = repair.risk.value if repair.risk else None
            name, call = cut_name(repair.data.get("name")), cut_id(repair.tool_call_id)
            lines.append(f"    synthetic result for {name} [{call}]: {risk}  {risk_marker(risk)}")
        else:
            lines.append(f"    turn_end {cut(repair.data, ARGS_WIDTH)}")
    return lines


def messages(folded: Iterable[Any], *, missing: Iterable[Any] = ()) -> list[str]:
    """The folded transcript, one message a line (risk of synthetic results marked)."""
    lines = []
    for position, message in enumerate(folded):
        if message.role == "assistant" and message.tool_calls:
            body = "; ".join(
                [cut(message.content, 50)] * bool(message.content)
                + [f"-> {_call(c) if isinstance(c, dict) else cut(c)}" for c in message.tool_calls]
            )
        elif message.role == "tool":
            marker = risk_marker(message.risk)
            body = f"[{cut_id(message.tool_call_id)}] " + (marker if marker else cut(message.content, 70))
        else:
            body = cut(message.content, 80)
        lines.append(f"{position:>4}  {message.role:<9} {body}")
    for gap in missing:
        lines.append(
            f"      MISSING result for {cut_name(gap.name)} [{cut_id(gap.tool_call_id)}] "
            "(run recovery before sending this)"
        )
    return lines
