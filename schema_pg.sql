-- The journal's schema on PostgreSQL (DESIGN §16): schema.sql's tables, keys, unique indexes,
-- CHECKs and triggers, each by PostgreSQL's own means. journal/store/postgres.py applies it to an
-- empty database (or schema) inside one transaction and stamps `journal_meta`.
--
-- The differences from schema.sql, and why:
-- - Every text column sorts by code point (COLLATE "C"), as SQLite's BINARY does: listings page
--   by id, and a prefix is a range of ids, whatever the server's default collation.
-- - JSON is kept as the text the codec wrote (TEXT, read through the `json` type, which keeps
--   the text as written and accepts every escape the codec writes, \u0000 included).
-- - What SQL reads of that JSON it reads through `journal_json_of`, not a plain `::json`: the
--   server's operators cannot turn the escape of U+0000 into text and refuse the whole document,
--   so there a NUL reads as U+FFFD (the stored text keeps it; no id or name holds one).
-- - `submissions.ordinal` is an identity column (writers of different sessions run at once).
-- - `session_meta` keeps each scalar meta value as its text (booleans as 1 and 0, as SQLite's
--   json_each), and its index holds md5 digests of the key and the value: SQLite's index takes a
--   value of any length, a btree entry here at most about 2.7 kB (what a file holds, a server holds).
-- - The column rules of the tables every append writes (events, turn_journal, tool_calls) are
--   domains, not table CHECKs: PostgreSQL reads, parses and plans a table's CHECK constraints
--   again for every statement that writes it, a domain's once per connection (the server's time
--   for a one-row append 29.5 → 18.5 µs, a deriving event's 83 → 63: bench/RESULTS.md, Dec 2).
--   The same rules, refused with the same SQLSTATE (23514, check_violation).
-- - The triggers are PL/pgSQL functions; one BEFORE INSERT trigger on events does G4's check and
--   hands the types that change derived state or compactions to their functions, as the SQLite
--   gate triggers do. `events` has no foreign key to `sessions`: its triggers keep the same rule.

-- JSON text as `json` for the server's operators, which refuse a whole document holding the
-- escape of U+0000 (\u0000) even to read another field: each such escape (not an escaped
-- backslash followed by "u0000") reads as U+FFFD. Inlined where it is used (one SQL SELECT,
-- IMMUTABLE, not STRICT); a text without the escape costs one strpos.
CREATE FUNCTION journal_json_of(text) RETURNS json LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN strpos($1, '\u0000') = 0 THEN $1::json
                ELSE regexp_replace($1, '(?<!\\)((\\\\)*)\\u0000', '\1\\ufffd', 'g')::json END
$$;

CREATE TABLE journal_meta (
    one            INTEGER PRIMARY KEY DEFAULT 1 CHECK (one = 1),
    application    TEXT NOT NULL,
    schema_version INTEGER NOT NULL
);

CREATE TABLE sessions (
    id          TEXT COLLATE "C" PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 256),
    parent_id   TEXT COLLATE "C" REFERENCES sessions (id),
    seed_length BIGINT NOT NULL DEFAULT 0 CHECK (seed_length >= 0),
    meta        TEXT COLLATE "C" CHECK (meta IS NULL OR json_typeof(meta::json) IS NOT NULL),
    created_ms  BIGINT NOT NULL,
    purged_ms   BIGINT,
    CHECK (parent_id IS NOT NULL OR seed_length = 0)
);

