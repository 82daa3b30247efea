"""A session's timeline: its turns as lanes, its steps, model calls and tool calls as spans.

``timeline(j, session_id)`` reads a window of the session's events in one pass, a page of
previews at a time (``Journal.previews``: every field cut to ``CHARS`` characters in SQL, so a
4 MiB message costs a few hundred bytes here), and keeps only what it draws:

- **lanes**: one per turn (``turn_start`` … ``turn_end``; a turn recovery closed says so), and
  one for a stretch of events outside any turn;
- **bars**: steps (``step_start`` → ``step_end``), model calls (the step's start, or the event
  before, → the ``assistant_message``) and tool calls (the ``tool_call`` dispatch → its
  ``tool_result``; a call never dispatched from its request), each with its duration, and a tool
  call with its risk as the log page classifies it (``pages.synthetic_risk``), its state
  (indeterminate, from ``Journal.indeterminate``; resolved, from an ``operator_resolution``) and
  its late results;
- **markers**: a crash (the gap before the recovery that closed a turn: from the turn's last
  event before recovery's synthetic results to the first of them), a late result, a compaction,
  an operator's resolution.

Bounded: at most ``CAP`` elements (lanes, bars and markers) are drawn one by one. A window that
would draw more is drawn aggregated instead: its events are cut into about ``GROUPS`` lanes of
whole turns (a lane closes at the first turn boundary once it holds ``ceil(events / GROUPS)``
events, or mid-turn at twice that), each drawn as one bar with its counts and a link to the
timeline of just its events; the calls that may have run (a synthetic ``tool_outcome_unknown``
result, an indeterminate call, a dispatch without a result) and the crashes are still drawn one
by one on their lane, up to ``RISKY_MAX`` (the rest counted). The pass holds the drawing (at most
``CAP`` elements), the aggregated lanes, the calls still waiting for their result (at most
``PENDING_MAX``) and one page of previews, never the window's events. A request reads at most
``WINDOW_MAX`` events, and by default the session's last ``WINDOW_DEFAULT``. The page (``timeline_page``) and the
JSON API (``/api/sessions/ID/timeline``) are drawn from the same ``Timeline``.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from journal import Journal, Session
from journal.preview import Preview
from journal.pure.view import is_compaction
from journal.serve.pages import closed_by_recovery, synthetic_risk

CAP = 4000  # elements (lanes, bars, markers) drawn one by one at most
GROUPS = 200  # lanes of an aggregated timeline, about
RISKY_MAX = 1000  # calls that may have run and crashes drawn one by one on an aggregated timeline
PENDING_MAX = 10_000  # calls waiting for their result that the pass remembers
WINDOW_MAX = 100_000  # events one timeline reads at most (asked for with since= or until=)
WINDOW_DEFAULT = 20_000  # events a timeline reads when no window is asked for: the session's last
PAGE = 2000  # events a previews read returns
CHARS = 200  # characters of each field read (call ids pair on their first 200)

MAY_HAVE_RUN = "tool_outcome_unknown"


@attrs.define
class Lane:
    """A turn (``kind`` ``turn``), a stretch of events outside any turn (``outside``), or on an
    aggregated timeline a group of turns (``group``: ``turn`` … ``last_turn``, ``counts``)."""

    index: int
    kind: str
    turn: int | None
    seq: int
    end_seq: int
    start_ms: int
    end_ms: int
    reason: str | None = None  # the turn_end's reason (None: still open, or cut by the window)
    recovered: bool = False  # closed by recovery after a crash
    last_turn: int | None = None
    counts: dict[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.define
class Bar:
    """A span: a step, a model call, a tool call, or an aggregated lane's ``group`` bar.

    ``seq`` is the event it starts at, ``end_seq`` the one it ends at (None: it never ended in
    the window). A tool call's ``status``: ``ok``, ``error``, ``synthetic`` (recovery wrote its
    result: see ``risk``), ``no_result``; ``dispatched`` says whether it was; ``state``:
    ``indeterminate`` or ``resolved`` (an operator's finding) when it is either."""

    lane: int
    kind: str
    seq: int
    end_seq: int | None
    start_ms: int
    end_ms: int
    step: int | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    risk: str | None = None
    status: str | None = None
    state: str | None = None
    dispatched: bool = False
    late: list[int] = attrs.Factory(list)

    @property
    def ms(self) -> int:
        return self.end_ms - self.start_ms

    def to_dict(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "ms": self.ms}


@attrs.define
class Marker:
    """A moment (or for a ``crash``, the gap ``start_ms`` … ``end_ms``) on a lane: ``crash``,
    ``late`` (a result kept as evidence, G5), ``compaction``, ``resolution``."""

    lane: int
    kind: str
    seq: int
    start_ms: int
    end_ms: int
    call_id: str | None = None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class Timeline:
    """What the timeline page draws, and the JSON API gives (``to_dict``)."""

    session: Session
    since: int
    until: int
    aggregated: bool
    events: int  # events read (the window's)
    calls: int  # tool calls seen
    detail_elements: int  # what drawing each one would take (counted up to CAP + 1)
    lanes: tuple[Lane, ...]
    bars: tuple[Bar, ...]
    markers: tuple[Marker, ...]
    left_off: int  # risky calls and crashes of an aggregated timeline not drawn one by one
    group_events: int  # an aggregated lane's events before it closes at a turn boundary (0: not aggregated)

    @property
    def elements(self) -> int:
        return len(self.lanes) + len(self.bars) + len(self.markers)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session": self.session.to_dict(),
            "since": self.since,
            "until": self.until,
            "events": self.events,
            "aggregated": self.aggregated,
            "cap": CAP,
            "elements": self.elements,
            "calls": self.calls,
            "group_events": self.group_events,
            "left_off": self.left_off,
            "lanes": [lane.to_dict() for lane in self.lanes],
            "bars": [bar.to_dict() for bar in self.bars],
            "markers": [m.to_dict() for m in self.markers],
        }


