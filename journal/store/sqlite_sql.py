"""SQLite's text of the statements that differ between the backends (``journal.store.statements``).

Where the planner, without statistics, could pick the table's primary key over a partial index
that holds only the open rows, the statement names the index (``INDEXED BY``): SQLite's own way,
which also fails the statement at once if the index is ever missing.
"""

from __future__ import annotations

from typing import Any

from journal.store.statements import PREVIEW_STRUCTURE, STRUCTURE_SQL, Statements

# The viewer's read of a page of events (journal.preview): each event's seq, type, time and size
# in bytes, and its first ?5 fields (one more, to tell there are more) as [key, value, cut, nul]:
# every string, and every object's or array's JSON text, cut to ?4 characters inside SQLite
# (``cut``: 1 when it was), so a page never decodes a whole large event. Of ``tool_calls``, the
# first ?5 calls: each one's id, name and arguments (cut; ``cut`` 1 when its arguments were).
# Only text is cut to ?4: the structure the messages view folds (a field's key, a call's id and
# name, statements.STRUCTURE_FIELDS) is cut at no fewer than PREVIEW_STRUCTURE characters (a
# call id's limit), so a cut read is the same messages, their text cut; a ``metadata`` longer
# than that keeps its ``synthetic`` and ``risk`` (the MAY-have-run marker). ``nul`` is 1 for a
# key or a string whose kept part holds a NUL, which SQLite's substr ends it at: journal.preview
# then reads that event whole and cuts it in Python (objects and arrays keep it escaped, and no
# call id or name holds one). The limit is written out where it is used: a subquery naming it
# would be materialized, each field's whole value copied into it.
_PREVIEW_COLUMNS = (
    """\
SELECT e.seq, e.type, e.time_ms, octet_length(e.data),
  (SELECT json_group_array(json_array(substr(f.key, 1, max(?4, 512)), CASE
     WHEN f.calls IS NOT NULL THEN
       json((SELECT json_group_array(CASE WHEN c.type = 'object' THEN json_object(
           'id', substr(c.id, 1, max(?4, 512)), 'name', substr(c.name, 1, max(?4, 512)),
           'arguments', CASE WHEN length(c.a) <= ?4 THEN json(c.a) ELSE substr(c.a, 1, ?4) END,
           'cut', length(c.a) > ?4) END)
        FROM (SELECT type, value ->> '$.id' AS id, value ->> '$.name' AS name,
                     substr(value -> '$.arguments', 1, ?4 + 1) AS a
              FROM json_each(f.calls) LIMIT ?5) AS c))
     WHEN f.type = 'true' THEN json('true')
     WHEN f.type = 'false' THEN json('false')
     WHEN f.marks IS NOT NULL AND length(f.head) > f.lim THEN json(f.marks)
     WHEN f.type = 'text' OR (f.type IN ('object', 'array') AND length(f.head) > f.lim) THEN substr(f.head, 1, f.lim)
     WHEN f.type IN ('object', 'array') THEN json(f.head)
     WHEN f.type = 'real' THEN e.data -> f.fullkey
     ELSE f.head END,
     f.type IN ('text', 'object', 'array') AND length(f.head) > f.lim, f.nul))
   FROM (SELECT key, fullkey, type, @lim@ AS lim,
                CASE WHEN type IN ('text', 'object', 'array') THEN substr(value, 1, @lim@ + 1) ELSE value END AS head,
                CASE WHEN key = 'tool_calls' AND type = 'array' THEN value END AS calls,
                CASE WHEN key = 'metadata' AND type = 'object'
                     THEN json_object('synthetic', value -> '$.synthetic', 'risk', value -> '$.risk') END AS marks,
                instr(CAST(key AS BLOB), X'00') > 0 OR (type = 'text'
                  AND instr(substr(CAST(value AS BLOB), 1, 4 * (@lim@ + 1)), X'00') > 0) AS nul
         FROM json_each(e.data) LIMIT ?5 + 1) AS f)
""".replace("@lim@", "(CASE WHEN key IN STRUCTURE THEN max(?4, 512) ELSE ?4 END)")
    .replace("STRUCTURE", STRUCTURE_SQL)
    .replace("512", str(PREVIEW_STRUCTURE))
)
PREVIEWS_SQL = (
    _PREVIEW_COLUMNS + "FROM events AS e WHERE e.session_id = ?1 AND e.seq >= ?2 AND e.seq < ?3 ORDER BY e.seq"
)
# The same cut read of the events at the seqs ?6 (a JSON array) of ?2 <= seq < ?3: the messages a
# viewer's page shows (journal.transcript's cut tail). Driven from the list: one seek a seq.
PREVIEWS_AT_SQL = _PREVIEW_COLUMNS + (
    "FROM json_each(?6) AS w CROSS JOIN events AS e "
    "WHERE e.session_id = ?1 AND e.seq = w.value AND e.seq >= ?2 AND e.seq < ?3 ORDER BY e.seq"
)


