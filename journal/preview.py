"""The previews part: a page of events as a viewer shows them, cut to a few characters in SQL.

A viewer shows a few thousand characters of each stored string; a page of the log must not
decode whole events to show that (a session of 4 MiB messages would cost megabytes a row). The
store's ``sql.previews`` (one statement written natively for each backend) returns each event's
seq, type, time and size, and its fields with every string, and every object's or array's JSON
text, cut to ``chars`` characters inside the database. What was cut is said, never hidden: a cut
string is a ``Clipped`` (a ``str`` that knows it was cut), and ``Preview.cut`` names its fields.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from journal.codec import check_int
from journal.lineage import chain_txn, next_seq_txn
from journal.model import Event
from journal.store import Database, Store
from journal.store.statements import PREVIEW_STRUCTURE, STRUCTURE_FIELDS

FIELDS_MAX = 64  # fields of one event a preview reads (and calls of one tool_calls list)
CHARS_MAX = 100_000
LIMIT_MAX = 10_000


class Clipped(str):
    """A stored string cut short by the preview read: the first characters of a longer one."""

    __slots__ = ()


@attrs.frozen
class Preview:
    """One event as a page shows it.

    ``data`` holds its first ``FIELDS_MAX`` fields, each string cut to the read's ``chars``
    characters (a ``Clipped`` then) and each object or array kept whole if its JSON text fits,
    else its JSON text cut (a ``Clipped``); ``tool_calls`` keeps each call's ``id``, ``name`` and
    ``arguments``; a ``metadata`` too long to keep whole keeps its ``synthetic`` and ``risk``.
    ``cut`` names the fields that were cut, ``omitted`` counts the fields left out (at least that
    many), ``size`` is the stored event's size in bytes."""

    session_id: str
    seq: int
    type: str
    time_ms: int
    size: int
    data: dict[str, Any]
    cut: tuple[str, ...]
    omitted: int

    @property
    def whole(self) -> bool:
        """Whether ``data`` is the event's whole data (nothing cut or left out)."""
        return not self.cut and not self.omitted

    def event(self) -> Event:
        """The preview as an ``Event`` (its ``data`` the cut one), for code that renders events."""
        return Event(self.session_id, self.seq, self.type, self.data, self.time_ms)


class Previews:
    """``previews``: pages of events cut in SQL, read through the fork chain."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def previews(
        self,
        session_id: str,
        *,
        since: int | None = None,
        tail: int | None = None,
        limit: int = 200,
        chars: int = 2000,
    ) -> list[Preview]:
        """At most ``limit`` events of the session from ``since`` on (or its last ``tail``, or
        from its start), in seq order, each field cut to ``chars`` characters in the database.

        The cost follows ``limit`` and ``chars``, not the size of the events: nothing of an
        event beyond its first ``chars`` characters a field reaches Python."""
        start = 0 if since is None else check_int("since", since)
        size = check_int("limit", limit, maximum=LIMIT_MAX)
        last_n = None if tail is None else check_int("tail", tail, maximum=LIMIT_MAX)
        cut = check_int("chars", chars, maximum=CHARS_MAX)
        with self._store.read() as db:
            if last_n is not None:
                start = max(next_seq_txn(db, session_id) - last_n, start)
                size = min(size, last_n)
            stop = start + size
            out: list[Preview] = []
            for owner, first, last in chain_txn(db, session_id, start, stop, newest_first=False):
                rows = db.execute(db.sql.previews, (owner, first, last, cut, FIELDS_MAX))
                out.extend(_previews(db, session_id, owner, rows, cut))
            return out

    def change_token(self) -> object:
        """A value that differs once another connection has committed to the journal, read
        without touching a table (SQLite's ``data_version``, PostgreSQL's snapshot horizon): a
        follower compares two from the same ``Journal`` and reads events only when they differ.
        A change may be anyone's commit, to any session: it says "look", not what changed."""
        with self._store.read() as db:
            return db.value(db.sql.change_token)


