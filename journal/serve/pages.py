"""The viewer's HTML: every stored string escaped twice over, so content stays text (G14).

Everything a journal holds was written by a model, a tool or a user. ``text`` is the one way a
stored value reaches a page: first ``journal.escape.escape`` (control characters, escape
sequences, bidi overrides, invisible characters and newlines become visible escapes, as on the
command line), then HTML escaping (``<script>``, ``onerror=``, quotes stay characters). Links
are built here from quoted ids only (``url``), never from content, so a ``javascript:`` in a
message is text like the rest. The pages hold no script: the one script, ``/static/live.js``,
only follows a session live, and the page works without it.

Pure functions from library values to strings: the server (``journal.serve.app``) reads, these
render.
"""

from __future__ import annotations

import datetime
import html
import json
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from journal import Event, Message, MissingResult, ScanReport, Session
from journal.escape import escape
from journal.preview import Clipped
from journal.view import is_compaction

CLIP = 2000  # characters of one stored string shown on a page (the API gives it whole)
MAY_HAVE_RUN = "MAY HAVE RUN — verify before retrying"
DID_NOT_RUN = "did not run"


# -- the escaping every stored value goes through ------------------------------------------------


def text(value: object, limit: int | None = CLIP) -> str:
    """A stored value as HTML text: G14-escaped, cut at ``limit`` characters, HTML-escaped.

    A ``Clipped`` value (cut short in SQL by the preview read) says that more was stored."""
    shown = escape(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str))
    if limit is not None and len(shown) > limit:
        more = "more" if isinstance(value, Clipped) else f"{len(shown) - limit} more characters"
        shown = shown[:limit] + f"… ({more})"
    elif isinstance(value, Clipped):
        shown += "… (more stored; the API gives it whole)"
    return html.escape(shown, quote=True)


def url(*parts: str, **query: object) -> str:
    """A link to the viewer: each part quoted whole (a ``/`` in an id stays in its segment),
    the query url-encoded, the result HTML-escaped for an attribute."""
    path = "/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)
    pairs = {k: str(v) for k, v in query.items() if v is not None}
    return html.escape(path + ("?" + urllib.parse.urlencode(pairs) if pairs else ""), quote=True)


def when(ms: int | None) -> str:
    if ms is None:
        return ""
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + f".{ms % 1000:03d}Z"


def at_seq(session_id: str, seq: int | None) -> str:
    """A link to the log page that shows event ``seq`` (a few events before it, for context)."""
    if seq is None:
        return url("sessions", session_id)
    return url("sessions", session_id, since=max(seq - 20, 0)) + f"#e{seq}"


def risk_marker(risk: str | None) -> str:
    """The marker of a synthetic result of this risk, as HTML (empty for none)."""
    if risk == "tool_outcome_unknown":
        return f'<strong class="marker risk-unknown">{MAY_HAVE_RUN}</strong>'
    if risk == "tool_not_started":
        return f'<strong class="marker risk-not-started">{DID_NOT_RUN}</strong>'
    return ""


def layout(title: str, body: str, *, journal_path: str, current: str = "") -> str:
    """A whole page: ``title`` is already HTML (built with ``text``)."""
    nav = "".join(
        f'<a href="{href}"{" aria-current=page" if name == current else ""}>{name}</a>'
        for name, href in (("Sessions", "/"), ("Scan", "/scan"))
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title} · journal</title>"
        '<link rel="stylesheet" href="/static/journal.css"><script src="/static/live.js" defer></script>'
        f'</head><body><header><nav>{nav}</nav><span class="file">{text(journal_path)}</span></header>'
        f"<main>{body}</main></body></html>\n"
    )


def error_page(status: int, message: str, *, journal_path: str) -> str:
    return layout(f"{status}", f'<h1>{status}</h1><p class="error">{text(message)}</p>', journal_path=journal_path)


# -- the sessions -----------------------------------------------------------------------------------


@attrs.frozen
class Totals:
    sessions: int
    forks: int
    events: int


