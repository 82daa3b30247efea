"""The timeline page: a session's ``Timeline`` drawn as an SVG waterfall (G14 in SVG too).

One lane per turn, each on its own axis from the turn's start (so a bar's length is its
duration, on one scale for every lane, and the idle time between turns takes no room); a crash
gap is drawn ``GAP_PX`` wide whatever its length (its title says how long). Every stored string
reaches the SVG through ``pages.text`` (``journal.escape.escape``, then HTML escaping: a
``</text><script>`` in a tool name is characters in a ``<title>``), attribute values too; links
are the viewer's own paths from quoted ids and integers only (``pages.url``, ``pages.at_seq``).
No inline script, no inline style, no event handler: colours come from classes in the one
stylesheet, hover is each element's ``<title>``, focus is ``tabindex`` and ``:focus``; the one
script (``/static/live.js``) also copies the focused bar's title into the page, as text.
"""

from __future__ import annotations

import html

from journal.escape import escape
from journal.serve.pages import at_seq, risk_class, risk_words, text, url, when
from journal.serve.timeline import CAP, GROUPS, RISKY_MAX, WINDOW_DEFAULT, WINDOW_MAX, Bar, Lane, Marker, Timeline

WIDTH = 1100  # pixels of the drawing
LABEL_PX = 170  # the lanes' labels, on the left
PLOT_PX = WIDTH - LABEL_PX - 180  # and room on the right for the last bars' labels
AXIS_PX = 26
GAP_PX = 24  # a crash gap, whatever its length
ROW_PX = 11  # a row of tool calls
TOOL_ROWS = 6  # rows of tool calls a lane packs its calls into (beyond, they overlap in the last)
LABEL_CHARS = 24  # characters of a tool's name written beside its bar
CHAR_PX = 6.2


def _label(value: object, limit: int = LABEL_CHARS) -> str:
    """A short label (a tool name beside its bar): G14-escaped, cut, HTML-escaped."""
    shown = escape(value if isinstance(value, str) else str(value))
    if len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return html.escape(shown, quote=True)


def _many(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _ms(ms: int) -> str:
    if ms < 1000:
        return f"{ms} ms"
    if ms < 120_000:
        return f"{ms / 1000:.2f} s"
    if ms < 7_200_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:.1f} h"


class _Axis:
    """A lane's time → x: linear from the lane's start, its crash gap (if any) ``GAP_PX`` wide."""

    def __init__(self, lane: Lane, gap: tuple[int, int] | None, scale: float) -> None:
        self.start, self.end = lane.start_ms, max(lane.end_ms, lane.start_ms)
        self.gap = gap if gap is not None and gap[1] > gap[0] else None
        self.scale = scale

    def x(self, t: int) -> float:
        t = min(max(t, self.start), self.end)
        base = LABEL_PX
        if self.gap is None or t <= self.gap[0]:
            return base + (t - self.start) * self.scale
        g0, g1 = self.gap
        before = (g0 - self.start) * self.scale
        if t < g1:
            return base + before + (t - g0) / (g1 - g0) * GAP_PX
        return base + before + GAP_PX + (t - g1) * self.scale


def _effective(lane: Lane, gap: tuple[int, int] | None) -> int:
    span = max(lane.end_ms - lane.start_ms, 0)
    if gap is not None and gap[1] > gap[0]:
        span -= gap[1] - gap[0]
    return max(span, 0)


