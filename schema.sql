-- The journal's schema: the one definition. journal/store.py applies it to a new file inside one
-- transaction and stamps PRAGMA application_id and PRAGMA user_version (see store.py).
--
-- `events` is the log; every other table is derived state, kept in step with the log by the
-- triggers at the end of this file (so it follows every append, whichever API made it) or by the
-- engine in the same transaction. `journal check` recomputes it from the log.

CREATE TABLE sessions (
    id          TEXT PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 256),
    parent_id   TEXT REFERENCES sessions (id),
    -- Events with seq < seed_length are read through the parent (a fork copies nothing).
    seed_length INTEGER NOT NULL DEFAULT 0 CHECK (seed_length >= 0),
    meta        TEXT CHECK (meta IS NULL OR json_valid(meta)),
    created_ms  INTEGER NOT NULL,
    -- Set (in the same transaction as the deletes) only by purge: the one exception to G3.
    purged_ms   INTEGER,
    CHECK (parent_id IS NOT NULL OR seed_length = 0)
) STRICT;

CREATE INDEX sessions_parent ON sessions (parent_id) WHERE parent_id IS NOT NULL;
-- The listing order (oldest first, then by id): a page of sessions is a seek into this index and
-- a walk of the page's length, not a sort of every session.
CREATE INDEX sessions_created ON sessions (created_ms, id);

CREATE TABLE events (
    session_id TEXT NOT NULL REFERENCES sessions (id),
    seq        INTEGER NOT NULL CHECK (seq >= 0),
    -- Written as a chain of = rather than IN (...): SQLite builds an ephemeral index for an IN
    -- list on every insert, which costs more than the rest of this CHECK.
    type       TEXT NOT NULL CHECK (
        type = 'system_message' OR type = 'user_message' OR type = 'assistant_message'
        OR type = 'tool_result' OR type = 'tool_call' OR type = 'tool_result_late'
        OR type = 'turn_start' OR type = 'turn_end' OR type = 'step_start' OR type = 'step_end'
        OR type = 'stream_interrupted' OR type = 'stream_continued'
        OR type = 'submission_interrupted' OR type = 'operator_resolution' OR type = 'retract'
        OR (type LIKE 'x.%' AND length(type) > 2)
    ),
    data       TEXT NOT NULL CHECK (json_valid(data) AND json_type(data) = 'object'),
    time_ms    INTEGER NOT NULL,
    -- An idempotency key the appender chose (a framework's entry id, a retried batch's item):
    -- unique per session, so a duplicate returns the stored event and writes nothing.
    key        TEXT CHECK (key IS NULL OR length(key) BETWEEN 1 AND 256),
    PRIMARY KEY (session_id, seq)
) STRICT, WITHOUT ROWID;

CREATE UNIQUE INDEX events_key ON events (session_id, key) WHERE key IS NOT NULL;
-- A session's app events (`x.` types: what adapters store) of given types, newest first
-- (`events(types=..., newest_first=True)`). Partial: an index entry on every append would cost
-- each one about a third more; the engine's own types are dense in a log, read from its end.
CREATE INDEX events_app ON events (session_id, type, seq) WHERE type LIKE 'x.%';

-- G5: at most one result per (session, tool call); G6's record: one dispatch per call.
CREATE UNIQUE INDEX events_one_result
    ON events (session_id, data ->> '$.tool_call_id') WHERE type = 'tool_result';
CREATE UNIQUE INDEX events_one_dispatch
    ON events (session_id, data ->> '$.id') WHERE type = 'tool_call';
-- (No index of the turn boundaries: turn numbering and fork checks read the turn journal.)