def previews_at_txn(db: Database, session_id: str, owner: str, seqs: list[int], chars: int) -> list[Preview]:
    """The events of ``owner``'s own segment at ``seqs``, as ``session_id``'s previews cut to
    ``chars`` characters in SQL (``sql.previews_at``: one index seek a seq), in seq order."""
    if not seqs:
        return []
    bindings = (owner, min(seqs), max(seqs) + 1, chars, FIELDS_MAX, json.dumps(sorted(set(seqs))))
    return _previews(db, session_id, owner, db.execute(db.sql.previews_at, bindings), chars)


def _previews(db: Database, session_id: str, owner: str, rows: Any, chars: int) -> list[Preview]:
    """The rows of ``sql.previews``/``previews_at`` (events of ``owner``'s segment) as previews.
    An event one of whose fields the statement flags (a NUL it could not cut) is read whole here."""
    out = []
    for seq, type_, time_ms, size, fields in list(rows):
        items = json.loads(fields or "[]")
        if any(item[3] for item in items):  # a NUL the database's text functions cannot cut
            text = db.value("SELECT data FROM events WHERE session_id = ? AND seq = ?", (owner, seq))
            items = _cut_fields(json.loads(text), chars)
        out.append(_preview(session_id, seq, type_, time_ms, size, items))
    return out


def _preview(session_id: str, seq: int, type_: str, time_ms: int, size: int, items: list[Any]) -> Preview:
    data: dict[str, Any] = {}
    cut: list[str] = []
    omitted = max(len(items) - FIELDS_MAX, 0)
    for key, value, was_cut, *_nul in items[:FIELDS_MAX]:
        if key == "tool_calls" and isinstance(value, list):
            value = [_call(c) for c in value]
        if was_cut:
            cut.append(key)
            if isinstance(value, str):
                value = Clipped(value)
        data[key] = value
    return Preview(session_id, seq, type_, time_ms, size, data, tuple(cut), omitted)


def _cut_fields(data: dict[str, Any], chars: int) -> list[list[Any]]:
    """The ``[key, value, cut]`` items the previews statement makes of an event's data, made in
    Python: for an event whose text holds a NUL, which the database's text functions cannot
    cut (SQLite ends a string at it, PostgreSQL's json operators refuse it). The same rules."""
    structure = max(chars, PREVIEW_STRUCTURE)
    items: list[list[Any]] = []
    for key, value in list(data.items())[: FIELDS_MAX + 1]:
        limit = structure if key in STRUCTURE_FIELDS else chars
        text = value if isinstance(value, str) else _json(value) if isinstance(value, (dict, list)) else None
        if key == "tool_calls" and isinstance(value, list):
            out: Any = [_cut_call(c, chars, structure) for c in value[:FIELDS_MAX]]
        elif key == "metadata" and isinstance(value, dict) and text is not None and len(text) > limit:
            out = {"synthetic": value.get("synthetic"), "risk": value.get("risk")}  # the marker, kept
        elif text is not None and len(text) > limit:
            out = text[:limit]
        else:
            out = value
        items.append([key[:structure], out, text is not None and len(text) > limit])
    return items


def _cut_call(call: Any, chars: int, structure: int) -> Any:
    if not isinstance(call, dict):
        return None
    out: dict[str, Any] = {}
    for name in ("id", "name"):
        value = call.get(name)
        out[name] = value[:structure] if isinstance(value, str) else value
    arguments = call.get("arguments")
    text = None if "arguments" not in call else _json(arguments)
    cut = text is not None and len(text) > chars
    out["arguments"] = text[:chars] if cut and text is not None else arguments
    out["cut"] = cut
    return out


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _call(call: Any) -> Any:
    """One call of a ``tool_calls`` preview: its ``cut`` flag taken out, its cut arguments a ``Clipped``."""
    if not isinstance(call, dict):
        return call
    was_cut = call.pop("cut", False)
    if was_cut and isinstance(call.get("arguments"), str):
        call["arguments"] = Clipped(call["arguments"])
    return call


__all__ = ["CHARS_MAX", "Clipped", "Preview", "Previews", "previews_at_txn"]