def window(count: int, since: int | None, until: int | None) -> tuple[int, int]:
    """The events ``since`` … ``until - 1`` a timeline reads: at most ``WINDOW_MAX`` (from
    ``since``, or up to ``until`` when only it is given); neither given, the session's last
    ``WINDOW_DEFAULT``."""
    stop = count if until is None else min(until, count)
    if since is None:
        return max(stop - (WINDOW_DEFAULT if until is None else WINDOW_MAX), 0), stop
    start = min(since, stop)
    return start, min(stop, start + WINDOW_MAX)


def timeline(j: Journal, session_id: str, *, since: int | None = None, until: int | None = None) -> Timeline:
    """The timeline of the session's events ``since`` … ``until - 1`` (see ``window``), in one
    pass of previews (``PAGE`` a read, cut to ``CHARS`` characters in SQL)."""
    session = j.session(session_id)
    start, stop = window(session.count, since, until)
    indeterminate = {c.call_id for c in j.indeterminate(session_id)}
    builder = _Builder(max(1, math.ceil((stop - start) / GROUPS)), indeterminate)
    at = start
    while at < stop:
        page: list[Preview] = j.previews(session_id, since=at, limit=min(PAGE, stop - at), chars=CHARS)
        if not page:
            break
        for p in page:
            builder.add(p)
        at = page[-1].seq + 1
        del page
    return builder.finish(session, start, stop)


@attrs.define
class _Call:
    call_id: str
    lane: int  # the detail lane it started on (-1: none)
    group: int  # the aggregated lane it started on
    seq: int
    start_ms: int
    name: str | None
    arguments: str | None
    step: int | None
    dispatched: bool = False


@attrs.define
class _Open:
    """The lane being drawn (detail) and where its step stands."""

    lane: Lane
    step: Bar | None = None
    step_has_model: bool = False
    last_ms: int = 0  # the time of the lane's last event
    plain_ms: int | None = None  # the time of its last event that is not recovery's
    recovery: tuple[int, int] | None = None  # seq and time of the first of its trailing synthetic results


