"""The viewer's routes: Starlette endpoints that read through a bounded pool of threads.

Every database read runs in a worker thread (``Reader.read``: at most ``threads`` at once,
each with a read-only ``Journal`` borrowed from the pool), so the event loop never waits on
the file. What a page reads is what it shows: a page of the log is one ``previews`` read (every
field cut to ``pages.CLIP`` characters in SQL), the messages and provider views their last
messages (``tail``), cut in SQL too (``chars=``), the API's log a page of rows at a time (the
API's messages views whole messages, tailed); a timeline one pass of previews over a bounded
window (``journal.serve.timeline``). Live following wakes on a count of
the session's events (one indexed query) and reads events only when it changed.
"""

from __future__ import annotations

import functools
import re
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route, Router

from journal import Journal, Session
from journal.escape import dumps, escape
from journal.log import check_session_id
from journal.preview import Preview
from journal.serve import api, log_page, pages, timeline_page
from journal.serve.assets import SCRIPT, STYLE
from journal.serve.forks import fork_tree
from journal.serve.gate import HttpError
from journal.serve.timeline import timeline
from journal.serve.watch import GONE, Watcher

T = TypeVar("T")
SEQ_MAX = 2**63 - 1
SESSIONS_PAGE = 50  # sessions a page of the listing shows (?limit= up to SESSIONS_MAX)
SESSIONS_MAX = 500
LOG_PAGE = 200  # events a page of a log shows (?tail= up to LOG_MAX)
LOG_MAX = 5000
MESSAGES_PAGE = 200  # messages the messages and provider views show (?tail= up to MESSAGES_MAX)
MESSAGES_MAX = 5000
MARGIN = 200  # events read on either side of a page, to pair its calls with their results
LIVE_BATCH = 500  # events sent per read at most (a backlog is sent in batches, without waiting)
KEEPALIVE_S = 10.0
HTML = "text/html; charset=utf-8"
STATIC = {
    "/static/journal.css": ("text/css; charset=utf-8", STYLE.encode()),
    "/static/live.js": ("text/javascript; charset=utf-8", SCRIPT.encode()),
}


class Reader(Protocol):
    """What the routes need of the viewer: reads in worker threads, the journal's shown name,
    the stream cap and the stopping flag (``journal.serve.app.Viewer`` is one)."""

    shown_db: str
    stopping: Any  # a threading.Event, set when the viewer stops
    watcher: Watcher
    max_streams: int
    streams: int

    async def read(self, work: Callable[[Journal], T]) -> T: ...
    async def hold(self) -> Journal: ...
    def release(self, j: Journal) -> None: ...
    async def in_thread(self, work: Callable[[], T]) -> T: ...


def router(viewer: Reader) -> Router:
    """The routes of ``viewer``: one endpoint that dispatches on the raw path (a ``%2F`` in a
    session id stays inside its segment; Starlette's decoded path would split it)."""

    async def endpoint(request: Request) -> Response:
        raw = request.scope.get("raw_path") or request.url.path.encode()
        path = raw.decode("latin-1").partition("?")[0]
        return await _route(viewer, request, path, _query(request.scope.get("query_string", b"")))

    return Router(routes=[Route("/{rest:path}", endpoint, methods=["GET", "HEAD"])], redirect_slashes=False)


async def _route(viewer: Reader, request: Request, path: str, query: dict[str, str]) -> Response:
    head = request.method == "HEAD"
    if path in STATIC:
        content_type, body = STATIC[path]
        return Response(body, media_type=content_type)
    if path == "/":
        return Response(await viewer.read(lambda j: _sessions_page(viewer, j, query)), media_type=HTML)
    if path == "/scan":
        report = await viewer.read(lambda j: j.scan())
        return Response(pages.scan_page(report, journal_path=viewer.shown_db), media_type=HTML)
    if path == "/tools":
        session = check_session_id(query["session"]) if query.get("session") else None
        stats = await viewer.read(lambda j: j.tool_stats(session))
        return Response(pages.tools_page(stats, session_id=session, journal_path=viewer.shown_db), media_type=HTML)
    if path.startswith("/api/"):
        return await _api(viewer, path, query, head=head)
    found = re.fullmatch(r"/sessions/([^/]+)(/events|/timeline)?", path)
    if found is None:
        raise HttpError(404, "no such page")
    session_id = _session_id(found.group(1))
    if found.group(2) == "/events":
        return await _follow(viewer, request, session_id, query, head=head)
    if found.group(2) == "/timeline":
        return Response(await viewer.read(lambda j: _timeline_page(viewer, j, session_id, query)), media_type=HTML)
    return Response(await viewer.read(lambda j: _session_page(viewer, j, session_id, query)), media_type=HTML)


