"""``journal serve`` over HTTP (DESIGN §15): read-only, its own host name only, content as text
(G14), the command line's JSON shapes, pages whose reads follow what they show (not the file:
a statement trace, never a clock; the timings are bench/serve.py --pages), live following that
keeps the server's memory flat.

The viewer runs in a thread of the test process on a free loopback port; requests go through
``http.client`` (or a raw socket, where a request must be malformed on purpose).
"""

from __future__ import annotations

import contextlib
import html
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner

import journal
from journal import ToolRegistry, Unsafe
from journal.cli import main
from journal.preview import Clipped
from journal.serve.app import Limits, Viewer, run
from journal.store.sqlite import PREVIEWS_SQL
from tests.conftest import ROOT, python_child

HOSTILE = (
    '<script>window.pwned=1</script><img src=x onerror="window.pwned=1">'
    '<a href="javascript:window.pwned=1">click</a>\x1b[31mRED\u202eevil\nnext line'
)
HOSTILE_ID = "<img/src=x/onerror=window.pwned=1>"
HOSTILE_CALL = 'c"><script>window.pwned=1</script>'
HOSTILE_TOOL = "<svg onload=window.pwned=1>"
SECURITY = {
    "Content-Security-Policy": "script-src 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


# -- journals to look at ------------------------------------------------------------------------


def build_story(db: Path) -> None:
    """A file with a bit of everything the viewer shows: paired calls, a late result, a
    compaction, a retraction, a fork, an open turn owing a call, an indeterminate call with its
    notification, and a session of hostile content."""
    with journal.open(db, durability="normal") as j:
        j.create_session("plain", meta={"user": "alice"})
        with j.turn("plain") as turn:
            j.append("plain", "user_message", {"content": "look it up"})
            with turn.step():
                turn.assistant(
                    "", tool_calls=[{"id": "c1", "name": "lookup", "arguments": {"q": "x"}}], stop_reason="tool_use"
                )
                with turn.dispatch("c1") as call:
                    call.result("found it")
            with turn.step():
                turn.assistant("it is x", stop_reason="stop")
        j.put_result("plain", "c1", "a second answer")  # kept as tool_result_late (G5)
        j.compact("plain", 0, 1, "the user asked; a lookup ran")
        j.append("plain", "user_message", {"content": "never mind"})
        j.retract("plain", reason="sent by mistake")
        j.fork("plain", "last", id="plain-fork")

        registry = ToolRegistry()
        registry.register("send_email", lambda arguments, context: "sent", effects=Unsafe())
        j.create_session("mailer")
        turn = j.turn_start("mailer")
        j.append("mailer", "user_message", {"content": "mail bob"})
        j.step_start(turn)
        turn.assistant("", tool_calls=[{"id": "m1", "name": "send_email", "arguments": {"to": "bob"}}])
        turn.dispatch("m1")
        j.recover_effects(registry)  # Unsafe, no result: indeterminate, with a notification

        j.create_session("crashed")
        turn = j.turn_start("crashed")
        j.step_start(turn)
        turn.assistant("", tool_calls=[{"id": "k1", "name": "pay", "arguments": {"cents": 4200}}])
        turn.dispatch("k1")  # no result: the scan lists it

        build_hostile(j)


def build_hostile(j: journal.Journal) -> None:
    """A session whose id, meta, messages, tool name, call id and app event are hostile."""
    j.create_session(HOSTILE_ID, meta={"title": HOSTILE})
    with j.turn(HOSTILE_ID) as turn:
        j.append(HOSTILE_ID, "user_message", {"content": HOSTILE})
        with turn.step():
            turn.assistant(
                HOSTILE, tool_calls=[{"id": HOSTILE_CALL, "name": HOSTILE_TOOL, "arguments": {"x": HOSTILE}}]
            )
            with turn.dispatch(HOSTILE_CALL) as call:
                call.result(HOSTILE)
    j.append(HOSTILE_ID, "x.app.note", {"html": HOSTILE})


@pytest.fixture
def story(db_path: Path) -> Path:
    build_story(db_path)
    return db_path


@contextlib.contextmanager
def serving(db: Path, **kwargs: Any) -> Iterator[Viewer]:
    viewer = run(str(db), host="127.0.0.1", port=0, **kwargs)
    try:
        yield viewer
    finally:
        viewer.shutdown()
        viewer.server_close()


@pytest.fixture
def viewer(story: Path) -> Iterator[Viewer]:
    with serving(story) as running:
        yield running


class Response:
    def __init__(self, status: int, headers: Any, body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    @property
    def text(self) -> str:
        return self.body.decode()

    def json(self) -> Any:
        return json.loads(self.body)


def request(viewer: Viewer, path: str, *, method: str = "GET", host: str | None = None) -> Response:
    conn = http.client.HTTPConnection("127.0.0.1", viewer.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True)
        conn.putheader("Host", host if host is not None else f"127.0.0.1:{viewer.port}")
        conn.endheaders()
        got = conn.getresponse()
        return Response(got.status, got.msg, got.read())  # its headers by name, in any case
    finally:
        conn.close()


def session_path(session_id: str, **query: Any) -> str:
    q = urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
    return "/sessions/" + urllib.parse.quote(session_id, safe="") + (f"?{q}" if q else "")


def cli_json(db: Path, *args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--json"], env={"JOURNAL_DB": str(db)})
    assert result.exit_code == 0, result.output
    return result.output


# -- the gate: host names, methods, headers -------------------------------------------------------


def test_a_request_naming_another_host_is_refused_against_dns_rebinding(viewer: Viewer) -> None:
    port = viewer.port
    for good in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}"):
        assert request(viewer, "/", host=good).status == 200, good
    for bad in (
        "evil.example",
        f"evil.example:{port}",
        f"localhost:{port + 1}",
        "127.0.0.1",
        f"127.0.0.1.nip.io:{port}",
    ):
        got = request(viewer, "/api/sessions", host=bad)
        assert got.status == 421, bad
        assert b"plain" not in got.body


def test_a_request_without_a_host_header_is_refused(viewer: Viewer) -> None:
    with socket.create_connection(("127.0.0.1", viewer.port), timeout=30) as sock:
        sock.sendall(b"GET /api/sessions HTTP/1.0\r\n\r\n")
        answer = b"".join(iter(lambda: sock.recv(65536), b""))
    assert re.match(rb"HTTP/1\.[01] 400 ", answer)
    assert b"content-security-policy: default-src 'none'" in answer.lower()
    assert b'"plain"' not in answer


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PROPFIND"])
def test_every_method_but_get_and_head_is_refused_and_writes_nothing(viewer: Viewer, story: Path, method: str) -> None:
    before = cli_json(story, "sessions")
    got = request(viewer, session_path("plain"), method=method)
    assert got.status == 405 and got.headers["Allow"] == "GET, HEAD"
    assert cli_json(story, "sessions") == before


def test_head_answers_the_headers_of_get_without_a_body(viewer: Viewer) -> None:
    got = request(viewer, "/", method="HEAD")
    assert got.status == 200 and got.body == b"" and got.headers["Content-Type"].startswith("text/html")


@pytest.mark.parametrize(
    "path",
    ["/", "/scan", session_path("plain"), "/api/sessions", "/nowhere", session_path("nobody"), "/static/live.js"],
)
def test_every_response_forbids_inline_script_sniffing_and_referrers(viewer: Viewer, path: str) -> None:
    got = request(viewer, path)
    for name, value in SECURITY.items():
        assert value in got.headers[name]
    assert "'unsafe-inline'" not in got.headers["Content-Security-Policy"]
    assert "default-src 'none'" in got.headers["Content-Security-Policy"]


def test_refusals_carry_the_security_headers_too(viewer: Viewer) -> None:
    for got in (request(viewer, "/", method="POST"), request(viewer, "/", host="evil.example")):
        assert "script-src 'self'" in got.headers["Content-Security-Policy"]


def test_the_journal_is_opened_read_only(story: Path) -> None:
    before = cli_json(story, "show", "plain")
    with serving(story) as viewer, viewer.pool.borrow() as j, pytest.raises(journal.JournalError):
        j.append("plain", "user_message", {"content": "sneaky"})
    assert cli_json(story, "show", "plain") == before


# -- the JSON API is the command line's --json ----------------------------------------------------


@pytest.mark.parametrize(
    ("path", "args"),
    [
        ("/api/sessions", ["sessions"]),
        ("/api/sessions?prefix=pl", ["sessions", "--prefix", "pl"]),
        ("/api/scan", ["scan"]),
        ("/api/indeterminate", ["indeterminate"]),
        ("/api/indeterminate?session=mailer", ["indeterminate", "mailer"]),
        ("/api/tools", ["tools"]),
        ("/api/tools?session=plain", ["tools", "plain"]),
        ("/api/sessions/plain", ["show", "plain"]),
        ("/api/sessions/plain?since=3", ["show", "plain", "--since", "3"]),
        ("/api/sessions/plain?since=3&tail=2", ["show", "plain", "--since", "3", "--tail", "2"]),
        ("/api/sessions/plain?tail=4", ["show", "plain", "--tail", "4"]),
        ("/api/sessions/plain?view=messages", ["show", "plain", "--view", "messages"]),
        ("/api/sessions/plain?view=messages&tail=1", ["show", "plain", "--view", "messages", "--tail", "1"]),
        ("/api/sessions/plain-fork?view=provider", ["show", "plain-fork", "--view", "provider"]),
        ("/api/sessions/crashed?view=provider", ["show", "crashed", "--view", "provider"]),
        ("/api/sessions/mailer", ["show", "mailer"]),
        (session_path(HOSTILE_ID).replace("/sessions/", "/api/sessions/"), ["show", HOSTILE_ID]),
    ],
)
def test_the_api_returns_what_the_command_line_prints_with_json(
    viewer: Viewer, story: Path, path: str, args: list[str]
) -> None:
    got = request(viewer, path)
    assert got.status == 200 and got.headers["Content-Type"] == "application/json"
    expected = cli_json(story, *args)
    assert got.json() == json.loads(expected)
    assert got.text == expected  # the same bytes, escaping of control and bidi characters included


def test_the_whole_session_listing_streams_page_by_page_with_the_same_bytes(db_path: Path) -> None:
    with journal.open(db_path, durability="normal") as j:
        for i in range(2500):  # 3 pages of the API's 1,000
            j.create_session(f"s{i:05d}", meta={"n": i})
    with serving(db_path) as viewer:
        got = request(viewer, "/api/sessions")
    assert "Content-Length" not in got.headers
    assert got.text == cli_json(db_path, "sessions")


def test_the_api_pages_sessions_with_limit_and_after(viewer: Viewer, story: Path) -> None:
    everything = [s["id"] for s in json.loads(cli_json(story, "sessions"))["sessions"]]
    first = request(viewer, "/api/sessions?limit=2").json()["sessions"]
    after = urllib.parse.quote(first[-1]["id"], safe="")
    second = request(viewer, f"/api/sessions?limit=2&after={after}").json()["sessions"]
    assert [s["id"] for s in first + second] == everything[:4]


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/api/sessions/nobody", 404),
        ("/api/sessions/plain?view=nope", 400),
        ("/api/sessions/plain?view=messages&since=1", 400),
        ("/api/sessions/plain?since=-1", 400),
        ("/api/sessions/plain?since=1&since=2", 400),
        ("/api/sessions?limit=0", 400),
        ("/api/sessions?after=nobody", 404),
        ("/api/sessions/a%20b", 400),
        ("/api/sessions/" + "x" * 257, 400),
        ("/api/sessions/%ff", 400),
        ("/api/nothing", 404),
    ],
)
def test_api_errors_are_json_with_a_status(viewer: Viewer, path: str, status: int) -> None:
    got = request(viewer, path)
    assert got.status == status and "error" in got.json()


