"""The sessions part: looking a session up, and listing them in pages (DESIGN §8, §11).

It reads the ``sessions`` table (which the log part writes) and ``session_meta`` (the index of
the metas' top-level entries that the schema's triggers keep). A page is a seek into the index
of the listing order and a walk of ``limit`` entries, never a sort of every session.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

import attrs

from journal.codec import check_int, check_text
from journal.errors import InvalidArgument, SessionNotFound
from journal.lineage import NO_LIMIT
from journal.log import check_session_id
from journal.model import Session
from journal.store import Statements, Store

# A session's row, in ``Session``'s field order: each subquery is one seek to the end of the
# session's run in the events primary key (session_id, seq), whatever the log's length. A
# session without events of its own has the count it inherits and the time it was created.
_SESSION_ROW = (
    "SELECT s.id, coalesce((SELECT max(seq) + 1 FROM events WHERE session_id = s.id), s.seed_length), "
    "s.created_ms, s.meta, s.parent_id, s.seed_length, "
    "coalesce((SELECT time_ms FROM events WHERE session_id = s.id ORDER BY seq DESC LIMIT 1), s.created_ms) "
    "FROM sessions AS s WHERE s.purged_ms IS NULL"
)
# The listing order is (created_ms, id), the index sessions_created: a page is a seek into it
# and a walk of `limit` entries, never a sort of every session. The page after a session starts
# past its key (a row-value comparison the index serves; after a listed Session its key is
# known, so a page follows it even if it was purged since); no limit is NO_LIMIT. A meta filter
# is a set of sessions found through session_meta's key, sorted for the page.
_EXISTS = "SELECT 1 FROM sessions WHERE id = ? AND purged_ms IS NULL"
_TOTALS = (
    "SELECT count(*), count(s.parent_id), "
    "coalesce(sum((SELECT max(seq) + 1 FROM events WHERE session_id = s.id) - s.seed_length), 0) "
    "FROM sessions AS s WHERE s.purged_ms IS NULL"
)


def _sessions_from_rows(rows: list[tuple[Any, ...]]) -> list[Session]:
    """``Session``s from rows of ``_SESSION_ROW``.

    The metas are decoded by one ``json.loads`` of them all: for a small object, a call of its
    own costs twice the parse, and a listing of 100,000 sessions is measured (DESIGN §11)."""
    texts = [row[3] for row in rows if row[3] is not None]
    if not texts:
        return list(itertools.starmap(Session, rows))
    metas = iter(json.loads("[" + ",".join(texts) + "]"))
    return [
        Session(*row) if row[3] is None else Session(row[0], row[1], row[2], next(metas), row[4], row[5], row[6])
        for row in rows
    ]


# The page after a listed Session (its key known), or after a session id.
_AFTER_SESSION = " AND (s.created_ms, s.id) > (?, ?)"
_AFTER_ID = " AND (s.created_ms, s.id) > (SELECT created_ms, id FROM sessions WHERE id = ? AND purged_ms IS NULL)"


def _page_sql(where: str) -> str:
    """A page of the listing: the sessions that pass ``where``'s terms, in listing order."""
    return f"{_SESSION_ROW}{where} ORDER BY s.created_ms, s.id LIMIT ?"


def statement_shapes(sql: Statements) -> list[str]:
    """One statement of each shape this module builds at run time (``tests/test_statements.py``
    prepares them on both backends): pages with no filter and with every filter at once."""
    every, _ = _session_filters(sql, {"k": "v", "n": 1}, "p", "x")
    return [_page_sql(where + after) for where in ("", every) for after in ("", _AFTER_SESSION, _AFTER_ID)]