def timeline_svg(tl: Timeline) -> str:
    """The SVG of the timeline (see the module's docstring)."""
    sid = tl.session.id
    gaps: dict[int, tuple[int, int]] = {}
    if not tl.aggregated:
        for m in tl.markers:
            if m.kind == "crash" and m.lane not in gaps:
                gaps[m.lane] = (m.start_ms, m.end_ms)
    longest = max((_effective(lane, gaps.get(lane.index)) for lane in tl.lanes), default=0)
    room = PLOT_PX - (GAP_PX if gaps else 0)
    scale = room / max(longest, 1)
    by_lane: dict[int, list[Bar]] = {}
    for bar in tl.bars:
        by_lane.setdefault(bar.lane, []).append(bar)
    marks: dict[int, list[Marker]] = {}
    for m in tl.markers:
        marks.setdefault(m.lane, []).append(m)

    parts: list[str] = []
    y = AXIS_PX
    for lane in tl.lanes:
        axis = _Axis(lane, gaps.get(lane.index), scale)
        bars = by_lane.get(lane.index, [])
        body, height = (_group_lane if tl.aggregated else _turn_lane)(
            sid, tl, lane, bars, marks.get(lane.index, []), axis, y
        )
        parts.append(_lane_head(sid, tl, lane, y, height) + body)
        y += height
    ticks = _ticks(longest, scale)
    total = y + 8
    label = f"timeline of session {sid}: {len(tl.lanes)} lanes"
    return (
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{total}" '
        f'viewBox="0 0 {WIDTH} {total}" role="group" aria-label="{text(label, 300)}">'
        '<defs><pattern id="crash-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect class="hatch" width="3" height="6"></rect></pattern></defs>'
        f"{ticks}{''.join(parts)}</svg>"
    )


_ANCHORS = ("start", "middle", "middle", "middle", "end")


def _ticks(longest: int, scale: float) -> str:
    out = [f'<text class="axis" x="6" y="{AXIS_PX - 8}">from each lane\'s start</text>']
    for i in range(5):
        ms = round(longest * i / 4)
        x = LABEL_PX + ms * scale
        out.append(
            f'<line class="tick" x1="{x:.1f}" x2="{x:.1f}" y1="{AXIS_PX - 6}" y2="{AXIS_PX}"></line>'
            f'<text class="axis" x="{x:.1f}" y="{AXIS_PX - 8}" text-anchor="{_ANCHORS[i]}">'
            f"{_ms(ms)}</text>"
        )
    return "".join(out)


def _lane_head(sid: str, tl: Timeline, lane: Lane, y: int, height: int) -> str:
    if lane.kind == "group":
        first, last = lane.turn, lane.last_turn
        name = "no turn" if first is None else f"turn {first}" if first == last else f"turns {first}–{last}"
    elif lane.kind == "outside":
        name = "outside a turn"
    else:
        name = f"turn {text(lane.turn)}" if lane.turn is not None else "turn ?"
    note = ""
    if lane.recovered:
        note = '<tspan class="warn"> · recovered</tspan>'
    elif lane.kind == "turn" and lane.reason is None:
        note = '<tspan class="warn"> · open</tspan>'
    elif lane.reason not in (None, "complete"):
        note = f'<tspan class="warn"> · {_label(lane.reason, 16)}</tspan>'
    title = f"{name}: events {lane.seq}..{lane.end_seq}, {when(lane.start_ms)} to {when(lane.end_ms)}"
    if lane.reason is not None:
        title += f", ended: {lane.reason}"
    if lane.recovered:
        title += " (closed by recovery after a crash)"
    shade = "lane-bg odd" if lane.index % 2 else "lane-bg"
    return (
        f'<rect class="{shade}" x="0" y="{y}" width="{WIDTH}" height="{height}"></rect>'
        f'<a class="lane-label" href="{at_seq(sid, lane.seq)}" data-lane="{lane.index}">'
        f'<title>{text(title)}</title><text x="6" y="{y + 14}">{name}{note}</text></a>'
    )


