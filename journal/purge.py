"""Purge: erasing a whole session, the one exception to append-only (G3).

A user deleting a conversation must be able to delete it (transcripts hold secrets). ``purge``
marks the session and deletes all its rows — events and derived state — in one transaction; the
schema's triggers let a delete of events through only for a session so marked. A fork that still
reads events through the purged session is refused (``SessionHasForks``) unless the caller asks
for ``copy_forks=True``: each such fork is then given its own copy of what it inherited, first,
in the same transaction, and stands alone afterwards.
"""

from __future__ import annotations

import attrs

from journal import log as _log
from journal.errors import SessionHasForks
from journal.store import Database, Store

_DERIVED_TABLES = ("turn_journal", "tool_calls", "stream_chunks", "notifications", "submissions")


@attrs.frozen
class PurgeResult:
    """What ``purge`` erased, and which forks were given their own copy."""

    session_id: str
    events_deleted: int
    forks_copied: tuple[str, ...]


def _copy_prefix_txn(db: Database, fork_id: str, seed_length: int) -> None:
    """Give a fork its own rows for the events it read through its parent (seqs kept)."""
    rows = _log.read_rows_txn(db, fork_id, 0, seed_length)
    # seed_length 0 first: the schema's contiguity trigger then takes the copied events as the
    # session's own, from seq 0, below the ones it already has.
    db.execute("UPDATE sessions SET parent_id = NULL, seed_length = 0 WHERE id = ?", (fork_id,))
    db.executemany(
        "INSERT INTO events (session_id, seq, type, data, time_ms) VALUES (?, ?, ?, ?, ?)",
        [(fork_id, seq, type_, data, time_ms) for seq, type_, data, time_ms in rows],
    )


class PurgeMixin:
    """``purge`` on ``Journal``."""

    _store: Store

    def purge(self, session_id: str, *, copy_forks: bool = False) -> PurgeResult:
        """Erase a session and everything derived from it, in one transaction."""
        with self._store.write("purge") as db:
            _log.next_seq_txn(db, session_id)  # SessionNotFound
            readers = [
                (fork_id, seed)
                for fork_id, seed in db.execute(
                    "SELECT id, seed_length FROM sessions WHERE parent_id = ? AND purged_ms IS NULL ORDER BY id",
                    (session_id,),
                )
                if seed > 0
            ]
            if readers and not copy_forks:
                raise SessionHasForks(session_id, tuple(fork_id for fork_id, _ in readers))
            for fork_id, seed in readers:
                _copy_prefix_txn(db, fork_id, seed)
            db.execute("UPDATE sessions SET parent_id = NULL WHERE parent_id = ?", (session_id,))
            db.execute("UPDATE sessions SET purged_ms = ? WHERE id = ?", (_log.now_ms(), session_id))
            deleted = db.value("SELECT count(*) FROM events WHERE session_id = ?", (session_id,))
            db.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
            for table in _DERIVED_TABLES:
                db.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        return PurgeResult(session_id, deleted, tuple(fork_id for fork_id, _ in readers))
