"""``journal serve``: a read-only web viewer of one journal, on Starlette served by uvicorn.

``Viewer`` binds its socket, then runs uvicorn on it (``serve_forever``; ``run`` starts it in a
thread). What it guarantees, and how (docs/serve.md):

- **Read-only.** The journals are opened with ``readonly=True`` (SQLite's read-only flag and
  ``query_only``); every method but GET and HEAD is refused with 405 (``journal.serve.gate``).
- **Loopback, and only its own name.** It binds 127.0.0.1 unless told otherwise (the command
  warns on stderr then); a request whose ``Host`` is not the bound host:port or a loopback name
  with that port is refused with 421 (400 without one): DNS rebinding.
- **Content stays text (G14).** Pages are rendered by ``journal.serve.pages``; every response
  forbids inline script, foreign sources, sniffing, framing and referrers.
- **Bounded work.** Reads run in at most ``threads`` worker threads, each with a read-only
  ``Journal`` from a pool (an apsw connection is never used by two threads at once); a page
  reads what it shows, cut in SQL (``journal.preview``). Connections have limits: a client
  must send its request's headers within ``read_timeout_s``, a client that stops reading a
  response (the server's buffer full) is cut off after ``write_timeout_s``, an idle keep-alive
  connection is closed after ``keep_alive_s``, at most ``max_connections`` connections are open,
  ``max_requests`` requests run at once and ``max_streams`` live streams are open (503 beyond
  each, with the security headers), and the listen backlog is ``backlog``.
- **Its log cannot stall it.** One line a request, escaped (G14) and redacted (a DSN's
  password never reaches it), written by a thread of its own from a bounded queue: a full
  stderr pipe drops lines, it never blocks a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import queue
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import attrs
import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

import journal
from journal import Journal
from journal.escape import escape
from journal.serve.gate import SECURITY, Gate, HttpError
from journal.serve.routes import router
from journal.serve.watch import Watcher
from journal.store.target import redact

T = TypeVar("T")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


@attrs.frozen
class Limits:
    """The viewer's limits on connections and work (see the module's docstring)."""

    threads: int = 4
    pool: int = 4
    max_requests: int = 64
    max_streams: int = 16
    max_connections: int = 160  # open connections at once; beyond, each request gets a 503
    read_timeout_s: float = 10.0
    write_timeout_s: float = 30.0  # a response the client has stopped reading, from its buffer filling
    keep_alive_s: float = 5.0
    backlog: int = 128
    poll_s: float = 0.15  # how often live following counts the followed sessions' events


class _Pool:
    """Read-only journals for the worker threads, each lent to one thread at a time; a few are
    kept open between requests, more are opened under load."""

    def __init__(self, path: str, size: int) -> None:
        self._path = path
        self._size = size
        self._idle: list[Journal] = []
        self._lock = threading.Lock()
        self._closed = False

    def take(self) -> Journal:
        with self._lock:
            if self._closed:
                raise HttpError(503, "the viewer is stopping")
            lent = self._idle.pop() if self._idle else None
        return lent if lent is not None else journal.open(self._path, readonly=True)

    def give(self, lent: Journal) -> None:
        with self._lock:
            keep = not self._closed and len(self._idle) < self._size
            if keep:
                self._idle.append(lent)
        if not keep:
            lent.close()

    @contextlib.contextmanager
    def borrow(self) -> Iterator[Journal]:
        lent = self.take()
        try:
            yield lent
        finally:
            self.give(lent)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for j in idle:
            j.close()


class _LogWriter:
    """Log lines, escaped (G14) and redacted, handed to ``sink`` by a thread of their own.

    The queue is bounded and never waited on: when ``sink`` is stuck (a full stderr pipe), lines
    are dropped and counted, and a request never blocks on its log line."""

    def __init__(self, sink: Callable[[str], None] | None, size: int = 1024) -> None:
        self._sink = sink
        self._lines: queue.Queue[str | None] = queue.Queue(size)
        self.dropped = 0
        self._thread: threading.Thread | None = None
        if sink is not None:
            self._thread = threading.Thread(target=self._drain, name="journal-serve-log", daemon=True)
            self._thread.start()

    def __call__(self, line: str) -> None:
        if self._sink is None:
            return
        try:
            self._lines.put_nowait(escape(redact(line)))
        except queue.Full:
            self.dropped += 1

    def _drain(self) -> None:
        assert self._sink is not None
        while (line := self._lines.get()) is not None:
            if self.dropped:
                dropped, self.dropped = self.dropped, 0
                self._sink(f"journal serve: {dropped} log lines dropped (the log could not keep up)")
            with contextlib.suppress(Exception):
                self._sink(line)

    def close(self, timeout_s: float = 2.0) -> None:
        if self._thread is not None:
            with contextlib.suppress(queue.Full):
                self._lines.put(None, timeout=timeout_s)
            self._thread.join(timeout_s)


class _UvicornLog(logging.Handler):
    """uvicorn's own warnings (a malformed request, ...) as one line of the viewer's log each."""

    def __init__(self, log: _LogWriter) -> None:
        super().__init__(logging.WARNING)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        self._log(f"journal serve: {record.levelname.lower()}: {record.getMessage()}")


def _protocol(limits: Limits, refuse: Any) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol with a read and a write timeout, a cap on connections and
    the security headers on uvicorn's own refusals.

    A connection that has not sent a whole request's headers within ``read_timeout_s`` is
    closed (uvicorn times out idle keep-alive connections, not a client that opens one and
    sends nothing, or a byte a minute). A connection whose client stops reading (the
    transport's buffer stays over its high-water mark for ``write_timeout_s``) is aborted: else
    uvicorn waits for it forever, holding the request's slot, a live stream's, and its memory.
    A connection beyond ``max_connections`` has its requests answered by ``refuse`` (the gate's
    503, with its headers and its log line) instead of uvicorn's bare ``limit_concurrency`` 503.
    A request h11 cannot parse gets uvicorn's 400 with the security headers too."""

    class Protocol(H11Protocol):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)  # (adds this one to the server's connections)
            if len(self.connections) > limits.max_connections:
                self.app = refuse  # this connection's requests only
            self._read_timer = self.loop.call_later(limits.read_timeout_s, self._read_timed_out)
            self._write_timer: asyncio.TimerHandle | None = None

        def pause_writing(self) -> None:
            super().pause_writing()
            if self._write_timer is None:
                self._write_timer = self.loop.call_later(limits.write_timeout_s, self._write_timed_out)

        def resume_writing(self) -> None:
            super().resume_writing()
            if self._write_timer is not None:
                self._write_timer.cancel()
                self._write_timer = None

        def _write_timed_out(self) -> None:
            self._write_timer = None
            if self.flow.write_paused and not self.transport.is_closing():
                self.transport.abort()  # connection_lost follows: the response's send sees a disconnect

        def send_400_response(self, msg: str) -> None:
            # uvicorn's own, with the viewer's headers: it writes this one past the ASGI app.
            body = msg.encode("ascii")
            headers = [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
                *SECURITY,
            ]
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body)):
                self.transport.write(self.conn.send(event))
            self.transport.write(self.conn.send(h11.EndOfMessage()))
            self.transport.close()

        def _read_timed_out(self) -> None:
            cycle: object = self.cycle  # typed as always set, it is None between requests
            if cycle is None and not self.transport.is_closing():
                self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            self._read_timer.cancel()
            if self._write_timer is not None:
                self._write_timer.cancel()
            super().connection_lost(exc)

    return Protocol


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