CREATE INDEX sessions_parent ON sessions (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX sessions_created ON sessions (created_ms, id);

-- An event's session exists: its first event must be at the session's seed length and each
-- later one follow the one before (the seq trigger), and a session with events is never
-- deleted (sessions_keep_events). (A foreign key would say it again, at the cost of locking
-- the session's row on every append: a third of the schema's cost of one.)
CREATE DOMAIN journal_seq AS BIGINT CHECK (VALUE >= 0);
CREATE DOMAIN journal_event_type AS TEXT COLLATE "C" CHECK (
    VALUE IN ('system_message', 'user_message', 'assistant_message', 'tool_result', 'tool_call',
              'tool_result_late', 'turn_start', 'turn_end', 'step_start', 'step_end',
              'stream_interrupted', 'stream_continued', 'submission_interrupted',
              'operator_resolution', 'retract')
    OR (VALUE LIKE 'x.%' AND length(VALUE) > 2)
);
CREATE DOMAIN journal_event_data AS TEXT COLLATE "C" CHECK (json_typeof(VALUE::json) = 'object');
CREATE DOMAIN journal_event_key AS TEXT COLLATE "C" CHECK (length(VALUE) BETWEEN 1 AND 256);

CREATE TABLE events (
    session_id TEXT COLLATE "C" NOT NULL,
    seq        journal_seq NOT NULL,
    type       journal_event_type NOT NULL,
    data       journal_event_data NOT NULL,
    time_ms    BIGINT NOT NULL,
    key        journal_event_key,
    PRIMARY KEY (session_id, seq)
);

CREATE UNIQUE INDEX events_key ON events (session_id, key) WHERE key IS NOT NULL;
CREATE INDEX events_app ON events (session_id, type, seq) WHERE type LIKE 'x.%';
-- G5 and G6's record, as in schema.sql.
CREATE UNIQUE INDEX events_one_result
    ON events (session_id, (journal_json_of(data) ->> 'tool_call_id')) WHERE type = 'tool_result';
CREATE UNIQUE INDEX events_one_dispatch
    ON events (session_id, (journal_json_of(data) ->> 'id')) WHERE type = 'tool_call';

-- The derived tables' column rules are domains too (the row trigger writes them for every
-- deriving event); the turn's one rule across columns stays the table's CHECK.
CREATE DOMAIN journal_turn_phase AS TEXT COLLATE "C" CHECK (
    VALUE IN ('before_provider', 'provider_started', 'tool_request_recorded', 'committed'));
CREATE DOMAIN journal_turn_end_reason AS TEXT COLLATE "C" CHECK (VALUE IN ('complete', 'rejected', 'interrupted'));
CREATE DOMAIN journal_attempt AS BIGINT CHECK (VALUE >= 1);
CREATE DOMAIN journal_count AS BIGINT CHECK (VALUE >= 0);
CREATE DOMAIN journal_flag AS INTEGER CHECK (VALUE IN (0, 1));
CREATE DOMAIN journal_json AS TEXT COLLATE "C" CHECK (VALUE IS NULL OR json_typeof(VALUE::json) IS NOT NULL);
CREATE DOMAIN journal_call_state AS TEXT COLLATE "C" CHECK (
    VALUE IN ('requested', 'dispatched', 'resolved', 'indeterminate'));
CREATE DOMAIN journal_effect AS TEXT COLLATE "C" CHECK (VALUE IN ('idempotent', 'queryable', 'unsafe'));

CREATE TABLE turn_journal (
    session_id     TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    start_seq      BIGINT NOT NULL,
    turn           BIGINT,
    phase          journal_turn_phase NOT NULL,
    attempt        journal_attempt NOT NULL DEFAULT 1,
    revision       journal_count NOT NULL DEFAULT 0,
    checkpoint_seq BIGINT NOT NULL,
    tool_request   journal_json,
    stream_key     TEXT COLLATE "C",
    steps          journal_count NOT NULL DEFAULT 0,
    step_open      journal_flag NOT NULL DEFAULT 0,
    submission_id  TEXT COLLATE "C",
    outer_start    BIGINT,
    end_seq        BIGINT,
    end_reason     journal_turn_end_reason,
    owner          TEXT COLLATE "C",
    PRIMARY KEY (session_id, start_seq),
    CHECK ((end_seq IS NULL) = (phase <> 'committed'))
);

CREATE INDEX turn_journal_open ON turn_journal (session_id, start_seq) WHERE end_seq IS NULL;