# Recovery's set-based path (journal.recovery_batch), SQLite's statement: the open work of a batch
# of sessions (?1: a JSON array of ids), one row per open turn and call it owes (the call columns
# NULL for a turn owing none), read from the derived tables and the open turn's own events only.
# ``simple`` says the turn is the common case that path plans alone: a session that is no fork,
# with this one open turn and no turn after its start (no nesting), every owed call first seen in
# an assistant message of the turn (not first by its dispatch, nor requested before the turn and
# dispatched in it: a call resumed after an approval). ``dispatching``: the turn recorded
# a dispatch. A call's ``position`` in its request orders calls requested together; ``name`` is
# the request's name when it is text (NULL: the planner decides).
OPEN_WORK_SQL = """\
WITH batch (sid) AS (SELECT DISTINCT value FROM json_each(?1)),
open_turn AS MATERIALIZED (
  SELECT s.id AS sid, t.start_seq, t.turn, t.steps, t.step_open,
    s.seed_length = 0
    AND (SELECT count(*) FROM turn_journal INDEXED BY turn_journal_open WHERE session_id = s.id AND end_seq IS NULL) = 1
    AND NOT EXISTS (SELECT 1 FROM turn_journal WHERE session_id = s.id AND start_seq > t.start_seq)
    AND NOT EXISTS (SELECT 1 FROM tool_calls INDEXED BY tool_calls_owed
                     WHERE session_id = s.id AND result_seq IS NULL AND dispatch_seq IS NOT NULL
                       AND ((requested_seq IS NULL OR dispatch_seq < requested_seq)
                            AND max(dispatch_seq, coalesce(requested_seq, -1)) >= t.start_seq
                            OR requested_seq < t.start_seq AND dispatch_seq >= t.start_seq)) AS simple,
    (SELECT max(seq) FROM events WHERE session_id = s.id) + 1 AS next_seq,
    EXISTS (SELECT 1 FROM events WHERE session_id = s.id AND seq > t.start_seq AND type = 'tool_call'
             AND json_type(data, '$.id') = 'text' AND data ->> '$.id' <> '') AS dispatching
  FROM batch JOIN sessions AS s ON s.id = batch.sid AND s.purged_ms IS NULL
  JOIN turn_journal AS t INDEXED BY turn_journal_open ON t.session_id = s.id AND t.end_seq IS NULL
)
SELECT o.sid, o.start_seq, o.turn, o.steps, o.step_open, o.simple, o.next_seq, o.dispatching,
       c.call_id, c.requested_seq, c.dispatch_seq, j.key AS position,
       CASE WHEN json_type(j.value, '$.name') = 'text' THEN j.value ->> '$.name' END AS name
FROM open_turn AS o
LEFT JOIN tool_calls AS c INDEXED BY tool_calls_owed
  ON o.simple AND c.session_id = o.sid AND c.result_seq IS NULL AND c.requested_seq >= o.start_seq AND c.call_id <> ''
LEFT JOIN events AS e ON e.session_id = c.session_id AND e.seq = c.requested_seq
LEFT JOIN json_each(e.data, '$.tool_calls') AS j ON j.type = 'object' AND j.value ->> '$.id' = c.call_id
ORDER BY o.sid, o.start_seq, c.requested_seq, j.key"""

