"""The viewer's page of a session's log: turns and steps indented, calls paired, risks marked (G14).

Rows are rendered from the events a page read (cut in SQL, ``journal.preview``) and a margin
around them, so a call requested on the page finds its dispatch and result a few events on. Every
stored value reaches the page through ``journal.serve.pages.text`` (escaped twice over).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from journal import Event, Session
from journal.serve.pages import at_seq, closed_by_recovery, risk_class, risk_marker, synthetic_risk, text, url, when
from journal.view import is_compaction


@attrs.frozen
class Calls:
    """Where each tool call of a window of the log stands: who asked, the dispatch, the result.

    Built from the page's events and a margin around them, so a call requested on this page
    finds the result a few events on; a call paired outside the margin shows only what is there."""

    requested: dict[str, int]
    dispatched: dict[str, int]
    results: dict[str, Event]
    late: dict[str, list[int]]

    @classmethod
    def of(cls, events: Iterable[Event]) -> Calls:
        calls = cls({}, {}, {}, {})
        for e in events:
            d = e.data
            if e.type == "assistant_message":
                for call in d.get("tool_calls") or []:
                    if isinstance(call, dict) and isinstance(call.get("id"), str):
                        calls.requested.setdefault(call["id"], e.seq)
            elif e.type == "tool_call" and isinstance(d.get("id"), str):
                calls.dispatched.setdefault(d["id"], e.seq)
            elif e.type == "tool_result" and isinstance(d.get("tool_call_id"), str):
                calls.results.setdefault(d["tool_call_id"], e)
            elif e.type == "tool_result_late" and isinstance(d.get("tool_call_id"), str):
                calls.late.setdefault(d["tool_call_id"], []).append(e.seq)
        return calls


def _risk(event: Event) -> str | None:
    return synthetic_risk(event.data)


class LogRenderer:
    """A session's log as rows: turns and steps indented, calls paired, risks marked.

    ``link(seq)`` makes the link to an event: an anchor on this page, or the page that shows it.
    The renderer keeps the depth (inside a turn, a step) from one row to the next, so a live
    stream renders each new event where it belongs."""

    def __init__(self, session_id: str, calls: Calls, *, shown: range | None = None) -> None:
        self.session_id = session_id
        self.calls = calls
        self.shown = shown
        self.in_turn = False
        self.in_step = False

    def start_at(self, events: Sequence[Event]) -> LogRenderer:
        """Guess where the first of ``events`` sits (a window may start inside a turn or a
        step): inside one if the first marker of its kind in the window closes it."""
        firsts: dict[str, str] = {}
        for e in events:
            if e.type in ("turn_start", "turn_end", "step_start", "step_end"):
                firsts.setdefault(e.type.split("_")[0], e.type)
        self.in_turn = firsts.get("turn") == "turn_end" or (firsts.get("turn") is None and "step" in firsts)
        self.in_step = firsts.get("step") == "step_end"
        return self

    def advance(self, event: Event) -> int:
        """Move past ``event``; returns the depth its row is drawn at."""
        t = event.type
        if t == "turn_start" or t == "turn_end":
            self.in_turn, self.in_step = t == "turn_start", False
            return 0
        if t == "step_start" or t == "step_end":
            self.in_step = t == "step_start"
            return int(self.in_turn)
        return int(self.in_turn) + int(self.in_step)

    def link(self, seq: int, label: str) -> str:
        if self.shown is not None and seq in self.shown:
            return f'<a href="#e{seq}">{label}</a>'
        return f'<a href="{at_seq(self.session_id, seq)}">{label}</a>'

    def call_status(self, call_id: str) -> str:
        """What became of a call: its dispatch and its result, with the result's risk marked."""
        parts = []
        dispatch = self.calls.dispatched.get(call_id)
        parts.append(self.link(dispatch, f"dispatched @{dispatch}") if dispatch is not None else "not dispatched")
        result = self.calls.results.get(call_id)
        if result is not None:
            error = " (error)" if result.data.get("is_error") and _risk(result) is None else ""
            parts.append(self.link(result.seq, f"result @{result.seq}") + error + risk_marker(_risk(result)))
        else:
            parts.append('<span class="warn">no result yet</span>')
        for seq in self.calls.late.get(call_id, []):
            parts.append(self.link(seq, f"late result @{seq}"))
        return f'<span class="status">{" · ".join(parts)}</span>'

    def row(self, event: Event, *, retracted_at: int | None = None) -> str:
        kind, label, body = self._describe(event)
        depth = self.advance(event)
        if retracted_at is not None:
            body += f' <span class="warn">(retracted at {self.link(retracted_at, f"seq {retracted_at}")})</span>'
        return (
            f'<div class="ev k-{kind} d{depth}" id="e{event.seq}"><a class="seq" href="#e{event.seq}">{event.seq}</a>'
            f'<span class="label">{text(label)}</span><span class="body">{body}</span>'
            f"<time>{when(event.time_ms)}</time></div>"
        )

    def _describe(self, event: Event) -> tuple[str, str, str]:
        """``(kind, label, body HTML)`` of one event."""
        d, t = event.data, event.type
        if t == "turn_start":
            return "turn", f"turn {d.get('turn')}", "started"
        if t == "turn_end":
            reason = d.get("reason")
            flag = ' <strong class="warn">closed by recovery after a crash</strong>' if closed_by_recovery(d) else ""
            return (
                "turn",
                f"turn {d.get('turn', '?')}",
                f"ended: {text(reason)} ({text(d.get('steps'))} steps){flag}",
            )
        if t == "step_start":
            return "step", "step", f"step {text(d.get('step'))}"
        if t == "step_end":
            return "step", "step", f"step {text(d.get('step'))} ended: {text(d.get('outcome'))}"
        if is_compaction(event):
            op = d["surface_op"]
            return (
                "compaction",
                "compaction",
                (f"replaces transcript messages {text(op[1])}..{text(op[2])} with: {text(d.get('content'))}"),
            )
        if t in ("user_message", "system_message"):
            return t.split("_")[0], t.split("_")[0], f'<span class="content">{text(d.get("content"))}</span>'
        if t == "assistant_message":
            return "assistant", "assistant", self._assistant(d)
        if t == "tool_call":
            call_id = d.get("id")
            extra = "".join(f" {k}={text(d[k])}" for k in ("effect", "idempotency_key", "request_id") if k in d)
            requested = self.calls.requested.get(call_id) if isinstance(call_id, str) else None
            asked = f" (requested {self.link(requested, f'@{requested}')})" if requested is not None else ""
            status = (
                f'<span data-call="{text(call_id, None)}">{self.call_status(call_id)}</span>'
                if isinstance(call_id, str)
                else ""
            )
            return (
                "dispatch",
                "dispatch",
                (
                    f'<span class="tool">{text(d.get("name"))}</span> '
                    f'[<span class="call">{text(call_id)}</span>]{extra}{asked} {status}'
                ),
            )
        if t in ("tool_result", "tool_result_late"):
            return self._result(event)
        if t == "retract":
            target = d.get("seq")
            where = (
                self.link(target, f"seq {target}")
                if isinstance(target, int) and not isinstance(target, bool)
                else text(target)
            )
            reason = f" ({text(d['reason'])})" if d.get("reason") else ""
            return "retract", "retract", f"the message at {where} taken back{reason}"
        if t == "operator_resolution":
            note = f" — {text(d.get('note'))}" if d.get("note") else ""
            return (
                "operator",
                "operator",
                (f'[<span class="call">{text(d.get("tool_call_id"))}</span>] resolved: {text(d.get("outcome"))}{note}'),
            )
        kind = "app" if t.startswith("x.") else "other"
        return kind, t, text(d, 400)

    def _assistant(self, d: dict[str, Any]) -> str:
        parts = []
        if d.get("content"):
            parts.append(f'<span class="content">{text(d.get("content"))}</span>')
        calls = [c for c in d.get("tool_calls") or [] if isinstance(c, dict)]
        if calls:
            items = "".join(
                f'<li data-call="{text(c.get("id"), None)}"><span class="tool">{text(c.get("name"))}</span>'
                f'<span class="args">({text(c.get("arguments"), 400)})</span> '
                f'[<span class="call">{text(c.get("id"))}</span>] '
                f"{self.call_status(c['id']) if isinstance(c.get('id'), str) else ''}</li>"
                for c in calls
            )
            parts.append(f'<ul class="calls">{items}</ul>')
        stop = d.get("stop_reason")
        if stop and stop not in ("stop", "tool_use"):
            parts.append(f'<span class="warn">({text(stop)})</span>')
        return " ".join(parts)

    def _result(self, event: Event) -> tuple[str, str, str]:
        d = event.data
        call_id = d.get("tool_call_id")
        risk = _risk(event)
        late = event.type == "tool_result_late"
        where = []
        if isinstance(call_id, str):
            for what, seq in (
                ("requested", self.calls.requested.get(call_id)),
                ("dispatched", self.calls.dispatched.get(call_id)),
            ):
                if seq is not None:
                    where.append(self.link(seq, f"{what} @{seq}"))
            first = self.calls.results.get(call_id)
            if late and first is not None:
                where.append("arrived after the " + self.link(first.seq, f"result @{first.seq}") + "; kept as evidence")
        head = f'[<span class="call">{text(call_id)}</span>]' + (
            f' <span class="tool">{text(d.get("name"))}</span>' if d.get("name") else ""
        )
        marker = risk_marker(risk)
        synthetic = f' <span class="synthetic">(synthetic: {text(risk)})</span>' if risk is not None else ""
        error = ' <span class="warn">(error)</span>' if d.get("is_error") and risk is None else ""
        context = f' <span class="notes">{" · ".join(where)}</span>' if where else ""
        body = f'{head} {marker}{synthetic}{error}{context} <span class="content">{text(d.get("content"))}</span>'
        kind = "late" if late else f"result {risk_class(risk)}".strip()
        return kind, "late result" if late else "result", body