CREATE TABLE tool_calls (
    session_id      TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    call_id         TEXT COLLATE "C" NOT NULL,
    name            TEXT COLLATE "C",
    requested_seq   BIGINT,
    dispatch_seq    BIGINT,
    result_seq      BIGINT,
    state           journal_call_state NOT NULL,
    effect          journal_effect,
    idempotency_key TEXT COLLATE "C",
    request_id      TEXT COLLATE "C",
    PRIMARY KEY (session_id, call_id)
);

CREATE INDEX tool_calls_owed ON tool_calls (session_id, requested_seq) WHERE result_seq IS NULL;
CREATE INDEX tool_calls_dispatched ON tool_calls (session_id) WHERE state = 'dispatched';
CREATE INDEX tool_calls_indeterminate ON tool_calls (session_id) WHERE state = 'indeterminate';

CREATE TABLE stream_chunks (
    stream_key TEXT COLLATE "C" NOT NULL,
    idx        BIGINT NOT NULL CHECK (idx >= 0),
    session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    content    TEXT COLLATE "C" NOT NULL,
    time_ms    BIGINT NOT NULL,
    consumed   INTEGER NOT NULL DEFAULT 0 CHECK (consumed IN (0, 1)),
    PRIMARY KEY (stream_key, idx)
);

CREATE TABLE state (
    id         BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    key        TEXT COLLATE "C" NOT NULL CHECK (length(key) BETWEEN 1 AND 256),
    at         BIGINT NOT NULL CHECK (at >= 0),
    kind       TEXT COLLATE "C" NOT NULL CHECK (kind IN ('json', 'bytes')),
    value      BYTEA NOT NULL,
    CHECK (kind = 'bytes' OR json_typeof(convert_from(value, 'UTF8')::json) IS NOT NULL)
);

CREATE INDEX state_at ON state (session_id, key, at, id);

-- A meta key or value may be as long as the event size limit allows, as in SQLite (whose index
-- takes a value whole), but a btree entry here holds at most about 2.7 kB: the lookup index
-- holds their md5 digests, and the lookup (meta_sessions in journal/store/postgres_sql.py) rechecks the
-- text itself. No unique key: a session's meta is one JSON object, each key once.
CREATE TABLE session_meta (
    session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    key        TEXT COLLATE "C" NOT NULL,
    type       TEXT COLLATE "C" NOT NULL,
    value      TEXT COLLATE "C"
);

CREATE INDEX session_meta_match ON session_meta (md5(key), type, md5(value));
CREATE INDEX session_meta_session ON session_meta (session_id);

CREATE TABLE compactions (
    session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    seq        BIGINT NOT NULL,
    kind       TEXT COLLATE "C" NOT NULL DEFAULT 'replace' CHECK (kind IN ('replace', 'retract')),
    first      BIGINT NOT NULL CHECK (first >= 0),
    last       BIGINT NOT NULL CHECK (last >= first),
    before     BIGINT NOT NULL CHECK (before >= 0),
    after      BIGINT NOT NULL,
    PRIMARY KEY (session_id, seq),
    CHECK ((kind = 'replace' AND after BETWEEN 1 AND before + 1) OR (kind = 'retract' AND after = greatest(before - 1, 0)))
);