-- One row per turn; the open ones (end_seq IS NULL) are what the restart scan lists.
CREATE TABLE turn_journal (
    session_id     TEXT NOT NULL REFERENCES sessions (id),
    start_seq      INTEGER NOT NULL,
    turn           INTEGER,
    phase          TEXT NOT NULL CHECK (
        phase IN ('before_provider', 'provider_started', 'tool_request_recorded', 'committed')),
    attempt        INTEGER NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    revision       INTEGER NOT NULL DEFAULT 0 CHECK (revision >= 0),
    checkpoint_seq INTEGER NOT NULL,
    tool_request   TEXT CHECK (tool_request IS NULL OR json_valid(tool_request)),
    stream_key     TEXT,
    steps          INTEGER NOT NULL DEFAULT 0 CHECK (steps >= 0),
    step_open      INTEGER NOT NULL DEFAULT 0 CHECK (step_open IN (0, 1)),
    submission_id  TEXT,
    -- The turn that was innermost open when this one started (nested turns come only from
    -- damaged or hand-made logs); fork walks it to find the innermost turn open at a boundary.
    outer_start    INTEGER,
    end_seq        INTEGER,
    end_reason     TEXT CHECK (end_reason IS NULL OR end_reason IN ('complete', 'rejected', 'interrupted')),
    -- The process driving the turn (host:pid:process-start-time), set by the turn API and by a
    -- claim; NULL for a turn opened by a plain append. Recovery closes a turn only once its
    -- owner is gone (or when forced). Last, where a migration from version 2 adds it.
    owner          TEXT,
    PRIMARY KEY (session_id, start_seq),
    CHECK ((end_seq IS NULL) = (phase <> 'committed'))
) STRICT, WITHOUT ROWID;

-- The triggers and the scan name this index (INDEXED BY): without statistics the planner would
-- otherwise walk every turn of a session through the primary key.
CREATE INDEX turn_journal_open ON turn_journal (session_id, start_seq) WHERE end_seq IS NULL;

-- Where each tool call stands, derived from the log.
CREATE TABLE tool_calls (
    session_id      TEXT NOT NULL REFERENCES sessions (id),
    call_id         TEXT NOT NULL,
    name            TEXT,
    requested_seq   INTEGER,
    dispatch_seq    INTEGER,
    result_seq      INTEGER,
    state           TEXT NOT NULL CHECK (
        state IN ('requested', 'dispatched', 'resolved', 'indeterminate')),
    effect          TEXT CHECK (effect IS NULL OR effect IN ('idempotent', 'queryable', 'unsafe')),
    idempotency_key TEXT,
    request_id      TEXT,
    PRIMARY KEY (session_id, call_id)
) STRICT, WITHOUT ROWID;

CREATE INDEX tool_calls_owed ON tool_calls (session_id, requested_seq) WHERE result_seq IS NULL;
CREATE INDEX tool_calls_dispatched ON tool_calls (session_id) WHERE state = 'dispatched';
CREATE INDEX tool_calls_indeterminate ON tool_calls (session_id) WHERE state = 'indeterminate';

-- Streamed segments of a provider response, first write wins per (stream_key, idx).
CREATE TABLE stream_chunks (
    stream_key TEXT NOT NULL,
    idx        INTEGER NOT NULL CHECK (idx >= 0),
    session_id TEXT NOT NULL REFERENCES sessions (id),
    content    TEXT NOT NULL,
    time_ms    INTEGER NOT NULL,
    consumed   INTEGER NOT NULL DEFAULT 0 CHECK (consumed IN (0, 1)),
    PRIMARY KEY (stream_key, idx)
) STRICT, WITHOUT ROWID;

-- Per-session keyed state (a framework's channel values): each write is a new row, never an
-- update; the latest row of a key is its value, and `at` (the session's event count when it was
-- written) dates it, so the state as of any seq can be read back. Values are bytes: a JSON
-- value's UTF-8 text, or the bytes themselves (as schema_pg.sql keeps them, in a BYTEA).
CREATE TABLE state (
    id         INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id),
    key        TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 256),
    at         INTEGER NOT NULL CHECK (at >= 0),
    kind       TEXT NOT NULL CHECK (kind IN ('json', 'bytes')),
    value      BLOB NOT NULL,
    CHECK (kind = 'bytes' OR json_valid(CAST(value AS TEXT)))
) STRICT;

CREATE INDEX state_at ON state (session_id, key, at, id);