def _turn_lane(
    sid: str, tl: Timeline, lane: Lane, bars: list[Bar], marks: list[Marker], axis: _Axis, y: int
) -> tuple[str, int]:
    out: list[str] = []
    step_y, model_y, tool_y = y + 5, y + 12, y + 24
    rows: list[float] = []
    placed: list[tuple[Bar, int]] = []
    for bar in bars:
        if bar.kind != "tool":
            continue
        x0 = axis.x(bar.start_ms)
        x1 = max(axis.x(bar.end_ms), x0 + 2) + 4 + CHAR_PX * min(len(bar.name or ""), LABEL_CHARS)
        row = next((r for r, end in enumerate(rows) if end <= x0), None)
        if row is None:
            if len(rows) < TOOL_ROWS:
                rows.append(0)
                row = len(rows) - 1
            else:
                row = min(range(len(rows)), key=lambda r: rows[r])
        rows[row] = max(rows[row], x1)
        placed.append((bar, row))
    height = max(30, 24 + ROW_PX * len(rows) + 6)
    for m in marks:
        if m.kind == "crash":
            out.append(_crash(sid, m, axis, y, height))
    for bar in bars:
        if bar.kind == "step":
            out.append(_span(sid, bar, axis, step_y, 4))
        elif bar.kind == "model":
            out.append(_span(sid, bar, axis, model_y, 9))
    for bar, row in placed:
        out.append(_tool(sid, bar, axis, tool_y + row * ROW_PX))
    for m in marks:
        if m.kind != "crash":
            out.append(_point(sid, m, axis, y + 4))
    return "".join(out), height


def _group_lane(
    sid: str, tl: Timeline, lane: Lane, bars: list[Bar], marks: list[Marker], axis: _Axis, y: int
) -> tuple[str, int]:
    out: list[str] = []
    risky = [b for b in bars if b.kind == "tool"]
    height = 44 if risky or marks else 30
    for m in marks:
        out.append(_crash(sid, m, axis, y, height))
    for bar in bars:
        if bar.kind == "group":
            out.append(_group_bar(sid, lane, bar, axis, y + 8))
    for bar in risky:
        out.append(_tool(sid, bar, axis, y + 28))
    return "".join(out), height


def _rect(cls: str, x0: float, x1: float, y: float, h: float) -> str:
    return f'<rect class="{cls}" x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0, 2):.1f}" height="{h}"></rect>'


def _span(sid: str, bar: Bar, axis: _Axis, y: float, h: float) -> str:
    """A step or a model call; links to its event (a model call: its assistant message)."""
    seq = bar.end_seq if bar.kind == "model" and bar.end_seq is not None else bar.seq
    if bar.kind == "model":
        what = f"model call (step {bar.step})" if bar.step is not None else "model call"
        detail = f"{what}: @{bar.seq} → assistant message @{bar.end_seq}, {_ms(bar.ms)}"
        if bar.status:
            detail += f", stop reason {bar.status}"
        cls = "bar model"
    else:
        ended = f"ended @{bar.end_seq}: {bar.status}" if bar.end_seq is not None else "never ended"
        detail = f"step {bar.step}: @{bar.seq}, {ended}, {_ms(bar.ms)}"
        cls = "bar step" + (" step-error" if bar.status == "error" else " step-open" if bar.status == "open" else "")
    return (
        f'<a class="{cls}" href="{at_seq(sid, seq)}" data-seq="{seq}" tabindex="0"><title>{text(detail)}</title>'
        f"{_rect('r', axis.x(bar.start_ms), axis.x(bar.end_ms), y, h)}</a>"
    )