# -- pages: what they show ------------------------------------------------------------------------


def test_the_sessions_page_lists_open_turns_indeterminate_calls_and_fork_parents(viewer: Viewer) -> None:
    page = request(viewer, "/").text
    assert re.search(r'href="/sessions/crashed">crashed</a>.*?turn 1 \(tool_request_recorded', page)
    assert re.search(
        r'href="/sessions/mailer">mailer</a>.*?<a class="marker risk-unknown" href="/scan#indeterminate">1</a>', page
    )
    assert re.search(r'href="/sessions/plain-fork">plain-fork</a>.*?href="/sessions/plain">plain</a> at \d+', page)


def test_the_sessions_page_pages_and_filters(viewer: Viewer, story: Path) -> None:
    everything = [s["id"] for s in json.loads(cli_json(story, "sessions"))["sessions"]]
    first = request(viewer, "/?limit=2").text
    nxt = re.search(r'rel="next" href="([^"]+)"', first)
    assert nxt is not None
    second = request(viewer, nxt.group(1).replace("&amp;", "&")).text

    def listed(page: str) -> list[str]:
        return re.findall(r'<tr><td><a href="/sessions/([^"]+)">', page)

    assert [urllib.parse.unquote(i) for i in listed(first) + listed(second)] == everything[:4]
    assert listed(request(viewer, "/?prefix=pla").text) == ["plain", "plain-fork"]