-- The top-level scalar entries of each session's meta, for listing sessions by a meta value
-- (kept by the trigger below: meta is written once, when the session is created).
CREATE TABLE session_meta (
    session_id TEXT NOT NULL REFERENCES sessions (id),
    key        TEXT NOT NULL,
    type       TEXT NOT NULL,
    value      ANY,
    PRIMARY KEY (key, type, value, session_id)
) STRICT, WITHOUT ROWID;

CREATE TRIGGER sessions_meta AFTER INSERT ON sessions
WHEN NEW.meta IS NOT NULL
BEGIN
    INSERT INTO session_meta (session_id, key, type, value)
    SELECT NEW.id, m.key, m.type, m.value FROM json_each(NEW.meta) AS m
     WHERE m.type NOT IN ('object', 'array', 'null');
END;

-- Where each compaction and each retract stands in its session's transcript (derived from the
-- log by the triggers below): one row per surface event of the session's own whose surface_op is
-- a well-formed replace (`kind` 'replace': it stands at `first` in place of the messages up to
-- `last`), and one per `retract` event (it removes the last message; `first` and `last` name
-- the position it had). `before` and `after` are the transcript's length (in messages, a fork's
-- inherited ones included) just before and after it. The last messages of a long chat are read
-- from the end of the log with these alone: a compaction's place needs no walk of what came
-- before it.
CREATE TABLE compactions (
    session_id TEXT NOT NULL REFERENCES sessions (id),
    seq        INTEGER NOT NULL,
    kind       TEXT NOT NULL DEFAULT 'replace' CHECK (kind IN ('replace', 'retract')),
    first      INTEGER NOT NULL CHECK (first >= 0),
    last       INTEGER NOT NULL CHECK (last >= first),
    before     INTEGER NOT NULL CHECK (before >= 0),
    after      INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq),
    CHECK ((kind = 'replace' AND after BETWEEN 1 AND before + 1) OR (kind = 'retract' AND after = max(before - 1, 0)))
) STRICT, WITHOUT ROWID;

-- The durable input queue.
CREATE TABLE submissions (
    id               TEXT PRIMARY KEY,
    session_id       TEXT NOT NULL REFERENCES sessions (id),
    type             TEXT NOT NULL CHECK (type IN ('user_message', 'system_message', 'tool_result') OR type LIKE 'x.%'),
    data             TEXT NOT NULL CHECK (json_valid(data) AND json_type(data) = 'object'),
    state            TEXT NOT NULL CHECK (state IN ('queued', 'running', 'completed', 'failed')),
    attempt          INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
    timeout_s        REAL NOT NULL CHECK (timeout_s > 0),
    created_ms       INTEGER NOT NULL,
    updated_ms       INTEGER NOT NULL,
    lease_owner      TEXT,
    lease_expires_ms INTEGER,
    input_seq        INTEGER,
    turn_start_seq   INTEGER,
    -- Set by the reconciler when it starts a new attempt: how the next worker should resume.
    resume_mode      TEXT CHECK (resume_mode IS NULL OR resume_mode IN (
        'input_only', 'stream_continuation', 'tool_results', 'tool_results_partial',
        'transient_retry', 'overflow', 'aborted_partial')),
    outcome          TEXT,
    -- The order submissions were made in, which a session's queue follows: the next number,
    -- given by the INSERT (SQLite's writers take turns; schema_pg.sql: an identity column).
    ordinal          INTEGER NOT NULL UNIQUE CHECK (ordinal >= 1),
    CHECK ((state = 'running') = (lease_owner IS NOT NULL)),
    CHECK (attempt <= max_attempts)
) STRICT;

CREATE INDEX submissions_queued ON submissions (session_id, ordinal) WHERE state = 'queued';
CREATE INDEX submissions_running ON submissions (lease_expires_ms) WHERE state = 'running';

-- A durable outbox of operator notifications (indeterminate calls).
CREATE TABLE notifications (
    id         INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id),
    call_id    TEXT NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('indeterminate')),
    data       TEXT NOT NULL CHECK (json_valid(data)),
    created_ms INTEGER NOT NULL,
    acked_ms   INTEGER,
    UNIQUE (session_id, call_id, kind)
) STRICT;

CREATE INDEX notifications_pending ON notifications (created_ms) WHERE acked_ms IS NULL;