CREATE TABLE submissions (
    id               TEXT COLLATE "C" PRIMARY KEY,
    session_id       TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    type             TEXT COLLATE "C" NOT NULL CHECK (type IN ('user_message', 'system_message', 'tool_result') OR type LIKE 'x.%'),
    data             TEXT COLLATE "C" NOT NULL CHECK (json_typeof(data::json) = 'object'),
    state            TEXT COLLATE "C" NOT NULL CHECK (state IN ('queued', 'running', 'completed', 'failed')),
    attempt          BIGINT NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     BIGINT NOT NULL CHECK (max_attempts >= 1),
    timeout_s        DOUBLE PRECISION NOT NULL CHECK (timeout_s > 0),
    created_ms       BIGINT NOT NULL,
    updated_ms       BIGINT NOT NULL,
    lease_owner      TEXT COLLATE "C",
    lease_expires_ms BIGINT,
    input_seq        BIGINT,
    turn_start_seq   BIGINT,
    resume_mode      TEXT COLLATE "C" CHECK (resume_mode IS NULL OR resume_mode IN (
        'input_only', 'stream_continuation', 'tool_results', 'tool_results_partial',
        'transient_retry', 'overflow', 'aborted_partial')),
    outcome          TEXT COLLATE "C",
    -- The order submissions were made in, which a session's queue follows.
    ordinal          BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    CHECK ((state = 'running') = (lease_owner IS NOT NULL)),
    CHECK (attempt <= max_attempts)
);

CREATE INDEX submissions_queued ON submissions (session_id, ordinal) WHERE state = 'queued';
CREATE INDEX submissions_running ON submissions (lease_expires_ms) WHERE state = 'running';

CREATE TABLE notifications (
    id         BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    call_id    TEXT COLLATE "C" NOT NULL,
    kind       TEXT COLLATE "C" NOT NULL CHECK (kind IN ('indeterminate')),
    data       TEXT COLLATE "C" NOT NULL CHECK (json_typeof(data::json) IS NOT NULL),
    created_ms BIGINT NOT NULL,
    acked_ms   BIGINT,
    UNIQUE (session_id, call_id, kind)
);

CREATE INDEX notifications_pending ON notifications (created_ms) WHERE acked_ms IS NULL;

-- A JSON value that is an integer, as SQLite's json_type says 'integer'.
CREATE FUNCTION journal_json_int(v json) RETURNS BIGINT LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN json_typeof(v) = 'number' AND v::text ~ '^-?[0-9]{1,18}$' THEN v::text::bigint END
$$;

-- G3: the log is append-only. The one exception is purge, which marks the session first.
CREATE FUNCTION journal_events_no_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'journal: events are append-only' USING ERRCODE = 'JR001';
END $$;

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
FOR EACH ROW EXECUTE FUNCTION journal_events_no_update();

CREATE FUNCTION journal_events_no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT purged_ms FROM sessions WHERE id = OLD.session_id) IS NULL THEN
        RAISE EXCEPTION 'journal: events are append-only (only purge deletes, a whole session)'
            USING ERRCODE = 'JR001';
    END IF;
    RETURN OLD;
END $$;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
FOR EACH ROW EXECUTE FUNCTION journal_events_no_delete();

CREATE FUNCTION journal_sessions_keep_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM events WHERE session_id = OLD.id) THEN
        RAISE EXCEPTION 'journal: a session with events is not deleted' USING ERRCODE = 'JR001';
    END IF;
    RETURN OLD;
END $$;

CREATE TRIGGER sessions_keep_events BEFORE DELETE ON sessions
FOR EACH ROW EXECUTE FUNCTION journal_sessions_keep_events();

-- One trigger per insert (each trigger a PL/pgSQL call costs about as much as the next): G4's
-- check, then the derived state and the compactions for the types that change them, as
-- schema.sql's gate triggers let through. It runs before the row is written, and sees the rows
-- an INSERT ... SELECT wrote before it; the statement's failure (a taken seq, a second result)
-- undoes what it did.
CREATE FUNCTION journal_events_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- G4: seq is contiguous from the session's seed length (with the primary key, exactly one
    -- seq is open to an insert; two writers racing for it meet at the key).
    IF NOT EXISTS (SELECT 1 FROM events WHERE session_id = NEW.session_id AND seq = NEW.seq - 1)
       AND NEW.seq IS DISTINCT FROM (SELECT seed_length FROM sessions WHERE id = NEW.session_id) THEN
        RAISE EXCEPTION 'journal: seq must continue the session contiguously' USING ERRCODE = 'JR001';
    END IF;
    IF NEW.type IN ('turn_start', 'turn_end', 'step_start', 'step_end', 'tool_call', 'tool_result', 'operator_resolution')
       OR (NEW.type = 'assistant_message' AND strpos(NEW.data, '"tool_calls"') > 0) THEN
        PERFORM journal_events_derived(NEW.session_id, NEW.seq, NEW.type, journal_json_of(NEW.data), NEW.time_ms);
    END IF;
    IF strpos(NEW.data, '"surface_op"') > 0 OR NEW.type = 'retract' THEN
        PERFORM journal_events_compaction(NEW.session_id, NEW.seq, NEW.type, journal_json_of(NEW.data));
    END IF;
    RETURN NEW;