# -- the JSON API ------------------------------------------------------------------------------


async def _api(viewer: Reader, path: str, query: dict[str, str], *, head: bool) -> Response:
    if path == "/api/scan":
        return _json(await viewer.read(api.scan))
    if path == "/api/tools":
        session = check_session_id(query["session"]) if query.get("session") else None
        return _json(await viewer.read(lambda j: api.tools(j, session)))
    if path == "/api/indeterminate":
        session = check_session_id(query["session"]) if query.get("session") else None
        return _json(await viewer.read(lambda j: api.indeterminate(j, session)))
    if path == "/api/sessions":
        limit = _int(query, "limit", minimum=1, maximum=api.PAGE)
        after = check_session_id(query["after"]) if query.get("after") else None
        prefix = query.get("prefix") or None
        return await _chunks(viewer, lambda j: api.sessions(j, limit=limit, after=after, prefix=prefix), head=head)
    found = re.fullmatch(r"/api/sessions/([^/]+)(/timeline|/forks)?", path)
    if found is None:
        raise HttpError(404, "no such API path")
    session_id = _session_id(found.group(1))
    if found.group(2) == "/timeline":
        since, until = _span(query)
        return _json(await viewer.read(lambda j: api.timeline(j, session_id, since=since, until=until)))
    if found.group(2) == "/forks":
        after = query.get("after") or None
        return _json(await viewer.read(lambda j: api.forks(j, session_id, after=after)))
    view = query.get("view") or "log"
    since = _int(query, "since")
    tail = _int(query, "tail", maximum=MESSAGES_MAX if view != "log" else SEQ_MAX)
    if view != "log" and tail is None:
        tail = MESSAGES_PAGE  # the messages and provider views are tailed, never the whole transcript
    return await _chunks(viewer, lambda j: api.show(j, session_id, view=view, since=since, tail=tail), head=head)


def _json(text: str) -> Response:
    return Response(text.encode(), media_type="application/json")


async def _chunks(viewer: Reader, make: Callable[[Journal], Iterator[str]], *, head: bool) -> Response:
    """A JSON document: whole when it is one chunk, else streamed (its end is the close).

    The first chunk is made before the headers go, so an unknown session is still a 404. The
    journal stays borrowed while the document streams; each chunk is made in a worker thread."""
    j = await viewer.hold()
    handed_over = False
    try:
        chunks = await viewer.in_thread(lambda: make(j))
        first = await viewer.in_thread(lambda: next(chunks))
        second = await viewer.in_thread(lambda: next(chunks, None))
        if second is None:
            return _json(first)
        if head:
            return Response(b"", media_type="application/json")

        async def body() -> AsyncIterator[bytes]:
            yield first.encode()
            yield second.encode()
            while (chunk := await viewer.in_thread(lambda: next(chunks, None))) is not None:
                yield chunk.encode()

        handed_over = True
        return _Stream(body(), lambda: viewer.release(j), media_type="application/json")
    finally:
        if not handed_over:
            viewer.release(j)


# -- pages --------------------------------------------------------------------------------------


def _sessions_page(viewer: Reader, j: Journal, query: dict[str, str]) -> str:
    limit = _int(query, "limit", minimum=1, maximum=SESSIONS_MAX, default=SESSIONS_PAGE)
    assert limit is not None
    after = check_session_id(query["after"]) if query.get("after") else None
    prefix = query.get("prefix") or None
    page = j.sessions(limit=limit, after=after, prefix=prefix)
    report = j.scan()  # its cost grows with the unfinished work, not with the file (G7)
    totals = j.session_totals()
    return pages.sessions_page(
        page,
        report,
        pages.Totals(totals.sessions, totals.forks, totals.events),
        prefix=prefix,
        limit=limit,
        journal_path=viewer.shown_db,
    )