-- G3: the log is append-only. The one exception is purge, which marks the session first.
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'journal: events are append-only');
END;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
WHEN (SELECT purged_ms FROM sessions WHERE id = OLD.session_id) IS NULL
BEGIN
    SELECT RAISE(ABORT, 'journal: events are append-only (only purge deletes, a whole session)');
END;

-- G4: seq is contiguous from the session's seed length. An event either continues its own
-- session's events (the one at seq - 1 is there) or is the session's first (seq = seed_length);
-- with the primary key refusing a taken seq, that leaves exactly one seq an insert can use. In
-- the common case this costs one primary-key lookup.
CREATE TRIGGER events_seq_contiguous BEFORE INSERT ON events
WHEN NOT EXISTS (SELECT 1 FROM events WHERE session_id = NEW.session_id AND seq = NEW.seq - 1)
 AND NEW.seq IS NOT (SELECT seed_length FROM sessions WHERE id = NEW.session_id)
BEGIN
    SELECT RAISE(ABORT, 'journal: seq must continue the session contiguously');
END;

-- Derived state follows the log: the turn journal and the tool calls. SQLite runs a trigger as
-- a sub-program whose set-up costs in proportion to its size, even when its WHEN is false; so
-- the trigger on events is a small gate that lets through only the types that change derived
-- state, and hands them to the trigger on the view `derived_events`, which does the work. (One
-- trigger per type cost every message append about 2 µs; the gate costs a fifth of that.)
CREATE VIEW derived_events AS SELECT session_id, seq, type, data, time_ms FROM events WHERE 0;

-- A row here while recovery writes a batch of repairs, or append_many a batch whose derived state
-- it planned, says the statements after its INSERT write the derived state of the batch's rows,
-- set-based (journal.store.sqlite's insert_repairs: one upsert of the calls, one update of the
-- turns; insert_events with a plan: journal.derived_batch), in place of this trigger, row by
-- row, which costs several times as much. The row is inserted and deleted inside that one transaction, so
-- no commit holds it (one that did would stop the derived state following the log, which
-- `journal check` reports for every append after it).
CREATE TABLE derived_by_statement (one INTEGER PRIMARY KEY CHECK (one = 1)) STRICT;

CREATE TRIGGER events_derived AFTER INSERT ON events
WHEN (NEW.type = 'turn_start' OR NEW.type = 'turn_end' OR NEW.type = 'step_start'
  OR NEW.type = 'step_end' OR NEW.type = 'tool_call' OR NEW.type = 'tool_result'
  OR NEW.type = 'operator_resolution'
  OR (NEW.type = 'assistant_message' AND json_type(NEW.data, '$.tool_calls') = 'array'))
 AND NOT EXISTS (SELECT 1 FROM derived_by_statement)
BEGIN
    INSERT INTO derived_events VALUES (NEW.session_id, NEW.seq, NEW.type, NEW.data, NEW.time_ms);
END;

