"""The viewer's HTML: every stored string escaped twice over, so content stays text (G14).

Everything a journal holds was written by a model, a tool or a user. ``text`` is the one way a
stored value reaches a page: first ``journal.escape.escape`` (control characters, escape
sequences, bidi overrides, invisible characters and newlines become visible escapes, as on the
command line), then HTML escaping (``<script>``, ``onerror=``, quotes stay characters). Links
are built here from quoted ids only (``url``), never from content, so a ``javascript:`` in a
message is text like the rest. The pages hold no script: the one script, ``/static/live.js``,
follows a session live and shows a timeline's focused bar, and every page works without it.

Pure functions from library values to strings: the server (``journal.serve.app``) reads, these
render (a page of the log: ``journal.serve.log_page``).
"""

from __future__ import annotations

import datetime
import html
import json
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from journal import Message, MissingResult, ScanReport, Session, ToolStats
from journal.escape import escape
from journal.model import Risk, TurnEndReason
from journal.preview import Clipped
from journal.serve.forks import ForkNode, ForkTree

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


def synthetic_risk(data: Mapping[str, Any]) -> str | None:
    """The risk a result's data carries when recovery wrote it (a synthetic result: its
    ``metadata`` says ``synthetic`` and names the risk), else None. The one reading of it that
    every page (the log, the timeline) uses."""
    meta = data.get("metadata")
    if isinstance(meta, dict) and meta.get("synthetic"):
        risk = meta.get("risk")
        return risk if isinstance(risk, str) else None
    return None


def closed_by_recovery(data: Mapping[str, Any]) -> bool:
    """Whether a ``turn_end``'s data says recovery closed the turn after a crash."""
    return data.get("reason") == TurnEndReason.INTERRUPTED.value


def risk_class(risk: str | None) -> str:
    """The CSS class of a risk: ``risk-unknown`` (may have run), ``risk-not-started``, or ``""``."""
    if risk == Risk.TOOL_OUTCOME_UNKNOWN.value:
        return "risk-unknown"
    if risk == Risk.TOOL_NOT_STARTED.value:
        return "risk-not-started"
    return ""


def risk_marker(risk: str | None) -> str:
    """The marker of a synthetic result of this risk, as HTML (empty for none)."""
    kind = risk_class(risk)
    if kind:
        return f'<strong class="marker {kind}">{risk_words(risk)}</strong>'
    return ""


def risk_words(risk: str | None) -> str:
    """What a risk means, in the words every page shows (empty for none)."""
    return {"risk-unknown": MAY_HAVE_RUN, "risk-not-started": DID_NOT_RUN}.get(risk_class(risk), "")


