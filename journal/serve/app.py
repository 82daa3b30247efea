"""``journal serve``: a read-only web viewer of one journal file, on the standard library alone.

``Viewer`` is a ``ThreadingHTTPServer``: one thread a request, each borrowing a read-only
``Journal`` from a small pool (an apsw connection is never used by two threads at once). What it
guarantees, and how (docs/serve.md):

- **Read-only.** The journals are opened with ``readonly=True`` (SQLite's read-only flag and
  ``query_only``); every method but GET and HEAD is refused with 405, so a page cannot be made
  to write through the viewer either.
- **Loopback, and only its own name.** It binds 127.0.0.1 unless told otherwise (the command
  warns on stderr then). A request whose ``Host`` is not the bound host:port, or a loopback
  name with that port, is refused with 421 (400 without one): a web page that rebinds its own
  DNS name to 127.0.0.1 still sends its own name, so it cannot read the viewer (DNS rebinding).
- **Content stays text (G14).** Pages are rendered by ``journal.serve.pages``, which escapes
  every stored string for the terminal's sake and then for HTML's; links carry only quoted
  ids. Every response forbids inline script and foreign sources (``Content-Security-Policy``),
  MIME sniffing, framing and referrers, so even a mistake in escaping could not run a script.
- **Bounded work.** A page shows a page: 50 sessions, 200 events (the end of the log by
  default), the last 200 messages; the JSON API streams whole listings and logs a page at a
  time. Live following (server-sent events) polls the file every 150 ms and sends what is new;
  it keeps nothing between polls but the next seq, so the server's memory stays flat however
  long the session grows.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import select
import socket
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import journal
from journal import InvalidArgument, Journal, JournalError, Session, SessionNotFound
from journal.escape import dumps, escape
from journal.log import check_session_id
from journal.serve import api, pages
from journal.serve.assets import SCRIPT, STYLE

SEQ_MAX = 2**63 - 1
SESSIONS_PAGE = 50  # sessions a page of the listing shows (?limit= up to SESSIONS_MAX)
SESSIONS_MAX = 500
LOG_PAGE = 200  # events a page of a log shows (?tail= up to LOG_MAX)
LOG_MAX = 5000
MESSAGES_PAGE = 200  # messages the messages and provider views show (?tail= more)
MARGIN = 200  # events read on either side of a page, to pair its calls with their results
FORKS_SHOWN = 20
POLL_S = 0.15  # how often live following reads the file
LIVE_BATCH = 500  # events sent per poll at most (a backlog is sent in batches, without waiting)
KEEPALIVE_S = 10.0
POOL_SIZE = 4  # idle read-only journals kept for the request threads

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = (
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
)
STATIC = {
    "/static/journal.css": ("text/css; charset=utf-8", STYLE.encode()),
    "/static/live.js": ("text/javascript; charset=utf-8", SCRIPT.encode()),
}
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


class HttpError(Exception):
    """A request the viewer refuses: its status and a message (shown escaped)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Pool:
    """Read-only journals for the request threads, each lent to one thread at a time.

    ``ThreadingHTTPServer`` starts a thread per request, so a journal per thread would be one
    per request; the pool keeps a few open between requests and opens more under load."""

    def __init__(self, path: str, size: int = POOL_SIZE) -> None:
        self._path = path
        self._size = size
        self._idle: list[Journal] = []
        self._lock = threading.Lock()
        self._closed = False

    @contextlib.contextmanager
    def borrow(self) -> Iterator[Journal]:
        with self._lock:
            if self._closed:
                raise HttpError(503, "the viewer is stopping")
            lent = self._idle.pop() if self._idle else None
        if lent is None:
            lent = journal.open(self._path, readonly=True)
        try:
            yield lent
        finally:
            with self._lock:
                keep = not self._closed and len(self._idle) < self._size
                if keep:
                    self._idle.append(lent)
            if not keep:
                lent.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for j in idle:
            j.close()


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _bracketed(name: str) -> str:
    """An IPv6 address as a Host header writes it."""
    return f"[{name}]" if ":" in name and not name.startswith("[") else name


def allowed_hosts(host: str, port: int, extra: Iterable[str] = ()) -> frozenset[str]:
    """The ``Host`` header values the viewer answers: its bound name and the loopback names,
    each with the bound port (alone too for port 80, where browsers leave it out)."""
    names = {_bracketed(n.lower()) for n in (host, *LOOPBACK_NAMES, *extra)}
    values = {f"{n}:{port}" for n in names}
    if port == 80:
        values |= names
    return frozenset(values)


