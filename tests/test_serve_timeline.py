"""The viewer draws the session (issue 30, items 1, 3, 4): a timeline per session, forks as a tree,
the same data through the JSON API.

The timeline's data (``journal.serve.timeline``) on both backends: one bar per tool call of the
log with its risk as the log page decides it, the crash gap, late results, compactions,
indeterminate and resolved calls; drawn aggregated beyond the cap with every call that may have
run still drawn; read through the cut previews only, in pages, with a peak of memory that does
not follow the session's length. The page: content stays text in the SVG (G14), links are the
viewer's own, and the JSON API gives what the page draws. The fork tree: ancestors, forks and
theirs, on the page and in the API. In a browser: tests/test_serve_timeline_browser.py.
"""

from __future__ import annotations

import html
import html.parser
import json
import re
import tracemalloc
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

import journal
from journal import ToolRegistry, Unsafe
from journal.escape import escape
from journal.serve import timeline as tl_module
from journal.serve.timeline import CAP, GROUPS, timeline
from tests import test_serve
from tests.test_serve import request, serving, session_path

any_db = test_serve.any_db  # the fixtures: a journal on each backend, the statements its store runs
statements = test_serve.statements

XSS = "</text><script>alert(1)</script>"
HOSTILE_SESSION = '"onload="alert(1)' + XSS + "]]>"
HOSTILE_TOOL = "<svg onload=alert(1)>" + XSS
HOSTILE_CALL = '" onload="alert(1)]]><a href="javascript:alert(1)">'
HOSTILE_ARGS = {"url": "javascript:alert(1)", "x": "</title><script>alert(1)</script>]]>"}


# -- journals ------------------------------------------------------------------------------------


def build_crash(j: journal.Journal, session_id: str = "crashed") -> None:
    """The demo's story, written in this process: turn 1 lists (a result), deletes (dispatched,
    then the crash: no result) and would append a note (never dispatched); recovery closes it
    (MAY HAVE RUN, did not run); turn 2 pays, turn 3 thanks."""
    j.create_session(session_id)
    turn = j.turn_start(session_id)
    j.append(session_id, "user_message", {"content": "List my files and delete the temporary one."})
    with turn.step():
        turn.assistant("", tool_calls=[{"id": "t1-ls", "name": "list_files", "arguments": {"path": "/home"}}])
        with turn.dispatch("t1-ls") as call:
            call.result("a.txt tmp.txt")
    j.step_start(turn)
    turn.assistant(
        "",
        tool_calls=[
            {"id": "t1-rm", "name": "delete_file", "arguments": {"path": "/home/tmp.txt"}},
            {"id": "t1-log", "name": "append_note", "arguments": {"text": "deleted"}},
        ],
    )
    turn.dispatch("t1-rm")  # and the process dies here
    j.recover(session_id)  # the close policy: t1-rm may have run, t1-log did not run
    with j.turn(session_id) as turn:
        j.append(session_id, "user_message", {"content": "Pay the bill."})
        with turn.step():
            turn.assistant("", tool_calls=[{"id": "t2-pay", "name": "pay", "arguments": {"cents": 4200}}])
            with turn.dispatch("t2-pay") as call:
                call.result("paid")
        with turn.step():
            turn.assistant("Paid.", stop_reason="stop")


def calls_in_log(j: journal.Journal, session_id: str) -> set[str]:
    """Every tool call id the log holds: asked for by an assistant, or dispatched."""
    ids: set[str] = set()
    for e in j.events(session_id):
        if e.type == "assistant_message":
            ids.update(c["id"] for c in e.data.get("tool_calls") or [])
        elif e.type == "tool_call":
            ids.add(e.data["id"])
    return ids


def turns(n: int, first: int = 1) -> list[tuple[str, dict[str, Any]]]:
    """``n`` small complete turns of one step (five events each), numbered from ``first``."""
    items: list[tuple[str, dict[str, Any]]] = []
    for t in range(first, first + n):
        items += [
            ("turn_start", {"turn": t}),
            ("step_start", {"turn": t, "step": 1}),
            ("assistant_message", {"content": f"answer {t}", "stop_reason": "stop"}),
            ("step_end", {"turn": t, "step": 1, "outcome": "ok"}),
            ("turn_end", {"turn": t, "steps": 1, "reason": "complete"}),
        ]
    return items