def log_rows(session_id: str, events: Sequence[Event], window: Sequence[Event]) -> str:
    """The rows of a page of the log: ``window`` holds the page's events and a margin around
    them, read to pair calls with results and to know how deep the page starts."""
    calls = Calls.of(window)
    retracted = {e.data.get("seq"): e.seq for e in window if e.type == "retract"}
    shown = range(events[0].seq, events[-1].seq + 1) if events else range(0)
    renderer = LogRenderer(session_id, calls, shown=shown)
    first = shown.start if events else 0
    if window and window[0].seq > 0:
        renderer.start_at(window)
    for e in window:
        if e.seq >= first:
            break
        renderer.advance(e)
    return "".join(renderer.row(e, retracted_at=retracted.get(e.seq) if e.is_surface else None) for e in events)


def log_view(s: Session, events: Sequence[Event], window: Sequence[Event], *, follow: str | None, page: int) -> str:
    """A page of the log with links to the pages around it; ``follow`` is the live stream's URL
    when this page is the end of the log."""
    start = events[0].seq if events else s.count
    end = events[-1].seq + 1 if events else s.count
    nav = []
    if start > 0:
        nav.append(f'<a href="{url("sessions", s.id, since=0)}">first</a>')
        nav.append(f'<a rel="prev" href="{url("sessions", s.id, since=max(start - page, 0))}">← earlier</a>')
    if end < s.count:
        nav.append(f'<a rel="next" href="{url("sessions", s.id, since=end)}">later →</a>')
        nav.append(f'<a href="{url("sessions", s.id)}">latest (live)</a>')
    pager = f'<nav class="pager">events {start}..{end - 1} of {s.count} {" ".join(nav)}</nav>'
    live = ""
    follow_attr = ""
    if follow is not None:
        follow_attr = f' data-follow="{follow}"'
        live = (
            '<p class="live" id="live-status">'
            "the end of the log (new events appear here while JavaScript follows it)</p>"
        )
    rows = log_rows(s.id, events, window) if events else '<p class="empty">no events</p>'
    return f'{pager}<div class="log" id="log"{follow_attr}>{rows}</div>{live}{pager if events else ""}'