def _text(value: object) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Builder:
    """The one pass: events in, lanes, bars and markers out (detail while they fit in ``CAP``,
    and the aggregated lanes always, for when they do not)."""

    def __init__(self, group_events: int, indeterminate: set[str]) -> None:
        self.group_events = group_events
        self.indeterminate = indeterminate
        self.detail = True
        self.elements = 0
        self.lanes: list[Lane] = []
        self.bars: list[Bar] = []
        self.markers: list[Marker] = []
        self.done: dict[str, Bar] = {}  # a drawn call by id, for its late results and resolution
        self.open: _Open | None = None
        self.pending: dict[str, _Call] = {}
        self.calls = 0
        self.events = 0
        # the aggregated drawing, kept all along (bounded by GROUPS lanes and RISKY_MAX items)
        self.groups: list[Lane] = []
        self.group_open = False  # the last group takes events (else the next event opens one)
        self.group_turn_open = False
        self.risky: list[Bar | Marker] = []
        self.left_off = 0

    # -- the detail drawing -------------------------------------------------------------------

    def _count(self, n: int = 1) -> bool:
        """Room for ``n`` more detail elements? Beyond ``CAP`` the detail is let go."""
        if not self.detail:
            return False
        self.elements += n
        if self.elements > CAP:
            self.detail = False
            self.lanes, self.bars, self.markers, self.done = [], [], [], {}
            return False
        return True

    def _lane(self, kind: str, e: Preview, turn: int | None) -> Lane:
        lane = Lane(len(self.lanes), kind, turn, e.seq, e.seq, e.time_ms, e.time_ms)
        if self._count():
            self.lanes.append(lane)
        self.open = _Open(lane, last_ms=e.time_ms)
        return lane

    def _close_lane(self) -> None:
        o = self.open
        if o is None:
            return
        self._close_step(o, None)
        self.open = None

    def _close_step(self, o: _Open, e: Preview | None) -> None:
        step = o.step
        if step is None:
            return
        if e is not None:
            step.end_seq, step.end_ms = e.seq, e.time_ms
            outcome = e.data.get("outcome")
            step.status = _text(outcome) or "ok"
        else:
            step.end_ms, step.status = o.lane.end_ms, "open"
        o.step = None

    def _bar(self, bar: Bar) -> None:
        if self._count():
            self.bars.append(bar)

    def _marker(self, marker: Marker) -> None:
        if self._count():
            self.markers.append(marker)

    # -- the aggregated drawing ---------------------------------------------------------------

    def _group(self, e: Preview, turn: int | None) -> Lane:
        g = self.groups[-1] if self.groups and self.group_open else None
        size = 0 if g is None else g.end_seq - g.seq + 1
        boundary = e.type == "turn_start" or not self.group_turn_open
        if g is None or (boundary and size >= self.group_events) or size >= 2 * self.group_events:
            counts = dict.fromkeys(_COUNTED, 0)
            g = Lane(len(self.groups), "group", turn, e.seq, e.seq, e.time_ms, e.time_ms, counts=counts)
            g.last_turn = turn
            self.groups.append(g)
            self.group_open = True
        g.end_seq, g.end_ms = e.seq, max(g.end_ms, e.time_ms)
        g.start_ms = min(g.start_ms, e.time_ms)
        if turn is not None:
            if g.turn is None:
                g.turn = turn
            g.last_turn = turn
        return g

    def _risky(self, item: Bar | Marker) -> None:
        if len(self.risky) < RISKY_MAX:
            self.risky.append(item)
        else:
            self.left_off += 1

    # -- one event ----------------------------------------------------------------------------

    def add(self, e: Preview) -> None:
        self.events += 1
        d, t = e.data, e.type
        turn = _int(d.get("turn")) if t in _NUMBERED else None
        if t == "turn_start":
            self._close_lane()
            self._lane("turn", e, turn)
            self.group_turn_open = True
        else:
            # A window may start inside a turn: its steps and its end say which one.
            inside = t in ("turn_end", "step_start", "step_end") and turn is not None
            if self.open is None:
                self._lane("turn" if inside else "outside", e, turn if inside else None)
            elif inside and self.open.lane.kind == "outside":
                self.open.lane.kind, self.open.lane.turn = "turn", turn
        o = self.open
        assert o is not None
        lane = o.lane
        group = self._group(e, lane.turn if lane.kind == "turn" else None)
        if t == "turn_start":
            _counts(group)["turns"] += 1
        lane.end_seq, lane.end_ms = e.seq, max(lane.end_ms, e.time_ms)
        previous_ms = o.last_ms
        o.last_ms = e.time_ms
        risk = synthetic_risk(d) if t == "tool_result" else None
        if t == "tool_result" and risk is not None:
            if o.recovery is None:
                o.recovery = (e.seq, e.time_ms)
        else:
            if t != "turn_end":
                o.plain_ms, o.recovery = e.time_ms, None

        if t == "turn_end":
            lane.reason = _text(d.get("reason"))
            if closed_by_recovery(d):
                lane.recovered = True
                _counts(group)["crashes"] += 1
                first_seq, first_ms = o.recovery if o.recovery is not None else (e.seq, e.time_ms)
                gap_from = o.plain_ms if o.plain_ms is not None else lane.start_ms
                crash = Marker(lane.index, "crash", first_seq, gap_from, first_ms, note=f"turn {lane.turn}")
                self._marker(crash)
                self._risky(Marker(group.index, "crash", first_seq, gap_from, first_ms, note=f"turn {lane.turn}"))
            self._close_lane()
            self.group_turn_open = False
        elif t == "step_start":
            self._close_step(o, None)
            _counts(group)["steps"] += 1
            step = Bar(lane.index, "step", e.seq, None, e.time_ms, e.time_ms, step=_int(d.get("step")))
            o.step, o.step_has_model = step, False
            self._bar(step)
        elif t == "step_end":
            if o.step is not None:
                self._close_step(o, e)
        elif t == "assistant_message":
            _counts(group)["model_calls"] += 1
            begun = o.step.start_ms if o.step is not None and not o.step_has_model else previous_ms
            begun_seq = o.step.seq if o.step is not None and not o.step_has_model else e.seq
            o.step_has_model = True
            step_no = o.step.step if o.step is not None else None
            self._bar(
                Bar(
                    lane.index,
                    "model",
                    begun_seq,
                    e.seq,
                    min(begun, e.time_ms),
                    e.time_ms,
                    step=step_no,
                    status=_text(d.get("stop_reason")),
                )
            )
            for call in d.get("tool_calls") or []:
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    self._request(call["id"], e, lane, group, call.get("name"), call.get("arguments"), step_no)
        elif t == "tool_call" and isinstance(d.get("id"), str):
            call = self._request(d["id"], e, lane, group, d.get("name"), d.get("arguments"), None)
            if call is not None and not call.dispatched:
                call.dispatched, call.seq, call.start_ms = True, e.seq, e.time_ms
                call.name = _text(d.get("name")) or call.name
        elif t == "tool_result" and isinstance(d.get("tool_call_id"), str):
            self._result(d["tool_call_id"], e, lane, group, risk)
        elif t == "tool_result_late":
            call_id = _text(d.get("tool_call_id"))
            _counts(group)["late"] += 1
            self._marker(Marker(lane.index, "late", e.seq, e.time_ms, e.time_ms, call_id=call_id))
            if call_id is not None and call_id in self.done:
                self.done[call_id].late.append(e.seq)
        elif t == "operator_resolution":
            call_id = _text(d.get("tool_call_id"))
            outcome = _text(d.get("outcome"))
            self._marker(Marker(lane.index, "resolution", e.seq, e.time_ms, e.time_ms, call_id=call_id, note=outcome))
            if call_id is not None and call_id in self.done:
                self.done[call_id].state = "resolved"
        if "surface_op" in d and is_compaction(e.event()):
            _counts(group)["compactions"] += 1
            op = d.get("surface_op")
            note = f"replaces transcript messages {op[1]}..{op[2]}" if isinstance(op, list) and len(op) == 3 else None
            self._marker(Marker(lane.index, "compaction", e.seq, e.time_ms, e.time_ms, note=note))

    def _request(
        self, call_id: str, e: Preview, lane: Lane, group: Lane, name: Any, arguments: Any, step: int | None
    ) -> _Call | None:
        known = self.pending.get(call_id)
        if known is not None or call_id in self.done:
            return known
        if len(self.pending) >= PENDING_MAX:
            return None  # the result will be drawn from itself
        self.calls += 1
        _counts(group)["tool_calls"] += 1
        if arguments is not None and not isinstance(arguments, str):
            arguments = _compact(arguments)
        call = _Call(call_id, lane.index, group.index, e.seq, e.time_ms, _text(name), arguments, step)
        self.pending[call_id] = call
        return call

    def _result(self, call_id: str, e: Preview, lane: Lane, group: Lane, risk: str | None) -> None:
        call = self.pending.pop(call_id, None)
        if call is None:
            if call_id in self.done:
                return  # a second result with the same id (a fork's replay): the first one counts
            self.calls += 1
            _counts(group)["tool_calls"] += 1
            call = _Call(call_id, lane.index, group.index, e.seq, e.time_ms, _text(e.data.get("name")), None, None)
        status = "synthetic" if risk is not None else ("error" if e.data.get("is_error") else "ok")
        counts = _counts(self.groups[call.group])
        if status == "error":
            counts["errors"] += 1
        elif risk == MAY_HAVE_RUN:
            counts["may_have_run"] += 1
        elif risk is not None:
            counts["did_not_run"] += 1
        bar = self._call_bar(call, lane=call.lane, end_seq=e.seq, end_ms=e.time_ms, status=status, risk=risk)
        if risk == MAY_HAVE_RUN or bar.state == "indeterminate":
            self._risky(attrs.evolve(bar, lane=call.group, late=[]))
        if self.detail:
            self._bar(bar)
            self.done[call_id] = bar

    def _call_bar(
        self, call: _Call, *, lane: int, end_seq: int | None, end_ms: int, status: str, risk: str | None
    ) -> Bar:
        state = "indeterminate" if call.call_id in self.indeterminate else None
        return Bar(
            lane,
            "tool",
            call.seq,
            end_seq,
            call.start_ms,
            max(end_ms, call.start_ms),
            step=call.step,
            call_id=call.call_id,
            name=call.name,
            arguments=call.arguments,
            risk=risk,
            status=status,
            state=state,
            dispatched=call.dispatched,
        )

    # -- the end ------------------------------------------------------------------------------

    def finish(self, session: Session, since: int, until: int) -> Timeline:
        lanes_end = {lane.index: lane.end_ms for lane in self.lanes}
        groups_end = {g.index: g.end_ms for g in self.groups}
        for call in self.pending.values():  # never answered in the window
            end_ms = lanes_end.get(call.lane, call.start_ms) if call.dispatched else call.start_ms
            bar = self._call_bar(call, lane=call.lane, end_seq=None, end_ms=end_ms, status="no_result", risk=None)
            if call.dispatched or bar.state == "indeterminate":
                self._risky(
                    attrs.evolve(bar, lane=call.group, end_ms=max(groups_end.get(call.group, 0), call.start_ms))
                )
            self._bar(bar)
        self.pending = {}
        self._close_lane()
        if self.detail:
            bars = sorted(self.bars, key=lambda b: (b.lane, b.seq, _KIND_ORDER[b.kind]))
            return Timeline(
                session,
                since,
                until,
                False,
                self.events,
                self.calls,
                self.elements,
                tuple(self.lanes),
                tuple(bars),
                tuple(self.markers),
                0,
                0,
            )
        bars_g = [
            Bar(g.index, "group", g.seq, g.end_seq, g.start_ms, g.end_ms, step=None, status=None) for g in self.groups
        ]
        risky_bars = [b for b in self.risky if isinstance(b, Bar)]
        markers = tuple(m for m in self.risky if isinstance(m, Marker))
        bars = sorted([*bars_g, *risky_bars], key=lambda b: (b.lane, b.seq, _KIND_ORDER[b.kind]))
        return Timeline(
            session,
            since,
            until,
            True,
            self.events,
            self.calls,
            self.elements,
            tuple(self.groups),
            tuple(bars),
            markers,
            self.left_off,
            self.group_events,
        )


_COUNTED = (
    "turns",
    "steps",
    "model_calls",
    "tool_calls",
    "errors",
    "may_have_run",
    "did_not_run",
    "late",
    "compactions",
    "crashes",
)
_NUMBERED = frozenset({"turn_start", "turn_end", "step_start", "step_end"})
_KIND_ORDER = {"group": 0, "step": 1, "model": 2, "tool": 3}


def _counts(group: Lane) -> dict[str, int]:
    assert group.counts is not None  # an aggregated lane has its counts
    return group.counts


def _compact(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, default=str)[:CHARS]


__all__ = ["CAP", "WINDOW_DEFAULT", "WINDOW_MAX", "Bar", "Lane", "Marker", "Timeline", "timeline", "window"]
