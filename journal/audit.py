"""The audit part: ``check`` recomputes the derived state from the log and lists every
disagreement with what is stored (the comparison itself is pure: ``journal.pure.check``)."""

from __future__ import annotations

from journal import log as _log
from journal.log import Log
from journal.pure.check import Disagreement, compare
from journal.results import CallRow
from journal.store import Store
from journal.turns import TURN_COLUMNS, TurnState


class Audit:
    """``check`` and ``integrity_check``."""

    def __init__(self, store: Store, log: Log) -> None:
        self._store = store
        self._log = log

    def integrity_check(self) -> list[str]:
        """SQLite's verdict on the file: ``["ok"]`` when it is healthy."""
        return self._store.integrity_check()

    def check(self, session_id: str | None = None) -> list[Disagreement]:
        """Recompute the derived state (turn journal, tool-call states) from the log and list
        every disagreement with what is stored; also checks that seqs are contiguous."""
        with self._store.read() as db:
            ids = [session_id] if session_id is not None else [s.id for s in self._log.sessions()]
            out: list[Disagreement] = []
            for sid in ids:
                _log.next_seq_txn(db, sid)  # SessionNotFound for an unknown id
                seed = db.value("SELECT seed_length FROM sessions WHERE id = ?", (sid,))
                own = _log.read_events_txn(db, sid, seed)
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
                    c.call_id: {"requested_seq": c.requested_seq, "dispatch_seq": c.dispatch_seq, "result_seq": c.result_seq}
                    for c in calls
                }
                out.extend(compare(sid, own, stored_turns, stored_calls))
            return out
