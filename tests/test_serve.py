"""``journal serve`` over HTTP (DESIGN §15): read-only, its own host name only, content as text
(G14), the command line's JSON shapes, pages that stay quick on a big file, live following
that keeps the server's memory flat.

The viewer runs in a thread of the test process on a free loopback port; requests go through
``http.client`` (or a raw socket, where a request must be malformed on purpose).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import journal
from journal import ToolRegistry, Unsafe
from journal.cli import main
from journal.serve.app import Viewer, run
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
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
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
        return Response(got.status, dict(got.getheaders()), got.read())
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
    with socket.create_connection(("127.0.0.1", viewer.port), timeout=10) as sock:
        sock.sendall(b"GET /api/sessions HTTP/1.0\r\n\r\n")
        answer = b"".join(iter(lambda: sock.recv(65536), b""))
    assert answer.startswith(b"HTTP/1.0 400")
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
    listed = lambda page: re.findall(r'<tr><td><a href="/sessions/([^"]+)">', page)
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
    [(session_path("nobody"), 404), ("/sessions/a%20b", 400), (session_path("plain", since="x"), 400), ("/nowhere", 404),
     (session_path("plain", view="nope"), 400), ("/sessions/plain/events/more", 404)],
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
            line = got.fp.readline()
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
        j.append_many("grow", [("user_message", {"content": "event %d " % i + "x" * 200}) for i in range(start, start + 50)])
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
            marks: dict[int, tuple[int, int]] = {}
            for line in stream:
                if line.startswith("data: "):
                    seen += 1
                    if seen in (1000, total):
                        marks[seen] = (tracemalloc.get_traced_memory()[0], _rss_kib())
                    if seen == total:
                        break
            stream.close()
            assert writer.wait(timeout=60) == 0, writer.stderr.read() if writer.stderr else ""
        finally:
            tracemalloc.stop()
    grown = marks[total][0] - marks[1000][0]
    rss_grown = marks[total][1] - marks[1000][1]
    with capsys.disabled():
        print(f"\n[measure] following 10,000 appended events: traced Python memory {marks[1000][0] / 1024:.0f} KiB "
              f"after 1,000 -> {marks[total][0] / 1024:.0f} KiB after 10,000 ({grown / 1024:+.0f} KiB); "
              f"RSS {marks[1000][1]} KiB -> {marks[total][1]} KiB ({rss_grown:+d} KiB)")  # fmt: skip
    assert grown < 512 * 1024
    assert rss_grown < 16 * 1024


# -- the measure: big files ------------------------------------------------------------------------


def _median_ms(viewer: Viewer, path: str, runs: int = 7) -> tuple[float, float, Response]:
    """The median server time (its Server-Timing header) and wall time of ``runs`` requests."""
    server, wall = [], []
    got = None
    for _ in range(runs):
        started = time.perf_counter()
        got = request(viewer, path)
        wall.append((time.perf_counter() - started) * 1000)
        assert got.status == 200, got.text[:500]
        server.append(float(re.fullmatch(r"app;dur=([0-9.]+)", got.headers["Server-Timing"]).group(1)))  # type: ignore[union-attr]
    assert got is not None
    return statistics.median(server), statistics.median(wall), got


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """100,000 sessions, one of which holds 50,000 events (turns of four events)."""
    db = tmp_path_factory.mktemp("big") / "big.db"
    with journal.open(db, durability="normal") as j:
        for i in range(100_000):
            j.create_session(f"s{i:06d}", meta={"n": i})
        j.create_session("long")
        items: list[tuple[str, dict[str, Any]]] = []
        for turn in range(1, 12_501):
            items += [
                ("turn_start", {"turn": turn}),
                ("user_message", {"content": f"question {turn}"}),
                ("assistant_message", {"content": "an answer " * 10, "tool_calls": []}),
                ("turn_end", {"turn": turn, "steps": 0, "reason": "complete"}),
            ]
            if len(items) >= 2000:
                j.append_many("long", items)
                items = []
        if items:
            j.append_many("long", items)
    return db


@pytest.mark.parametrize(
    ("what", "path", "expected"),
    [
        ("sessions page (first of 100,000 sessions)", "/", "s000049"),
        ("sessions page (after the 50,000th)", "/?after=s049999", "s050049"),
        ("sessions page (prefix)", "/?prefix=s0999", "s099949"),
        ("50,000-event session page (its end)", session_path("long"), 'id="e49999"'),
        ("50,000-event session page (middle)", session_path("long", since=25_000), 'id="e25199"'),
        ("50,000-event session, messages view", session_path("long", view="messages"), "question 12500"),
        ("50,000-event session, provider view", session_path("long", view="provider"), "question 12500"),
        ("API: 50,000-event session, tail", "/api/sessions/long?tail=200", '"seq": 49999'),
        ("API: a page of 1,000 sessions", "/api/sessions?limit=1000&after=s050000", "s051000"),
    ],
)
def test_measure_pages_stay_under_200_ms_on_a_big_file(
    big_file: Path, what: str, path: str, expected: str, capsys
) -> None:
    with serving(big_file) as viewer:
        request(viewer, path)  # warm the pool and the page cache
        server_ms, wall_ms, got = _median_ms(viewer, path)
    with capsys.disabled():
        print(
            f"\n[measure] {what}: server {server_ms:.1f} ms, wall {wall_ms:.1f} ms (median of 7), {len(got.body)} bytes"
        )
    assert expected in got.text
    assert server_ms < 200


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
        conn = http.client.HTTPConnection("127.0.0.1", int(found.group(1)), timeout=10)
        conn.request("GET", "/api/sessions", headers={"Host": f"localhost:{found.group(1)}"})
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        child.terminate()
        _, err = child.communicate(timeout=10)
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
