"""Close-policy recovery of a batch of sessions in a few statements: the common case (issue 27).

The common case is a session that is not a fork, with one open turn and nothing nested in it,
each call it owes first seen in one of its assistant messages. For those sessions one statement
(the store's ``sql.open_work``) reads the whole batch's open work from the derived tables and
the open turns' own events, the risks follow from it without reading the log (DESIGN §7(2)), and
one ``insert_repairs`` appends every session's synthetic results and ``turn_end``, the turn
journal and the tool-call states kept exactly as for any other append (by the schema's triggers
on SQLite; on PostgreSQL with the row trigger off, by one statement each for the batch, G4's
check one more).

The pure planner (``journal.pure.plan``) stays the oracle and the path for everything else, which
this module hands back to the caller: forks (calls inherited through the parent), nested or
doubled turns, a call first seen by its dispatch, a request whose tool name is not text, a turn
that owes calls, recorded no dispatch and closed a step (rule 3 needs where each step opened and
closed), an event too large for the journal's limit, and sessions with no open turn (purged,
unknown, or repaired since the scan). Both backends have the statement, each in its own
dialect (``journal.store.sqlite_sql``, ``journal.store.postgres_sql``); a backend without it
(``sql.open_work`` is ``None``) would hand back every session. On PostgreSQL ``insert_repairs``
is one ``INSERT`` of the batch's rows as arrays, G4's check of the batch, and the derived state's
two statements (not a PL/pgSQL call per row), under one savepoint, their columns bound in binary,
in the transaction that took the journal's advisory lock with its ``BEGIN``; on SQLite it is the
prepared ``INSERT`` run per row, G4's trigger checking each, and the same two statements for the
derived state.

Run inside the caller's write transaction: the plan is made from what that transaction sees, so
racing recoverers make one repair (G8).
"""

from __future__ import annotations

import json
from typing import Any

from journal.codec import Codec
from journal.codec import _string as _json_string  # the codec's encoder of a JSON string
from journal.codec import _to_text as _encoded  # the codec's own encoder: the same text as its encode
from journal.model import Event, EventType, Risk, TurnEndReason
from journal.pure.plan import synthetic_head, synthetic_result_data
from journal.store import Database

__all__ = ["Repaired", "recover_common_txn"]

_RESULT = EventType.TOOL_RESULT.value
_TURN_END = EventType.TURN_END.value
_INTERRUPTED = TurnEndReason.INTERRUPTED.value


def recover_common_txn(
    db: Database, codec: Codec, session_ids: list[str], time_ms: int
) -> tuple[dict[str, Repaired], list[str]]:
    """Repair the common-case sessions among these inside the caller's transaction: what was
    appended to each, and the sessions left for the planner (in the order given)."""
    sql = db.sql.open_work
    if sql is None or not session_ids:
        return {}, list(session_ids)
    turns: dict[str, list[Any]] = {}
    unplanned: set[str] = set()
    for (
        sid,
        start,
        number,
        steps,
        step_open,
        simple,
        next_seq,
        dispatching,
        call_id,
        _requested_seq,  # the ORDER BY's: calls come in the order they were first seen
        disp,
        _position,
        name,
    ) in db.execute(sql, (json.dumps(session_ids),)):
        if sid in unplanned:
            continue
        turn = turns.get(sid)
        if turn is None:
            turn = turns[sid] = [start, number, steps, step_open, next_seq, dispatching, {}]
        elif turn[0] != start:  # a second open turn (the statement says so too): the planner's
            simple = False
        if not simple:
            unplanned.add(sid)
            continue
        if call_id is None or call_id in turn[6]:
            continue  # no owed call; or the same call twice in one request (hand-made data)
        if name is None:
            unplanned.add(sid)  # the request's name is not text: the planner names it
            continue
        turn[6][call_id] = (name, disp)
    rows: list[tuple[str, int, str, str, int]] = []
    results: list[tuple[str, str, str, int]] = []
    ends: list[tuple[str, int, int, str]] = []
    appended: dict[str, Repaired] = {}
    limit = codec.max_event_bytes
    for sid, (start, number, steps, step_open, next_seq, dispatching, calls) in turns.items():
        if sid in unplanned:
            continue
        repaired = _repairs(
            sid, start, number, steps, step_open, next_seq, dispatching, calls, time_ms, limit, rows, results, ends
        )
        if repaired is None:
            unplanned.add(sid)
        else:
            appended[sid] = repaired
    if rows:
        db.insert_repairs(rows, results, ends)
        for sid, repaired in appended.items():
            db.next_seqs[sid] = repaired.first_seq + len(repaired)
    return appended, [sid for sid in session_ids if sid not in appended]


