"""``Journal``: the public handle on one journal file, and ``open()``."""

from __future__ import annotations

import os
from typing import Any

from journal import log as _log
from journal.check import Disagreement, compare
from journal.effects import EffectsMixin
from journal.errors import InvalidArgument, JournalError
from journal.groupcommit import GroupCommit
from journal.log import LogMixin
from journal.results import ResultsMixin
from journal.purge import PurgeMixin
from journal.reconcile import ReconcileMixin
from journal.scan import ScanMixin
from journal.submissions import SubmissionsMixin
from journal.transcript import TranscriptMixin
from journal.turns import TurnsMixin
from journal.model import Durability
from journal.store import DEFAULT_BUSY_TIMEOUT_MS, Store
from journal.validate import DEFAULT_MAX_EVENT_BYTES, Codec


class Journal(PurgeMixin, EffectsMixin, ReconcileMixin, SubmissionsMixin, TranscriptMixin, ScanMixin, TurnsMixin, ResultsMixin, LogMixin):
    """An open journal file. Use it as a context manager, or call ``close()``.

    One ``Journal`` may be shared by the threads of a process; each public write is one
    ``BEGIN IMMEDIATE`` transaction (a lone append: one autocommit ``INSERT``), durable when the
    call returns (G1).
    """

    def __init__(self, store: Store, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._store = store
        # Every write path encodes through this, so the journal's limits hold on all of them.
        self._codec = Codec(max_event_bytes)
        self._appends = GroupCommit(store, "append")

    @property
    def path(self) -> str:
        return self._store.path

    @property
    def durability(self) -> Durability:
        return self._store.durability

    def integrity_check(self) -> list[str]:
        """SQLite's verdict on the file: ``["ok"]`` when it is healthy."""
        return self._store.integrity_check()

    def check(self, session_id: str | None = None) -> list[Disagreement]:
        """Recompute the derived state (turn journal, tool-call states) from the log and list
        every disagreement with what is stored; also checks that seqs are contiguous."""
        with self._store.read() as db:
            ids = [session_id] if session_id is not None else [s.id for s in self.sessions()]
            out: list[Disagreement] = []
            for sid in ids:
                _log.next_seq_txn(db, sid)  # SessionNotFound for an unknown id
                seed = db.value("SELECT seed_length FROM sessions WHERE id = ?", (sid,))
                own = _log.read_events_txn(db, sid, seed)
                for expected, event in enumerate(own, start=seed):
                    if event.seq != expected:
                        out.append(Disagreement(sid, "events", str(expected), "seq", event.seq, expected))
                        break
                turns = {
                    row[0]: dict(zip(("turn", "phase", "steps", "step_open", "end_seq"), row[1:]))
                    for row in db.execute(
                        "SELECT start_seq, turn, phase, steps, step_open, end_seq FROM turn_journal WHERE session_id = ?",
                        (sid,),
                    )
                }
                calls = {
                    row[0]: dict(zip(("requested_seq", "dispatch_seq", "result_seq"), row[1:]))
                    for row in db.execute(
                        "SELECT call_id, requested_seq, dispatch_seq, result_seq FROM tool_calls WHERE session_id = ?",
                        (sid,),
                    )
                }
                out.extend(compare(sid, own, turns, calls))
            return out

    def checkpoint(self) -> None:
        """Copy the write-ahead log into the main file now (bounds what ``normal`` can lose)."""
        self._store.checkpoint()

    def close(self) -> None:
        """Close the file. Everything already returned is on disk; closing adds nothing to that."""
        self._store.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except JournalError:
            pass  # the error already on its way out says more than a failed close after it

    def __repr__(self) -> str:
        state = "closed" if self._store.closed else self.durability.value
        return f"<Journal {self.path!r} {state}>"


def open(  # noqa: A001 - the module-level opener is the library's front door: journal.open(path)
    path: str | os.PathLike[str],
    *,
    durability: str | Durability = "full",
    readonly: bool = False,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    checkpoint_pages: int | None = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    vfs: str | None = None,
) -> Journal:
    """Open (or create) the journal at ``path``.

    ``durability="full"`` (the default) makes every returned write survive power loss;
    ``"normal"`` survives a process crash, and a power cut may drop the commits since the last
    checkpoint (bound it with ``checkpoint_pages``). A file that is not a journal raises
    ``NotAJournal`` and one written by a newer version ``SchemaTooNew``; neither is touched.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgument("path", f"must be a str or os.PathLike, not {type(path).__name__}")
    path = os.fspath(path)
    if not isinstance(path, str) or not path or "\0" in path:
        raise InvalidArgument("path", f"must be a non-empty text path without NUL characters, not {path!r}")
    try:
        level = Durability(durability)
    except ValueError:
        raise InvalidArgument("durability", f'must be "full" or "normal", not {durability!r}') from None
    for name, value in (("busy_timeout_ms", busy_timeout_ms), ("max_event_bytes", max_event_bytes)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidArgument(name, f"must be an int >= 0, not {value!r}")
    if checkpoint_pages is not None and (not isinstance(checkpoint_pages, int) or checkpoint_pages < 0):
        raise InvalidArgument("checkpoint_pages", f"must be an int >= 0, not {checkpoint_pages!r}")
    store = Store(
        path,
        durability=level,
        readonly=readonly,
        vfs=vfs,
        busy_timeout_ms=busy_timeout_ms,
        checkpoint_pages=checkpoint_pages,
    )
    return Journal(store, max_event_bytes=max_event_bytes)