def build_long(j: journal.Journal, session_id: str, n_turns: int) -> None:
    """``n_turns`` turns: small ones, and a crashed one in the middle (a call that may have run)."""
    j.create_session(session_id)
    half = n_turns // 2
    for at in range(0, half, 500):
        j.append_many(session_id, turns(min(500, half - at), at + 1))
    turn = j.turn_start(session_id)
    j.step_start(turn)
    turn.assistant("", tool_calls=[{"id": "risky", "name": "wire_money", "arguments": {"cents": 1}}])
    turn.dispatch("risky")
    j.recover(session_id)
    for at in range(half + 1, n_turns, 500):
        j.append_many(session_id, turns(min(500, n_turns - at), at + 1))


def build_hostile(j: journal.Journal) -> None:
    """A session whose id, tool names, call ids and arguments are SVG and HTML payloads, with a
    late result, a compaction, an indeterminate call resolved by an operator, and a crash."""
    sid = HOSTILE_SESSION
    j.create_session(sid)
    registry = ToolRegistry()
    registry.register(HOSTILE_TOOL, lambda arguments, context: "sent", effects=Unsafe())
    turn = j.turn_start(sid)
    j.append(sid, "user_message", {"content": XSS})
    j.step_start(turn)
    calls = [
        {"id": HOSTILE_CALL, "name": HOSTILE_TOOL, "arguments": HOSTILE_ARGS},
        {"id": "javascript:alert(1)", "name": "javascript:alert(1)", "arguments": {"a": XSS}},
        {"id": "]]>", "name": "]]>" + XSS, "arguments": HOSTILE_ARGS},
    ]
    turn.assistant(XSS, tool_calls=calls)
    with turn.dispatch("javascript:alert(1)") as call:
        call.result(XSS)
    turn.dispatch(HOSTILE_CALL)
    j.recover_effects(registry, session_id=sid)  # Unsafe, no result: indeterminate
    j.recover(sid)
    j.put_result(sid, HOSTILE_CALL, "the real answer " + XSS)  # kept as tool_result_late
    j.resolve(sid, HOSTILE_CALL, outcome="ran", note=XSS)
    j.compact(sid, 0, 1, XSS)


# -- the data ------------------------------------------------------------------------------------


def test_the_crashed_session_has_one_bar_per_tool_call_with_the_log_pages_risk(any_db: Any) -> None:
    with journal.open(any_db) as j:
        build_crash(j)
    with journal.open(any_db, readonly=True) as j:
        drawn = timeline(j, "crashed")
        in_log = calls_in_log(j, "crashed")
    assert not drawn.aggregated and drawn.events == drawn.session.count
    tools = [b for b in drawn.bars if b.kind == "tool"]
    assert sorted(b.call_id for b in tools) == sorted(in_log)  # one bar per call, none twice
    by_id = {b.call_id: b for b in tools}
    assert by_id["t1-rm"].risk == "tool_outcome_unknown" and by_id["t1-rm"].dispatched
    assert by_id["t1-log"].risk == "tool_not_started" and not by_id["t1-log"].dispatched
    assert by_id["t1-ls"].risk is None and by_id["t1-ls"].status == "ok"
    assert by_id["t2-pay"].status == "ok" and by_id["t2-pay"].lane == 1
    assert [(lane.kind, lane.turn, lane.recovered) for lane in drawn.lanes] == [
        ("turn", 1, True),
        ("turn", 2, False),
    ]
    (crash,) = [m for m in drawn.markers if m.kind == "crash"]
    assert crash.lane == 0 and crash.start_ms <= crash.end_ms
    # the gap runs from the dispatch of t1-rm (the last event before recovery) to its synthetic result
    assert crash.start_ms == next(
        e.time_ms for e in j_events(any_db) if e.type == "tool_call" and e.data["id"] == "t1-rm"
    )
    assert crash.seq == by_id["t1-rm"].end_seq
    steps = [b for b in drawn.bars if b.kind == "step"]
    assert [(b.lane, b.step, b.status) for b in steps] == [(0, 1, "ok"), (0, 2, "open"), (1, 1, "ok"), (1, 2, "ok")]
    models = [b for b in drawn.bars if b.kind == "model"]
    assert len(models) == 4 and all(b.end_seq is not None and b.ms >= 0 for b in models)
    assert all(b.ms >= 0 for b in drawn.bars)


