"""The purge part: erasing a whole session, the one exception to append-only (G3).

A user deleting a conversation must be able to delete it (transcripts hold secrets). ``purge``
marks the session and deletes all its rows — events and derived state — in one transaction; the
schema's triggers let a delete of events through only for a session so marked. Each table's rows
are deleted by the part that owns it. A fork that still reads events through the purged session
is refused (``SessionHasForks``) unless the caller asks for ``copy_forks=True``: each such fork is
then given its own copy of what it inherited, first, in the same transaction, and stands alone
afterwards.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from journal import lineage
from journal import log as _log
from journal.errors import SessionHasForks
from journal.log import Log
from journal.store import Database, Store


class _Owner(Protocol):
    def forget_txn(self, db: Database, session_id: str) -> None: ...


@attrs.frozen
class PurgeResult:
    """What ``purge`` erased, and which forks were given their own copy."""

    session_id: str
    events_deleted: int
    forks_copied: tuple[str, ...]


class Purge:
    """``purge``."""

    def __init__(self, store: Store, log: Log, derived: tuple[_Owner, ...]) -> None:
        self._store = store
        self._log = log
        self._derived = derived  # the parts owning the tables derived from the session's log

    def purge(self, session_id: str, *, copy_forks: bool = False) -> PurgeResult:
        """Erase a session and everything derived from it, in one transaction."""
        with self._store.write("purge") as db:
            lineage.next_seq_txn(db, session_id)  # SessionNotFound
            readers = lineage.forks_reading_txn(db, session_id)
            if readers and not copy_forks:
                raise SessionHasForks(session_id, tuple(fork_id for fork_id, _ in readers))
            for fork_id, seed in readers:
                self._log.detach_fork_txn(db, fork_id, seed)
            deleted = self._log.erase_txn(db, session_id, _log.now_ms())
            for part in self._derived:
                part.forget_txn(db, session_id)
            self._log.forget_txn(db, session_id)
        return PurgeResult(session_id, deleted, tuple(fork_id for fork_id, _ in readers))
