"""The fork chain: a session's log as segments of its own and its ancestors' events.

A fork copies nothing: its events with ``seq < seed_length`` are its parent's, read through the
parent (and the parent's below its own ``seed_length`` through the grandparent, ...), which is
safe because events never change (G3). A session's log is therefore a chain of segments
``(owner, lo, hi)``: ``owner``'s own events with ``lo <= seq < hi``. This module is the one walk
of that chain: every part that reads a session's log (or a table dated by seqs) through its
parents asks it for the segments, cut to what it reads.
"""

from __future__ import annotations

import json

from journal.bulk import paused_collector
from journal.codec import check_text
from journal.errors import SessionNotFound
from journal.model import Event
from journal.store import Database

# Past every seq (the largest integer both backends store): the bound of a session's own,
# open-ended segment, and of any read "to the end of the log".
SEQ_END = 2**63 - 1

# LIMIT of a read with no limit (PostgreSQL refuses SQLite's -1).
NO_LIMIT = 2**62
# A segment of a session's log: the events of `owner` with lo <= seq < hi.
Segment = tuple[str, int, int]
# A stored event row: (seq, type, data text, time_ms, key).
Row = tuple[int, str, str, int, str | None]

_PARENT = "SELECT parent_id, seed_length FROM sessions WHERE id = ? AND purged_ms IS NULL"
_END = (
    "SELECT s.seed_length, (SELECT max(seq) FROM events WHERE session_id = s.id) "
    "FROM sessions AS s WHERE s.id = ? AND s.purged_ms IS NULL"
)
_SEED = "SELECT seed_length FROM sessions WHERE id = ? AND purged_ms IS NULL"
_FORKS = "SELECT id, seed_length FROM sessions WHERE parent_id = ? AND purged_ms IS NULL ORDER BY id"
_ROWS = "SELECT seq, type, data, time_ms, key FROM events WHERE session_id = ? AND seq >= ? AND seq < ? ORDER BY seq"


def chain_txn(
    db: Database, session_id: str, since: int = 0, until: int = SEQ_END, *, newest_first: bool = True
) -> list[Segment]:
    """The segments that make up a session's log, cut to ``since <= seq < until`` (the empty
    ones left out): newest owner first (the session's own, up to ``SEQ_END``, then each
    ancestor's below the point where the next one forked), or oldest first.
    ``SessionNotFound`` for an unknown (or purged) session or ancestor."""
    segments: list[Segment] = []
    hi = SEQ_END
    current: str | None = check_text("session_id", session_id)
    while current is not None and hi > 0:
        row = db.one(_PARENT, (current,))
        if row is None:
            raise SessionNotFound(current)
        parent, seed = row
        if seed < hi:
            segments.append((current, seed, hi))
            hi = seed
        current = parent
    return spans(segments, since, until, newest_first=newest_first)


def spans(segments: list[Segment], since: int = 0, until: int = SEQ_END, *, newest_first: bool = True) -> list[Segment]:
    """A chain of segments (newest owner first, as ``chain_txn`` gives them) cut to
    ``since <= seq < until``, the empty ones left out, newest or oldest owner first."""
    ordered = segments if newest_first else segments[::-1]
    cut = [(owner, max(lo, since), min(hi, until)) for owner, lo, hi in ordered]
    return [(owner, lo, hi) for owner, lo, hi in cut if lo < hi]


def forks_reading_txn(db: Database, session_id: str) -> list[tuple[str, int]]:
    """The forks that read events through the session, the other way along the chain:
    ``(fork id, seed_length)``."""
    return [(fork_id, seed) for fork_id, seed in db.execute(_FORKS, (session_id,)) if seed > 0]


def owner_of(segments: list[Segment], seq: int) -> str:
    """The session whose own events hold ``seq`` in a chain of segments."""
    for owner, lo, hi in segments:
        if lo <= seq < hi:
            return owner
    return segments[-1][0]


def next_seq_txn(db: Database, session_id: str) -> int:
    """The seq the session's next event gets (its event count, inherited ones included); raises
    ``SessionNotFound`` (``InvalidArgument`` for an id no session can have: every part's first
    look at a session)."""
    row = db.one(_END, (check_text("session_id", session_id),))
    if row is None:
        raise SessionNotFound(session_id)
    seed_length: int = row[0]
    last: int | None = row[1]
    return seed_length if last is None else last + 1


def next_seq_in_txn(db: Database, session_id: str) -> int:
    """``next_seq_txn``, known without a read once this write transaction appended to the
    session (it holds the write lock, so nothing else can have appended since)."""
    seq = db.next_seqs.get(session_id)
    return next_seq_txn(db, session_id) if seq is None else seq


def seed_length_txn(db: Database, session_id: str) -> int:
    """Where the session's own events start (the seqs below are read through its parent);
    raises ``SessionNotFound``."""
    seed_length = db.value(_SEED, (check_text("session_id", session_id),))
    if seed_length is None:
        raise SessionNotFound(session_id)
    return int(seed_length)


def read_rows_txn(db: Database, session_id: str, since: int = 0, until: int = SEQ_END) -> list[Row]:
    """The stored rows ``(seq, type, data text, time_ms, key)`` with ``since <= seq < until``."""
    chain = chain_txn(db, session_id, since, until, newest_first=False)
    return [row for owner, lo, hi in chain for row in db.execute(_ROWS, (owner, lo, hi))]


def read_events_txn(db: Database, session_id: str, since: int = 0, until: int = SEQ_END) -> list[Event]:
    """Events with ``since <= seq < until``, read through the fork chain (the cyclic collector
    paused while they are made: ``journal.bulk``)."""
    chain = chain_txn(db, session_id, since, until, newest_first=False)
    with paused_collector():
        return [
            Event(session_id, seq, type_, json.loads(data), t, key)
            for owner, lo, hi in chain
            for seq, type_, data, t, key in db.execute(_ROWS, (owner, lo, hi))
        ]