def j_events(db: Any) -> list[journal.Event]:
    with journal.open(db, readonly=True) as j:
        return j.events("crashed")


def test_late_results_compactions_indeterminate_and_resolved_calls_are_marked(any_db: Any) -> None:
    with journal.open(any_db) as j:
        build_crash(j)
        j.put_result("crashed", "t1-rm", "it did run")  # after the synthetic one: late evidence
        j.compact("crashed", 0, 1, "the user asked")
        j.create_session("mailer")
        registry = ToolRegistry()
        registry.register("send_email", lambda arguments, context: "sent", effects=Unsafe())
        turn = j.turn_start("mailer")
        j.step_start(turn)
        turn.assistant("", tool_calls=[{"id": "m1", "name": "send_email", "arguments": {"to": "bob"}}])
        turn.dispatch("m1")
        j.recover_effects(registry)
    with journal.open(any_db, readonly=True) as j:
        crashed = timeline(j, "crashed")
        mailer = timeline(j, "mailer")
    kinds = {m.kind for m in crashed.markers}
    assert {"crash", "late", "compaction"} <= kinds
    (late,) = [m for m in crashed.markers if m.kind == "late"]
    rm = next(b for b in crashed.bars if b.call_id == "t1-rm")
    assert late.call_id == "t1-rm" and rm.late == [late.seq]
    (m1,) = [b for b in mailer.bars if b.kind == "tool"]
    assert m1.state == "indeterminate" and m1.risk == "tool_outcome_unknown"


def test_an_open_turn_shows_a_dispatched_call_without_a_result(any_db: Any) -> None:
    with journal.open(any_db) as j:
        j.create_session("open")
        turn = j.turn_start("open")
        j.step_start(turn)
        turn.assistant("", tool_calls=[{"id": "k1", "name": "pay", "arguments": {}}])
        turn.dispatch("k1")
    with journal.open(any_db, readonly=True) as j:
        drawn = timeline(j, "open")
    (k1,) = [b for b in drawn.bars if b.kind == "tool"]
    assert k1.status == "no_result" and k1.end_seq is None and k1.dispatched and k1.risk is None
    (lane,) = drawn.lanes
    assert lane.reason is None and not lane.recovered


def test_beyond_the_cap_turns_aggregate_and_the_call_that_may_have_run_is_still_drawn(any_db: Any) -> None:
    n_turns = CAP // 3 + 100  # each turn is three elements drawn one by one: a lane, a step, a model call
    with journal.open(any_db, durability="normal") as j:
        build_long(j, "long", n_turns)
    with journal.open(any_db, readonly=True) as j:
        drawn = timeline(j, "long")
        count = j.count("long")
        risky_seq = next(e.seq for e in j.events("long", types=["tool_call"]))
        zoom_of = next(lane for lane in drawn.lanes if lane.seq <= risky_seq <= lane.end_seq)
        zoomed = timeline(j, "long", since=zoom_of.seq, until=zoom_of.end_seq + 1)
    assert drawn.aggregated and drawn.detail_elements > CAP and drawn.events == count
    assert drawn.elements <= CAP and GROUPS // 2 <= len(drawn.lanes) <= GROUPS + 2
    assert sum(lane.counts["turns"] for lane in drawn.lanes) == n_turns  # type: ignore[index]
    assert sum(lane.counts["crashes"] for lane in drawn.lanes) == 1  # type: ignore[index]
    # the lanes cover the window, in order, each of whole turns of about group_events events
    assert drawn.lanes[0].seq == 0 and drawn.lanes[-1].end_seq == count - 1
    assert all(a.end_seq + 1 == b.seq for a, b in zip(drawn.lanes, drawn.lanes[1:]))
    assert all(lane.end_seq - lane.seq + 1 <= 2 * drawn.group_events + 5 for lane in drawn.lanes)
    (risky,) = [b for b in drawn.bars if b.kind == "tool"]
    assert risky.call_id == "risky" and risky.risk == "tool_outcome_unknown" and risky.lane == zoom_of.index
    assert [m.kind for m in drawn.markers] == ["crash"]
    # its lane's own timeline draws each event again, the risky call among them
    assert not zoomed.aggregated
    assert [b.call_id for b in zoomed.bars if b.kind == "tool"] == ["risky"]


