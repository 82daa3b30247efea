"""The audit part: ``check`` recomputes the derived state from the log and lists every
disagreement with what is stored (the comparison itself is pure: ``journal.pure.check``)."""

from __future__ import annotations

from journal import lineage
from journal.errors import CorruptJournal, JournalError
from journal.pure.check import Disagreement, compare
from journal.pure.view import Compaction, compactions
from journal.results import CallRow
from journal.sessions import Sessions
from journal.store import Database, Store
from journal.transcript import places_compactions
from journal.turns import TURN_COLUMNS, TurnState

# What decoding a damaged row raises: bytes that are not UTF-8, data that is not JSON or nests
# past the parser, a value of the wrong kind where the schema's CHECK no longer holds.
_UNDECODABLE = (UnicodeDecodeError, ValueError, RecursionError, TypeError, KeyError, IndexError, OverflowError)


class Audit:
    """``check`` and ``integrity_check``."""

    def __init__(self, store: Store, sessions: Sessions) -> None:
        self._store = store
        self._sessions = sessions

    def integrity_check(self) -> list[str]:
        """SQLite's verdict on the file: ``["ok"]`` when it is healthy."""
        return self._store.integrity_check()

    def check(self, session_id: str | None = None) -> list[Disagreement]:
        """Recompute the derived state (turn journal, tool-call states) from the log and list
        every disagreement with what is stored; also checks that seqs are contiguous."""
        try:
            return self._check(session_id)
        except JournalError:
            raise
        except _UNDECODABLE as exc:
            # A row whose bytes no decoder takes (not UTF-8, not JSON, nested past the parser):
            # the file is damaged, and the caller gets a typed error saying so, not the decoder's.
            detail = "nests too deep to decode" if isinstance(exc, RecursionError) else type(exc).__name__
            raise CorruptJournal(self._store.path, f"a row cannot be read back ({detail})") from exc

    def _check(self, session_id: str | None) -> list[Disagreement]:
        with self._store.read() as db:
            ids = [session_id] if session_id is not None else [s.id for s in self._sessions.sessions()]
            out: list[Disagreement] = []
            for sid in ids:
                seed = lineage.seed_length_txn(db, sid)  # SessionNotFound for an unknown id
                own = lineage.read_events_txn(db, sid, seed)
                for expected, event in enumerate(own, start=seed):
                    if event.seq != expected:
                        out.append(Disagreement(sid, "events", str(expected), "seq", event.seq, expected))
                        break
                turns = [
                    TurnState.from_row(row)
                    for row in db.execute(f"SELECT {TURN_COLUMNS} FROM turn_journal WHERE session_id = ?", (sid,))
                ]
                calls = [
                    CallRow.from_row(row)
                    for row in db.execute(f"SELECT {CallRow.COLUMNS} FROM tool_calls WHERE session_id = ?", (sid,))
                ]
                stored_turns = {
                    t.start_seq: {"turn": t.turn, "phase": t.phase.value, "steps": t.steps,
                                  "step_open": int(t.step_open), "end_seq": t.end_seq}
                    for t in turns
                }  # fmt: skip
                stored_calls = {
                    c.call_id: {
                        "requested_seq": c.requested_seq,
                        "dispatch_seq": c.dispatch_seq,
                        "result_seq": c.result_seq,
                    }
                    for c in calls
                }
                out.extend(compare(sid, own, stored_turns, stored_calls))
                if places_compactions(db):
                    out.extend(_compactions(db, sid, seed))
            return out


def _compactions(db: Database, session_id: str, seed: int) -> list[Disagreement]:
    """Where the stored compaction rows differ from the ones the log places (through its fork
    chain, read only when the session's own events hold a compaction or a row says so)."""
    stored = {
        row[0]: Compaction(*row)
        for row in db.execute(
            "SELECT seq, kind, first, last, before, after FROM compactions WHERE session_id = ?", (session_id,)
        )
    }
    may = db.value(db.sql.may_compact, (session_id,))
    derived = {c.seq: c for c in compactions(lineage.read_events_txn(db, session_id)) if c.seq >= seed} if may else {}
    out: list[Disagreement] = []
    for seq in sorted(stored.keys() | derived.keys()):
        have, want = stored.get(seq), derived.get(seq)
        if have is None or want is None:
            out.append(Disagreement(session_id, "compactions", str(seq), "row", have is not None, want is not None))
            continue
        for field in ("kind", "first", "last", "before", "after"):
            if getattr(have, field) != getattr(want, field):
                out.append(
                    Disagreement(session_id, "compactions", str(seq), field, getattr(have, field), getattr(want, field))
                )
    return out