def _session_page(viewer: Reader, j: Journal, session_id: str, query: dict[str, str]) -> str:
    view = query.get("view") or "log"
    if view not in api.VIEWS:
        raise HttpError(400, f"view: one of {', '.join(api.VIEWS)}, not {view!r}")
    s = j.session(session_id)
    forks = fork_tree(j, s, after=query.get("forks_after") or None)
    if view == "log":
        body = _log_body(j, s, query)
    else:
        tail = _int(query, "tail", minimum=1, maximum=MESSAGES_MAX, default=MESSAGES_PAGE)
        assert tail is not None
        # The page shows pages.CLIP characters of a field: its messages are read cut in SQL.
        if view == "messages":
            shown = j.messages(session_id, tail=tail, chars=pages.CLIP)
            body = pages.messages_view(s, shown, None, tail=tail, view=view)
        else:
            shaped = j.provider_view(session_id, tail=tail, chars=pages.CLIP)
            body = pages.messages_view(s, shaped.messages, shaped.missing, tail=tail, view=view)
    header = pages.session_header(s, forks, view)
    title = f"session {pages.text(s.id, 80)}"
    return pages.layout(title, header + body, journal_path=viewer.shown_db)


def _log_body(j: Journal, s: Session, query: dict[str, str]) -> str:
    """A page of the log: from ``?since=`` on, or its end (``?tail=N`` events, 200 by default),
    read as previews (cut in SQL) with a margin on either side to pair calls with results."""
    since = _int(query, "since")
    size = _int(query, "tail", minimum=0, maximum=LOG_MAX, default=LOG_PAGE)
    assert size is not None
    start = max(s.count - size, 0) if since is None else min(since, s.count)
    stop = min(start + size, s.count)
    low = max(start - MARGIN, 0)
    window = _events(j.previews(s.id, since=low, limit=stop - low + MARGIN, chars=pages.CLIP))
    events = [e for e in window if start <= e.seq < stop]
    follow = None
    if stop >= s.count:  # the end of the log: the page can follow it live
        follow = pages.url("sessions", s.id, "events", since=stop, start=start)
    return log_page.log_view(s, events, window, follow=follow, page=size or LOG_PAGE)


def _window(session_id: str, since: int, limit: int, j: Journal) -> list[Preview]:
    """A live stream's next events, as previews (the page's clip)."""
    return j.previews(session_id, since=since, limit=limit, chars=pages.CLIP)


def _events(previews: list[Preview]) -> list[Any]:
    return [p.event() for p in previews]


def _timeline_page(viewer: Reader, j: Journal, session_id: str, query: dict[str, str]) -> str:
    """The session's timeline (``journal.serve.timeline``: one pass of previews over the window
    ``?since=`` … ``?until=``, at most ``timeline.WINDOW_MAX`` events, by default the last)."""
    since, until = _span(query)
    drawn = timeline(j, session_id, since=since, until=until)
    s = drawn.session
    header = pages.session_header(s, fork_tree(j, s), "timeline")
    body = timeline_page.timeline_body(drawn)
    return pages.layout(f"timeline of {pages.text(s.id, 80)}", header + body, journal_path=viewer.shown_db)


# -- live following ----------------------------------------------------------------------------