def sessions_page(
    page: Sequence[Session],
    report: ScanReport,
    totals: Totals,
    *,
    prefix: str | None,
    limit: int,
    journal_path: str,
) -> str:
    """The paged list of sessions, each with its open turn, indeterminate calls and fork parent."""
    open_turns = {t.session_id: t for t in report.open_turns}
    waiting: dict[str, int] = {}
    for call in report.indeterminate:
        waiting[call.session_id] = waiting.get(call.session_id, 0) + 1
    rows = "".join(_session_row(s, open_turns.get(s.id), waiting.get(s.id, 0)) for s in page)
    form = (
        '<form method="get" action="/" class="filter"><label>id starts with '
        f'<input name="prefix" value="{text(prefix or "", None)}"></label> <button>filter</button></form>'
    )
    summary = (
        f"<p>{totals.sessions} sessions ({totals.forks} forks), {totals.events} events; "
        f"{len(report.open_turns)} open turns, {len(report.indeterminate)} indeterminate calls "
        f'(<a href="/scan">scan</a>)</p>'
    )
    pager = f'<a href="{url("", prefix=prefix, limit=limit)}">first page</a>'
    if len(page) == limit:
        pager += f' <a rel="next" href="{url("", after=page[-1].id, prefix=prefix, limit=limit)}">next page →</a>'
    table = (
        '<table class="sessions"><thead><tr><th>session</th><th>events</th><th>created</th><th>last activity</th>'
        "<th>open turn</th><th>indeterminate</th><th>fork of</th><th>meta</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
        if page
        else '<p class="empty">no sessions</p>'
    )
    body = f"<h1>Sessions</h1>{summary}{form}{table}<nav class=pager>{pager}</nav>"
    return layout("Sessions", body, journal_path=journal_path, current="Sessions")


def _session_row(s: Session, turn: Any, waiting: int) -> str:
    turn_cell = ""
    if turn is not None:
        held = f", held by {text(turn.owner)}" if turn.held else ""
        turn_cell = f'<span class="warn">turn {turn.turn} ({text(turn.phase.value)}{held})</span>'
    waiting_cell = f'<a class="marker risk-unknown" href="/scan#indeterminate">{waiting}</a>' if waiting else ""
    parent = ""
    if s.parent_id is not None:
        parent = f'<a href="{url("sessions", s.parent_id)}">{text(s.parent_id)}</a> at {s.seed_length - 1}'
    meta = text(s.meta, 120) if s.meta else ""
    return (
        f'<tr><td><a href="{url("sessions", s.id)}">{text(s.id)}</a></td><td class=num>{s.count}</td>'
        f"<td>{when(s.created_ms)}</td><td>{when(s.last_ms)}</td><td>{turn_cell}</td><td>{waiting_cell}</td>"
        f"<td>{parent}</td><td class=meta>{meta}</td></tr>"
    )


# -- a session ------------------------------------------------------------------------------------


@attrs.frozen
class Forks:
    """A session's forks found so far, and where to look further (None: nowhere)."""

    found: tuple[Session, ...]
    more_after: str | None


