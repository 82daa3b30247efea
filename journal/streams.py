"""The streams part: the segments of a streamed model answer, saved as they arrive (DESIGN §6).

It owns ``stream_chunks``. A turn's step names its stream (``provider_started(stream_key=)``);
after a crash the reconciler turns the saved, not yet consumed chunks of a half-streamed answer
into an aborted assistant message, and marks them consumed in the same transaction.
"""

from __future__ import annotations

from journal import lineage
from journal.codec import MAX_STREAM_KEY, check_id, check_int, check_stored_text, check_text
from journal.model import now_ms
from journal.store import Database, Store

_INSERT = (
    "INSERT INTO stream_chunks (stream_key, idx, session_id, content, time_ms) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (stream_key, idx) DO NOTHING"
)
_CHUNKS = "SELECT content FROM stream_chunks WHERE stream_key = ? ORDER BY idx"
_UNCONSUMED = "SELECT content FROM stream_chunks WHERE stream_key = ? AND consumed = 0 ORDER BY idx"


def unconsumed_chunks_txn(db: Database, stream_key: str) -> list[str]:
    """The stream's saved segments not yet turned into an aborted answer, in index order."""
    return [content for (content,) in db.execute(_UNCONSUMED, (stream_key,))]


def consume_chunks_txn(db: Database, stream_key: str) -> None:
    """Mark a stream's saved chunks as turned into an aborted answer (never twice)."""
    db.execute("UPDATE stream_chunks SET consumed = 1 WHERE stream_key = ? AND consumed = 0", (stream_key,))


class Streams:
    """``save_chunk`` and ``stream_chunks``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def save_chunk(self, session_id: str, stream_key: str, index: int, content: str) -> bool:
        """Save one streamed segment under ``(stream_key, index)``; the first write wins.

        Returns whether this write won. Chunks let the reconciler turn a half-streamed answer
        into an aborted assistant message after a crash.
        """
        check_text("session_id", session_id)
        check_id("stream_key", stream_key, MAX_STREAM_KEY)
        check_int("index", index)
        check_stored_text("content", content)
        with self._store.write("save_chunk", sessions=(session_id,)) as db:
            lineage.next_seq_txn(db, session_id)  # SessionNotFound first
            db.execute(_INSERT, (stream_key, index, session_id, content, now_ms()))
            return db.changes() == 1

    def stream_chunks(self, stream_key: str) -> list[str]:
        """The saved segments of a stream, in index order."""
        check_text("stream_key", stream_key)
        with self._store.read() as db:
            return [content for (content,) in db.execute(_CHUNKS, (stream_key,))]

    def forget_txn(self, db: Database, session_id: str) -> None:
        """Delete the session's chunks (purge)."""
        db.execute("DELETE FROM stream_chunks WHERE session_id = ?", (session_id,))