class Repaired:
    """What the set-based path appended to one session, kept as the few values it was made from:
    its events are built when first asked for (``events()``), so a restart whose caller only
    counts its repairs, or never reads them, builds none (issue 27). They are the events the
    planner's path would have returned: ``journal.pure.plan.synthetic_result_data``'s results,
    then the ``turn_end``."""

    __slots__ = ("calls", "first_seq", "risks", "session_id", "steps", "time_ms", "turn")

    def __init__(
        self,
        session_id: str,
        first_seq: int,
        time_ms: int,
        calls: dict[str, tuple[str, int | None]],
        risks: list[Risk],
        turn: int | None,
        steps: int,
    ) -> None:
        self.session_id, self.first_seq, self.time_ms = session_id, first_seq, time_ms
        self.calls, self.risks, self.turn, self.steps = calls, risks, turn, steps  # a call's name, then its risk

    def __len__(self) -> int:
        return len(self.risks) + 1

    def events(self) -> tuple[Event, ...]:
        sid, seq, time_ms = self.session_id, self.first_seq, self.time_ms
        events = [
            Event(sid, seq + n, _RESULT, synthetic_result_data(call_id, name, risk), time_ms)
            for n, ((call_id, (name, _)), risk) in enumerate(zip(self.calls.items(), self.risks))
        ]
        end: dict[str, Any] = {} if self.turn is None else {"turn": self.turn}
        end["steps"], end["reason"] = self.steps, _INTERRUPTED
        events.append(Event(sid, seq + len(self.risks), _TURN_END, end, time_ms))
        return tuple(events)


def _repairs(
    sid: str,
    start: int,
    number: int | None,
    steps: int,
    step_open: int,
    next_seq: int,
    dispatching: int,
    calls: dict[str, tuple[str, int | None]],
    time_ms: int,
    limit: int,
    rows: list[tuple[str, int, str, str, int]],
    results: list[tuple[str, str, str, int]],
    ends: list[tuple[str, int, int, str]],
) -> Repaired | None:
    """The session's repairs, their rows added to ``rows`` and their derived state to
    ``results`` and ``ends``; ``None`` when the planner must decide (rule 3 needs the steps'
    places, or an event might be over the size limit), nothing added then."""
    risks: list[Risk] = []
    seq = next_seq
    first, first_result = len(rows), len(results)
    for call_id, (name, dispatch_seq) in calls.items():
        if dispatch_seq is not None:  # 1: handed to its executor, no result
            risk = Risk.TOOL_OUTCOME_UNKNOWN
        elif dispatching:  # 2: the turn dispatched other calls (this one it did not)
            risk = Risk.TOOL_NOT_STARTED
        elif steps == 0 or (steps == 1 and step_open):  # 4: no step, or the only one never closed
            risk = Risk.TOOL_OUTCOME_UNKNOWN
        else:  # 3 or 4 depends on which step the call was seen in: the planner reads the log
            del rows[first:], results[first_result:]
            return None
        text = _synthetic(call_id, name, risk)
        if len(text) * 4 > limit:  # might be over (a text that might pass is left to the codec)
            del rows[first:], results[first_result:]
            return None
        rows.append((sid, seq, _RESULT, text, time_ms))
        results.append((sid, call_id, name, seq))
        risks.append(risk)
        seq += 1
    if number is None:
        text = f'{{"steps":{steps},"reason":"{_INTERRUPTED}"}}'
    else:
        text = f'{{"turn":{number},"steps":{steps},"reason":"{_INTERRUPTED}"}}'
    rows.append((sid, seq, _TURN_END, text, time_ms))
    ends.append((sid, start, seq, _INTERRUPTED))
    return Repaired(sid, next_seq, time_ms, calls, risks, number, steps)


def _result_template(risk: Risk) -> str:
    """The codec's text of a synthetic result of this risk after the call's head: what a result
    of this risk shares with every other."""
    text = _encoded(synthetic_result_data("c", "n", risk))
    prefix = '{"tool_call_id":"c","name":"n","content":' + _json_string(synthetic_head("c", "n"))[:-1]
    if not text.startswith(prefix):  # synthetic_result_data's shape changed: this must follow
        raise RuntimeError(f"a synthetic result no longer encodes as {prefix!r}...")
    return text[len(prefix) :]


_AFTER_HEAD = {risk: _result_template(risk) for risk in Risk}


def _synthetic(call_id: str, name: str, risk: Risk) -> str:
    """The codec's text of ``synthetic_result_data(call_id, name, risk)``, the part every result
    of the risk shares encoded once (the content is most of the text)."""
    head = _json_string(synthetic_head(call_id, name))[:-1]
    return f'{{"tool_call_id":{_json_string(call_id)},"name":{_json_string(name)},"content":{head}{_AFTER_HEAD[risk]}'
