"""The viewer's JSON documents: the same shapes as the command line's ``--json`` (docs/cli.md).

Each function returns the document ``journal sessions|show|scan|indeterminate --json`` prints for
the same file, as text chunks of the same bytes (``journal.escape.dumps`` with ``indent=2``), so
a script can move between the two without noticing. The timeline and the fork tree, which no
command prints, are laid out the same way (their shapes: docs/serve.md). Long documents (every session of the file,
a whole log) are produced a page at a time: the server's memory follows the page, not the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from journal import InvalidArgument, Journal, Session
from journal.escape import dumps
from journal.serve.forks import fork_tree
from journal.serve.timeline import timeline as _timeline

# Rows read per query when a whole listing or a whole log is streamed.
PAGE = 1000
PAGE_BYTES = 4 * 1024 * 1024  # stored bytes of events a streamed page of a log holds (or one event)
VIEWS = ("log", "messages", "provider")


def stream(
    head: dict[str, Any], key: str, pages: Iterable[list[Any]], after: dict[str, Any] | None = None
) -> Iterator[str]:
    """``dumps({**head, key: items, **after}, indent=2)``, ``items`` given a page at a time: the
    same bytes as the whole document, without holding it.

    ``dumps(page, indent=2)`` lays the page's items out one level shallower than the document
    does; with its brackets cut off and two spaces put after each newline it is the document's
    text for them (every raw newline is the layout's: JSON escapes those inside strings). The
    document's own ``"key": []`` is the one at two spaces of indentation (a nested one has more)."""
    empty = dumps({**head, key: [], **(after or {})}, indent=2)
    marker = "\n  " + dumps(key) + ": []"
    at = empty.index(marker) + len(marker) - len("[]")
    prefix, closing = empty[:at], empty[at + len("[]") :]
    opened = False
    for items in pages:
        if not items:
            continue
        text = dumps(items, indent=2)  # "[\n  {...},\n  {...}\n]"
        yield (",\n  " if opened else prefix + "[\n  ") + text[2:-2].replace("\n", "\n  ")
        opened = True
    yield ("\n  ]" + closing + "\n") if opened else empty + "\n"


def whole(document: Any) -> str:
    """A document that is small enough to build at once, as the command line prints it."""
    return dumps(document, indent=2) + "\n"


def sessions(
    j: Journal, *, limit: int | None = None, after: str | None = None, prefix: str | None = None
) -> Iterator[str]:
    """``journal sessions --json``: ``{"sessions": [session, ...]}``, oldest first.

    Without ``limit``, every session (read a page at a time, as the command line does); with
    it, the page of at most ``limit`` sessions after the session ``after``."""
    if limit is not None:
        page = j.sessions(limit=limit, after=after, prefix=prefix)
        return stream({}, "sessions", [[s.to_dict() for s in page]])
    return stream({}, "sessions", ([s.to_dict() for s in page] for page in _session_pages(j, after, prefix)))


def _session_pages(j: Journal, after: str | Session | None, prefix: str | None) -> Iterator[list[Session]]:
    while True:
        page = j.sessions(limit=PAGE, after=after, prefix=prefix)
        if page:
            yield page
        if len(page) < PAGE:
            return
        after = page[-1]  # a Session: paging goes on even if it is purged meanwhile


def show(
    j: Journal, session_id: str, *, view: str = "log", since: int | None = None, tail: int | None = None
) -> Iterator[str]:
    """``journal show SESSION --json``: ``{"session", "view", "items"}`` (+ ``"missing"`` for the
    provider view). The log view streams its events a page at a time, up to the count the
    ``session`` field gives (events appended meanwhile are left for the next request)."""
    if view not in VIEWS:
        raise InvalidArgument("view", f"must be one of {', '.join(VIEWS)}, not {view!r}")
    if since is not None and view != "log":
        raise InvalidArgument("since", f"applies to the log view only, not view={view}")
    info = j.session(session_id)
    head: dict[str, Any] = {"session": info.to_dict(), "view": view}
    if view == "log":
        start = since or 0
        if tail is not None:
            start = max(start, info.count - tail)
        return stream(
            head, "items", ([e.to_dict() for e in page] for page in _log_pages(j, session_id, start, info.count))
        )
    if view == "messages":
        return stream(head, "items", _message_pages(j.messages(session_id, tail=tail)))
    shaped = j.provider_view(session_id, tail=tail)
    missing = [
        {"assistant_seq": m.assistant_seq, "tool_call_id": m.tool_call_id, "name": m.name} for m in shaped.missing
    ]
    return stream(head, "items", _message_pages(list(shaped.messages)), {"missing": missing})


def _message_pages(messages: list[Any]) -> Iterator[list[Any]]:
    """The messages a page of about ``PAGE_BYTES`` (or one message) at a time, each let go once
    it is written: the document is never built whole."""
    messages.reverse()
    while messages:
        page: list[Any] = []
        size = 0
        while messages and (not page or size < PAGE_BYTES):
            item = messages.pop().to_dict()
            content = item.get("content")
            size += len(content) if isinstance(content, str) else 256
            page.append(item)
        yield page


def _log_pages(j: Journal, session_id: str, start: int, stop: int) -> Iterator[list[Any]]:
    """The events ``start..stop-1`` of a log, a page at a time: up to ``PAGE`` events, fewer
    when they are large (a page holds about ``PAGE_BYTES``, or one event), so the server holds
    a page's bytes, not the log's. The sizes come first, from a preview read that cuts every
    field to nothing in SQL."""
    while start < stop:
        sizes = j.previews(session_id, since=start, limit=min(PAGE, stop - start), chars=0)
        if not sizes:
            return
        count, total = 0, 0
        for p in sizes:
            if count and total + p.size > PAGE_BYTES:
                break
            count, total = count + 1, total + p.size
        page = j.events(session_id, since=start, limit=count)
        if not page:
            return
        yield page
        start = page[-1].seq + 1


def scan(j: Journal) -> str:
    """``journal scan --json``: the restart scan (read-only)."""
    return whole(j.scan().to_dict())


def indeterminate(j: Journal, session_id: str | None = None) -> str:
    """``journal indeterminate [SESSION] --json``: the calls awaiting an operator."""
    return whole({"indeterminate": [attrs.asdict(call) for call in j.indeterminate(session_id)]})


def tools(j: Journal, session_id: str | None = None) -> str:
    """``{"tools": [ToolStats.to_dict(), ...]}``: per tool name, most called first (``Journal.tool_stats``)."""
    return whole({"session_id": session_id, "tools": [t.to_dict() for t in j.tool_stats(session_id)]})


def timeline(j: Journal, session_id: str, *, since: int | None = None, until: int | None = None) -> str:
    """The session's timeline, what its page draws (``journal.serve.timeline.Timeline.to_dict``)."""
    return whole(_timeline(j, session_id, since=since, until=until).to_dict())


def forks(j: Journal, session_id: str, *, after: str | None = None) -> str:
    """The session's fork tree, what its page draws (``journal.serve.forks.ForkTree.to_dict``)."""
    return whole(fork_tree(j, j.session(session_id), after=after).to_dict())