# Recovery's repairs of a batch (``SqliteDatabase.insert_repairs``): with a row in
# ``derived_by_statement`` the schema's gate trigger leaves these rows' derived state to the two
# statements below, which write exactly what it writes for a ``tool_result`` (the call resolved)
# and a ``turn_end`` (its turn closed): one statement each for the batch, not the trigger's
# sub-program per row. Bindings: a JSON array of the results' ``[session, call, name, seq]``;
# one of the ends' ``[session, turn start, seq, reason]``.
RESOLVE_CALLS_SQL = (
    "INSERT INTO tool_calls (session_id, call_id, name, result_seq, state) "
    "SELECT r.value ->> 0, r.value ->> 1, r.value ->> 2, r.value ->> 3, 'resolved' FROM json_each(?1) AS r WHERE true "
    "ON CONFLICT (session_id, call_id) DO UPDATE SET result_seq = excluded.result_seq, state = 'resolved'"
)
CLOSE_TURNS_SQL = (
    "UPDATE turn_journal SET phase = 'committed', end_seq = u.seq, revision = revision + 1, step_open = 0, "
    "end_reason = CASE WHEN u.reason IN ('complete', 'rejected', 'interrupted') THEN u.reason END "
    "FROM (SELECT value ->> 0 AS sid, value ->> 1 AS start, value ->> 2 AS seq, value ->> 3 AS reason "
    "FROM json_each(?1)) AS u WHERE session_id = u.sid AND start_seq = u.start AND end_seq IS NULL"
)

