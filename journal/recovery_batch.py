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

__all__ = ["recover_common_txn"]

_RESULT = EventType.TOOL_RESULT.value
_TURN_END = EventType.TURN_END.value
_INTERRUPTED = TurnEndReason.INTERRUPTED.value


def recover_common_txn(
    db: Database, codec: Codec, session_ids: list[str], time_ms: int
) -> tuple[dict[str, list[Event]], list[str]]:
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
    appended: dict[str, list[Event]] = {}
    limit = codec.max_event_bytes
    for sid, (start, number, steps, step_open, next_seq, dispatching, calls) in turns.items():
        if sid in unplanned:
            continue
        events = _repairs(
            sid, start, number, steps, step_open, next_seq, dispatching, calls, time_ms, limit, rows, results, ends
        )
        if events is None:
            unplanned.add(sid)
        else:
            appended[sid] = events
    if rows:
        db.insert_repairs(rows, results, ends)
        for sid, events in appended.items():
            db.next_seqs[sid] = events[-1].seq + 1
    return appended, [sid for sid in session_ids if sid not in appended]


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
) -> list[Event] | None:
    """The session's repairs as events, their rows added to ``rows`` and their derived state to
    ``results`` and ``ends``; ``None`` when the planner must decide (rule 3 needs the steps'
    places, or an event might be over the size limit), nothing added then."""
    events: list[Event] = []
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
        data, text = _synthetic(call_id, name, risk)
        if len(text) * 4 > limit:  # might be over (a text that might pass is left to the codec)
            del rows[first:], results[first_result:]
            return None
        rows.append((sid, seq, _RESULT, text, time_ms))
        results.append((sid, call_id, name, seq))
        events.append(Event(sid, seq, _RESULT, data, time_ms))
        seq += 1
    if number is None:
        end: dict[str, Any] = {"steps": steps, "reason": _INTERRUPTED}
        text = f'{{"steps":{steps},"reason":"{_INTERRUPTED}"}}'
    else:
        end = {"turn": number, "steps": steps, "reason": _INTERRUPTED}
        text = f'{{"turn":{number},"steps":{steps},"reason":"{_INTERRUPTED}"}}'
    rows.append((sid, seq, _TURN_END, text, time_ms))
    ends.append((sid, start, seq, _INTERRUPTED))
    events.append(Event(sid, seq, _TURN_END, end, time_ms))
    return events


def _result_template(risk: Risk) -> tuple[dict[str, Any], str, str]:
    """A synthetic result of this risk as ``synthetic_result_data`` makes it, the content's part
    after the call's head, and the codec's text of the whole after that head: what a result of
    this risk shares with every other."""
    data = synthetic_result_data("c", "n", risk)
    text = _encoded(data)
    head = synthetic_head("c", "n")
    prefix = '{"tool_call_id":"c","name":"n","content":' + _json_string(head)[:-1]
    if not text.startswith(prefix):  # synthetic_result_data's shape changed: this must follow
        raise RuntimeError(f"a synthetic result no longer encodes as {prefix!r}...")
    return data, data["content"][len(head) :], text[len(prefix) :]


_TEMPLATES = {risk: _result_template(risk) for risk in Risk}


def _synthetic(call_id: str, name: str, risk: Risk) -> tuple[dict[str, Any], str]:
    """``synthetic_result_data(call_id, name, risk)`` and its text as the codec encodes it, the
    part every result of the risk shares encoded once (the content is most of the text)."""
    template, tail, after = _TEMPLATES[risk]
    head = synthetic_head(call_id, name)
    data = {**template, "tool_call_id": call_id, "name": name, "content": head + tail}
    data["metadata"] = dict(template["metadata"])
    text = '{"tool_call_id":' + _json_string(call_id) + ',"name":' + _json_string(name)
    text += ',"content":' + _json_string(head)[:-1] + after
    return data, text