def test_a_session_page_pairs_each_call_with_its_dispatch_and_result(viewer: Viewer) -> None:
    page = request(viewer, session_path("plain")).text
    dispatch = re.search(r'id="e(\d+)"><a class="seq"[^>]*>\d+</a><span class="label">dispatch</span>', page)
    result = re.search(r'id="e(\d+)"><a class="seq"[^>]*>\d+</a><span class="label">result</span>', page)
    assert dispatch and result
    call = re.search(r'<li data-call="c1">.*?</li>', page)
    assert call is not None
    assert f"dispatched @{dispatch.group(1)}" in call.group() and f"result @{result.group(1)}" in call.group()
    assert "late result" in page and "kept as evidence" in page
    assert "compaction" in page and "replaces transcript messages 0..1" in page
    assert "taken back" in page and "(retracted at" in page


def test_a_synthetic_result_stands_out_by_its_risk(viewer: Viewer) -> None:
    page = request(viewer, session_path("mailer")).text
    assert re.search(
        r'k-result risk-unknown.*?<strong class="marker risk-unknown">MAY HAVE RUN — verify before retrying', page
    )
    view = request(viewer, session_path("mailer", view="provider")).text
    assert "MAY HAVE RUN" in view


def test_forks_link_both_ways(viewer: Viewer) -> None:
    parent = request(viewer, session_path("plain")).text
    assert 'class="child" href="/sessions/plain-fork"' in parent
    child = request(viewer, session_path("plain-fork")).text
    assert re.search(r'fork of <a class="parent" href="/sessions/plain\?since=\d+#e\d+">plain</a> at seq \d+', child)


def test_the_provider_view_lists_what_is_missing(viewer: Viewer) -> None:
    page = request(viewer, session_path("crashed", view="provider")).text
    assert "MISSING result" in page and "pay" in page and "k1" in page


def test_the_scan_page_shows_open_turns_pending_and_indeterminate_calls_with_notifications(viewer: Viewer) -> None:
    page = request(viewer, "/scan").text
    assert "crashed" in page and "dispatched, no result: it MAY have run" in page
    block = re.search(r'<div class="indeterminate">.*?</div>', page)
    assert block is not None
    for expected in (
        "MAY HAVE RUN",
        "mailer",
        "send_email",
        "m1",
        "notification 1",
        "not acknowledged",
        "<dt>reason</dt><dd>unsafe</dd>",
    ):
        assert expected in block.group()
    assert "journal resolve SESSION CALL" in page  # resolving stays in the CLI: no form, no button
    assert "<form" not in page


def test_a_long_session_is_paged_from_its_end(db_path: Path) -> None:
    with journal.open(db_path, durability="normal") as j:
        j.create_session("long")
        j.append_many("long", [("user_message", {"content": f"message {i}"}) for i in range(1000)])
    with serving(db_path) as viewer:
        end = request(viewer, session_path("long")).text
        assert re.findall(r'id="e(\d+)"', end)[0] == "800" and len(re.findall(r'id="e\d+"', end)) == 200
        assert "data-follow=" in end
        earlier = re.search(r'rel="prev" href="([^"]+)"', end)
        assert earlier is not None and "since=600" in earlier.group(1)
        middle = request(viewer, session_path("long", since=300)).text
        assert re.findall(r'id="e(\d+)"', middle)[:1] == ["300"] and len(re.findall(r'id="e\d+"', middle)) == 200
        assert "data-follow=" not in middle  # not the end: nothing to follow
        assert len(re.findall(r'class="msg ', request(viewer, session_path("long", view="messages")).text)) == 200


@pytest.mark.parametrize(
    ("path", "status"),
    [(session_path("nobody"), 404), ("/sessions/a%20b", 400), (session_path("plain", since="x"), 400),
     ("/nowhere", 404), (session_path("plain", view="nope"), 400), ("/sessions/plain/events/more", 404)],
)  # fmt: skip
def test_page_errors_are_pages_with_a_status(viewer: Viewer, path: str, status: int) -> None:
    got = request(viewer, path)
    assert got.status == status and got.headers["Content-Type"].startswith("text/html")


# -- G14: content stays text ----------------------------------------------------------------------


def _pages_with_hostile_content(viewer: Viewer) -> dict[str, str]:
    return {
        path: request(viewer, path).text
        for path in (
            "/",
            "/scan",
            session_path(HOSTILE_ID),
            session_path(HOSTILE_ID, view="messages"),
            session_path(HOSTILE_ID, view="provider"),
            session_path("nobody" + "\u202e"),  # an error page quoting what it was given
            "/tools",
            "/tools?" + urllib.parse.urlencode({"session": HOSTILE_ID}),
        )
    }


def test_g14_hostile_content_is_shown_escaped_on_every_page(viewer: Viewer) -> None:
    for path, page in _pages_with_hostile_content(viewer).items():
        assert "<script>" not in page, path  # the viewer's own script is an external file
        assert not re.search(r"<(img|svg|a)\b[^>]*\s(on[a-z]+|src)=", page), path  # no tag of the content's making
        assert not re.search(r"\bon[a-z]+=\"", page), path  # no event handler attribute at all
        assert not re.search(r"(href|src|action)=[\"']?javascript:", page, re.IGNORECASE), path
        assert "\x1b" not in page and "\u202e" not in page, path
    log = _pages_with_hostile_content(viewer)[session_path(HOSTILE_ID)]
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in log
    assert "onerror=&quot;window.pwned=1&quot;" in log
    assert "&lt;a href=&quot;javascript:window.pwned=1&quot;&gt;" in log
    assert "\\x1b[31mRED\\u202eevil\\nnext line" in log  # visible escapes, as on the command line
    assert "&lt;svg onload=window.pwned=1&gt;" in log  # the tool name
    assert "c&quot;&gt;&lt;script&gt;" in log  # the call id
    assert "&lt;img/src=x/onerror=window.pwned=1&gt;" in log  # the session id
    listing = _pages_with_hostile_content(viewer)["/"]
    assert 'href="/sessions/%3Cimg%2Fsrc%3Dx%2Fonerror%3Dwindow.pwned%3D1%3E"' in listing  # quoted into the link