-- Each statement applies to one type. A turn_end (step, request) applies to the innermost turn
-- open before it; "before it" matters only while purge copies a prefix under a fork's own events.
CREATE TRIGGER derived_events_apply INSTEAD OF INSERT ON derived_events
BEGIN
    -- turn_start: a new open turn, nested in the one open before it (if any).
    INSERT INTO turn_journal (session_id, start_seq, turn, phase, checkpoint_seq, submission_id,
                              outer_start)
    SELECT NEW.session_id, NEW.seq,
           CASE WHEN json_type(NEW.data, '$.turn') = 'integer' THEN NEW.data ->> '$.turn' END,
           'before_provider', NEW.seq, NEW.data ->> '$.submission_id',
           (SELECT max(start_seq) FROM turn_journal INDEXED BY turn_journal_open
             WHERE session_id = NEW.session_id AND end_seq IS NULL AND start_seq < NEW.seq)
     WHERE NEW.type = 'turn_start';

    -- turn_end: the innermost open turn is committed.
    UPDATE turn_journal
       SET phase = 'committed', end_seq = NEW.seq, revision = revision + 1, step_open = 0,
           end_reason = CASE WHEN NEW.data ->> '$.reason' IN ('complete', 'rejected', 'interrupted')
                             THEN NEW.data ->> '$.reason' END
     WHERE NEW.type = 'turn_end'
       AND session_id = NEW.session_id
       AND start_seq = (SELECT max(start_seq) FROM turn_journal INDEXED BY turn_journal_open
                         WHERE session_id = NEW.session_id AND end_seq IS NULL AND start_seq < NEW.seq);

    -- step_start: a step opens in the innermost open turn.
    UPDATE turn_journal SET steps = steps + 1, step_open = 1, revision = revision + 1
     WHERE NEW.type = 'step_start'
       AND session_id = NEW.session_id
       AND start_seq = (SELECT max(start_seq) FROM turn_journal INDEXED BY turn_journal_open
                         WHERE session_id = NEW.session_id AND end_seq IS NULL AND start_seq < NEW.seq);

    -- step_end: the step closes; the turn's checkpoint moves to it.
    UPDATE turn_journal
       SET step_open = 0, phase = 'before_provider', checkpoint_seq = NEW.seq,
           tool_request = NULL, stream_key = NULL, revision = revision + 1
     WHERE NEW.type = 'step_end'
       AND session_id = NEW.session_id
       AND start_seq = (SELECT max(start_seq) FROM turn_journal INDEXED BY turn_journal_open
                         WHERE session_id = NEW.session_id AND end_seq IS NULL AND start_seq < NEW.seq);

    -- assistant_message with tool_calls: each call is requested; a non-empty request is the
    -- turn's tool request.
    INSERT INTO tool_calls (session_id, call_id, name, requested_seq, state)
    SELECT NEW.session_id, c.value ->> '$.id', c.value ->> '$.name', NEW.seq, 'requested'
      FROM json_each(NEW.data, '$.tool_calls') AS c
     WHERE NEW.type = 'assistant_message' AND json_type(NEW.data, '$.tool_calls') = 'array'
       AND c.type = 'object' AND json_type(c.value, '$.id') = 'text'
    ON CONFLICT (session_id, call_id) DO UPDATE
       SET requested_seq = coalesce(requested_seq, excluded.requested_seq),
           name = coalesce(name, excluded.name);
    UPDATE turn_journal
       SET phase = 'tool_request_recorded', tool_request = NEW.data ->> '$.tool_calls',
           checkpoint_seq = NEW.seq, revision = revision + 1
     WHERE NEW.type = 'assistant_message' AND json_type(NEW.data, '$.tool_calls') = 'array'
       AND json_array_length(NEW.data, '$.tool_calls') > 0
       AND session_id = NEW.session_id
       AND start_seq = (SELECT max(start_seq) FROM turn_journal INDEXED BY turn_journal_open
                         WHERE session_id = NEW.session_id AND end_seq IS NULL AND start_seq < NEW.seq);

    -- tool_call (the dispatch record): the call is dispatched, with its effect class.
    INSERT INTO tool_calls (session_id, call_id, name, dispatch_seq, state, effect,
                            idempotency_key, request_id)
    SELECT NEW.session_id, NEW.data ->> '$.id', NEW.data ->> '$.name', NEW.seq, 'dispatched',
           NEW.data ->> '$.effect', NEW.data ->> '$.idempotency_key', NEW.data ->> '$.request_id'
     WHERE NEW.type = 'tool_call'
    ON CONFLICT (session_id, call_id) DO UPDATE
       SET dispatch_seq = excluded.dispatch_seq,
           state = CASE WHEN state = 'requested' THEN 'dispatched' ELSE state END,
           name = coalesce(name, excluded.name),
           effect = excluded.effect,
           idempotency_key = excluded.idempotency_key,
           request_id = excluded.request_id;

    -- tool_result: the call is resolved.
    INSERT INTO tool_calls (session_id, call_id, name, result_seq, state)
    SELECT NEW.session_id, NEW.data ->> '$.tool_call_id', NEW.data ->> '$.name', NEW.seq, 'resolved'
     WHERE NEW.type = 'tool_result'
    ON CONFLICT (session_id, call_id) DO UPDATE
       SET result_seq = excluded.result_seq, state = 'resolved';

    -- operator_resolution: an indeterminate call is resolved and its notification acknowledged.
    UPDATE tool_calls SET state = 'resolved'
     WHERE NEW.type = 'operator_resolution'
       AND session_id = NEW.session_id AND call_id = NEW.data ->> '$.tool_call_id'
       AND state = 'indeterminate';
    UPDATE notifications SET acked_ms = NEW.time_ms
     WHERE NEW.type = 'operator_resolution'
       AND session_id = NEW.session_id AND call_id = NEW.data ->> '$.tool_call_id'
       AND acked_ms IS NULL;