# A batch's derived state, planned once (``journal.derived_batch``) and written with the gate
# trigger's derived part off (``SqliteDatabase.insert_events``): each value read from the stored
# row as the trigger reads it from NEW. A turn the batch opens, as its ``turn_start`` inserts it
# (bindings: session, the turn_start's seq, the turn open around it):
OPEN_TURN_SQL = (
    "INSERT INTO turn_journal (session_id, start_seq, turn, phase, checkpoint_seq, submission_id, outer_start) "
    "SELECT session_id, seq, CASE WHEN json_type(data, '$.turn') = 'integer' THEN data ->> '$.turn' END, "
    "'before_provider', seq, data ->> '$.submission_id', ?3 FROM events WHERE session_id = ?1 AND seq = ?2"
)
# What the batch's steps, requests and turn_ends did to a turn, at once (``TurnChange.row``): a
# NULL leaves a column as it was; ?8 is the seq of the request kept (-1: cleared by a step_end).
CHANGE_TURN_SQL = (
    "UPDATE turn_journal SET steps = steps + ?3, revision = revision + ?4, "
    "step_open = coalesce(?5, step_open), phase = coalesce(?6, phase), "
    "checkpoint_seq = coalesce(?7, checkpoint_seq), "
    "tool_request = CASE WHEN ?8 IS NULL THEN tool_request WHEN ?8 < 0 THEN NULL "
    "ELSE (SELECT data ->> '$.tool_calls' FROM events WHERE session_id = ?1 AND seq = ?8) END, "
    "stream_key = CASE WHEN ?9 THEN NULL ELSE stream_key END, "
    "end_seq = coalesce(?10, end_seq), "
    "end_reason = CASE WHEN ?10 IS NULL THEN end_reason ELSE (SELECT CASE WHEN data ->> '$.reason' "
    "IN ('complete', 'rejected', 'interrupted') THEN data ->> '$.reason' END "
    "FROM events WHERE session_id = ?1 AND seq = ?10) END "
    "WHERE session_id = ?1 AND start_seq = ?2"
)
# The batch's calls, kind by kind and in seq order (bindings: session, first seq, end seq): the
# requests of its assistant messages, its dispatches, its results, with the trigger's upserts.
REQUEST_CALLS_SQL = (
    "INSERT INTO tool_calls (session_id, call_id, name, requested_seq, state) "
    "SELECT e.session_id, c.value ->> '$.id', c.value ->> '$.name', e.seq, 'requested' "
    "FROM events AS e, json_each(e.data, '$.tool_calls') AS c "
    "WHERE e.session_id = ?1 AND e.seq >= ?2 AND e.seq < ?3 AND e.type = 'assistant_message' "
    "AND json_type(e.data, '$.tool_calls') = 'array' AND c.type = 'object' AND json_type(c.value, '$.id') = 'text' "
    "ORDER BY e.seq "
    "ON CONFLICT (session_id, call_id) DO UPDATE "
    "SET requested_seq = coalesce(requested_seq, excluded.requested_seq), name = coalesce(name, excluded.name)"
)
DISPATCH_CALLS_SQL = (
    "INSERT INTO tool_calls (session_id, call_id, name, dispatch_seq, state, effect, idempotency_key, request_id) "
    "SELECT session_id, data ->> '$.id', data ->> '$.name', seq, 'dispatched', data ->> '$.effect', "
    "data ->> '$.idempotency_key', data ->> '$.request_id' FROM events "
    "WHERE session_id = ?1 AND seq >= ?2 AND seq < ?3 AND type = 'tool_call' ORDER BY seq "
    "ON CONFLICT (session_id, call_id) DO UPDATE SET dispatch_seq = excluded.dispatch_seq, "
    "state = CASE WHEN state = 'requested' THEN 'dispatched' ELSE state END, name = coalesce(name, excluded.name), "
    "effect = excluded.effect, idempotency_key = excluded.idempotency_key, request_id = excluded.request_id"
)
RESULT_CALLS_SQL = (
    "INSERT INTO tool_calls (session_id, call_id, name, result_seq, state) "
    "SELECT session_id, data ->> '$.tool_call_id', data ->> '$.name', seq, 'resolved' FROM events "
    "WHERE session_id = ?1 AND seq >= ?2 AND seq < ?3 AND type = 'tool_result' ORDER BY seq "
    "ON CONFLICT (session_id, call_id) DO UPDATE SET result_seq = excluded.result_seq, state = 'resolved'"
)

_OPEN_TURNS = (
    "SELECT t.session_id, t.start_seq, t.turn, t.phase, t.attempt, t.submission_id, t.owner, "
    "q.state, q.lease_owner, q.lease_expires_ms FROM turn_journal AS t INDEXED BY turn_journal_open "
    "LEFT JOIN submissions AS q ON q.id = t.submission_id WHERE t.end_seq IS NULL"
)
_RUNNABLE = (
    "SELECT q.id FROM submissions AS q WHERE q.state = 'queued' {session}"
    "AND NOT EXISTS (SELECT 1 FROM submissions AS r WHERE r.session_id = q.session_id AND r.state = 'running') "
    "AND NOT EXISTS (SELECT 1 FROM submissions AS e INDEXED BY submissions_queued "
    "WHERE e.session_id = q.session_id AND e.state = 'queued' AND e.ordinal < q.ordinal) "
    "ORDER BY q.ordinal LIMIT 1"
)
_APP_EVENTS = (
    "SELECT seq, type, data, time_ms, key FROM events INDEXED BY events_app "
    "WHERE session_id = ? AND type = ? AND type LIKE 'x.%' AND seq >= ? AND seq < ? ORDER BY seq {order} LIMIT ?"
)


def _meta_value(value: Any) -> Any:
    """A meta value bound as json_each gives it (session_meta keeps its type)."""
    return value