def test_g14_the_live_stream_sends_escaped_rows(viewer: Viewer) -> None:
    events = read_events(viewer, HOSTILE_ID, since=0, count=9)
    joined = "".join(e["html"] for e in events)
    assert "<script>" not in joined and "\x1b" not in joined and "\u202e" not in joined
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in joined


# -- live following -------------------------------------------------------------------------------


def sse_lines(viewer: Viewer, session_id: str, since: int) -> Iterator[str]:
    conn = http.client.HTTPConnection("127.0.0.1", viewer.port, timeout=30)
    conn.request(
        "GET", session_path(session_id) + f"/events?since={since}", headers={"Host": f"127.0.0.1:{viewer.port}"}
    )
    got = conn.getresponse()
    assert got.status == 200 and got.getheader("Content-Type").startswith("text/event-stream")
    try:
        while True:
            line = got.readline()
            if not line:
                return
            yield line.decode().rstrip("\n")
    finally:
        conn.close()


def read_events(viewer: Viewer, session_id: str, *, since: int, count: int) -> list[dict[str, Any]]:
    out = []
    for line in sse_lines(viewer, session_id, since):
        if line.startswith("data: "):
            out.append(json.loads(line[6:]))
            if len(out) == count:
                break
    return out


def test_live_following_sends_each_new_event_once_in_order(story: Path) -> None:
    with serving(story) as viewer:
        stream = sse_lines(viewer, "plain", 0)
        with journal.open(story) as j:
            j.append("plain", "user_message", {"content": "live one"})
        seqs = []
        for line in stream:
            if line.startswith("id: "):
                seqs.append(int(line[4:]))
            if line.startswith("data: ") and "live one" in line:
                break
        stream.close()
    assert seqs == list(range(len(seqs)))


MEMORY_WRITER = """
import sys, journal
db, total = sys.argv[1], int(sys.argv[2])
with journal.open(db, durability="normal") as j:
    for start in range(0, total, 50):
        items = [("user_message", {"content": f"event {i} " + "x" * 200}) for i in range(start, start + 50)]
        j.append_many("grow", items)
"""


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_memory_stays_flat_while_following_a_session_that_grows_by_10000_events(db_path: Path, capsys) -> None:
    with journal.open(db_path) as j:
        j.create_session("grow")
    total = 10_000
    with serving(db_path) as viewer:
        tracemalloc.start()
        try:
            stream = sse_lines(viewer, "grow", 0)
            writer = python_child(MEMORY_WRITER, str(db_path), str(total))
            seen = 0
            marks: dict[int, tuple[int, int]] = {}  # every 1,000 events followed: memory, RSS
            for line in stream:
                if line.startswith("data: "):
                    seen += 1
                    if seen % 1000 == 0:
                        marks[seen] = (tracemalloc.get_traced_memory()[0], _rss_kib())
                    if seen == total:
                        break
            stream.close()
            assert writer.wait(timeout=60) == 0, writer.stderr.read() if writer.stderr else ""
        finally:
            tracemalloc.stop()
    # A sample is the memory of one instant: a page read and not yet sent is in it (more of them
    # on a loaded machine). Flat means the floor of the later samples is not above the earlier's.
    traced = [marks[n][0] for n in sorted(marks)]
    early, late = min(traced[:5]), min(traced[5:])
    grown = late - early
    rss_grown = marks[total][1] - marks[1000][1]
    with capsys.disabled():
        print(f"\n[measure] following 10,000 appended events: traced Python memory, least of the samples "
              f"at 1,000-5,000 {early / 1024:.0f} KiB, at 6,000-10,000 {late / 1024:.0f} KiB "
              f"({grown / 1024:+.0f} KiB); RSS {marks[1000][1]} -> {marks[total][1]} KiB ({rss_grown:+d})")  # fmt: skip
    assert grown < 256 * 1024
    assert rss_grown < 16 * 1024


# -- bounded by what a page shows, not by the file (timings: bench/serve.py --pages) ----------------