def _tool(sid: str, bar: Bar, axis: _Axis, y: float) -> str:
    """A tool call: ``data-call-id``, ``data-risk`` (``none`` for a real result), its status."""
    words = risk_words(bar.risk)
    start = f"dispatched @{bar.seq}" if bar.dispatched else f"requested @{bar.seq}, never dispatched"
    end = f"result @{bar.end_seq}" if bar.end_seq is not None else "no result"
    lines = [f"tool call {bar.name} [{bar.call_id}]", f"{start} → {end}, {_ms(bar.ms)}"]
    if bar.risk is not None:
        lines.append(f"{words or 'synthetic'} (synthetic result: {bar.risk})")
    elif bar.status == "error":
        lines.append("error")
    elif bar.status == "no_result":
        lines.append("dispatched, no result: it MAY have run" if bar.dispatched else "never dispatched, no result")
    if bar.state == "indeterminate":
        lines.append("indeterminate: awaiting an operator (journal resolve)")
    elif bar.state == "resolved":
        lines.append("resolved by an operator")
    if bar.late:
        lines.append("late results @" + ", @".join(str(s) for s in bar.late))
    if bar.arguments:
        lines.append(f"arguments {bar.arguments}")
    classes = ["bar", "tool", f"st-{bar.status or 'ok'}"]  # our own words only, never stored text
    if bar.risk is not None:
        classes.append(risk_class(bar.risk) or "risk-other")
    if bar.state in ("indeterminate", "resolved"):
        classes.append(f"state-{bar.state}")
    x0, x1 = axis.x(bar.start_ms), axis.x(bar.end_ms)
    x1 = max(x1, x0 + 2)
    may_have_run = bar.risk == "tool_outcome_unknown"
    label = _label(bar.name or "") + (" · MAY HAVE RUN" if may_have_run else "")
    tag = f'<text class="bar-label{" risk" if may_have_run else ""}" x="{x1 + 4:.1f}" y="{y + 8:.1f}">{label}</text>'
    return (
        f'<a class="{" ".join(classes)}" href="{at_seq(sid, bar.seq)}" data-seq="{bar.seq}" '
        f'data-call-id="{text(bar.call_id, None)}" data-risk="{text(bar.risk or "none", None)}" '
        f'data-status="{text(bar.status, None)}" data-state="{text(bar.state or "", None)}" tabindex="0">'
        f"<title>{chr(10).join(text(line) for line in lines)}</title>"
        f"{_rect('r', x0, x1, y, 9)}{tag}</a>"
    )


def _group_bar(sid: str, lane: Lane, bar: Bar, axis: _Axis, y: float) -> str:
    counts = lane.counts or {}
    said = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in counts.items() if v)
    detail = f"events {lane.seq}..{lane.end_seq} ({lane.end_seq - lane.seq + 1}), {_ms(bar.ms)}: {said or 'no turns'}"
    zoom = url("sessions", sid, "timeline", since=lane.seq, until=lane.end_seq + 1)
    cls = "bar group" + (" has-risk" if counts.get("may_have_run") or counts.get("crashes") else "")
    return (
        f'<a class="{cls}" href="{zoom}" data-seq="{lane.seq}" tabindex="0">'
        f"<title>{text(detail)} (open its timeline)</title>"
        f"{_rect('r', axis.x(bar.start_ms), axis.x(bar.end_ms), y, 12)}</a>"
    )


def _crash(sid: str, m: Marker, axis: _Axis, y: int, height: int) -> str:
    detail = (
        f"crash: nothing was written for {_ms(m.end_ms - m.start_ms)} ({when(m.start_ms)} to {when(m.end_ms)}); "
        f"recovery closed {m.note or 'the turn'}, its first repair @{m.seq}"
    )
    x0, x1 = axis.x(m.start_ms), axis.x(m.end_ms)
    return (
        f'<a class="mark crash" href="{at_seq(sid, m.seq)}" data-seq="{m.seq}" tabindex="0">'
        f"<title>{text(detail)}</title>"
        f'<rect class="crash-gap" x="{x0:.1f}" y="{y + 1}" width="{max(x1 - x0, 3):.1f}" height="{height - 2}" '
        f'fill="url(#crash-hatch)"></rect></a>'
    )