def test_the_timeline_reads_only_cut_previews_a_page_at_a_time(any_db: Any, statements: list[str]) -> None:
    from journal.store import postgres, sqlite

    with journal.open(any_db, durability="normal") as j:
        j.create_session("s")
        j.append_many("s", turns(1100))  # 5,500 events: three pages
        j.append("s", "user_message", {"content": "x" * 1_000_000})
    cut_read = (sqlite if isinstance(any_db, Path) else postgres).PREVIEWS_SQL
    with journal.open(any_db, readonly=True) as j:
        statements.clear()
        drawn = timeline(j, "s")
    assert drawn.events == 5501
    assert sum(s == cut_read for s in statements) == -(-5501 // tl_module.PAGE)
    assert not any(re.search(r"SELECT seq, type, data\b", s) for s in statements)


def test_the_memory_of_the_pass_does_not_follow_the_sessions_length(db_path: Path) -> None:
    """The pass holds a page of previews, the drawing (at most CAP elements) and the aggregated
    lanes: four times the events, about the same peak (bench/serve.py --timeline measures it)."""
    peaks = []
    with journal.open(db_path, durability="normal") as j:
        for name, n in (("short", 1600), ("long", 6400)):  # 8,000 and 32,000 events, both aggregated
            j.create_session(name)
            for at in range(0, n, 800):
                j.append_many(name, turns(800, at + 1))
    with journal.open(db_path, readonly=True) as j:
        timeline(j, "short")  # warm up: imports, the statement cache
        for name in ("short", "long"):
            tracemalloc.start()
            try:
                drawn = timeline(j, name)
                peaks.append(tracemalloc.get_traced_memory()[1])
            finally:
                tracemalloc.stop()
            assert drawn.aggregated
    short, long = peaks
    assert long < short * 1.5 + 256 * 1024, peaks
    assert long < 8 * 1024 * 1024, peaks


@pytest.mark.parametrize(
    ("count", "since", "until", "read"),
    [
        (10, None, None, (0, 10)),
        (250_000, None, None, (230_000, 250_000)),  # the last WINDOW_DEFAULT by default
        (250_000, 0, None, (0, 100_000)),  # at most WINDOW_MAX when asked
        (250_000, None, 200_000, (100_000, 200_000)),
        (250_000, 1000, 999_999, (1000, 101_000)),
        (10, 20, None, (10, 10)),
        (10, 3, 5, (3, 5)),
        (10, 5, 3, (3, 3)),
    ],
)
def test_a_timeline_reads_a_bounded_window_the_last_events_by_default(
    count: int, since: int | None, until: int | None, read: tuple[int, int]
) -> None:
    assert (tl_module.WINDOW_DEFAULT, tl_module.WINDOW_MAX) == (20_000, 100_000)
    assert tl_module.window(count, since, until) == read


# -- the page and the API ------------------------------------------------------------------------


class _Tags(html.parser.HTMLParser):
    """Every start tag with its attributes, and the text of every SVG ``<title>``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.titles: list[str] = []
        self._in_title = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "title":
            self._in_title += 1
            self.titles.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title -= 1

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.titles[-1] += data


def parsed(page: str) -> _Tags:
    tags = _Tags()
    tags.feed(page)
    tags.close()
    return tags


def timeline_path(session_id: str, **query: Any) -> str:
    return (
        session_path(session_id).partition("?")[0]
        + "/timeline"
        + ("?" + urllib.parse.urlencode(query) if query else "")
    )


def drawn_calls(page: str) -> list[tuple[str | None, str | None, int]]:
    """``(data-call-id, data-risk, data-seq)`` of every tool call bar the page draws."""
    return [
        (a.get("data-call-id"), a.get("data-risk"), int(a["data-seq"] or -1))
        for tag, a in parsed(page).tags
        if tag == "a" and "tool" in (a.get("class") or "").split()
    ]


def test_the_page_draws_each_call_with_its_risk_and_the_api_gives_what_it_draws(any_db: Any) -> None:
    with journal.open(any_db) as j:
        build_crash(j)
    with serving(any_db) as viewer:
        page = request(viewer, timeline_path("crashed"))
        api = request(viewer, "/api/sessions/crashed/timeline")
        session = request(viewer, session_path("crashed")).text
    assert page.status == 200 and api.status == 200
    assert api.headers["Content-Type"].startswith("application/json")
    assert 'href="/sessions/crashed/timeline"' in session  # the session page links to it
    calls = drawn_calls(page.text)
    assert sorted(calls) == sorted(
        [
            ("t1-ls", "none", 4),
            ("t1-rm", "tool_outcome_unknown", 9),
            ("t1-log", "tool_not_started", 8),
            ("t2-pay", "none", 17),
        ]
    )
    doc = api.json()
    assert doc["session"]["id"] == "crashed" and doc["aggregated"] is False and doc["cap"] == CAP
    from_api = [(b["call_id"], b["risk"] or "none", b["seq"]) for b in doc["bars"] if b["kind"] == "tool"]
    assert sorted(from_api) == sorted(calls)  # the JSON is what the page draws
    drawn = parsed(page.text)
    lanes = [a for tag, a in drawn.tags if tag == "a" and a.get("class") == "lane-label"]
    assert len(lanes) == len(doc["lanes"]) == 2
    bars = [a for tag, a in drawn.tags if tag == "a" and (a.get("class") or "").startswith("bar ")]
    assert len(bars) == len(doc["bars"])
    marks = [a for tag, a in drawn.tags if tag == "a" and (a.get("class") or "").startswith("mark ")]
    assert len(marks) == len(doc["markers"]) == 1
    assert "MAY HAVE RUN" in page.text and "recovered" in page.text
    # each bar links to its event on the log page
    rm = next(a for tag, a in drawn.tags if tag == "a" and a.get("data-call-id") == "t1-rm")
    assert rm["href"] == "/sessions/crashed?since=0#e9"
    assert all(b["lane"] in range(len(doc["lanes"])) for b in doc["bars"])
    with journal.open(any_db, readonly=True) as j:
        assert json.loads(json.dumps(timeline(j, "crashed").to_dict())) == doc


def test_the_aggregated_page_draws_its_lanes_with_links_to_their_own_timelines(db_path: Path) -> None:
    with journal.open(db_path, durability="normal") as j:
        build_long(j, "long", CAP // 3 + 100)
    with serving(db_path) as viewer:
        page = request(viewer, timeline_path("long")).text
        doc = request(viewer, "/api/sessions/long/timeline").json()
        groups = [a for tag, a in parsed(page).tags if tag == "a" and (a.get("class") or "").startswith("bar group")]
        assert doc["aggregated"] and len(groups) == len(doc["lanes"])
        assert drawn_calls(page) == [("risky", "tool_outcome_unknown", drawn_calls(page)[0][2])]
        assert "aggregated" in page
        zoom = next(a["href"] for a in groups if a["data-seq"] == str(doc["bars"][0]["seq"]))
        assert zoom is not None and re.fullmatch(r"/sessions/long/timeline\?since=\d+&until=\d+", zoom)
        lane_of_risky = next(b["lane"] for b in doc["bars"] if b["kind"] == "tool")
        lane = doc["lanes"][lane_of_risky]
        zoomed = request(viewer, timeline_path("long", since=lane["seq"], until=lane["end_seq"] + 1)).text
        assert [c[:2] for c in drawn_calls(zoomed)] == [("risky", "tool_outcome_unknown")]
        assert "each one drawn" in zoomed


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/sessions/nobody/timeline", 404),
        ("/api/sessions/nobody/timeline", 404),
        ("/api/sessions/nobody/forks", 404),
        ("/sessions/crashed/timeline?since=-1", 400),
        ("/sessions/crashed/timeline?until=x", 400),
        ("/api/sessions/crashed/timeline?since=1&since=2", 400),
        ("/api/sessions/crashed/timeline?since=5&until=2", 400),
        ("/sessions/crashed/timeline?since=5&until=2", 400),
        ("/sessions/crashed/timeline/more", 404),
    ],
)
def test_timeline_errors_have_a_status(db_path: Path, path: str, status: int) -> None:
    with journal.open(db_path) as j:
        build_crash(j)
    with serving(db_path) as viewer:
        got = request(viewer, path)
    assert got.status == status, got.text[:300]
    if path.startswith("/api/"):
        assert "error" in got.json()


def test_g14_hostile_names_ids_and_arguments_stay_text_in_the_svg(db_path: Path) -> None:
    with journal.open(db_path) as j:
        build_hostile(j)
    with serving(db_path) as viewer:
        page = request(viewer, timeline_path(HOSTILE_SESSION))
        doc = request(viewer, "/api/sessions/" + urllib.parse.quote(HOSTILE_SESSION, safe="") + "/timeline").json()
    assert page.status == 200
    text = page.text
    tags = parsed(text)
    scripts = [a for tag, a in tags.tags if tag == "script"]
    assert scripts == [{"src": "/static/live.js", "defer": None}]  # the one script, none from content
    assert text.count("<script") == 1 and "]]>" not in text and "<svg onload" not in text
    for tag, attributes in tags.tags:
        assert not any(name.startswith("on") for name in attributes), (tag, attributes)
        for name in ("href", "xlink:href", "src"):
            value = attributes.get(name)
            if value is not None:
                assert value.startswith("/") and not value.startswith("//"), (tag, value)
    assert [tag for tag, _ in tags.tags if tag in ("svg", "foreignobject", "iframe", "img", "image")] == ["svg"]
    # the payloads are shown as text, literally, in the bars' titles and labels
    titles = "\n".join(tags.titles)
    for payload in (HOSTILE_TOOL, HOSTILE_CALL, "javascript:alert(1)", HOSTILE_ARGS["x"]):
        assert payload in titles, payload
    # the drawn call ids are the stored ones (escaped for the screen: none needed here)
    ids = {c[0] for c in drawn_calls(text)}
    assert ids == {escape(HOSTILE_CALL), "javascript:alert(1)", "]]>"}
    by_id = {b["call_id"]: b for b in doc["bars"] if b["kind"] == "tool"}
    assert by_id[HOSTILE_CALL]["state"] == "resolved" and by_id[HOSTILE_CALL]["late"]
    assert by_id["]]>"]["risk"] == "tool_not_started"
    assert {m["kind"] for m in doc["markers"]} == {"crash", "late", "resolution", "compaction"}


# -- forks as a tree -----------------------------------------------------------------------------


def build_forks(j: journal.Journal) -> None:
    j.create_session("root")
    j.append_many("root", turns(3))
    j.fork("root", 4, id="a")
    j.fork("root", "last", id="b")
    j.append_many("a", turns(1, 2))
    j.fork("a", "last", id="a1")
    for i in range(7):
        j.fork("a", 4, id=f"a-{i}")
    j.fork("a1", "last", id="a1x")


def test_forks_form_a_tree_of_ancestors_forks_and_theirs(any_db: Any) -> None:
    from journal.serve.forks import GRANDCHILDREN, fork_tree

    with journal.open(any_db) as j:
        build_forks(j)
    with journal.open(any_db, readonly=True) as j:
        at_root = fork_tree(j, j.session("root")).to_dict()
        at_a1 = fork_tree(j, j.session("a1")).to_dict()
    assert at_root["ancestors"] == [] and at_root["parent_id"] is None
    assert [(c["id"], c["fork_point"]) for c in at_root["children"]] == [("a", 4), ("b", 14)]
    a = at_root["children"][0]
    assert len(a["children"]) == GRANDCHILDREN and a["more"] is True  # a1 and six others: bounded
    assert a["children"][0]["id"] in ("a1", "a-0")
    assert at_a1["ancestors"] == [
        {"id": "root", "parent_id": None, "fork_point": None},
        {"id": "a", "parent_id": "root", "fork_point": 4},
    ]
    assert at_a1["fork_point"] == 9 and [c["id"] for c in at_a1["children"]] == ["a1x"]


def test_the_session_page_draws_the_fork_tree_and_the_api_gives_it(db_path: Path) -> None:
    with journal.open(db_path) as j:
        build_forks(j)
    with serving(db_path) as viewer:
        page = request(viewer, session_path("a1")).text
        doc = request(viewer, "/api/sessions/a1/forks").json()
        root = request(viewer, session_path("root")).text
    tree = re.search(r'<div class="fork-tree">.*?</div>', page)
    assert tree is not None
    links = re.findall(r'<a class="(ancestor|child|grandchild)" href="([^"]+)">([^<]+)</a>', tree.group(0))
    assert links == [
        ("ancestor", "/sessions/root", "root"),
        ("ancestor", "/sessions/a", "a"),
        ("child", "/sessions/a1x", "a1x"),
    ]
    assert '<strong class="here id">a1</strong> at seq 9 (this session)' in tree.group(0)
    assert doc["session_id"] == "a1" and [a["id"] for a in doc["ancestors"]] == ["root", "a"]
    assert re.search(r'<a class="child" href="/sessions/a">a</a> at seq 4<ul><li><a class="grandchild"', root)
    assert "more forks of it" in root