def build_wide(db: Path, *, sessions: int, events: int) -> None:
    """``sessions`` sessions, and one more, ``long``, of ``events`` events (turns of four)."""
    with journal.open(db, durability="normal") as j:
        for i in range(sessions):
            j.create_session(f"s{i:06d}", meta={"n": i})
        j.create_session("long")
        items: list[tuple[str, dict[str, Any]]] = []
        for turn in range(1, events // 4 + 1):
            items += [
                ("turn_start", {"turn": turn}),
                ("user_message", {"content": f"question {turn}"}),
                ("assistant_message", {"content": "an answer " * 10, "tool_calls": []}),
                ("turn_end", {"turn": turn, "steps": 0, "reason": "complete"}),
            ]
        j.append_many("long", items)


class Reads:
    """The statements and the rows every apsw connection opened meanwhile runs and returns."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.rows = 0

    def clear(self) -> None:
        self.statements.clear()
        self.rows = 0


@pytest.fixture
def reads() -> Iterator[Reads]:
    import apsw

    seen = Reads()

    def on_statement(cursor: Any, sql: str, bindings: Any) -> bool:
        seen.statements.append(sql)
        return True

    def on_row(cursor: Any, row: Any) -> Any:
        seen.rows += 1
        return row

    def hook(conn: Any) -> None:
        conn.exec_trace = on_statement
        conn.row_trace = on_row

    apsw.connection_hooks.append(hook)
    try:
        yield seen
    finally:
        apsw.connection_hooks.remove(hook)


BOUNDED_PAGES = [
    ("sessions page", "/", "s000049"),
    ("sessions page after a session", "/?after=s000100", "s000150"),
    ("sessions page by prefix", "/?prefix=s0001", "s000149"),
    ("a long session's end", session_path("long"), 'id="e'),
    ("a long session's middle", session_path("long", since=400), 'id="e599"'),
    ("a long session's messages", session_path("long", view="messages"), "question"),
    ("a long session's provider view", session_path("long", view="provider"), "question"),
    ("API: a long session's tail", "/api/sessions/long?tail=200", '"seq": '),
    ("API: a page of sessions", "/api/sessions?limit=100&after=s000050", "s000150"),
]


@pytest.fixture(scope="module")
def wide_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A file of 300 sessions and a 2,000-event session, and one ten times larger."""
    made = []
    for scale in (1, 10):
        db = tmp_path_factory.mktemp("wide") / f"x{scale}.db"
        build_wide(db, sessions=300 * scale, events=2000 * scale)
        made.append(db)
    return made[0], made[1]


@pytest.mark.parametrize(("what", "path", "expected"), BOUNDED_PAGES, ids=[p[0] for p in BOUNDED_PAGES])
def test_a_page_reads_as_many_statements_and_rows_on_a_file_ten_times_larger(
    wide_files: tuple[Path, Path], reads: Reads, what: str, path: str, expected: str
) -> None:
    """What a page reads follows what it shows: the same statements, the same number of rows
    handed to Python, on a file of 300 sessions and a 2,000-event session as on one of 3,000
    sessions and a 20,000-event session (a statement trace, not a clock)."""
    seen: list[tuple[int, int]] = []
    for db in wide_files:
        with serving(db) as viewer:
            request(viewer, "/api/scan")  # the pool's journal opened (its pragmas are not the page's)
            reads.clear()
            got = request(viewer, path)
            seen.append((len(reads.statements), reads.rows))
        assert got.status == 200 and expected in got.text, got.text[:500]
    (small_statements, small_rows), (large_statements, large_rows) = seen
    assert large_statements == small_statements, what
    assert large_rows == small_rows, what
    assert 0 < large_rows <= 1500, what  # a page and its margins, never the file


# -- the command ----------------------------------------------------------------------------------


def test_the_command_serves_and_warns_when_bound_beyond_loopback(story: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [sys.executable, "-m", "journal.cli", "serve", "--db", str(story), "--port", "0", "--host", "0.0.0.0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        line = child.stdout.readline() if child.stdout else ""
        found = re.search(r"http://0\.0\.0\.0:(\d+)/", line)
        assert found, line
        conn = http.client.HTTPConnection("127.0.0.1", int(found.group(1)), timeout=30)
        conn.request("GET", "/api/sessions", headers={"Host": f"localhost:{found.group(1)}"})
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        child.terminate()
        _, err = child.communicate(timeout=30)
    assert "warning: serving on 0.0.0.0, not loopback" in err


def test_the_command_refuses_a_missing_journal_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    result = CliRunner().invoke(main, ["serve", "--db", str(missing), "--port", "0"])
    assert result.exit_code == 1 and "no such journal" in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_not_a_journal_is_refused_before_listening(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    other.write_bytes(b"not a database at all" * 100)
    with pytest.raises(journal.NotAJournal):
        Viewer(str(other), port=0)


def test_threads_reading_at_once_each_get_the_right_answer(viewer: Viewer, story: Path) -> None:
    expected = {sid: cli_json(story, "show", sid) for sid in ("plain", "mailer", "crashed", "plain-fork")}
    failures: list[str] = []

    def reader(sid: str) -> None:
        for _ in range(10):
            got = request(viewer, f"/api/sessions/{sid}")
            if got.text != expected[sid]:
                failures.append(sid)

    threads = [threading.Thread(target=reader, args=(sid,)) for sid in expected for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


# -- bounded by what it shows, in bytes (DESIGN §15) ------------------------------------------------

BIG = 4 * 1024 * 1024  # characters of each large message


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A journal's address on each backend: a file under ``tmp_path``, or a PostgreSQL DSN."""
    if request.param == "postgresql":
        return request.getfixturevalue("pg_dsn")
    return tmp_path / "journal.db"


def build_large(db: Any, *, events: int = 6) -> None:
    """A session ``big`` of large messages, and a turn whose call has large arguments."""
    with journal.open(db, durability="normal") as j:
        j.create_session("big")
        for i in range(events):
            kind = "user_message" if i % 2 == 0 else "assistant_message"
            j.append("big", kind, {"content": f"message {i} " + "x" * BIG})
        with j.turn("big") as turn, turn.step():
            turn.assistant("", tool_calls=[{"id": "c1", "name": "upload", "arguments": {"blob": "y" * BIG}}])
            with turn.dispatch("c1") as call:
                call.result("z" * BIG)


def test_previews_cut_every_field_in_sql_and_say_what_was_cut(any_db: Any) -> None:
    build_large(any_db)
    with journal.open(any_db, readonly=True) as j:
        previews = j.previews("big", chars=100)
        events = j.events("big")
    assert [p.seq for p in previews] == [e.seq for e in events]
    for p, e in zip(previews, events):
        assert p.type == e.type and p.time_ms == e.time_ms
        if p.whole:
            assert p.data == e.data  # a small event comes whole
            continue
        assert p.size > BIG  # the stored size, in bytes
        for key in p.cut:
            value = p.data[key]
            if isinstance(value, str):
                assert isinstance(value, Clipped) and len(value) == 100
                assert str(e.data[key]).startswith(value) or key == "arguments"
    first = previews[0]
    assert first.cut == ("content",) and first.data["content"].startswith("message 0 xxx")
    asked = next(p for p in previews if p.type == "assistant_message" and p.data.get("tool_calls"))
    (call,) = asked.data["tool_calls"]
    assert call["id"] == "c1" and call["name"] == "upload"
    assert isinstance(call["arguments"], Clipped) and len(call["arguments"]) == 100
    result = next(p for p in previews if p.type == "tool_result")
    assert result.data["tool_call_id"] == "c1" and result.cut == ("content",)
    assert [p.seq for p in j_tail(any_db, 2)] == [e.seq for e in events[-2:]]


def j_tail(db: Any, n: int) -> list[Any]:
    with journal.open(db, readonly=True) as j:
        return j.previews("big", tail=n, chars=10)


def test_previews_read_through_the_fork_chain(any_db: Any) -> None:
    build_large(any_db, events=2)
    with journal.open(any_db, durability="normal") as j:
        j.fork("big", "last", id="big-fork")
        j.append("big-fork", "user_message", {"content": "own " + "w" * 5000})
        whole = j.events("big-fork")
        cut = j.previews("big-fork", chars=50)
    assert [p.seq for p in cut] == [e.seq for e in whole]
    assert cut[-1].data["content"] == "own " + "w" * 46


def test_the_change_token_moves_only_when_another_connection_commits(any_db: Any) -> None:
    with journal.open(any_db) as writer:
        writer.create_session("s")
        with journal.open(any_db, readonly=True) as reader:
            first = reader._change_token()
            assert reader._change_token() == first  # nothing committed: the same
            writer.append("s", "user_message", {"content": "hello"})
            assert reader._change_token() != first


@pytest.fixture
def traced() -> Iterator[list[str]]:
    """Every SQL statement any apsw connection opened meanwhile runs (the viewer's pool too)."""
    import apsw

    statements: list[str] = []

    def trace(cursor: Any, sql: str, bindings: Any) -> bool:
        statements.append(sql)
        return True

    def hook(conn: Any) -> None:
        conn.exec_trace = trace

    apsw.connection_hooks.append(hook)
    try:
        yield statements
    finally:
        apsw.connection_hooks.remove(hook)


def _reads_whole_events(sql: str) -> bool:
    """Whether a statement reads events' stored ``data`` whole (the ``events()`` read, the tail)."""
    return bool(re.search(r"SELECT seq, type, data\b", sql))


def test_a_page_of_large_events_reads_them_cut_in_sql_never_whole(db_path: Path, traced: list[str]) -> None:
    build_large(db_path)
    with serving(db_path) as viewer:
        traced.clear()
        page = request(viewer, session_path("big"))
        log_statements = list(traced)
    assert page.status == 200
    assert len(page.body) < 200_000  # a page of 10 events of 4 MiB: a few KB of each
    assert page.text.count("(more stored; the API gives it whole)") >= 6
    assert any(s == PREVIEWS_SQL for s in log_statements)
    assert not any(_reads_whole_events(s) for s in log_statements), [
        s for s in log_statements if _reads_whole_events(s)
    ]


@pytest.fixture
def statements(any_db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement the journal's store runs meanwhile, as the store writes it: the apsw
    trace for SQLite, each ``PgDatabase.execute`` for PostgreSQL (its reads all go through it)."""
    seen: list[str] = []
    if isinstance(any_db, Path):
        import apsw

        def on_statement(cursor: Any, sql: str, bindings: Any) -> bool:
            seen.append(sql)
            return True

        def hook(conn: Any) -> None:
            conn.exec_trace = on_statement

        apsw.connection_hooks.append(hook)
        try:
            yield seen
        finally:
            apsw.connection_hooks.remove(hook)
        return
    from journal.store.postgres import PgDatabase

    execute = PgDatabase.execute

    def traced_execute(self: Any, sql: str, bindings: Any = None) -> Any:
        seen.append(sql)
        return execute(self, sql, bindings)

    monkeypatch.setattr(PgDatabase, "execute", traced_execute)
    yield seen


def build_large_transcript(db: Any) -> None:
    """``big`` of ``build_large``, compacted (its summary large too), then a large hostile message."""
    build_large(db)
    with journal.open(db, durability="normal") as j:
        j.compact("big", 0, 1, "summary " + "s" * BIG)
        j.append("big", "user_message", {"content": HOSTILE + "h" * BIG})


@pytest.mark.parametrize("view", ["messages", "provider"])
def test_g14_a_messages_page_of_large_events_reads_them_cut_in_sql_never_whole(
    any_db: Any, statements: list[str], view: str
) -> None:
    from journal.store import postgres, sqlite

    build_large_transcript(any_db)
    cut_read = (sqlite if isinstance(any_db, Path) else postgres).PREVIEWS_AT_SQL
    with serving(any_db) as viewer:
        statements.clear()
        page = request(viewer, session_path("big", view=view))
        seen = list(statements)
        whole = request(viewer, f"/api/sessions/big?view={view}&tail=1")
    assert page.status == 200
    assert len(page.body) < 200_000  # ten messages of 4 MiB: a few KB of each
    assert page.text.count("(more stored; the API gives it whole)") >= 5
    assert "summary sss" in page.text  # the compaction's summary stands where it replaced
    assert cut_read in seen
    assert not any(_reads_whole_events(s) for s in seen), [s for s in seen if _reads_whole_events(s)]
    # G14: a cut message is escaped like the rest
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in page.text and "<script>window" not in page.text
    assert "\\x1b[31mRED" in page.text and "\x1b" not in page.text
    # the API's view gives whole messages, tailed
    (item,) = whole.json()["items"]
    assert item["content"] == HOSTILE + "h" * BIG


def test_a_cut_tail_is_the_tail_with_each_field_cut_in_sql(any_db: Any) -> None:
    build_story(any_db)
    with journal.open(any_db, readonly=True) as j:
        for s in j.sessions():
            for n in (0, 1, 2, 3, 50):
                whole = j.messages(s.id, tail=n)
                assert j.messages(s.id, tail=n, chars=100_000) == whole, (s.id, n)
                assert j.provider_view(s.id, tail=n, chars=100_000) == j.provider_view(s.id, tail=n), (s.id, n)
                short = j.messages(s.id, tail=n, chars=12)
                assert [(m.seq, m.role) for m in short] == [(m.seq, m.role) for m in whole]
                for cut, message in zip(short, whole):
                    if isinstance(message.content, str):
                        assert cut.content == message.content[:12]
                        assert isinstance(cut.content, Clipped) == (len(message.content) > 12)


@pytest.mark.parametrize(("chars", "tail"), [(10, None), (-1, 5), ("10", 5), (True, 5), (10**9, 5)])
def test_g12_a_cut_read_with_bad_chars_is_refused_with_a_typed_error(story: Path, chars: Any, tail: Any) -> None:
    with journal.open(story, readonly=True) as j:
        for read in (j.messages, j.provider_view):
            with pytest.raises(journal.InvalidArgument, match="chars"):
                read("plain", tail=tail, chars=chars)


def test_the_api_streams_a_log_of_large_events_a_few_mib_at_a_time(any_db: Any) -> None:
    from journal.serve import api

    build_large(any_db)
    with journal.open(any_db, readonly=True) as j:
        count = j.count("big")
        pages = list(api._log_pages(j, "big", 0, count))
    assert [e.seq for page in pages for e in page] == list(range(count))
    for page in pages:  # each page holds about PAGE_BYTES, or one event
        assert len(page) == 1 or sum(len(json.dumps(e.data)) for e in page) <= api.PAGE_BYTES


def test_the_api_messages_view_is_tailed_by_default(db_path: Path) -> None:
    with journal.open(db_path, durability="normal") as j:
        j.create_session("long")
        j.append_many("long", [("user_message", {"content": f"message {i}"}) for i in range(300)])
    with serving(db_path) as viewer:
        got = request(viewer, "/api/sessions/long?view=messages")
        more = request(viewer, "/api/sessions/long?view=messages&tail=250")
        too_many = request(viewer, "/api/sessions/long?view=messages&tail=5001")
    assert got.text == cli_json(db_path, "show", "long", "--view", "messages", "--tail", "200")
    assert len(got.json()["items"]) == 200 and len(more.json()["items"]) == 250
    assert too_many.status == 400


def _sse_open(viewer: Viewer, session_id: str, since: int) -> tuple[http.client.HTTPConnection, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", viewer.port, timeout=30)
    conn.request(
        "GET", session_path(session_id) + f"/events?since={since}", headers={"Host": f"127.0.0.1:{viewer.port}"}
    )
    got = conn.getresponse()
    return conn, got


def _wait_for(condition: Any, what: str, timeout_s: float = 20.0) -> None:
    """Wait until ``condition()`` holds (a bound on waiting, not a measure of time)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


def test_an_idle_follower_probes_the_change_token_and_reads_no_table(db_path: Path, traced: list[str]) -> None:
    build_large(db_path, events=2)
    probe = "PRAGMA data_version"  # the SQLite store's change token: reads no table
    with serving(db_path) as viewer:
        conn, got = _sse_open(viewer, "big", since=0)
        try:
            assert got.status == 200
            _wait_for(lambda: got.readline().startswith(b"data: "), "the backlog")
            _wait_for(lambda: probe in list(traced), "the first probe")
            traced.clear()
            _wait_for(lambda: list(traced).count(probe) >= 5, "five probes")
            idle = [s for s in list(traced) if s not in ("BEGIN", "COMMIT", "ROLLBACK")]  # a read's transaction
            assert idle and all(s == probe for s in idle), [s for s in idle if s != probe]
            with journal.open(db_path) as j:
                j.append("big", "user_message", {"content": "news"})
            _wait_for(lambda: b"news" in got.readline(), "the new event")
            after = list(traced)
            assert any(s.startswith("SELECT s.seed_length, (SELECT max(seq)") for s in after)  # then it counts
            assert any(s == PREVIEWS_SQL for s in after)  # and reads the new event, cut in SQL
        finally:
            conn.close()


def test_live_streams_are_capped_and_a_refused_one_carries_the_security_headers(story: Path) -> None:
    with serving(story, limits=Limits(max_streams=1)) as viewer:
        conn, got = _sse_open(viewer, "plain", since=0)
        assert got.status == 200
        second = request(viewer, session_path("plain") + "/events")
        assert second.status == 503 and "default-src 'none'" in second.headers["Content-Security-Policy"]
        assert request(viewer, "/").status == 200  # pages still answer
        conn.close()

        def reopened() -> bool:
            again, answer = _sse_open(viewer, "plain", since=0)
            again.close()
            return answer.status == 200

        _wait_for(reopened, "the first stream's slot to be given back")


def test_requests_in_flight_are_capped_with_a_503_that_carries_the_security_headers(story: Path) -> None:
    with serving(story, limits=Limits(max_requests=1)) as viewer:
        conn, got = _sse_open(viewer, "plain", since=0)  # a stream is a request in flight while open
        assert got.status == 200
        busy = request(viewer, "/")
        assert busy.status == 503 and "default-src 'none'" in busy.headers["Content-Security-Policy"]
        conn.close()
        _wait_for(lambda: request(viewer, "/").status == 200, "the stream's slot to be given back")


def _raw_response(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection."""
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


@pytest.mark.parametrize(
    "malformed",
    [b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header Name: x\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n"],
)
def test_a_malformed_request_gets_uvicorns_400_with_the_security_headers(viewer: Viewer, malformed: bytes) -> None:
    with socket.create_connection(("127.0.0.1", viewer.port), timeout=30) as sock:
        sock.sendall(malformed)
        got = _raw_response(sock)
    head = got.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
    assert head.startswith("http/1.1 400"), head
    for name, value in SECURITY.items():
        assert f"{name.lower()}: " in head and value.lower() in head, name


def test_connections_beyond_the_cap_get_a_503_with_the_security_headers_then_a_close(story: Path) -> None:
    with serving(story, limits=Limits(max_connections=2)) as viewer:
        held = [http.client.HTTPConnection("127.0.0.1", viewer.port, timeout=30) for _ in range(2)]
        try:
            for conn in held:  # each one accepted and kept alive
                conn.request("GET", "/", headers={"Host": f"127.0.0.1:{viewer.port}"})
                answer = conn.getresponse()
                assert answer.status == 200 and answer.read()
            with socket.create_connection(("127.0.0.1", viewer.port), timeout=30) as sock:
                sock.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{viewer.port}\r\n\r\n".encode())
                got = _raw_response(sock)  # the server closes it after the answer
            head = got.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
            assert head.startswith("http/1.1 503"), head
            assert "default-src 'none'" in head and "x-content-type-options: nosniff" in head
            assert "connection: close" in head and b"too many connections" in got
            held[0].request("GET", "/scan", headers={"Host": f"127.0.0.1:{viewer.port}"})
            assert held[0].getresponse().status == 200  # the connections within the cap still answer
        finally:
            for conn in held:
                conn.close()
        _wait_for(lambda: request(viewer, "/").status == 200, "a connection's slot to be given back")


def test_a_connection_that_sends_no_request_is_closed_after_the_read_timeout(story: Path) -> None:
    with serving(story, limits=Limits(read_timeout_s=0.3)) as viewer:
        with socket.create_connection(("127.0.0.1", viewer.port), timeout=30) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1")  # and never the rest
            assert sock.recv(65536) == b""  # closed by the server, with nothing sent
        assert request(viewer, "/").status == 200


def test_a_client_that_goes_away_is_one_log_line_and_no_traceback(story: Path) -> None:
    lines: list[str] = []
    with serving(story, log=lines.append) as viewer:
        conn, got = _sse_open(viewer, "plain", since=0)
        assert got.readline().startswith(b"retry:")
        conn.close()
        _wait_for(lambda: any("/events" in line for line in lines), "the stream's log line")
        request(viewer, "/nowhere")
        _wait_for(lambda: any("/nowhere" in line for line in lines), "the next request's line")
    streams = [line for line in lines if "/events" in line]
    assert len(streams) == 1 and "(client went away)" in streams[0] and '" 200 ' in streams[0]
    assert not any("Traceback" in line for line in lines)
    assert all("\n" not in line for line in lines)


def test_a_full_stderr_pipe_never_stalls_the_viewer(story: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [sys.executable, "-m", "journal.cli", "serve", "--db", str(story), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )  # fmt: skip  (stderr is never read: its pipe fills after 64 KiB)
    try:
        assert child.stdout is not None
        found = re.search(rb"http://127\.0\.0\.1:(\d+)/", child.stdout.readline())
        assert found
        port = int(found.group(1))
        long_path = "/nowhere/" + "x" * 2000  # each request logs a line of 2 KB
        for _ in range(200):  # 400 KB of log lines
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", long_path, headers={"Host": f"127.0.0.1:{port}"})
            assert conn.getresponse().status == 404
            conn.close()
    finally:
        child.kill()
        child.communicate(timeout=30)


def test_a_dsn_password_never_reaches_a_page_a_header_a_log_line_or_an_error(pg_dsn: str) -> None:
    secret = "s3cret-pw-7781"
    dsn = pg_dsn.replace("postgresql://postgres@", f"postgresql://postgres:{secret}@", 1)
    assert secret in dsn
    build_story(dsn)  # type: ignore[arg-type]  (journal.open takes the DSN as given)
    lines: list[str] = []
    seen: list[str] = []
    with serving(dsn, log=lines.append) as viewer:  # type: ignore[arg-type]
        for path in (
            "/", "/scan", session_path("plain"), session_path("plain", view="messages"),
            session_path("crashed", view="provider"), session_path("nobody"), "/nowhere", "/api/sessions",
            "/api/sessions/plain", "/api/scan", "/api/sessions/nobody",
        ):  # fmt: skip
            got = request(viewer, path)
            seen += [path, got.text, *(f"{k}: {v}" for k, v in got.headers.items())]
        assert "postgresql://postgres:***@" in request(viewer, "/").text  # the name is shown, redacted
        schema = re.search(r"search_path%3D(\w+)", dsn)
        assert schema is not None
        import psycopg

        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the journal goes away under the viewer
            conn.execute(f"DROP SCHEMA {schema.group(1)} CASCADE")
        for path in ("/", session_path("plain"), "/api/sessions"):
            got = request(viewer, path)
            assert got.status >= 400
            seen += [got.text, *(f"{k}: {v}" for k, v in got.headers.items())]
        _wait_for(lambda: len(lines) >= 14, "the log lines")
    assert lines and seen
    for text in seen + lines:
        assert secret not in text


def test_the_command_prints_a_dsn_redacted(pg_dsn: str) -> None:
    secret = "s3cret-pw-9924"
    dsn = pg_dsn.replace("postgresql://postgres@", f"postgresql://postgres:{secret}@", 1)
    with journal.open(dsn) as j:
        j.create_session("one")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [sys.executable, "-m", "journal.cli", "serve", "--db", dsn, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        line = child.stdout.readline() if child.stdout else ""
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert found, line
        conn = http.client.HTTPConnection("127.0.0.1", int(found.group(1)), timeout=30)
        conn.request("GET", "/sessions/one", headers={"Host": f"127.0.0.1:{found.group(1)}"})
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        child.terminate()
        out, err = child.communicate(timeout=30)
    assert secret not in line + out + err and "***" in line


def test_a_client_that_stops_reading_is_cut_off_after_the_write_timeout(db_path: Path) -> None:
    """A live stream whose client never reads fills the server's buffers; after the write
    timeout the connection is aborted and its stream slot given back (else it is held forever)."""
    with journal.open(db_path) as j:
        j.create_session("big")
        j.append_many("big", [("user_message", {"content": f"{n:06d} " + "x" * 400}) for n in range(20_000)])
    with serving(db_path, limits=Limits(max_streams=1, write_timeout_s=0.5)) as viewer:
        stalled = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
        stalled.connect(("127.0.0.1", viewer.port))
        try:
            stalled.sendall(
                f"GET {session_path('big')}/events?since=0 HTTP/1.1\r\nHost: 127.0.0.1:{viewer.port}\r\n\r\n".encode()
            )  # and never reads
            _wait_for(lambda: viewer.streams == 1, "the stalled stream to open")

            def reopened() -> bool:
                again, answer = _sse_open(viewer, "big", since=19_999)
                again.close()
                return answer.status == 200

            _wait_for(reopened, "the stalled stream's slot to be given back")
            stalled.settimeout(30)
            with contextlib.suppress(ConnectionResetError):  # a live stream ends only when cut off
                while stalled.recv(1 << 20):
                    pass
        finally:
            stalled.close()


# -- tools at a glance ----------------------------------------------------------------------------

_RAW_TOOLS = """
SELECT c.name, count(*), count(c.result_seq),
       sum(CASE WHEN json_extract(r.data, '$.is_error')
                 AND NOT coalesce(json_extract(r.data, '$.metadata.synthetic'), 0) THEN 1 ELSE 0 END),
       sum(CASE WHEN json_extract(r.data, '$.metadata.risk') = 'tool_outcome_unknown'
                 AND json_extract(r.data, '$.metadata.synthetic') THEN 1 ELSE 0 END),
       sum(c.state = 'indeterminate')
  FROM tool_calls AS c LEFT JOIN events AS r ON r.session_id = c.session_id AND r.seq = c.result_seq
 GROUP BY c.name
"""


def test_the_tools_page_and_api_give_the_numbers_a_raw_sql_count_gives(viewer: Viewer, story: Path) -> None:
    conn = apsw.Connection(str(story), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        raw = {row[0]: tuple(int(v or 0) for v in row[1:]) for row in conn.execute(_RAW_TOOLS)}
    finally:
        conn.close()
    got = request(viewer, "/api/tools")
    assert got.status == 200 and got.headers["Content-Type"].startswith("application/json")
    api_rows = {t["name"]: t for t in got.json()["tools"]}
    assert {
        name: (t["calls"], t["results"], t["errors"], t["may_have_run"], t["indeterminate"])
        for name, t in api_rows.items()
    } == raw
    assert api_rows["send_email"]["indeterminate"] == 1 and api_rows["pay"]["results"] == 0
    page = request(viewer, "/tools").text
    for name, (calls, results, *_rest) in raw.items():
        row = re.search(r'<tr data-tool="' + re.escape(html.escape(name, quote=True)) + r'">(.*?)</tr>', page)
        if "<" in name:
            continue  # the hostile tool: its row is checked escaped by the G14 test
        assert row is not None, name
        cells = re.findall(r'<td class="num[^"]*">(\d*)', row.group(1))
        assert cells[:2] == [str(calls), str(results)], (name, cells)
    one = request(viewer, "/api/tools?session=plain").json()
    assert one["session_id"] == "plain" and [t["name"] for t in one["tools"]] == ["lookup"]
    assert 'href="/tools?session=plain"' in request(viewer, session_path("plain")).text
    assert request(viewer, "/api/tools?session=nobody").status == 404
    assert request(viewer, "/tools?session=nobody").status == 404