def layout(title: str, body: str, *, journal_path: str, current: str = "") -> str:
    """A whole page: ``title`` is already HTML (built with ``text``)."""
    nav = "".join(
        f'<a href="{href}"{" aria-current=page" if name == current else ""}>{name}</a>'
        for name, href in (("Sessions", "/"), ("Tools", "/tools"), ("Scan", "/scan"))
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


def session_header(s: Session, forks: ForkTree, view: str) -> str:
    """The session's facts, its fork parent, its forks as a tree, and the tabs of its views."""
    facts = [f"{s.count} events", f"created {when(s.created_ms)}", f"last activity {when(s.last_ms)}"]
    parts = [f'<h1>session <span class="id">{text(s.id)}</span></h1><p>{", ".join(facts)}</p>']
    if s.meta:
        parts.append(f'<p class="meta">meta: {text(s.meta)}</p>')
    if s.parent_id is not None:
        fork_point = s.seed_length - 1
        parts.append(
            f'<p class="fork">fork of <a class="parent" href="{at_seq(s.parent_id, fork_point)}">'
            f"{text(s.parent_id)}</a> at seq {fork_point} (inherits its events 0..{fork_point})</p>"
        )
    if forks.ancestors or forks.children or forks.more_after:
        parts.append(fork_tree_html(forks, view))
    tabs = "".join(
        f'<a href="{url("sessions", s.id, view=None if name == "log" else name)}"'
        f"{' aria-current=page' if name == view else ''}>{label}</a>"
        for name, label in (("log", "Log"), ("messages", "Messages"), ("provider", "Provider view"))
    )
    current = " aria-current=page" if view == "timeline" else ""
    tabs += f'<a href="{url("sessions", s.id, "timeline")}"{current}>Timeline</a>'
    tabs += f'<a href="{url("tools", session=s.id)}">Tools</a>'
    parts.append(f'<nav class="tabs">{tabs}</nav>')
    return "".join(parts)


def fork_tree_html(tree: ForkTree, view: str) -> str:
    """The fork tree as nested lists: the fork parents from the root, this session, its forks
    and theirs, each fork with its fork point (the last seq it inherits)."""

    def point(f: Session) -> str:
        return f" at seq {f.seed_length - 1}" if f.parent_id is not None else ""

    def node(n: ForkNode, cls: str) -> str:
        inner = "".join(node(c, "grandchild") for c in n.children)
        if n.more:
            inner += f'<li class="more"><a href="{url("sessions", n.session.id)}">more forks of it</a></li>'
        nested = f"<ul>{inner}</ul>" if inner else ""
        link = f'<a class="{cls}" href="{url("sessions", n.session.id)}">{text(n.session.id)}</a>'
        return f"<li>{link}{point(n.session)}{nested}</li>"

    children = "".join(node(c, "child") for c in tree.children)
    if tree.more_after is not None:
        shown = view if view in ("messages", "provider") else None  # the timeline's "more" is the session page's
        more_url = url("sessions", tree.session.id, view=shown, forks_after=tree.more_after)
        children += f'<li class="more"><a href="{more_url}">more forks</a></li>'
    here = (
        f'<li><strong class="here id">{text(tree.session.id)}</strong>{point(tree.session)} (this session)'
        f"{f'<ul>{children}</ul>' if children else ''}</li>"
    )
    for a in reversed(tree.ancestors):
        here = f'<li><a class="ancestor" href="{url("sessions", a.id)}">{text(a.id)}</a>{point(a)}<ul>{here}</ul></li>'
    if tree.ancestors_left_off:
        here = f'<li class="more">… (older fork parents)<ul>{here}</ul></li>'
    return f'<div class="fork-tree"><h2>Forks</h2><ul class="tree">{here}</ul></div>'


def messages_view(
    s: Session, messages: Sequence[Message], missing: Sequence[MissingResult] | None, *, tail: int, view: str
) -> str:
    """The folded transcript (or what a model is sent, with the calls still missing a result)."""
    rows = "".join(_message_row(s.id, m) for m in messages)
    more = ""
    if len(messages) == tail:
        more_url = url("sessions", s.id, view=view, tail=tail * 2)
        more = f'<nav class="pager">the last {tail} messages <a href="{more_url}">show more</a></nav>'
    gaps = ""
    if missing:
        items = "".join(
            '<li><strong class="marker risk-unknown">MISSING result</strong> '
            f'for <span class="tool">{text(g.name)}</span> [<span class="call">{text(g.tool_call_id)}</span>] '
            f"(asked at seq {text(g.assistant_seq)}; run recovery before sending this)</li>"
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
            f'<span class="tool">→ {text(c.get("name"))}</span>'
            f'<span class="args">({text(c.get("arguments"), 400)})</span> '
            f'[<span class="call">{text(c.get("id"))}</span>]'
        )
    if m.role == "tool":
        parts.insert(0, f'[<span class="call">{text(m.tool_call_id)}</span>] {risk_marker(m.risk)}')
    if m.is_error and m.risk is None:
        parts.append('<span class="warn">(error)</span>')
    if m.stop_reason and m.stop_reason not in ("stop", "tool_use"):
        parts.append(f'<span class="warn">({text(m.stop_reason)})</span>')
    seq = "" if m.seq is None else f'<a class="seq" href="{at_seq(session_id, m.seq)}">{m.seq}</a>'
    return (
        f'<div class="msg role-{text(m.role)}">{seq}<span class="label">{text(m.role)}</span>'
        f'<span class="body">{" ".join(parts)}</span></div>'
    )


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
            f'<div class="turn"><a href="{url("sessions", t.session_id, since=t.start_seq)}#e{t.start_seq}">'
            f"{text(t.session_id)}</a>: turn {t.turn} "
            f"(seq {t.start_seq}, phase {text(t.phase.value)}, attempt {t.attempt}){held}<ul>{owed}</ul></div>"
        )
    parts.append(f"<h2>Dispatched without a result ({len(report.pending_calls)})</h2><ul>")
    for c in report.pending_calls:
        parts.append(
            f'<li><a href="{at_seq(c.session_id, c.dispatch_seq)}">{text(c.session_id)}</a> '
            f'<span class="tool">{text(c.name)}</span> [<span class="call">{text(c.call_id)}</span>] '
            f"at seq {c.dispatch_seq}"
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
            f"dispatched at seq {call.dispatch_seq}, result at seq {text(call.result_seq)}; "
            f"{notified}<dl>{details}</dl></div>"
        )
    for title, subs in (
        ("Stale submissions", report.stale_submissions),
        ("Queued submissions", report.queued_submissions),
    ):
        parts.append(f"<h2>{title} ({len(subs)})</h2><ul>")
        for sub in subs:
            parts.append(
                f'<li>{text(sub.id)} (<a href="{url("sessions", sub.session_id)}">{text(sub.session_id)}</a>): '
                f"{text(sub.state)}, "
                f"attempt {sub.attempt}/{sub.max_attempts}, {text(sub.reason)}</li>"
            )
        parts.append("</ul>")
    return layout("Restart scan", "".join(parts), journal_path=journal_path, current="Scan")