def session_header(s: Session, forks: Forks, view: str) -> str:
    """The session's facts, its fork parent and forks, and the tabs of its three views."""
    facts = [f"{s.count} events", f"created {when(s.created_ms)}", f"last activity {when(s.last_ms)}"]
    parts = [f'<h1>session <span class="id">{text(s.id)}</span></h1><p>{", ".join(facts)}</p>']
    if s.meta:
        parts.append(f'<p class="meta">meta: {text(s.meta)}</p>')
    if s.parent_id is not None:
        fork_point = s.seed_length - 1
        parts.append(
            f'<p class="fork">fork of <a class="parent" href="{at_seq(s.parent_id, fork_point)}">{text(s.parent_id)}</a> at seq {fork_point} (inherits its events 0..{fork_point})</p>'
        )
    if forks.found or forks.more_after:
        links = ", ".join(
            f'<a class="child" href="{url("sessions", f.id)}">{text(f.id)}</a> at seq {f.seed_length - 1}'
            for f in forks.found
        )
        more = ""
        if forks.more_after is not None:
            more = f' <a href="{url("sessions", s.id, view=view, forks_after=forks.more_after)}">more forks</a>'
        parts.append(f'<p class="forks">forks: {links or "none found yet"}{more}</p>')
    tabs = "".join(
        f'<a href="{url("sessions", s.id, view=None if name == "log" else name)}"'
        f"{' aria-current=page' if name == view else ''}>{label}</a>"
        for name, label in (("log", "Log"), ("messages", "Messages"), ("provider", "Provider view"))
    )
    parts.append(f'<nav class="tabs">{tabs}</nav>')
    return "".join(parts)


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
    meta = event.data.get("metadata")
    if isinstance(meta, dict) and meta.get("synthetic"):
        risk = meta.get("risk")
        return risk if isinstance(risk, str) else None
    return None


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
            flag = ' <strong class="warn">closed by recovery after a crash</strong>' if reason == "interrupted" else ""
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
                    f'<span class="tool">{text(d.get("name"))}</span> [<span class="call">{text(call_id)}</span>]{extra}{asked} {status}'
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
                f'<span class="args">({text(c.get("arguments"), 400)})</span> [<span class="call">{text(c.get("id"))}</span>] '
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
        kind = (
            "late"
            if late
            else (
                "result risk-" + ("unknown" if risk == "tool_outcome_unknown" else "not-started") if risk else "result"
            )
        )
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
        live = '<p class="live" id="live-status">the end of the log (new events appear here while JavaScript follows it)</p>'
    rows = log_rows(s.id, events, window) if events else '<p class="empty">no events</p>'
    return f'{pager}<div class="log" id="log"{follow_attr}>{rows}</div>{live}{pager if events else ""}'


def messages_view(
    s: Session, messages: Sequence[Message], missing: Sequence[MissingResult] | None, *, tail: int, view: str
) -> str:
    """The folded transcript (or what a model is sent, with the calls still missing a result)."""
    rows = "".join(_message_row(s.id, m) for m in messages)
    more = ""
    if len(messages) == tail:
        more = f'<nav class="pager">the last {tail} messages <a href="{url("sessions", s.id, view=view, tail=tail * 2)}">show more</a></nav>'
    gaps = ""
    if missing:
        items = "".join(
            f'<li><strong class="marker risk-unknown">MISSING result</strong> for <span class="tool">{text(g.name)}</span> '
            f'[<span class="call">{text(g.tool_call_id)}</span>] (asked at seq {text(g.assistant_seq)}; run recovery before sending this)</li>'
            for g in missing
        )
        gaps = f'<h2>Calls still missing a result</h2><ul class="missing">{items}</ul>'
    table = f'<div class="messages">{rows}</div>' if messages else '<p class="empty">no messages</p>'
    return f"{more}{table}{gaps}"


def _message_row(session_id: str, m: Message) -> str:
    parts = []
    if m.content not in (None, ""):
        parts.append(f'<span class="content">{text(m.content)}</span>')
    for c in m.tool_calls:
        parts.append(
            f'<span class="tool">→ {text(c.get("name"))}</span><span class="args">({text(c.get("arguments"), 400)})</span> '
            f'[<span class="call">{text(c.get("id"))}</span>]'
        )
    if m.role == "tool":
        parts.insert(0, f'[<span class="call">{text(m.tool_call_id)}</span>] {risk_marker(m.risk)}')
    if m.is_error and m.risk is None:
        parts.append('<span class="warn">(error)</span>')
    if m.stop_reason and m.stop_reason not in ("stop", "tool_use"):
        parts.append(f'<span class="warn">({text(m.stop_reason)})</span>')
    seq = "" if m.seq is None else f'<a class="seq" href="{at_seq(session_id, m.seq)}">{m.seq}</a>'
    return f'<div class="msg role-{text(m.role)}">{seq}<span class="label">{text(m.role)}</span><span class="body">{" ".join(parts)}</span></div>'