# Per tool name, at a glance (journal.results.Results.tool_stats; SQLite: JSON true reads as 1).
TOOL_STATS_SQL = """
WITH c AS (
    SELECT c.name AS name, c.state AS state, c.result_seq AS result_seq,
           coalesce(r.data ->> '$.is_error' = 1, 0) AS is_error,
           coalesce(r.data ->> '$.metadata.synthetic' = 1, 0) AS synthetic,
           CASE WHEN coalesce(r.data ->> '$.metadata.synthetic' = 1, 0) THEN r.data ->> '$.metadata.risk' END AS risk,
           CASE WHEN t.seq IS NOT NULL AND r.seq IS NOT NULL AND NOT coalesce(r.data ->> '$.metadata.synthetic' = 1, 0)
                THEN r.time_ms - t.time_ms END AS ms
      FROM tool_calls AS c
      LEFT JOIN events AS t ON t.session_id = c.session_id AND t.seq = c.dispatch_seq
      LEFT JOIN events AS r ON r.session_id = c.session_id AND r.seq = c.result_seq
     WHERE ?1 IS NULL OR c.session_id = ?1
), timed AS (
    SELECT name, ms, row_number() OVER (PARTITION BY name ORDER BY ms) AS k,
           count(*) OVER (PARTITION BY name) AS n
      FROM c WHERE ms IS NOT NULL
), ranks AS (
    SELECT name, max(CASE WHEN k = (n * 50 + 99) / 100 THEN ms END) AS p50,
           max(CASE WHEN k = (n * 95 + 99) / 100 THEN ms END) AS p95
      FROM timed GROUP BY name
)
SELECT coalesce(a.name, ''), a.calls, a.results, a.errors, a.may_have_run, a.did_not_run, a.indeterminate,
       ranks.p50, ranks.p95
  FROM (SELECT name, count(*) AS calls, count(result_seq) AS results,
               sum(CASE WHEN is_error AND NOT synthetic THEN 1 ELSE 0 END) AS errors,
               sum(CASE WHEN risk = 'tool_outcome_unknown' THEN 1 ELSE 0 END) AS may_have_run,
               sum(CASE WHEN risk = 'tool_not_started' THEN 1 ELSE 0 END) AS did_not_run,
               sum(CASE WHEN state = 'indeterminate' THEN 1 ELSE 0 END) AS indeterminate
          FROM c GROUP BY name) AS a
  LEFT JOIN ranks ON ranks.name IS a.name
 ORDER BY a.calls DESC, a.name LIMIT ?2
"""