# -- tools at a glance ------------------------------------------------------------------------------

BAR_WIDTH = 120  # pixels of the longest inline bar


def _bar(value: int, most: int, kind: str, label: str) -> str:
    """An inline SVG bar (attributes, not styles: the CSP allows no inline style)."""
    width = 0 if most <= 0 else max(1, round(BAR_WIDTH * value / most)) if value else 0
    return (
        f'<svg class="bar" width="{BAR_WIDTH}" height="10" role="img" aria-label="{text(label)}">'
        f'<rect class="bar-{kind}" width="{width}" height="10"></rect></svg>'
    )


def tools_page(stats: Sequence[ToolStats], *, session_id: str | None, journal_path: str) -> str:
    """Per tool name: calls, results, p50/p95 from dispatch to a real result, errors, and what
    recovery said of interrupted calls (``Journal.tool_stats``: one statement, bounded)."""
    where = f' of <a href="{url("sessions", session_id)}">{text(session_id)}</a>' if session_id else ""
    parts = [f"<h1>Tools{where}</h1>"]
    if not stats:
        parts.append('<p class="muted">no tool calls</p>')
        return layout("Tools", "".join(parts), journal_path=journal_path, current="Tools")
    most = max(t.calls for t in stats)
    slowest = max((t.p95_ms or 0) for t in stats)
    parts.append(
        '<table class="sessions tools"><thead><tr><th>tool</th><th>calls</th><th>results</th>'
        "<th>p50 ms</th><th>p95 ms</th><th>errors</th><th>may have run</th><th>did not run</th>"
        "<th>indeterminate</th></tr></thead><tbody>"
    )
    for t in stats:
        p50 = "" if t.p50_ms is None else str(t.p50_ms)
        p95 = "" if t.p95_ms is None else str(t.p95_ms)
        parts.append(
            f'<tr data-tool="{text(t.name, limit=200)}"><td class="tool">{text(t.name, limit=200)}</td>'
            f'<td class="num">{t.calls} {_bar(t.calls, most, "calls", f"{t.calls} calls")}</td>'
            f'<td class="num">{t.results}</td>'
            f'<td class="num">{p50}</td>'
            f'<td class="num">{p95} {_bar(t.p95_ms or 0, slowest, "time", f"p95 {p95} ms")}</td>'
            f'<td class="num">{t.errors}</td>'
            f'<td class="num{" risk" if t.may_have_run else ""}">{t.may_have_run}</td>'
            f'<td class="num">{t.did_not_run}</td>'
            f'<td class="num{" risk" if t.indeterminate else ""}">{t.indeterminate}</td></tr>'
        )
    parts.append("</tbody></table>")
    return layout("Tools", "".join(parts), journal_path=journal_path, current="Tools")