async def _follow(viewer: Reader, request: Request, session_id: str, query: dict[str, str], *, head: bool) -> Response:
    """Server-sent events: each event from ``since`` on (or after ``Last-Event-ID``, when the
    browser reconnects), rendered as the page renders it, as it is appended.

    Each poll counts the session's events (one indexed query); only when the count grew does it
    read the new ones (at most ``LIVE_BATCH``, as previews) with a margin before them, to pair
    calls with results. An idle follower reads no event; nothing grows with the session."""
    asked = _int(query, "since")
    last = request.headers.get("last-event-id", "")
    if re.fullmatch(r"[0-9]{1,18}", last):
        asked = int(last) + 1
    count = await viewer.read(lambda j: j.count(session_id))  # an unknown session: 404 before the stream
    since: int = count if asked is None else asked
    start = _int(query, "start", default=since)
    assert start is not None
    headers = {"X-Accel-Buffering": "no"}
    if head:
        return Response(b"", media_type="text/event-stream; charset=utf-8", headers=headers)
    if viewer.streams >= viewer.max_streams:
        raise HttpError(503, f"too many live streams open (at most {viewer.max_streams})")
    viewer.streams += 1

    def closed() -> None:
        viewer.streams -= 1

    async def stream() -> AsyncIterator[bytes]:
        nonlocal since, count
        yield b"retry: 1000\n\n"
        renderer = log_page.LogRenderer(session_id, log_page.Calls.of(()), shown=range(start, SEQ_MAX))
        primed = False
        with viewer.watcher.follow(session_id, count) as sub:
            while not viewer.stopping.is_set():
                if count > since:
                    low = max(since - MARGIN, 0)
                    window = _events(
                        await viewer.read(functools.partial(_window, session_id, low, since - low + LIVE_BATCH))
                    )
                    if not primed:  # where the first new event sits: inside a turn, a step?
                        if window and window[0].seq > 0:
                            renderer.start_at(window)
                        for e in window:
                            if e.seq < since:
                                renderer.advance(e)
                        primed = True
                    batch = [e for e in window if e.seq >= since]
                    calls = log_page.Calls.of(window)  # the margin too: a result finds its request
                    del window
                    if batch:
                        renderer.calls = calls
                        yield "".join(_sse(renderer, e) for e in batch).encode()
                        since = batch[-1].seq + 1
                        del batch
                        continue  # a backlog is sent in batches, without waiting
                # Wait for the watcher's probe to see the count change (or the keepalive).
                with anyio.move_on_after(KEEPALIVE_S) as waited:
                    await sub.woken.wait()
                sub.woken.clear()
                if waited.cancelled_caught:
                    yield b": keepalive\n\n"  # finds a client gone without a word
                if sub.count == GONE:
                    yield b"event: gone\ndata: {}\n\n"
                    return
                count = max(count, sub.count)

    return _Stream(stream(), closed, media_type="text/event-stream; charset=utf-8", headers=headers)


class _Stream(StreamingResponse):
    """A streamed response that runs ``closed`` once it ends, however it ends: sent to its end,
    the client gone, cancelled, or never started (an async generator that never ran has no
    ``finally`` to run). Its generator is closed here too, not left to the garbage collector."""

    def __init__(self, content: AsyncIterator[bytes], closed: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._closed = closed
        self._content = content

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._closed()
            aclose = getattr(self._content, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()


def _sse(renderer: log_page.LogRenderer, event: Any) -> str:
    """One event as a server-sent event: its row's HTML, and for a dispatch or a result the
    new status of its call (the script updates the call where the assistant asked for it)."""
    d = event.data
    call = d.get("id") if event.type == "tool_call" else d.get("tool_call_id")
    if event.type not in ("tool_call", "tool_result", "tool_result_late") or not isinstance(call, str):
        call = None
    payload = {
        "seq": event.seq,
        "html": renderer.row(event),
        "call": None if call is None else escape(call),
        "status": None if call is None else renderer.call_status(call),
    }
    # dumps writes no raw newline (nor any line separator), so the payload is one data line.
    return f"id: {event.seq}\ndata: {dumps(payload)}\n\n"


# -- parameters ----------------------------------------------------------------------------------


def _query(raw: bytes) -> dict[str, str]:
    """The query string as a dict; a parameter given twice is refused (which one would win?)."""
    try:
        text = raw.decode("ascii")
        pairs = urllib.parse.parse_qsl(text, keep_blank_values=True, max_num_fields=20, errors="strict")
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(400, f"bad query string: {exc}") from None
    out: dict[str, str] = {}
    for key, value in pairs:
        if key in out:
            raise HttpError(400, f"{key} given twice")
        out[key] = value
    return out


def _span(query: dict[str, str]) -> tuple[int | None, int | None]:
    """``?since=`` and ``?until=``: a window of events, ``until`` not before ``since``."""
    since, until = _int(query, "since"), _int(query, "until")
    if since is not None and until is not None and until < since:
        raise HttpError(400, f"until: expected an integer from since ({since}) on, not {until}")
    return since, until


def _int(
    query: dict[str, str], name: str, *, minimum: int = 0, maximum: int = SEQ_MAX, default: int | None = None
) -> int | None:
    value = query.get(name, "")
    if value == "":
        return default
    if not re.fullmatch(r"[0-9]{1,19}", value) or not minimum <= int(value) <= maximum:
        raise HttpError(400, f"{name}: expected an integer from {minimum} to {maximum}, not {value!r}")
    return int(value)


def _session_id(segment: str) -> str:
    """A session id from one path segment (percent-decoded), checked as the library checks it."""
    try:
        return check_session_id(urllib.parse.unquote(segment, errors="strict"))
    except UnicodeDecodeError:
        raise HttpError(400, "a session id is printable ASCII") from None


__all__ = ["router"]
