"""The gate every request of the viewer passes: an ASGI middleware in front of its routes.

Before a route runs: the ``Host`` header must be the viewer's own name (421; 400 without one
or with two: DNS rebinding), the method GET or HEAD (405), and fewer than ``max_requests``
requests in flight (503). On every response, refusals and errors included: the security
headers (CSP, nosniff, no referrer, no framing), ``Cache-Control: no-store`` and
``Server-Timing``. An exception a route raises becomes its status (``HttpError``'s, 404 for an
unknown session, 400 for a bad argument, 500 else) with a page or a JSON body; a bug's
traceback goes to the log, escaped and redacted. Each request is one line of the log, a client
that went away included (``... 200 1234 (client went away)``), never a traceback.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from journal import InvalidArgument, JournalError, SessionNotFound
from journal.escape import dumps
from journal.serve import pages
from journal.store.target import redact

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

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
    ("Cache-Control", "no-store"),
)
SECURITY = [(name.lower().encode(), value.encode()) for name, value in SECURITY_HEADERS]
_SECURITY = SECURITY
_OWN = {name for name, _ in _SECURITY}


class HttpError(Exception):
    """A request the viewer refuses: its status and a message (shown escaped)."""

    def __init__(self, status: int, message: str, *, allow: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.allow = allow


class Gate:
    """The middleware: ``allowed`` is the set of ``Host`` values answered, ``log`` takes one
    line a request (already escaped by the caller's writer), ``shown_db`` is the journal's name
    as pages show it (its password redacted)."""

    def __init__(
        self, app: App, *, allowed: frozenset[str], log: Callable[[str], None], shown_db: str, max_requests: int
    ) -> None:
        self.app = app
        self.allowed = allowed
        self.log = log
        self.shown_db = shown_db
        self.max_requests = max_requests
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        started = time.perf_counter()
        state: dict[str, Any] = {"status": None, "bytes": 0, "done": False}

        async def guarded_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                timing = f"app;dur={(time.perf_counter() - started) * 1000:.2f}".encode()
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _OWN]
                message = {**message, "headers": [*headers, *_SECURITY, (b"server-timing", timing)]}
                state["status"] = message["status"]
            elif message["type"] == "http.response.body":
                state["bytes"] += len(message.get("body", b""))
                state["done"] = not message.get("more_body", False)
            await send(message)

        note = ""
        try:
            self._check(scope)
            if self.in_flight >= self.max_requests:
                raise HttpError(503, "the viewer is busy: too many requests at once")
            self.in_flight += 1
            try:
                await self.app(scope, receive, guarded_send)
            finally:
                self.in_flight -= 1
        except OSError:
            note = "client went away"
        except Exception as exc:
            note = await self._fail(scope, guarded_send, exc, started=state["status"] is not None)
        if state["status"] is not None and not state["done"] and not note:
            note = "client went away"
        self._log_line(scope, state, note)

    def refusing(self, error: HttpError) -> App:
        """An app that answers every request as this gate would answer ``error`` (its page or
        its JSON, the headers, the log line), then closes the connection: what a connection
        beyond the viewer's cap is answered."""

        async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
            raise error

        gate = Gate(refuse, allowed=self.allowed, log=self.log, shown_db=self.shown_db, max_requests=self.max_requests)

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            async def closing(message: Message) -> None:
                if message["type"] == "http.response.start":
                    message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
                await send(message)

            await gate(scope, receive, closing)

        return app

    def _check(self, scope: Scope) -> None:
        hosts = [v for k, v in scope.get("headers", []) if k.lower() == b"host"]
        if len(hosts) != 1:
            raise HttpError(400, "a request needs exactly one Host header")
        if hosts[0].decode("latin-1").strip().lower() not in self.allowed:
            raise HttpError(421, "this viewer does not answer for that host name")
        method = scope.get("method", "")
        if method not in ("GET", "HEAD"):
            raise HttpError(405, f"{method} is not allowed: the viewer is read-only", allow="GET, HEAD")

    async def _fail(self, scope: Scope, send: Send, exc: Exception, *, started: bool) -> str:
        """Answer ``exc`` with its status (when the response has not started); returns the
        log line's note."""
        allow = None
        if isinstance(exc, HttpError):
            status, message, allow = exc.status, exc.message, exc.allow
        elif isinstance(exc, SessionNotFound):
            status, message = 404, str(exc)
        elif isinstance(exc, InvalidArgument):
            status, message = 400, str(exc)
        elif isinstance(exc, JournalError):
            status, message = 500, str(exc)
        else:
            status, message = 500, "internal error"
            self.log(redact(traceback.format_exc()))
        message = redact(message)
        if started:
            return f"cut short: {message}"  # too late for a status
        api = scope.get("path", "").startswith("/api/")
        if api:
            body, content_type = (dumps({"error": message}) + "\n").encode(), b"application/json"
        else:
            body = pages.error_page(status, message, journal_path=self.shown_db).encode()
            content_type = b"text/html; charset=utf-8"
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
        if allow is not None:
            headers.append((b"allow", allow.encode()))
        try:
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": b"" if scope.get("method") == "HEAD" else body})
        except OSError:
            return "client went away"
        return ""

    def _log_line(self, scope: Scope, state: dict[str, Any], note: str) -> None:
        client = scope.get("client") or ("-", 0)
        target = scope.get("raw_path", b"").decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        status = state["status"] if state["status"] is not None else "-"
        request = f'"{scope.get("method", "-")} {target} HTTP/{scope.get("http_version", "1.1")}"'
        line = f"{client[0]} {request} {status} {state['bytes']}"
        self.log(redact(line + (f" ({note})" if note else "")))


__all__ = ["CSP", "SECURITY", "SECURITY_HEADERS", "Gate", "HttpError"]