STATEMENTS = Statements(
    dialect="sqlite",
    previews=PREVIEWS_SQL,
    previews_at=PREVIEWS_AT_SQL,
    # Differs after another connection committed (compared on one connection).
    change_token="PRAGMA data_version",
    # Version 6 places compactions with retracts; a read-only open of an older file folds instead.
    places_compactions="SELECT user_version >= 6 FROM pragma_user_version",
    open_turn="SELECT 1 FROM turn_journal INDEXED BY turn_journal_open WHERE session_id = ? AND end_seq IS NULL",
    insert_own_dispatch=(
        "INSERT INTO events (session_id, seq, type, data, time_ms) SELECT ?1, ?2, ?3, ?4, ?5 "
        "WHERE (SELECT seed_length FROM sessions WHERE id = ?1) = 0 "
        "AND EXISTS (SELECT 1 FROM turn_journal INDEXED BY turn_journal_open WHERE session_id = ?1 AND end_seq IS NULL)"
    ),
    app_events_oldest_first=_APP_EVENTS.format(order="ASC"),
    app_events_newest_first=_APP_EVENTS.format(order="DESC"),
    meta_sessions="SELECT session_id FROM session_meta WHERE key = ? AND type = ? AND value = ?",
    meta_value=_meta_value,
    innermost_open_turn=(
        "SELECT max(start_seq) FROM turn_journal INDEXED BY turn_journal_open WHERE session_id = ? AND end_seq IS NULL"
    ),
    state_latest=(
        "SELECT kind, value FROM state INDEXED BY state_at WHERE session_id = ? AND key = ? AND at <= ? "
        "ORDER BY at DESC, id DESC LIMIT 1"
    ),
    # The next ordinal: an index seek (writers take turns, so no two read the same maximum).
    insert_submission=(
        "INSERT INTO submissions (id, session_id, type, data, state, max_attempts, timeout_s, created_ms, updated_ms, "
        "ordinal) VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?, (SELECT coalesce(max(ordinal), 0) + 1 FROM submissions))"
    ),
    runnable=_RUNNABLE.format(session=""),
    runnable_in_session=_RUNNABLE.format(session="AND q.session_id = ? "),
    owned_open_turns_of=_OPEN_TURNS + " AND t.owner IS NOT NULL AND t.session_id IN (SELECT value FROM json_each(?))",
    open_turns_owing=(
        "SELECT t.session_id, t.start_seq, t.turn, t.phase, t.attempt, t.submission_id, t.owner, "
        "q.state, q.lease_owner, q.lease_expires_ms, c.call_id, c.name, c.requested_seq, c.dispatch_seq "
        "FROM turn_journal AS t INDEXED BY turn_journal_open "
        "LEFT JOIN submissions AS q ON q.id = t.submission_id "
        "LEFT JOIN tool_calls AS c INDEXED BY tool_calls_owed ON c.session_id = t.session_id AND c.result_seq IS NULL "
        "AND (coalesce(c.requested_seq, c.dispatch_seq) >= t.start_seq OR c.dispatch_seq >= t.start_seq) "
        "WHERE t.end_seq IS NULL "
        "ORDER BY t.session_id, t.start_seq, coalesce(c.requested_seq, c.dispatch_seq), c.call_id"
    ),
    interrupted_sessions=(
        "SELECT DISTINCT session_id FROM turn_journal INDEXED BY turn_journal_open WHERE end_seq IS NULL "
        "ORDER BY session_id"
    ),
    outermost_open=(
        "SELECT seed_length, (SELECT min(start_seq) FROM turn_journal INDEXED BY turn_journal_open "
        "WHERE session_id = s.id AND end_seq IS NULL) FROM sessions AS s WHERE s.id = ? AND s.purged_ms IS NULL"
    ),
    call_seqs=(
        "SELECT call_id, requested_seq, dispatch_seq, result_seq FROM tool_calls "
        "WHERE session_id = ? AND call_id IN (SELECT value FROM json_each(?))"
    ),
    open_work=OPEN_WORK_SQL,
    open_turn_starts=(
        "SELECT start_seq, turn FROM turn_journal INDEXED BY turn_journal_open "
        "WHERE session_id = ? AND end_seq IS NULL ORDER BY start_seq"
    ),
    tool_stats=TOOL_STATS_SQL,
    indeterminate_calls=(
        "SELECT c.session_id, c.call_id, c.name, c.dispatch_seq, c.result_seq, n.id, n.data, n.created_ms, n.acked_ms "
        "FROM tool_calls AS c INDEXED BY tool_calls_indeterminate LEFT JOIN notifications AS n "
        "ON n.session_id = c.session_id AND n.call_id = c.call_id AND n.kind = 'indeterminate' "
        "WHERE c.state = 'indeterminate' ORDER BY c.session_id, c.dispatch_seq"
    ),
    mark_delivered=(
        "UPDATE notifications SET data = json_set(data, '$.delivered_ms', ?1) "
        "WHERE id = ?2 AND data ->> '$.delivered_ms' IS NULL"
    ),
    undelivered=(
        "SELECT session_id, call_id FROM notifications INDEXED BY notifications_pending "
        "WHERE acked_ms IS NULL AND data ->> '$.delivered_ms' IS NULL ORDER BY created_ms, id"
    ),
    may_compact=(
        "SELECT count(*) FROM events WHERE session_id = ? AND (instr(data, '\"surface_op\"') > 0 OR type = 'retract')"
    ),
)