# -- the restart scan -------------------------------------------------------------------------------


def scan_page(report: ScanReport, *, journal_path: str) -> str:
    """The restart scan and the indeterminate calls with their notifications (read-only)."""
    parts = ["<h1>Restart scan</h1>"]
    if report.clean and not report.queued_submissions:
        parts.append('<p class="ok">clean: no unfinished work</p>')
    parts.append(f"<h2>Open turns ({len(report.open_turns)})</h2>")
    for t in report.open_turns:
        held = f', <strong class="warn">held by live process {text(t.owner)}</strong>' if t.held else ""
        owed = "".join(
            f'<li>owes <span class="tool">{text(c.name)}</span> [<span class="call">{text(c.call_id)}</span>]: '
            + ("dispatched, no result: it MAY have run" if c.dispatch_seq is not None else "requested, not dispatched")
            + "</li>"
            for c in t.owed
        )
        parts.append(
            f'<div class="turn"><a href="{url("sessions", t.session_id, since=t.start_seq)}#e{t.start_seq}">{text(t.session_id)}</a>: '
            f"turn {t.turn} (seq {t.start_seq}, phase {text(t.phase.value)}, attempt {t.attempt}){held}<ul>{owed}</ul></div>"
        )
    parts.append(f"<h2>Dispatched without a result ({len(report.pending_calls)})</h2><ul>")
    for c in report.pending_calls:
        parts.append(
            f'<li><a href="{at_seq(c.session_id, c.dispatch_seq)}">{text(c.session_id)}</a> '
            f'<span class="tool">{text(c.name)}</span> [<span class="call">{text(c.call_id)}</span>] at seq {c.dispatch_seq}'
            f"{' effect ' + text(c.effect) if c.effect else ''}</li>"
        )
    parts.append("</ul>")
    parts.append(f'<h2 id="indeterminate">Indeterminate calls, awaiting an operator ({len(report.indeterminate)})</h2>')
    if report.indeterminate:
        parts.append(
            "<p>Each may have run before a crash; nothing retries it. Resolve it from the command line: "
            "<code>journal resolve SESSION CALL --outcome ran|did_not_run</code>.</p>"
        )
    for call in report.indeterminate:
        note = call.notification or {}
        data = note.get("data") or {}
        details = "".join(f"<dt>{text(k)}</dt><dd>{text(v)}</dd>" for k, v in data.items())
        acked = f"acknowledged {when(note.get('acked_ms'))}" if note.get("acked_ms") else "not acknowledged"
        notified = (
            f"notification {text(note.get('id'))}, created {when(note.get('created_ms'))}, {acked}"
            if note
            else "no notification"
        )
        parts.append(
            f'<div class="indeterminate"><strong class="marker risk-unknown">{MAY_HAVE_RUN}</strong> '
            f'<a href="{at_seq(call.session_id, call.dispatch_seq)}">{text(call.session_id)}</a> '
            f'<span class="tool">{text(call.name)}</span> [<span class="call">{text(call.call_id)}</span>] '
            f"dispatched at seq {call.dispatch_seq}, result at seq {text(call.result_seq)}; {notified}<dl>{details}</dl></div>"
        )
    for title, subs in (
        ("Stale submissions", report.stale_submissions),
        ("Queued submissions", report.queued_submissions),
    ):
        parts.append(f"<h2>{title} ({len(subs)})</h2><ul>")
        for sub in subs:
            parts.append(
                f'<li>{text(sub.id)} (<a href="{url("sessions", sub.session_id)}">{text(sub.session_id)}</a>): {text(sub.state)}, '
                f"attempt {sub.attempt}/{sub.max_attempts}, {text(sub.reason)}</li>"
            )
        parts.append("</ul>")
    return layout("Restart scan", "".join(parts), journal_path=journal_path, current="Scan")
