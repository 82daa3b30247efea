"""The statements whose text differs between the backends: the dialect lives in the store (DESIGN §12).

Each field is one thing a part needs, written natively in each dialect: SQLite's text in
``journal.store.sqlite_sql``, PostgreSQL's in ``journal.store.postgres_sql``. A part reads them
from its handle (``db.sql.open_turn``) and never asks which backend it is on. Placeholders are
SQLite's in both (``?``, ``?N``): the PostgreSQL store translates that style, and nothing else of
the text. A statement whose text is the same on both backends stays in its part.
``tests/test_statements.py`` prepares every statement, shared or paired, on both backends.

Bindings are listed after each field's name; every statement of a pair takes the same ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from journal.codec import MAX_CALL_ID

# The fields of an event's data that the messages view folds as structure, not text: a cut read
# (``previews``) cuts them, like every field's key and a call's id and name, at no fewer than
# PREVIEW_STRUCTURE characters, so its messages are the uncut ones with their text cut.
STRUCTURE_FIELDS = ("tool_call_id", "name", "stop_reason", "surface_op", "metadata")
PREVIEW_STRUCTURE = MAX_CALL_ID  # a call id is never cut
STRUCTURE_SQL = "(" + ", ".join(f"'{name}'" for name in STRUCTURE_FIELDS) + ")"


@dataclass(frozen=True)
class Statements:
    """One backend's text of every statement whose text is its own."""

    dialect: str  # "sqlite" or "postgresql": which text this is (parts never ask)

    # -- journal.preview and journal.transcript: the viewer's cut reads ---------------------------
    # (session, first seq, end seq, chars, fields): each event's seq, type, time, size in bytes
    # and its first fields, every string cut to `chars` in the database.
    previews: str
    # (session, first, end, chars, fields, a JSON array of seqs): the same, of the events at seqs.
    previews_at: str
    # (): a value that differs after another connection committed; reads no table.
    change_token: str
    # (): 1 when the journal places its compactions (a read-only open of an older file does not).
    places_compactions: str

    # -- journal.log -----------------------------------------------------------------------------
    # (session): a row if the session has an open turn.
    open_turn: str
    # (session, seq, type, data, time_ms): a dispatch inside an open turn of a session that is not
    # a fork; inserts nothing otherwise (the append then takes the path that reads the chain).
    insert_own_dispatch: str
    # (session, type, lo, hi, limit): a segment's events of one app type (x.*), oldest first.
    app_events_oldest_first: str
    # The same, newest first.
    app_events_newest_first: str
    # (key, type, value): the ids of the sessions whose meta holds the scalar (the listing's
    # ``s.id IN (...)``); ``meta_value`` makes the value's binding from json_each's value.
    meta_sessions: str
    meta_value: Callable[[Any], Any]

    # -- journal.turns ---------------------------------------------------------------------------
    # (session): the start seq of the innermost open turn, or NULL.
    innermost_open_turn: str

    # -- journal.state ---------------------------------------------------------------------------
    # (session, key, at bound): the kind and value of the key's latest row dated at or before it.
    state_latest: str

    # -- journal.queue ---------------------------------------------------------------------------
    # (id, session, type, data, max_attempts, timeout_s, created_ms, updated_ms): a queued
    # submission, numbered after every other (its ``ordinal``).
    insert_submission: str

    # -- journal.claims --------------------------------------------------------------------------
    # (): the id of the runnable head of any session's queue (on PostgreSQL, taken for update).
    runnable: str
    # (session): the same, of one session's queue.
    runnable_in_session: str

    # -- journal.recovery ------------------------------------------------------------------------
    # (a JSON array of session ids): the open turns of these sessions that record an owner (no other
    # can be held), with their submission's lease.
    owned_open_turns_of: str
    # (): every open turn with the calls it owes, one row per call (NULL call columns: none).
    open_turns_owing: str
    # (): the sessions with an open turn, by id.
    interrupted_sessions: str
    # (session): its seed length and the start of its outermost open turn; no row: no session.
    outermost_open: str
    # (session, a JSON array of call ids): those calls' seqs.
    call_seqs: str
    # (a JSON array of session ids): recovery's set-based read of a batch's open work
    # (journal.recovery_batch), the same columns and rows on both backends; None: a backend that
    # recovers session by session (the planner).
    open_work: str | None
    # (session): the session's open turns' start seqs and numbers, by start (a plain turn_start
    # or turn_end is checked against them; a batch's derived state is planned from the starts:
    # journal.derived_batch).
    open_turn_starts: str

    # -- journal.results -------------------------------------------------------------------------
    # (session or NULL for every session, limit): per tool name, most called first: calls,
    # results, error results, synthetic results by risk (may have run, did not run), indeterminate
    # calls, and the p50 and p95 (nearest rank) of dispatch -> real result, in ms.
    tool_stats: str

    # -- journal.effects -------------------------------------------------------------------------
    # (): every indeterminate call with its notification, oldest first per session.
    indeterminate_calls: str
    # (now_ms, notification id): mark a notification delivered, once.
    mark_delivered: str
    # (): the notifications committed and never delivered, oldest first.
    undelivered: str

    # -- journal.audit ---------------------------------------------------------------------------
    # (session): how many of its own events may be a compaction or a retract.
    may_compact: str

    def texts(self) -> dict[str, str]:
        """Every statement of this backend by name (what the statement test prepares)."""
        out: dict[str, str] = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name != "dialect" and isinstance(value, str):
                out[field.name] = value
        return out