END $$;

-- journal.derived = 'statement' (SET LOCAL by the store around the one INSERT of recovery's
-- repairs, PgDatabase.insert_repairs, and of a batch whose derived state append_many planned,
-- PgDatabase.insert_events; no other write sets it) turns the row trigger off for that INSERT:
-- the statements after it, in the same savepoint, check G4 for all its rows at once
-- (journal_events_contiguous) and write their derived state set-based. Neither holds a row a
-- compaction reads (recovery's are synthetic results and turn ends; a batch with one keeps the
-- row trigger).
CREATE TRIGGER events_insert BEFORE INSERT ON events
FOR EACH ROW WHEN (current_setting('journal.derived', true) IS DISTINCT FROM 'statement')
EXECUTE FUNCTION journal_events_insert();

-- G4 for the rows of one INSERT made with the row trigger off, checked after it, a session at a
-- time: its rows in the batch are one run of seqs (as many as the run is long: with the primary
-- key, each seq once), and the run starts at its seed length or right after a row that is there.
-- Every other write keeps each session contiguous from its seed length (the row trigger), so the
-- session stays so, exactly as the row trigger would have kept it row by row.
CREATE FUNCTION journal_events_contiguous(ids TEXT[], seqs BIGINT[]) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    -- One probe of the primary key a session (LATERAL ... LIMIT 1: a nested loop whatever the
    -- planner guesses of the arrays' length; an anti-join could read the whole table).
    IF EXISTS (SELECT 1
                 FROM (SELECT r.session_id, min(r.seq) AS lo, max(r.seq) AS hi, count(*) AS n
                         FROM unnest(ids, seqs) AS r (session_id, seq) GROUP BY r.session_id) AS b
                 LEFT JOIN LATERAL (SELECT true AS found FROM events e
                                     WHERE e.session_id = b.session_id AND e.seq = b.lo - 1 LIMIT 1) AS p ON true
                WHERE b.n <> b.hi - b.lo + 1
                   OR (p.found IS NULL
                       AND b.lo IS DISTINCT FROM (SELECT seed_length FROM sessions WHERE id = b.session_id))) THEN
        RAISE EXCEPTION 'journal: seq must continue the session contiguously' USING ERRCODE = 'JR001';
    END IF;
END $$;

-- Derived state follows the log (schema.sql's derived_events_apply, statement for statement).
CREATE FUNCTION journal_events_derived(new_session TEXT, new_seq BIGINT, new_type TEXT, d json, new_time BIGINT)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    innermost BIGINT;
BEGIN
    IF new_type = 'turn_start' THEN
        INSERT INTO turn_journal (session_id, start_seq, turn, phase, checkpoint_seq, submission_id, outer_start)
        VALUES (new_session, new_seq, journal_json_int(d -> 'turn'), 'before_provider', new_seq,
                d ->> 'submission_id',
                (SELECT max(start_seq) FROM turn_journal
                  WHERE session_id = new_session AND end_seq IS NULL AND start_seq < new_seq));
        RETURN;
    END IF;
    IF new_type = 'assistant_message' AND json_typeof(d -> 'tool_calls') IS DISTINCT FROM 'array' THEN
        RETURN;
    END IF;
    IF new_type IN ('turn_end', 'step_start', 'step_end', 'assistant_message') THEN
        innermost := (SELECT max(start_seq) FROM turn_journal
                       WHERE session_id = new_session AND end_seq IS NULL AND start_seq < new_seq);
    END IF;
    IF new_type = 'turn_end' THEN
        UPDATE turn_journal
           SET phase = 'committed', end_seq = new_seq, revision = revision + 1, step_open = 0,
               end_reason = CASE WHEN d ->> 'reason' IN ('complete', 'rejected', 'interrupted') THEN d ->> 'reason' END
         WHERE session_id = new_session AND start_seq = innermost;
    ELSIF new_type = 'step_start' THEN
        UPDATE turn_journal SET steps = steps + 1, step_open = 1, revision = revision + 1
         WHERE session_id = new_session AND start_seq = innermost;
    ELSIF new_type = 'step_end' THEN
        UPDATE turn_journal
           SET step_open = 0, phase = 'before_provider', checkpoint_seq = new_seq,
               tool_request = NULL, stream_key = NULL, revision = revision + 1
         WHERE session_id = new_session AND start_seq = innermost;
    ELSIF new_type = 'assistant_message' THEN
        -- A call id twice in one message is requested once (its first place), as SQLite's
        -- statement-at-a-time upsert leaves it.
        INSERT INTO tool_calls (session_id, call_id, name, requested_seq, state)
        SELECT DISTINCT ON (c.value ->> 'id') new_session, c.value ->> 'id', c.value ->> 'name', new_seq, 'requested'
          FROM json_array_elements(d -> 'tool_calls') WITH ORDINALITY AS c (value, n)
         WHERE json_typeof(c.value) = 'object' AND json_typeof(c.value -> 'id') = 'string'
         ORDER BY c.value ->> 'id', c.n
        ON CONFLICT (session_id, call_id) DO UPDATE
           SET requested_seq = coalesce(tool_calls.requested_seq, excluded.requested_seq),
               name = coalesce(tool_calls.name, excluded.name);
        IF json_array_length(d -> 'tool_calls') > 0 THEN
            UPDATE turn_journal
               SET phase = 'tool_request_recorded', tool_request = d ->> 'tool_calls',
                   checkpoint_seq = new_seq, revision = revision + 1
             WHERE session_id = new_session AND start_seq = innermost;
        END IF;
    ELSIF new_type = 'tool_call' THEN
        INSERT INTO tool_calls (session_id, call_id, name, dispatch_seq, state, effect, idempotency_key, request_id)
        VALUES (new_session, d ->> 'id', d ->> 'name', new_seq, 'dispatched',
                d ->> 'effect', d ->> 'idempotency_key', d ->> 'request_id')
        ON CONFLICT (session_id, call_id) DO UPDATE
           SET dispatch_seq = excluded.dispatch_seq,
               state = CASE WHEN tool_calls.state = 'requested' THEN 'dispatched' ELSE tool_calls.state END,
               name = coalesce(tool_calls.name, excluded.name),
               effect = excluded.effect,
               idempotency_key = excluded.idempotency_key,
               request_id = excluded.request_id;
    ELSIF new_type = 'tool_result' THEN
        INSERT INTO tool_calls (session_id, call_id, name, result_seq, state)
        VALUES (new_session, d ->> 'tool_call_id', d ->> 'name', new_seq, 'resolved')
        ON CONFLICT (session_id, call_id) DO UPDATE
           SET result_seq = excluded.result_seq, state = 'resolved';
    ELSIF new_type = 'operator_resolution' THEN
        UPDATE tool_calls SET state = 'resolved'
         WHERE session_id = new_session AND call_id = d ->> 'tool_call_id' AND state = 'indeterminate';
        UPDATE notifications SET acked_ms = new_time
         WHERE session_id = new_session AND call_id = d ->> 'tool_call_id' AND acked_ms IS NULL;
    END IF;
END $$;

-- A compaction's row (schema.sql's compaction_events_apply): well-formed replaces of surface
-- events and every retract, each placed from the one before it in the fork chain.
CREATE FUNCTION journal_events_compaction(new_session TEXT, new_seq BIGINT, new_type TEXT, d json)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    op json;
    op_first BIGINT;
    op_last BIGINT;
    n BIGINT;
BEGIN
    IF new_type <> 'retract' THEN
        IF new_type NOT IN ('system_message', 'user_message', 'assistant_message', 'tool_result') THEN
            RETURN;
        END IF;
        op := d -> 'surface_op';
        IF json_typeof(op) IS DISTINCT FROM 'array' OR json_array_length(op) <> 3
           OR json_typeof(op -> 0) <> 'string' OR op ->> 0 <> 'replace' THEN
            RETURN;
        END IF;
        op_first := journal_json_int(op -> 1);
        op_last := journal_json_int(op -> 2);
        IF op_first IS NULL OR op_last IS NULL OR op_first < 0 OR op_first > op_last THEN
            RETURN;
        END IF;
    END IF;
    WITH RECURSIVE
        chain (owner, lo, hi, parent) AS (
            SELECT id, seed_length, new_seq, parent_id FROM sessions WHERE id = new_session
            UNION ALL
            SELECT s.id, least(s.seed_length, c.lo), c.lo, s.parent_id
              FROM chain AS c JOIN sessions AS s ON s.id = c.parent
             WHERE c.lo > 0
        ),
        previous (seq, after) AS (
            SELECT m.seq, m.after FROM chain AS c
              JOIN compactions AS m ON m.session_id = c.owner AND m.seq >= c.lo AND m.seq < c.hi
             ORDER BY m.seq DESC LIMIT 1
        )
    SELECT coalesce((SELECT after FROM previous), 0) + (
               SELECT count(*) FROM chain AS c
                 JOIN events AS e ON e.session_id = c.owner AND e.seq < c.hi
                  AND e.seq >= greatest(c.lo, coalesce((SELECT seq FROM previous) + 1, 0))
                WHERE e.type IN ('system_message', 'user_message', 'assistant_message', 'tool_result'))
      INTO n;
    IF new_type = 'retract' THEN
        INSERT INTO compactions (session_id, seq, kind, first, last, before, after)
        VALUES (new_session, new_seq, 'retract', greatest(n - 1, 0), greatest(n - 1, 0), n, greatest(n - 1, 0));
    ELSE
        INSERT INTO compactions (session_id, seq, kind, first, last, before, after)
        VALUES (new_session, new_seq, 'replace', op_first, op_last, n,
                CASE WHEN op_first >= n THEN n + 1 ELSE n - (least(op_last, n - 1) - op_first) END);
    END IF;
    RETURN;
END $$;

-- The top-level scalar entries of a session's meta (schema.sql's sessions_meta).
CREATE FUNCTION journal_sessions_meta() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO session_meta (session_id, key, type, value)
    SELECT NEW.id, m.key,
           CASE json_typeof(m.value)
               WHEN 'string' THEN 'text'
               WHEN 'boolean' THEN m.value::text
               ELSE CASE WHEN m.value::text ~ '^-?[0-9]+$' THEN 'integer' ELSE 'real' END
           END,
           CASE json_typeof(m.value)
               WHEN 'string' THEN m.value #>> '{}'
               WHEN 'boolean' THEN CASE WHEN m.value::text = 'true' THEN '1' ELSE '0' END
               ELSE m.value::text
           END
      FROM json_each(journal_json_of(NEW.meta)) AS m
     WHERE json_typeof(m.value) NOT IN ('object', 'array', 'null');
    RETURN NULL;
END $$;

CREATE TRIGGER sessions_meta AFTER INSERT ON sessions
FOR EACH ROW WHEN (NEW.meta IS NOT NULL) EXECUTE FUNCTION journal_sessions_meta();