class Viewer:
    """The viewer of the journal at ``db``: ``serve_forever()`` runs it, ``shutdown()`` and
    ``server_close()`` stop it (live streams end within one poll).

    The journal is opened once here, so a path that is not a journal fails before any port is
    bound. ``port=0`` picks a free port (``viewer.port``). ``log`` receives one escaped,
    redacted line per request (none when it is ``None``)."""

    def __init__(
        self,
        db: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        allow_hosts: Iterable[str] = (),
        log: Callable[[str], None] | None = None,
        limits: Limits = Limits(),
    ) -> None:
        with journal.open(db, readonly=True):
            pass  # NotAJournal, SchemaTooNew, a missing file: refused before anything listens
        self.db = db
        self.shown_db = redact(db)
        self.host = host
        self.limits = limits
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind((host.strip("[]"), port))
            self._socket.listen(limits.backlog)
        except OSError:
            self._socket.close()
            raise
        self.port: int = self._socket.getsockname()[1]
        self.allowed = allowed_hosts(host, self.port, allow_hosts)
        self.log = _LogWriter(log)
        self.pool = _Pool(db, limits.pool)
        self.max_streams = limits.max_streams
        self.streams = 0
        self.stopping = threading.Event()
        self.watcher = Watcher(lambda: journal.open(db, readonly=True), poll_s=limits.poll_s, stopping=self.stopping)
        self._limiter: anyio.CapacityLimiter | None = None
        self.gate = Gate(
            router(self), allowed=self.allowed, log=self.log, shown_db=self.shown_db, max_requests=limits.max_requests
        )
        uvicorn_log = logging.getLogger("uvicorn.error")
        uvicorn_log.handlers = [_UvicornLog(self.log)]
        uvicorn_log.propagate = False
        busy = HttpError(503, f"the viewer is busy: too many connections at once (at most {limits.max_connections})")
        config = uvicorn.Config(
            self.gate,
            http=_protocol(limits, self.gate.refusing(busy)),
            lifespan="off",
            log_config=None,
            access_log=False,
            server_header=False,
            timeout_keep_alive=int(limits.keep_alive_s),
            # No limit_concurrency: its 503 would carry none of the viewer's headers; the protocol
            # caps connections (max_connections) and the gate requests (max_requests).
            backlog=limits.backlog,
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    # -- what the routes use ----------------------------------------------------------------------

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        if self._limiter is None:  # made in the event loop's thread, on first use
            self._limiter = anyio.CapacityLimiter(self.limits.threads)
        return self._limiter

    async def in_thread(self, work: Callable[[], T]) -> T:
        """``work()`` in a worker thread, at most ``limits.threads`` at once."""
        return await anyio.to_thread.run_sync(work, limiter=self.limiter)

    async def read(self, work: Callable[[Journal], T]) -> T:
        """``work(j)`` in a worker thread, with a journal borrowed from the pool."""

        def borrowed() -> T:
            with self.pool.borrow() as j:
                return work(j)

        return await self.in_thread(borrowed)

    async def hold(self) -> Journal:
        """A journal from the pool for a streamed response (``release`` it at its end)."""
        return await self.in_thread(self.pool.take)

    def release(self, j: Journal) -> None:
        self.pool.give(j)

    # -- running -----------------------------------------------------------------------------------

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def url(self) -> str:
        return f"http://{_bracketed(self.host)}:{self.port}/"

    @property
    def started(self) -> bool:
        return self._server.started

    def serve_forever(self) -> None:
        """Serve until ``shutdown()`` (or, in the main thread, SIGINT or SIGTERM)."""
        self._server.run(sockets=[self._socket])

    def shutdown(self) -> None:
        self.stopping.set()
        self.watcher.stop()  # live streams wake, see it and end
        self._server.should_exit = True
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def server_close(self) -> None:
        self.stopping.set()
        self.watcher.stop()
        self._server.should_exit = True
        self._socket.close()
        self.pool.close()
        self.log.close()


def run(
    db: str,
    *,
    host: str,
    port: int,
    allow_hosts: Iterable[str] = (),
    log: Callable[[str], None] | None = None,
    limits: Limits = Limits(),
) -> Viewer:
    """A started viewer, serving in a daemon thread (tests, the screenshot): stop it with
    ``viewer.shutdown(); viewer.server_close()``."""
    viewer = Viewer(db, host=host, port=port, allow_hosts=allow_hosts, log=log, limits=limits)
    thread = threading.Thread(target=viewer.serve_forever, name="journal-serve", daemon=True)
    viewer._thread = thread
    thread.start()
    while not viewer.started:
        if not thread.is_alive():
            viewer.server_close()
            raise RuntimeError("the viewer stopped while starting")
        viewer.stopping.wait(0.01)
    return viewer


__all__ = ["HttpError", "Limits", "Viewer", "allowed_hosts", "is_loopback", "run"]