def _point(sid: str, m: Marker, axis: _Axis, y: float) -> str:
    x = axis.x(m.start_ms)
    if m.kind == "late":
        detail = f"late result @{m.seq} for [{m.call_id}]: kept as evidence (the first result won)"
        shape = f'<path class="shape" d="M{x:.1f} {y:.1f} l4 4 l-4 4 l-4 -4 z"></path>'
    elif m.kind == "compaction":
        detail = f"compaction @{m.seq}" + (f": {m.note}" if m.note else "")
        shape = f'<path class="shape" d="M{x - 4:.1f} {y:.1f} h8 l-4 7 z"></path>'
    else:
        detail = f"operator resolution @{m.seq} of [{m.call_id}]: {m.note}"
        shape = f'<circle class="shape" cx="{x:.1f}" cy="{y + 4:.1f}" r="4"></circle>'
    call = f' data-call-id="{text(m.call_id, None)}"' if m.call_id is not None else ""
    return (
        f'<a class="mark {m.kind}" href="{at_seq(sid, m.seq)}" data-seq="{m.seq}"{call} tabindex="0">'
        f"<title>{text(detail)}</title>{shape}</a>"
    )


def timeline_body(tl: Timeline) -> str:
    """The page's body under the session's header: what is drawn and how, the window's links,
    the key, the drawing, and the line the script fills with the focused bar's event."""
    sid, count = tl.session.id, tl.session.count
    first, last = tl.since, tl.until - 1
    summary = [f"events {first}..{last} of {count}", _many(len(tl.lanes), "lane"), _many(tl.calls, "tool call")]
    if tl.aggregated:
        how = (
            f"aggregated: drawing each one would take more than {CAP:,} elements, so each lane is a group of "
            f"whole turns (it closes at the first turn boundary after {tl.group_events:,} events, or mid-turn at "
            f"{2 * tl.group_events:,}; about {GROUPS} lanes), one bar each with its counts, linked to its own "
            f"timeline; the calls that may have run and the crashes are drawn one by one (up to {RISKY_MAX:,}"
            + (f"; {tl.left_off:,} more not drawn" if tl.left_off else "")
            + ")"
        )
    else:
        how = f"each one drawn ({tl.elements:,} elements)"
    nav = []
    if tl.since > 0:
        earlier = url("sessions", sid, "timeline", since=max(tl.since - WINDOW_DEFAULT, 0), until=tl.since)
        nav.append(f'<a rel="prev" href="{earlier}">← earlier</a>')
    if tl.until < count:
        later = url("sessions", sid, "timeline", since=tl.until, until=tl.until + WINDOW_DEFAULT)
        nav.append(f'<a rel="next" href="{later}">later →</a>')
        nav.append(f'<a href="{url("sessions", sid, "timeline")}">the end</a>')
    if tl.since > 0 or tl.until < count:
        widest = f"the first {WINDOW_MAX:,} events" if count > WINDOW_MAX else "the whole session"
        nav.append(f'<a href="{url("sessions", sid, "timeline", since=0)}">{widest} (slower)</a>')
    nav.append(f'<a href="{url("api", "sessions", sid, "timeline", since=tl.since, until=tl.until)}">JSON</a>')
    key = (
        '<p class="tl-key">'
        + "".join(
            f'<span class="key key-{cls}">{words}</span>'
            for cls, words in (
                ("step", "step"),
                ("model", "model call"),
                ("tool", "tool call"),
                ("error", "error"),
                ("risk-unknown", "MAY HAVE RUN"),
                ("risk-not-started", "did not run"),
                ("no-result", "no result"),
                ("indeterminate", "indeterminate"),
                ("crash", "crash gap"),
                ("late", "late result"),
                ("compaction", "compaction"),
            )
        )
        + "</p>"
    )
    drawing = timeline_svg(tl) if tl.lanes else '<p class="empty">no events</p>'
    return (
        f'<p class="tl-summary">{", ".join(summary)}; {how}.</p><nav class="pager">{" ".join(nav)}</nav>{key}'
        f'<div class="tl-scroll">{drawing}</div>'
        '<p class="tl-detail" id="tl-detail" aria-live="polite">hover or focus a bar to see its event here '
        "(each bar links to its event in the log)</p>"
    )


__all__ = ["timeline_body", "timeline_svg"]