END;

-- A compaction's row. The gate lets through only events whose text names the op (the codec
-- writes keys unescaped) and retracts; the view's trigger keeps the well-formed replaces of
-- surface events (fold's own rule) and every retract, and places each from the one before it in
-- the fork chain, counting only the surface events since: the cost follows the events since the
-- last compaction.
CREATE VIEW compaction_events AS SELECT session_id, seq, type, data FROM events WHERE 0;

CREATE TRIGGER events_compaction AFTER INSERT ON events
WHEN instr(NEW.data, '"surface_op"') OR NEW.type = 'retract'
BEGIN
    INSERT INTO compaction_events VALUES (NEW.session_id, NEW.seq, NEW.type, NEW.data);
END;

CREATE TRIGGER compaction_events_apply INSTEAD OF INSERT ON compaction_events
WHEN NEW.type = 'retract' OR (
     NEW.type IN ('system_message', 'user_message', 'assistant_message', 'tool_result')
 AND json_type(NEW.data, '$.surface_op') = 'array'
 AND json_array_length(NEW.data, '$.surface_op') = 3
 AND json_type(NEW.data, '$.surface_op[0]') = 'text' AND NEW.data ->> '$.surface_op[0]' = 'replace'
 AND json_type(NEW.data, '$.surface_op[1]') = 'integer'
 AND json_type(NEW.data, '$.surface_op[2]') = 'integer'
 AND NEW.data ->> '$.surface_op[1]' BETWEEN 0 AND NEW.data ->> '$.surface_op[2]')
BEGIN
    INSERT INTO compactions (session_id, seq, kind, first, last, before, after)
    WITH RECURSIVE
        -- The log before this event, as segments of each owner's own events, newest first.
        chain (owner, lo, hi, parent) AS (
            SELECT id, seed_length, NEW.seq, parent_id FROM sessions WHERE id = NEW.session_id
            UNION ALL
            SELECT s.id, min(s.seed_length, c.lo), c.lo, s.parent_id
              FROM chain AS c JOIN sessions AS s ON s.id = c.parent
             WHERE c.lo > 0
        ),
        previous (seq, after) AS (
            SELECT m.seq, m.after FROM chain AS c
              JOIN compactions AS m ON m.session_id = c.owner AND m.seq >= c.lo AND m.seq < c.hi
             ORDER BY m.seq DESC LIMIT 1
        ),
        length (n) AS (
            SELECT coalesce((SELECT after FROM previous), 0) + (
                SELECT count(*) FROM chain AS c
                  JOIN events AS e ON e.session_id = c.owner AND e.seq < c.hi
                   AND e.seq >= max(c.lo, coalesce((SELECT seq FROM previous) + 1, 0))
                 WHERE e.type IN ('system_message', 'user_message', 'assistant_message', 'tool_result'))
        ),
        op (kind, first, last) AS (
            SELECT 'retract', max(n - 1, 0), max(n - 1, 0) FROM length WHERE NEW.type = 'retract'
            UNION ALL
            SELECT 'replace', NEW.data ->> '$.surface_op[1]', NEW.data ->> '$.surface_op[2]' WHERE NEW.type <> 'retract'
        )
    SELECT NEW.session_id, NEW.seq, kind, first, last, n,
           CASE WHEN kind = 'retract' THEN max(n - 1, 0)
                WHEN first >= n THEN n + 1
                ELSE n - (min(last, n - 1) - first) END
      FROM length, op;
END;