class Viewer(ThreadingHTTPServer):
    """The viewer of the journal at ``db``; ``serve_forever()`` runs it, ``shutdown()`` and
    ``server_close()`` stop it (live streams end within one poll).

    The file is opened once here, so a path that is not a journal fails before any port is
    bound. ``port=0`` picks a free port (``viewer.port``). ``log`` receives one escaped line per
    request (none when it is ``None``)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        db: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        allow_hosts: Iterable[str] = (),
        log: Callable[[str], None] | None = None,
    ) -> None:
        with journal.open(db, readonly=True):
            pass  # NotAJournal, SchemaTooNew, a missing file: refused before anything listens
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host.strip("[]"), port), _Handler)
        self.db = db
        self.host = host
        self.port: int = self.server_address[1]
        self.allowed = allowed_hosts(host, self.port, allow_hosts)
        self.log = log
        self.pool = _Pool(db)
        self.stopping = threading.Event()

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def url(self) -> str:
        return f"http://{_bracketed(self.host)}:{self.port}/"

    def shutdown(self) -> None:
        self.stopping.set()  # live streams see it at their next poll
        super().shutdown()

    def server_close(self) -> None:
        self.stopping.set()
        super().server_close()
        self.pool.close()


def _query(raw: str) -> dict[str, str]:
    """The query string as a dict; a parameter given twice is refused (which one would win?)."""
    try:
        pairs = urllib.parse.parse_qsl(raw, keep_blank_values=True, max_num_fields=20, errors="strict")
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(400, f"bad query string: {exc}") from None
    out: dict[str, str] = {}
    for key, value in pairs:
        if key in out:
            raise HttpError(400, f"{key} given twice")
        out[key] = value
    return out


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


class _Handler(BaseHTTPRequestHandler):
    server: Viewer
    server_version = "journal-serve"
    sys_version = ""
    protocol_version = "HTTP/1.0"  # one request a connection: a stream ends when it closes

    # -- the gate every request passes ----------------------------------------------------------

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def __getattr__(self, name: str) -> Any:
        # http.server answers a method it has no do_X for with 501; every method but GET and
        # HEAD gets a 405 instead (after the Host check, like the rest).
        if name.startswith("do_"):
            return self._refuse_method
        raise AttributeError(name)

    def _refuse_method(self) -> None:
        self._started = time.perf_counter()
        if self._host_ok():
            self._error(405, f"{self.command} is not allowed: the viewer is read-only", head=False, allow="GET, HEAD")

    def _host_ok(self) -> bool:
        hosts = self.headers.get_all("Host") or []
        if len(hosts) != 1:
            self._error(400, "a request needs exactly one Host header", head=self.command == "HEAD")
            return False
        if hosts[0].strip().lower() not in self.server.allowed:
            self._error(421, "this viewer does not answer for that host name", head=self.command == "HEAD")
            return False
        return True

    def version_string(self) -> str:
        return self.server_version

    def end_headers(self) -> None:
        for name, value in SECURITY_HEADERS:  # on every response, errors of http.server's own included
            self.send_header(name, value)
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.log is not None:
            self.server.log(escape(f"{self.address_string()} {format % args}"))

    def _serve(self, *, head: bool) -> None:
        self._started = time.perf_counter()
        if not self._host_ok():
            return
        api_request = self.path.startswith("/api/")
        try:
            if not self.path.startswith("/"):
                raise HttpError(400, "the request target must be a path")
            path, _, raw_query = self.path.partition("?")
            self._route(path, _query(raw_query.partition("#")[0]), head)
        except HttpError as exc:
            self._error(exc.status, exc.message, head=head, as_json=api_request)
        except SessionNotFound as exc:
            self._error(404, str(exc), head=head, as_json=api_request)
        except InvalidArgument as exc:
            self._error(400, str(exc), head=head, as_json=api_request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away
        except JournalError as exc:
            self._error(500, str(exc), head=head, as_json=api_request)
        except Exception:  # noqa: BLE001 - a bug in a page is a 500 and a logged traceback, never a dead thread
            if self.server.log is not None:
                self.server.log(escape(traceback.format_exc()))
            self._error(500, "internal error", head=head, as_json=api_request)

    # -- responses -----------------------------------------------------------------------------

    def _headers(self, status: int, content_type: str, length: int | None, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Server-Timing", f"app;dur={(time.perf_counter() - self._started) * 1000:.2f}")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self._sent = True

    def _send(
        self, status: int, content_type: str, body: str | bytes, *, head: bool, extra: dict[str, str] | None = None
    ) -> None:
        data = body.encode() if isinstance(body, str) else body
        self._headers(status, content_type, len(data), extra)
        if not head:
            self.wfile.write(data)

    def _send_chunks(self, chunks: Iterator[str], *, head: bool, extra: dict[str, str] | None = None) -> None:
        """A JSON document: whole when it is one chunk, else streamed (its end is the close).

        The first chunk is made before the headers go, so an unknown session is still a 404."""
        first = next(chunks)
        second = next(chunks, None)
        if second is None:
            return self._send(200, "application/json", first, head=head, extra=extra)
        self._headers(200, "application/json", None, extra)
        if head:
            return None
        self.wfile.write(first.encode())
        self.wfile.write(second.encode())
        for chunk in chunks:
            self.wfile.write(chunk.encode())
        return None

    def _error(self, status: int, message: str, *, head: bool, as_json: bool = False, allow: str | None = None) -> None:
        if getattr(self, "_sent", False):
            self.close_connection = True  # too late for a status: cut the response short
            return
        extra = {"Allow": allow} if allow else None
        if as_json:
            self._send(status, "application/json", dumps({"error": message}) + "\n", head=head, extra=extra)
        else:
            page = pages.error_page(status, message, journal_path=self.server.db)
            self._send(status, "text/html; charset=utf-8", page, head=head, extra=extra)

    # -- routes --------------------------------------------------------------------------------

    def _route(self, path: str, query: dict[str, str], head: bool) -> None:
        html = "text/html; charset=utf-8"
        if path in STATIC:
            content_type, body = STATIC[path]
            return self._send(200, content_type, body, head=head)
        if path == "/":
            return self._send(200, html, self._sessions_page(query), head=head)
        if path == "/scan":
            with self.server.pool.borrow() as j:
                report = j.scan()
            return self._send(200, html, pages.scan_page(report, journal_path=self.server.db), head=head)
        if path.startswith("/api/"):
            return self._api(path, query, head)
        found = re.fullmatch(r"/sessions/([^/]+)(/events)?", path)
        if found is None:
            raise HttpError(404, "no such page")
        session_id = _session_id(found.group(1))
        if found.group(2):
            return self._follow(session_id, query, head)
        return self._send(200, html, self._session_page(session_id, query), head=head)

    def _api(self, path: str, query: dict[str, str], head: bool) -> None:
        pool = self.server.pool
        if path == "/api/scan":
            with pool.borrow() as j:
                return self._send_chunks(iter([api.scan(j)]), head=head)
        if path == "/api/indeterminate":
            session = check_session_id(query["session"]) if query.get("session") else None
            with pool.borrow() as j:
                return self._send_chunks(iter([api.indeterminate(j, session)]), head=head)
        if path == "/api/sessions":
            limit = _int(query, "limit", minimum=1, maximum=api.PAGE)
            after = check_session_id(query["after"]) if query.get("after") else None
            prefix = query.get("prefix") or None
            with pool.borrow() as j:
                chunks = api.sessions(j, limit=limit, after=after, prefix=prefix)
                return self._send_chunks(chunks, head=head)
        found = re.fullmatch(r"/api/sessions/([^/]+)", path)
        if found is None:
            raise HttpError(404, "no such API path")
        session_id = _session_id(found.group(1))
        view = query.get("view") or "log"
        since, tail = _int(query, "since"), _int(query, "tail")
        with pool.borrow() as j:
            return self._send_chunks(api.show(j, session_id, view=view, since=since, tail=tail), head=head)

    def _sessions_page(self, query: dict[str, str]) -> str:
        limit = _int(query, "limit", minimum=1, maximum=SESSIONS_MAX, default=SESSIONS_PAGE)
        assert limit is not None
        after = check_session_id(query["after"]) if query.get("after") else None
        prefix = query.get("prefix") or None
        with self.server.pool.borrow() as j:
            page = j.sessions(limit=limit, after=after, prefix=prefix)
            report = j.scan()  # its cost grows with the unfinished work, not with the file (G7)
            totals = j.session_totals()
        return pages.sessions_page(
            page,
            report,
            pages.Totals(totals.sessions, totals.forks, totals.events),
            prefix=prefix,
            limit=limit,
            journal_path=self.server.db,
        )

    def _session_page(self, session_id: str, query: dict[str, str]) -> str:
        view = query.get("view") or "log"
        if view not in api.VIEWS:
            raise HttpError(400, f"view: one of {', '.join(api.VIEWS)}, not {view!r}")
        with self.server.pool.borrow() as j:
            s = j.session(session_id)
            forks = _forks(j, s, query.get("forks_after") or None)
            if view == "log":
                body = self._log_body(j, s, query)
            else:
                tail = _int(query, "tail", minimum=1, maximum=SEQ_MAX, default=MESSAGES_PAGE)
                assert tail is not None
                if view == "messages":
                    body = pages.messages_view(s, j.messages(session_id, tail=tail), None, tail=tail, view=view)
                else:
                    shaped = j.provider_view(session_id, tail=tail)
                    body = pages.messages_view(s, shaped.messages, shaped.missing, tail=tail, view=view)
        header = pages.session_header(s, forks, view)
        title = f"session {pages.text(s.id, 80)}"
        return pages.layout(title, header + body, journal_path=self.server.db)

    def _log_body(self, j: Journal, s: Session, query: dict[str, str]) -> str:
        """A page of the log: from ``?since=`` on, or its end (``?tail=N`` events, 200 by default)."""
        since = _int(query, "since")
        size = _int(query, "tail", minimum=0, maximum=LOG_MAX, default=LOG_PAGE)
        assert size is not None
        start = max(s.count - size, 0) if since is None else min(since, s.count)
        stop = min(start + size, s.count)
        low = max(start - MARGIN, 0)
        window = j.events(s.id, since=low, limit=stop - low + MARGIN)
        events = [e for e in window if start <= e.seq < stop]
        follow = None
        if stop >= s.count:  # the end of the log: the page can follow it live
            follow = pages.url("sessions", s.id, "events", since=stop, start=start)
        return pages.log_view(s, events, window, follow=follow, page=size or LOG_PAGE)

    # -- live following ------------------------------------------------------------------------

    def _follow(self, session_id: str, query: dict[str, str], head: bool) -> None:
        """Server-sent events: each event from ``since`` on (or after ``Last-Event-ID``, when
        the browser reconnects), rendered as the page renders it, as it is appended.

        Each poll reads the new events (at most ``LIVE_BATCH``) with a margin before them, to
        pair calls with results, and forgets them once sent: nothing grows with the session."""
        since = _int(query, "since")
        last = self.headers.get("Last-Event-ID", "")
        if re.fullmatch(r"[0-9]{1,18}", last):
            since = int(last) + 1
        with self.server.pool.borrow() as j:
            count = j.count(session_id)  # an unknown session: 404 before the stream starts
        since = count if since is None else since
        start = _int(query, "start", default=since)
        assert start is not None
        self._headers(200, "text/event-stream; charset=utf-8", None, {"X-Accel-Buffering": "no"})
        if head:
            return
        self.wfile.write(b"retry: 1000\n\n")
        renderer = pages.LogRenderer(session_id, pages.Calls.of(()), shown=range(start, SEQ_MAX))
        primed = False
        quiet_since = time.monotonic()
        while not self.server.stopping.is_set() and not self._client_gone():
            low = max(since - MARGIN, 0)
            try:
                with self.server.pool.borrow() as j:
                    window = j.events(session_id, since=low, limit=since - low + LIVE_BATCH)
            except SessionNotFound:
                self.wfile.write(b"event: gone\ndata: {}\n\n")
                return
            if not primed:  # where the first new event sits: inside a turn, a step?
                if window and window[0].seq > 0:
                    renderer.start_at(window)
                for e in window:
                    if e.seq < since:
                        renderer.advance(e)
                primed = True
            batch = [e for e in window if e.seq >= since]
            if batch:
                renderer.calls = pages.Calls.of(window)
                self.wfile.write("".join(_sse(renderer, e) for e in batch).encode())
                since = batch[-1].seq + 1
                quiet_since = time.monotonic()
                if len(batch) == LIVE_BATCH:
                    continue  # a backlog: send the next batch at once
            elif time.monotonic() - quiet_since > KEEPALIVE_S:
                self.wfile.write(b": keepalive\n\n")  # finds a client gone without a word
                quiet_since = time.monotonic()
            del window, batch
            self.server.stopping.wait(POLL_S)

    def _client_gone(self) -> bool:
        """Whether the browser closed the stream (it sends nothing else on it)."""
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True


def _sse(renderer: pages.LogRenderer, event: journal.Event) -> str:
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


def _forks(j: Journal, s: Session, after: str | None) -> pages.Forks:
    """The session's forks, ``FORKS_SHOWN`` a page (``sessions(parent_id=)``: one index seek),
    after the fork ``after`` when the user asks for more."""
    try:
        page = j.sessions(parent_id=s.id, limit=FORKS_SHOWN, after=None if after is None else check_session_id(after))
    except SessionNotFound:  # `after` purged meanwhile: from the start again
        page = j.sessions(parent_id=s.id, limit=FORKS_SHOWN)
    return pages.Forks(tuple(page), page[-1].id if len(page) == FORKS_SHOWN else None)


def run(
    db: str, *, host: str, port: int, allow_hosts: Iterable[str] = (), log: Callable[[str], None] | None = None
) -> Viewer:
    """A started viewer, serving in a daemon thread (tests, the screenshot): stop it with
    ``viewer.shutdown(); viewer.server_close()``."""
    viewer = Viewer(db, host=host, port=port, allow_hosts=allow_hosts, log=log)
    threading.Thread(
        target=viewer.serve_forever, kwargs={"poll_interval": 0.05}, name="journal-serve", daemon=True
    ).start()
    return viewer


__all__ = ["HttpError", "Viewer", "allowed_hosts", "is_loopback", "run"]
