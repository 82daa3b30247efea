"""PostgreSQL's text of the statements that differ between the backends (``journal.store.statements``).

Placeholders are SQLite's style (``?``, ``?N``), which the store translates; the rest is
PostgreSQL's own: its planner picks its own indexes, JSON is read through the ``json`` type, a
claim takes its row ``FOR UPDATE SKIP LOCKED`` (claimers on several hosts run at once).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from journal.store.statements import PREVIEW_STRUCTURE, STRUCTURE_SQL, Statements

# The viewer's read of a page of events (journal.preview), PostgreSQL's text of the SQLite
# store's PREVIEWS_SQL: each event's seq, type, time and size in bytes, and its first ?5 fields
# (one more, to tell there are more) as [key, value, cut, nul], every string and every object's
# or array's JSON text cut to ?4 characters in the server; of ``tool_calls``, the first ?5 calls'
# id, name and arguments (cut). The structure the messages view folds (a key, a call's id and
# name, statements.STRUCTURE_FIELDS) is cut at no fewer than PREVIEW_STRUCTURE characters; a longer
# ``metadata`` keeps its ``synthetic`` and ``risk``. ``journal_json_of`` reads a NUL as the escape
# of U+FFFD: ``nul`` is true for a key holding U+FFFD or a value whose kept part's JSON text holds
# that escape (the codec writes a real one as it is; 6 characters an escape at most), and
# journal.preview then reads that event whole and cuts it in Python.
_PREVIEW_COLUMNS = """\
SELECT e.seq, e.type, e.time_ms, octet_length(e.data),
  (SELECT coalesce(json_agg(json_build_array(left(f.key, greatest(?4::int, 512)), CASE
     WHEN f.key = 'tool_calls' AND f.kind = 'array' THEN
       (SELECT coalesce(json_agg(CASE WHEN json_typeof(c.value) = 'object' THEN json_build_object(
           'id', left(c.value ->> 'id', greatest(?4::int, 512)),
           'name', left(c.value ->> 'name', greatest(?4::int, 512)),
           'arguments', CASE WHEN length((c.value -> 'arguments')::text) <= ?4::int THEN c.value -> 'arguments'
                             ELSE to_json(left((c.value -> 'arguments')::text, ?4::int)) END,
           'cut', coalesce(length((c.value -> 'arguments')::text) > ?4::int, false)) END ORDER BY c.n), '[]'::json)
        FROM (SELECT value, n FROM json_array_elements(f.value) WITH ORDINALITY AS a (value, n)
              ORDER BY n LIMIT ?5) AS c)
     WHEN f.key = 'metadata' AND f.kind = 'object' AND length(f.value::text) > f.lim
       THEN json_build_object('synthetic', f.value -> 'synthetic', 'risk', f.value -> 'risk')
     WHEN f.kind = 'string' THEN to_json(left(f.value #>> '{}', f.lim))
     WHEN f.kind IN ('object', 'array') AND length(f.value::text) > f.lim THEN to_json(left(f.value::text, f.lim))
     ELSE f.value END,
     CASE WHEN f.kind = 'string' THEN length(f.value #>> '{}') > f.lim
          WHEN f.kind IN ('object', 'array') THEN length(f.value::text) > f.lim ELSE false END,
     strpos(f.key, U&'\\FFFD') > 0 OR strpos(left(f.value::text, 6 * f.lim + 8), '\\ufffd') > 0)
     ORDER BY f.n), '[]'::json)::text
   FROM (SELECT key, value, json_typeof(value) AS kind, n,
                CASE WHEN key IN STRUCTURE THEN greatest(?4::int, 512) ELSE ?4::int END AS lim
         FROM json_each(journal_json_of(e.data)) WITH ORDINALITY AS d (key, value, n) ORDER BY n LIMIT ?5 + 1) AS f)
""".replace("STRUCTURE", STRUCTURE_SQL).replace("512", str(PREVIEW_STRUCTURE))
PREVIEWS_SQL = (
    _PREVIEW_COLUMNS + "FROM events AS e WHERE e.session_id = ?1 AND e.seq >= ?2 AND e.seq < ?3 ORDER BY e.seq"
)
# The same cut read of the events at the seqs ?6 (a JSON array) of ?2 <= seq < ?3 (the SQLite
# store's PREVIEWS_AT_SQL): driven from the list, one index seek a seq.
PREVIEWS_AT_SQL = _PREVIEW_COLUMNS + (
    "FROM json_array_elements_text(?6::json) AS w (value) JOIN events AS e "
    "ON e.session_id = ?1 AND e.seq = w.value::bigint WHERE e.seq >= ?2 AND e.seq < ?3 ORDER BY e.seq"
)

# Recovery's set-based path (journal.recovery_batch), PostgreSQL's text of the SQLite store's
# OPEN_WORK_SQL: the same columns, rows and meaning. The open work of a batch of sessions (?1: a
# JSON array of ids), one row per open turn and call it owes (the call columns NULL for a turn
# owing none), read from the derived tables (turn_journal_open, tool_calls_owed, the events' key)
# and the open turn's own events only: the calls are joined per open turn (LATERAL), so each is an
# index seek and the cost follows the open work, not the file. ``simple``: the turn is the common case that path plans
# alone (a session that is no fork, this one open turn, no turn after its start, every owed call
# first seen in an assistant message of the turn); ``dispatching``: the turn recorded a dispatch.
# A call's ``position`` (1-based here) orders the calls requested together; ``name`` is the
# request's name when it is a string (NULL: the planner decides).
OPEN_WORK_SQL = """\
WITH batch (sid) AS (SELECT DISTINCT b.value FROM json_array_elements_text(?1::json) AS b (value)),
open_turn AS MATERIALIZED (
  SELECT s.id AS sid, t.start_seq, t.turn, t.steps, t.step_open,
    s.seed_length = 0
    AND (SELECT count(*) FROM turn_journal AS u WHERE u.session_id = s.id AND u.end_seq IS NULL) = 1
    AND NOT EXISTS (SELECT 1 FROM turn_journal AS u WHERE u.session_id = s.id AND u.start_seq > t.start_seq)
    AND NOT EXISTS (SELECT 1 FROM tool_calls AS d
                     WHERE d.session_id = s.id AND d.result_seq IS NULL AND d.dispatch_seq IS NOT NULL
                       AND ((d.requested_seq IS NULL OR d.dispatch_seq < d.requested_seq)
                            AND GREATEST(d.dispatch_seq, coalesce(d.requested_seq, -1)) >= t.start_seq
                            OR d.requested_seq < t.start_seq AND d.dispatch_seq >= t.start_seq)) AS simple,
    (SELECT max(v.seq) FROM events AS v WHERE v.session_id = s.id) + 1 AS next_seq,
    EXISTS (SELECT 1 FROM events AS v WHERE v.session_id = s.id AND v.seq > t.start_seq AND v.type = 'tool_call'
             AND json_typeof(journal_json_of(v.data) -> 'id') = 'string'
             AND (journal_json_of(v.data) ->> 'id') <> '') AS dispatching
  FROM batch JOIN sessions AS s ON s.id = batch.sid AND s.purged_ms IS NULL
  JOIN turn_journal AS t ON t.session_id = s.id AND t.end_seq IS NULL
)
SELECT o.sid, o.start_seq, o.turn, o.steps, o.step_open, o.simple, o.next_seq, o.dispatching,
       w.call_id, w.requested_seq, w.dispatch_seq, w.position, w.name
FROM open_turn AS o
LEFT JOIN LATERAL (
  SELECT c.call_id, c.requested_seq, c.dispatch_seq, j.n AS position,
         CASE WHEN json_typeof(j.value -> 'name') = 'string' THEN j.value ->> 'name' END AS name
  FROM tool_calls AS c
  LEFT JOIN events AS e ON e.session_id = c.session_id AND e.seq = c.requested_seq
  LEFT JOIN LATERAL (SELECT journal_json_of(e.data) -> 'tool_calls' AS calls) AS r ON true
  LEFT JOIN LATERAL json_array_elements(CASE WHEN json_typeof(r.calls) = 'array' THEN r.calls END)
    WITH ORDINALITY AS j (value, n)
    ON json_typeof(j.value) = 'object' AND json_typeof(j.value -> 'id') = 'string' AND (j.value ->> 'id') = c.call_id
  WHERE o.simple AND c.session_id = o.sid AND c.result_seq IS NULL AND c.requested_seq >= o.start_seq
    AND c.call_id <> ''
) AS w ON true
ORDER BY o.sid, o.start_seq, w.requested_seq, w.position"""

_OPEN_TURNS = (
    "SELECT t.session_id, t.start_seq, t.turn, t.phase, t.attempt, t.submission_id, t.owner, "
    "q.state, q.lease_owner, q.lease_expires_ms FROM turn_journal AS t "
    "LEFT JOIN submissions AS q ON q.id = t.submission_id WHERE t.end_seq IS NULL"
)
# Each claimer takes the row it found and passes over the rows other claimers hold: the
# submission is theirs until they commit.
_RUNNABLE = (
    "SELECT q.id FROM submissions AS q WHERE q.state = 'queued' {session}"
    "AND NOT EXISTS (SELECT 1 FROM submissions AS r WHERE r.session_id = q.session_id AND r.state = 'running') "
    "AND NOT EXISTS (SELECT 1 FROM submissions AS e "
    "WHERE e.session_id = q.session_id AND e.state = 'queued' AND e.ordinal < q.ordinal) "
    "ORDER BY q.ordinal LIMIT 1 FOR UPDATE OF q SKIP LOCKED"
)
_APP_EVENTS = (
    "SELECT seq, type, data, time_ms, key FROM events "
    "WHERE session_id = ? AND type = ? AND type LIKE 'x.%' AND seq >= ? AND seq < ? ORDER BY seq {order} LIMIT ?"
)


def _meta_value(value: Any) -> str:
    """A meta value as session_meta holds it here: its JSON text, a string unquoted (and a
    boolean as 1 or 0, as json_each gives it)."""
    return value if isinstance(value, str) else json.dumps(value)


# Per tool name, at a glance (journal.results.Results.tool_stats). PostgreSQL: the data is text,
# cast to json; a JSON true reads as 'true'.
TOOL_STATS_SQL = """
WITH c AS (
    SELECT c.name AS name, c.state AS state, c.result_seq AS result_seq,
           coalesce(journal_json_of(r.data) ->> 'is_error' = 'true', false) AS is_error,
           coalesce(journal_json_of(r.data) -> 'metadata' ->> 'synthetic' = 'true', false) AS synthetic,
           CASE WHEN coalesce(journal_json_of(r.data) -> 'metadata' ->> 'synthetic' = 'true', false)
                THEN journal_json_of(r.data) -> 'metadata' ->> 'risk' END AS risk,
           CASE WHEN t.seq IS NOT NULL AND r.seq IS NOT NULL
                 AND NOT coalesce(journal_json_of(r.data) -> 'metadata' ->> 'synthetic' = 'true', false)
                THEN r.time_ms - t.time_ms END AS ms
      FROM tool_calls AS c
      LEFT JOIN events AS t ON t.session_id = c.session_id AND t.seq = c.dispatch_seq
      LEFT JOIN events AS r ON r.session_id = c.session_id AND r.seq = c.result_seq
     WHERE CAST(?1 AS text) IS NULL OR c.session_id = ?1
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
  LEFT JOIN ranks ON ranks.name IS NOT DISTINCT FROM a.name
 ORDER BY a.calls DESC, a.name LIMIT ?2
"""

STATEMENTS = Statements(
    dialect="postgresql",
    previews=PREVIEWS_SQL,
    previews_at=PREVIEWS_AT_SQL,
    # Differs after a transaction committed (the snapshot's horizon moves): reads no table.
    change_token="SELECT pg_current_snapshot()::text",
    places_compactions="SELECT true",
    open_turn="SELECT 1 FROM turn_journal WHERE session_id = ? AND end_seq IS NULL",
    insert_own_dispatch=(
        "INSERT INTO events (session_id, seq, type, data, time_ms) SELECT ?1, ?2, ?3, ?4, ?5 "
        "WHERE (SELECT seed_length FROM sessions WHERE id = ?1) = 0 "
        "AND EXISTS (SELECT 1 FROM turn_journal WHERE session_id = ?1 AND end_seq IS NULL)"
    ),
    app_events_oldest_first=_APP_EVENTS.format(order="ASC"),
    app_events_newest_first=_APP_EVENTS.format(order="DESC"),
    # Through the digests schema_pg.sql indexes (a key or value may be longer than a btree
    # entry), rechecked on the text itself; each binding is used once.
    meta_sessions=(
        "SELECT m.session_id FROM (SELECT ?::text AS k, ?::text AS t, ?::text AS v) AS p JOIN session_meta AS m "
        "ON md5(m.key) = md5(p.k) AND m.type = p.t AND md5(m.value) = md5(p.v) AND m.key = p.k AND m.value = p.v"
    ),
    meta_value=_meta_value,
    innermost_open_turn="SELECT max(start_seq) FROM turn_journal WHERE session_id = ? AND end_seq IS NULL",
    state_latest=(
        "SELECT kind, value FROM state WHERE session_id = ? AND key = ? AND at <= ? ORDER BY at DESC, id DESC LIMIT 1"
    ),
    insert_submission=(  # the ordinal is the identity column's next value
        "INSERT INTO submissions (id, session_id, type, data, state, max_attempts, timeout_s, created_ms, updated_ms) "
        "VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?)"
    ),
    runnable=_RUNNABLE.format(session=""),
    runnable_in_session=_RUNNABLE.format(session="AND q.session_id = ? "),
    owned_open_turns_of=_OPEN_TURNS
    + " AND t.owner IS NOT NULL AND t.session_id IN (SELECT json_array_elements_text(?::json))",
    open_turns_owing=(
        "SELECT t.session_id, t.start_seq, t.turn, t.phase, t.attempt, t.submission_id, t.owner, "
        "q.state, q.lease_owner, q.lease_expires_ms, c.call_id, c.name, c.requested_seq, c.dispatch_seq "
        "FROM turn_journal AS t "
        "LEFT JOIN submissions AS q ON q.id = t.submission_id "
        "LEFT JOIN tool_calls AS c ON c.session_id = t.session_id AND c.result_seq IS NULL "
        "AND (coalesce(c.requested_seq, c.dispatch_seq) >= t.start_seq OR c.dispatch_seq >= t.start_seq) "
        "WHERE t.end_seq IS NULL "
        "ORDER BY t.session_id, t.start_seq, coalesce(c.requested_seq, c.dispatch_seq), c.call_id"
    ),
    interrupted_sessions="SELECT DISTINCT session_id FROM turn_journal WHERE end_seq IS NULL ORDER BY session_id",
    outermost_open=(
        "SELECT seed_length, (SELECT min(start_seq) FROM turn_journal WHERE session_id = s.id AND end_seq IS NULL) "
        "FROM sessions AS s WHERE s.id = ? AND s.purged_ms IS NULL"
    ),
    call_seqs=(
        "SELECT call_id, requested_seq, dispatch_seq, result_seq FROM tool_calls "
        "WHERE session_id = ? AND call_id IN (SELECT json_array_elements_text(?::json))"
    ),
    open_work=OPEN_WORK_SQL,
    open_turn_starts=(
        "SELECT start_seq, turn FROM turn_journal WHERE session_id = ? AND end_seq IS NULL ORDER BY start_seq"
    ),
    tool_stats=TOOL_STATS_SQL,
    indeterminate_calls=(
        "SELECT c.session_id, c.call_id, c.name, c.dispatch_seq, c.result_seq, n.id, n.data, n.created_ms, n.acked_ms "
        "FROM tool_calls AS c LEFT JOIN notifications AS n "
        "ON n.session_id = c.session_id AND n.call_id = c.call_id AND n.kind = 'indeterminate' "
        "WHERE c.state = 'indeterminate' ORDER BY c.session_id, c.dispatch_seq"
    ),
    mark_delivered=(
        "UPDATE notifications SET data = (data::jsonb || jsonb_build_object('delivered_ms', ?1::bigint))::text "
        "WHERE id = ?2 AND (journal_json_of(data) ->> 'delivered_ms') IS NULL"
    ),
    undelivered=(
        "SELECT session_id, call_id FROM notifications "
        "WHERE acked_ms IS NULL AND (journal_json_of(data) ->> 'delivered_ms') IS NULL ORDER BY created_ms, id"
    ),
    may_compact=(
        "SELECT count(*) FROM events WHERE session_id = ? AND (strpos(data, '\"surface_op\"') > 0 OR type = 'retract')"
    ),
)


# The same statements for a read-only open of a schema made before ``journal_json_of`` (which the
# first writable open makes: journal.store.postgres): its JSON read with a plain ``::json``.
_OLDER_TEXTS: dict[str, Any] = {
    name: re.sub(r"journal_json_of\(([\w.]+)\)", r"\1::json", text) for name, text in STATEMENTS.texts().items()
}
OLDER_STATEMENTS = dataclasses.replace(STATEMENTS, **_OLDER_TEXTS)

# A lone append committed alone (the store's ``INSERT_EVENT`` through ``write_one``): one prepared
# statement in an implicit transaction, one round trip. Its CTE takes the journal's lock shared,
# then the session's, before the INSERT reads it; the schema's row trigger then checks the row's
# place (G4) with queries of its own, which see every write committed before the locks were
# granted (a PL/pgSQL trigger's queries each take a fresh snapshot). Bindings: the two lock keys,
# then the five event columns.
APPEND_ONE = (
    "WITH lock AS MATERIALIZED "
    "(SELECT pg_advisory_xact_lock_shared(?1) AS journal, pg_advisory_xact_lock(?2) AS session) "
    "INSERT INTO events (session_id, seq, type, data, time_ms) "
    "SELECT CAST(?3 AS text), CAST(?4 AS bigint), CAST(?5 AS text), CAST(?6 AS text), CAST(?7 AS bigint) FROM lock"
)

# A batch of event rows in one statement (``PgDatabase.insert_events``): the columns as arrays,
# inserted in the batch's order (the schema's trigger checks each seq against the row before it).
INSERT_EVENTS = (
    "INSERT INTO events (session_id, seq, type, data, time_ms) "
    "SELECT r.session_id, r.seq, r.type, r.data, r.time_ms "
    "FROM unnest(?::text[], ?::bigint[], ?::text[], ?::text[], ?::bigint[]) "
    "WITH ORDINALITY AS r (session_id, seq, type, data, time_ms, n) ORDER BY r.n"
)

# Recovery's repairs of a batch of sessions (``PgDatabase.insert_repairs``), in this order: the
# rows in one INSERT with the row trigger off (``journal.derived``: see schema_pg.sql), G4 checked
# for all of them at once, then their derived state written for all of them, exactly as the
# trigger writes it for a ``tool_result`` (the call resolved) and a ``turn_end`` (its turn closed
# as interrupted): one statement each, not a PL/pgSQL call per row. Each statement's values are
# whole columns: the five event columns; the sessions and seqs again; the results' (session,
# call, name, seq); the ends' (session, turn start, seq, reason).
DERIVED_BY_STATEMENT = "SET LOCAL journal.derived = 'statement'"
DERIVED_BY_ROW = "SET LOCAL journal.derived = ''"
EVENTS_CONTIGUOUS = "SELECT journal_events_contiguous(?::text[], ?::bigint[])"
RESOLVE_CALLS = (
    "INSERT INTO tool_calls (session_id, call_id, name, result_seq, state) "
    "SELECT r.session_id, r.call_id, r.name, r.seq, 'resolved' "
    "FROM unnest(?::text[], ?::text[], ?::text[], ?::bigint[]) AS r (session_id, call_id, name, seq) "
    "ON CONFLICT (session_id, call_id) DO UPDATE SET result_seq = excluded.result_seq, state = 'resolved'"
)
CLOSE_TURNS = (
    "UPDATE turn_journal AS t SET phase = 'committed', end_seq = u.seq, revision = t.revision + 1, "
    "step_open = 0, end_reason = u.reason "
    "FROM unnest(?::text[], ?::bigint[], ?::bigint[], ?::text[]) AS u (session_id, start_seq, seq, reason) "
    "WHERE t.session_id = u.session_id AND t.start_seq = u.start_seq AND t.end_seq IS NULL"
)

# A batch's derived state, planned once (``journal.derived_batch``) and written with the row
# trigger off (``PgDatabase.insert_events``): each value read from the stored row as
# ``journal_events_derived`` reads it from NEW (``journal_json_of(data)``). Bindings are whole columns: the
# turns the batch opens (the session, their turn_start seqs, the turns open around them); the
# turns' changes (``TurnChange.row``'s columns, the session first: NULL leaves a column as it was,
# a negative request seq clears it); the batch's session and seq bounds for its calls.
OPEN_TURNS = (
    "INSERT INTO turn_journal (session_id, start_seq, turn, phase, checkpoint_seq, submission_id, outer_start) "
    "SELECT e.session_id, e.seq, journal_json_int(journal_json_of(e.data) -> 'turn'), 'before_provider', e.seq, "
    "journal_json_of(e.data) ->> 'submission_id', u.outer_start "
    "FROM unnest(?2::bigint[], ?3::bigint[]) AS u (start_seq, outer_start) "
    "JOIN events AS e ON e.session_id = ?1 AND e.seq = u.start_seq"
)
CHANGE_TURNS = (
    "UPDATE turn_journal AS t SET steps = t.steps + u.steps, revision = t.revision + u.revision, "
    "step_open = coalesce(u.step_open, t.step_open), phase = coalesce(u.phase, t.phase), "
    "checkpoint_seq = coalesce(u.checkpoint_seq, t.checkpoint_seq), "
    "tool_request = CASE WHEN u.tool_request IS NULL THEN t.tool_request WHEN u.tool_request < 0 THEN NULL "
    "ELSE (SELECT journal_json_of(e.data) ->> 'tool_calls' FROM events AS e "
    "WHERE e.session_id = ?1 AND e.seq = u.tool_request) "
    "END, "
    "stream_key = CASE WHEN u.clear_stream <> 0 THEN NULL ELSE t.stream_key END, "
    "end_seq = coalesce(u.end_seq, t.end_seq), "
    "end_reason = CASE WHEN u.end_seq IS NULL THEN t.end_reason "
    "ELSE (SELECT CASE WHEN journal_json_of(e.data) ->> 'reason' "
    "IN ('complete', 'rejected', 'interrupted') THEN journal_json_of(e.data) ->> 'reason' END "
    "FROM events AS e WHERE e.session_id = ?1 AND e.seq = u.end_seq) END "
    "FROM unnest(?2::bigint[], ?3::bigint[], ?4::bigint[], ?5::int[], ?6::text[], ?7::bigint[], ?8::bigint[], "
    "?9::int[], ?10::bigint[]) "
    "AS u (start_seq, steps, revision, step_open, phase, checkpoint_seq, tool_request, clear_stream, end_seq) "
    "WHERE t.session_id = ?1 AND t.start_seq = u.start_seq"
)
# A call requested twice in the batch is written once, from its first place (the upserts after
# it would keep that place and name: coalesce), as the trigger's DISTINCT ON does in one message.
REQUEST_CALLS = (
    "INSERT INTO tool_calls (session_id, call_id, name, requested_seq, state) "
    "SELECT DISTINCT ON (c.value ->> 'id') e.session_id, c.value ->> 'id', c.value ->> 'name', e.seq, 'requested' "
    "FROM events AS e CROSS JOIN LATERAL json_array_elements("
    "CASE WHEN json_typeof(journal_json_of(e.data) -> 'tool_calls') = 'array' "
    "THEN journal_json_of(e.data) -> 'tool_calls' "
    "ELSE '[]'::json END) WITH ORDINALITY AS c (value, n) "
    "WHERE e.session_id = ?1 AND e.seq >= ?2 AND e.seq < ?3 AND e.type = 'assistant_message' "
    "AND json_typeof(c.value) = 'object' AND json_typeof(c.value -> 'id') = 'string' "
    "ORDER BY c.value ->> 'id', e.seq, c.n "
    "ON CONFLICT (session_id, call_id) DO UPDATE "
    "SET requested_seq = coalesce(tool_calls.requested_seq, excluded.requested_seq), "
    "name = coalesce(tool_calls.name, excluded.name)"
)
DISPATCH_CALLS = (
    "INSERT INTO tool_calls (session_id, call_id, name, dispatch_seq, state, effect, idempotency_key, request_id) "
    "SELECT session_id, journal_json_of(data) ->> 'id', journal_json_of(data) ->> 'name', seq, 'dispatched', "
    "journal_json_of(data) ->> 'effect', "
    "journal_json_of(data) ->> 'idempotency_key', journal_json_of(data) ->> 'request_id' FROM events "
    "WHERE session_id = ?1 AND seq >= ?2 AND seq < ?3 AND type = 'tool_call' ORDER BY seq "
    "ON CONFLICT (session_id, call_id) DO UPDATE SET dispatch_seq = excluded.dispatch_seq, "
    "state = CASE WHEN tool_calls.state = 'requested' THEN 'dispatched' ELSE tool_calls.state END, "
    "name = coalesce(tool_calls.name, excluded.name), effect = excluded.effect, "
    "idempotency_key = excluded.idempotency_key, request_id = excluded.request_id"
)
RESULT_CALLS = (
    "INSERT INTO tool_calls (session_id, call_id, name, result_seq, state) "
    "SELECT session_id, journal_json_of(data) ->> 'tool_call_id', journal_json_of(data) ->> 'name', seq, 'resolved' "
    "FROM events "
    "WHERE session_id = ?1 AND seq >= ?2 AND seq < ?3 AND type = 'tool_result' ORDER BY seq "
    "ON CONFLICT (session_id, call_id) DO UPDATE SET result_seq = excluded.result_seq, state = 'resolved'"
)
