"""The reads part: a session's events, its count and its keyed state, through its fork chain.

Every read here is a walk of the session's segments (``journal.lineage``): a fork's inherited
events and state versions are read where they were written, in its parent. The writes of the
same tables are the log part's (``journal.log``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from journal import state as _state
from journal.bulk import paused_collector
from journal.codec import check_int, check_text
from journal.errors import InvalidArgument
from journal.lineage import NO_LIMIT, chain_txn, next_seq_txn, read_events_txn
from journal.model import Event
from journal.store import Database, Statements, Store


def _check_types(types: object) -> tuple[str, ...]:
    if isinstance(types, str) or not isinstance(types, Iterable):
        raise InvalidArgument("types", f"must be a list of event types, not {types!r}")
    out = tuple(types)
    if not out or not all(isinstance(t, str) for t in out):
        raise InvalidArgument("types", f"must be a non-empty list of event type names, not {out!r}")
    return out


def _filtered_sql(types: int | None, order: str) -> str:
    """``events()``'s read of a segment in ``order`` (ASC or DESC), of ``types`` event types
    (``None``: of every type)."""
    kinds = "" if types is None else f" AND type IN ({', '.join('?' * types)})"
    return (
        f"SELECT seq, type, data, time_ms, key FROM events WHERE session_id = ?{kinds} AND seq >= ? AND seq < ? "
        f"ORDER BY seq {order} LIMIT ?"
    )


def statement_shapes(sql: Statements) -> list[str]:
    """One statement of each shape this module builds at run time (``tests/test_statements.py``
    prepares them on both backends)."""
    return [_filtered_sql(types, order) for types in (None, 1, 3) for order in ("ASC", "DESC")]


def _filtered_txn(
    db: Database, session_id: str, since: int, types: tuple[str, ...] | None, newest_first: bool, limit: int | None
) -> list[Event]:
    """``events()`` with a type filter, an order or a limit. Each segment of the fork chain is
    walked from the chosen end, stopping after ``limit`` rows: for app types one walk of the
    app-types index per type (merged here), else one walk of the log's primary key."""
    order = "DESC" if newest_first else "ASC"
    queries: list[tuple[str, tuple[str, ...]]]
    if types is not None and all(t.startswith("x.") and len(t) > 2 for t in types):
        sql = db.sql.app_events_newest_first if newest_first else db.sql.app_events_oldest_first
        queries = [(sql, (t,)) for t in dict.fromkeys(types)]
    else:
        sql = _filtered_sql(None if types is None else len(types), order)
        queries = [(sql, tuple(types or ()))]
    rows: list[tuple[int, str, str, int, str | None]] = []
    for owner, start, stop in chain_txn(db, session_id, since, newest_first=newest_first):
        wanted = NO_LIMIT if limit is None else limit - len(rows)
        if wanted == 0:
            break
        found = [row for sql, kinds in queries for row in db.execute(sql, (owner, *kinds, start, stop, wanted))]
        found.sort(key=lambda row: row[0], reverse=newest_first)
        rows.extend(found if wanted < 0 else found[:wanted])
    with paused_collector():  # journal.bulk
        return [Event(session_id, seq, t, json.loads(data), ms, key) for seq, t, data, ms, key in rows]


class Reads:
    """``events``, ``count``, ``state`` and the state history an export writes."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def events(
        self,
        session_id: str,
        *,
        since: int | None = None,
        types: Iterable[str] | None = None,
        newest_first: bool = False,
        limit: int | None = None,
    ) -> list[Event]:
        """The session's events with ``seq >= since`` (all of them by default), in seq order.

        ``types``: only events of these types. ``newest_first``: from the end of the log.
        ``limit``: at most that many. App (``x.``) types are read through their index; the
        engine's own types by a walk of the log from the chosen end that stops after ``limit``."""
        check_text("session_id", session_id)
        start = 0 if since is None else check_int("since", since)
        kinds = None if types is None else _check_types(types)
        if limit is not None:
            check_int("limit", limit)
        if not isinstance(newest_first, bool):
            raise InvalidArgument("newest_first", f"must be True or False, not {newest_first!r}")
        with self._store.read() as db:
            if kinds is None and not newest_first and limit is None:
                return read_events_txn(db, session_id, start)
            return _filtered_txn(db, session_id, start, kinds, newest_first, limit)

    def count(self, session_id: str) -> int:
        """How many events the session's log holds (inherited ones included)."""
        check_text("session_id", session_id)
        with self._store.read() as db:
            return next_seq_txn(db, session_id)

    def state(self, session_id: str, *, keys: Iterable[str] | None = None, as_of: int | None = None) -> dict[str, Any]:
        """The session's keyed state: the latest value of each key (of ``keys``, or every key),
        or as it stood right after event ``as_of`` (a fork's as of its fork point, then its own)."""
        check_text("session_id", session_id)
        wanted = (
            None if keys is None else [_state.check_key(k, "keys") for k in ([keys] if isinstance(keys, str) else keys)]
        )
        if as_of is not None:
            check_int("as_of", as_of)
        with self._store.read() as db:
            return _state.read_txn(db, chain_txn(db, session_id), wanted, as_of)

    def state_history(self, session_id: str) -> list[tuple[str, int, Any]]:
        """Every version of the session's keyed state ``(key, at, value)``, oldest first, its
        inherited ones included (what an export writes)."""
        with self._store.read() as db:
            return _state.history_txn(db, chain_txn(db, session_id))