def _session_filters(sql: Statements, meta: object, prefix: object, parent_id: object) -> tuple[str, list[Any]]:
    """The WHERE terms (and their arguments) of ``sessions(meta=, prefix=, parent_id=)`` in the
    store's dialect (``sql``: its meta lookup), refused when bad."""
    where, args = "", []
    if parent_id is not None:
        where += " AND s.parent_id = ?"
        args.append(check_session_id(parent_id))
    if meta is not None:
        if not isinstance(meta, Mapping) or not meta:
            raise InvalidArgument("meta", f"must be a non-empty mapping of meta keys to values, not {meta!r}")
        for key, value in meta.items():
            if not isinstance(key, str):
                raise InvalidArgument("meta", f"keys are strings, not {key!r}")
            check_text("meta", key)
            where += f" AND s.id IN ({sql.meta_sessions})"
            type_, scalar = _json_scalar(value)
            args += [key, type_, sql.meta_value(scalar)]
    if prefix is not None:
        if not isinstance(prefix, str) or not prefix:
            raise InvalidArgument("prefix", f"must be a non-empty string, not {prefix!r}")
        check_text("prefix", prefix)
        # Ids are printable ASCII: every id that starts with the prefix sorts below prefix + DEL.
        where += " AND s.id >= ? AND s.id < ?"
        args += [prefix, prefix + "\x7f"]
    return where, args


def _json_scalar(value: object) -> tuple[str, Any]:
    """How ``json_each`` types and gives a meta value: ``(type, value)``."""
    if isinstance(value, bool):
        return ("true", 1) if value else ("false", 0)
    if isinstance(value, int):
        return "integer", value
    if isinstance(value, float):
        return "real", value
    if isinstance(value, str):
        return "text", check_text("meta", value)
    raise InvalidArgument("meta", f"values are strings, numbers or booleans, not {value!r}")


def _check_page(limit: object, after: object) -> None:
    """``sessions()``'s paging arguments, refused before anything is read."""
    if limit is not None:
        check_int("limit", limit, minimum=1)
    if after is not None and not isinstance(after, (str, Session)):
        raise InvalidArgument("after", f"must be a session id, a Session or None, not {type(after).__name__}")
    if isinstance(after, str):
        check_text("after", after)


@attrs.frozen
class SessionTotals:
    """How many sessions the file holds, how many are forks, and their own events in all."""

    sessions: int
    forks: int
    events: int


class Sessions:
    """``session``, ``sessions`` (the listing and its pages) and ``session_totals``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def session(self, id: str) -> Session:
        """The session with this id; raises ``SessionNotFound``."""
        check_text("session_id", id)
        with self._store.read() as db:
            row = db.one(f"{_SESSION_ROW} AND s.id = ?", (id,))
        if row is None:
            raise SessionNotFound(id)
        return _sessions_from_rows([row])[0]

    def sessions(
        self,
        *,
        limit: int | None = None,
        after: str | Session | None = None,
        meta: Mapping[str, Any] | None = None,
        prefix: str | None = None,
        parent_id: str | None = None,
    ) -> list[Session]:
        """Sessions oldest first (by ``created_ms``, then id), in one query: all of them, or a
        page of at most ``limit`` starting after the session ``after`` (its id, or a ``Session``
        a page returned).

        ``meta``: only sessions whose meta holds each of these top-level entries (a string,
        number or boolean, compared as JSON values: 3 is not 3.0 nor "3"), found through an
        index of the metas' entries. ``prefix``: only sessions whose id starts with it.
        ``parent_id``: only the forks of that session (through the index of fork parents).

        Page on with ``after=page[-1]`` until a page is shorter than ``limit``: that goes on even
        if the session was purged meanwhile. Each page is its own snapshot: a session created
        meanwhile may or may not appear, none appears twice. An unknown (or purged) id as
        ``after`` raises ``SessionNotFound``; a bad argument ``InvalidArgument``, before anything
        is read."""
        _check_page(limit, after)
        where, args = _session_filters(self._store.sql, meta, prefix, parent_id)
        if isinstance(after, Session):
            where += _AFTER_SESSION
            args += [after.created_ms, after.id]
        elif after is not None:
            where += _AFTER_ID
            args.append(after)
        sql = _page_sql(where)
        with self._store.read() as db:
            rows = list(db.execute(sql, (*args, NO_LIMIT if limit is None else limit)))
            # Only an empty page can hide an unknown `after`: its key would match nothing.
            if not rows and isinstance(after, str) and db.one(_EXISTS, (after,)) is None:
                raise SessionNotFound(after)
        return _sessions_from_rows(rows)

    def session_totals(self) -> SessionTotals:
        """Sessions, forks and own events counted in one query (``journal stats``), one index
        seek per session and no ``Session`` built."""
        with self._store.read() as db:
            row = db.one(_TOTALS)
        assert row is not None
        return SessionTotals(*row)
