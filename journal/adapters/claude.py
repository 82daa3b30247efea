"""A ``SessionStore`` for the Claude Agent SDK that keeps transcripts in a journal (DESIGN §14).

Plug it in with one line::

    options = ClaudeAgentOptions(session_store=JournalSessionStore("agent.db"), session_store_flush="eager")

``JournalSessionStore`` takes a SQLite path, a PostgreSQL DSN (``postgresql://...``; the
password is never shown) or an open ``journal.Journal`` shared with the rest of the program.

**The key.** The SDK names a transcript by a ``SessionKey``: ``project_key`` is the agent's
working directory made a name (``claude_agent_sdk.project_key_for_directory(options.cwd)``, e.g.
``-home-ada-shop``), ``session_id`` is Claude's session id (the ``session_id`` of the SDK's
``ResultMessage``, the value you pass as ``resume=``), and ``subpath`` names a subagent's
transcript under it (``subagents/agent-<id>``; absent for the main one). ``repair`` takes the
same key. Each key is one journal session. Its id is
``claude/<project_key>/<session_id>[/<subpath>]`` when that is a valid session id (printable
ASCII, no spaces; the two first parts without ``/`` or ``#``), else ``claude/#<sha256 of the
key>``: a readable id never holds ``#`` where a hashed one does, and ``/`` splits it one way
only, so two keys never share a session; the key's parts are kept in the session's meta
(``claude.project_key``, ``claude.session_id``, ``claude.subpath``, ``claude.transcript`` =
``main`` | ``subagent``) and checked on every read and first write (a session made by something
else under that id is refused with ``SessionKeyMismatch``, never mixed in). The listings are
indexed meta lookups, never a scan.

What it guarantees:

- **The store's contract, verbatim.** ``load`` returns the entries deep-equal, in append order
  and in each entry's own key order (plus the answers recovery wrote, below). An entry's
  ``uuid`` is its idempotency key: a duplicate, in one batch or across batches, processes or
  retries, is not stored twice — the journal's unique index decides, atomically. Entries without
  a uuid are stored as they come (the SDK's rule), each an ``x.claude.entry`` event
  ``{"entry": <the entry>}`` (wrapped, so no field of an entry is ever read as one of the
  journal's own). A batch is one transaction (G2), durable when ``append`` returns (G1); the
  async methods run the journal's calls in a worker thread, so the event loop never waits on an
  fsync. The SDK's session summary (``fold_session_summary``) is kept as keyed state written in
  the same transaction as the batch, when the batch changes it.
- **Each item stored once, one row per item.** An entry with a uuid that has a typed event (a
  prompt → ``user_message``, a model message → ``assistant_message``, a tool's output →
  ``tool_result``) is stored *in* that event: the event carries the entry's key (its uuid: read
  it as ``Event.key``) and, in ``metadata["claude_entry"]``, the entry minus what the log holds
  already -- the values the typed events of its batch hold (text, thinking, a tool's input and
  output, Claude Code's copy of it in ``toolUseResult``, call ids and names, the message's id
  and model), its uuid, the fields it repeats from the entry before it (``sessionId``, ``cwd``,
  ``parentUuid``...), and the field names it shares with an earlier entry of its shape
  (``journal.adapters.claude_entries`` defines the references and their escaping). Other
  entries with a uuid (attachments, summaries, a result for a call already answered, which G5
  may keep as late evidence or not at all) are an ``x.claude.entry`` event ``{"e": ...}``
  stored the same way without the typed values. ``load`` (or ``entries_of`` for any journal
  session, a fork included) rebuilds each entry exactly; files written by the previous format
  (every entry an ``x.claude.entry``, with ``holes``) read as before.
- **Typed events, derived in the same transaction.** User text → ``user_message``; an assistant
  entry → ``assistant_message`` with ``tool_calls`` from its ``tool_use`` blocks; the first
  assistant entry asking for tools opens a journal turn and each of its calls is recorded as
  dispatched (``tool_call``); ``tool_result`` blocks → ``tool_result`` (first write wins, G5;
  ``is_error`` kept); an assistant entry without tool use that ends the message, once the turn
  owes no result, ends the turn. So ``scan``, ``recover``, the messages view and ``journal show``
  work on Claude sessions: a ``tool_use`` left without its ``tool_result`` by a crash is a
  pending call. The derivation reads the journal's own state (the turn open, the calls known) as
  of the count it then appends at (``expected_count``): two processes racing re-plan instead of
  deriving twice. It never costs the verbatim layer: a derived event the journal would refuse is
  left out, and if a batch still fails for a derived event, the entries are stored alone.
- **Delete is erasure.** ``delete`` purges the journal session(s) — the one exception to
  append-only (DESIGN G3), as a user deleting a conversation needs. A journal fork of a purged
  session is given its own copy first (``purge(copy_forks=True)``).
- **One recovery; ``load`` shows it in Claude's shape.** Whoever recovers a crashed session --
  ``repair(store, key)``, ``journal recover`` from a shell, ``Journal.recover()``, the async
  face's -- writes typed events only (a synthetic ``tool_result``: the call MAY have run; the
  turn ends ``interrupted``). ``load`` projects each such result as the user entry Claude Code
  writes for a failed tool (a ``tool_result`` block, ``is_error``), right after the model
  message that made the call, chained into the ``parentUuid`` links (the entries after it follow
  it), with a uuid derived from the session and the call, so every read shows the same entry and
  the same entry written back by Claude is stored once. A resume from the store then sends no
  orphan ``tool_use`` (no provider 400) and nothing re-runs the tool, whichever recovery ran and
  however often. With no recovery run first, ``load`` recovers a turn whose process is gone
  (the store records the process that drives a turn) before it reads; a turn whose owner may be
  alive, or that records none, waits for ``repair`` (or ``arepair``): idempotent, it returns a
  ``Repaired``. A new prompt appended while the journal still owes a call is logged as a warning
  naming it.

What it cannot guarantee:

- **No dispatch barrier (G6).** The SDK mirrors entries after Claude Code wrote them to its local
  file, in batches (per turn by default; ``session_store_flush="eager"`` narrows the gap), so a
  tool may have run — or the process died — before the store sees its ``tool_use``. The journal
  therefore records what Claude Code did, not what it is about to do; every unanswered call is
  ``tool_outcome_unknown`` ("MAY have run"), never ``tool_not_started``. Entries of a batch the
  SDK never flushed are missing from the journal (they are in Claude's local file).
- **Turn boundaries are inferred.** Claude Code may split one model message into several entries
  (one per content block): a text entry written before a ``tool_use`` of the same message can
  close a turn that the ``tool_use`` then reopens as a new one. Scan and recovery stay correct
  (calls are always inside an open turn); only the turn count differs from Claude's.
- ``repair`` (like ``journal recover``) closes open turns as interrupted: call it when no Claude
  process is driving the session (the journal cannot see Claude's process, so it cannot refuse
  for you). Without any recovery, ``load`` shows an orphan ``tool_use`` as Claude left it.
- An entry the journal cannot hold (over ``max_event_bytes``, nested deeper than 100 levels, an
  integer outside 64 bits, a lone surrogate; the ``{"entry": ...}`` wrapper counts) is refused
  with ``InvalidEvent`` and nothing of its batch is written; the SDK reports that as a
  ``MirrorErrorMessage``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any, cast

from journal.adapters import refuse_async_journal, require

require("claude_agent_sdk", "claude")

from claude_agent_sdk import fold_session_summary
from claude_agent_sdk.types import (
    SessionKey,
    SessionListSubkeysKey,
    SessionStore,
    SessionStoreEntry,
    SessionStoreListEntry,
    SessionSummaryEntry,
)

import journal
from journal.adapters.claude_entries import (
    CARRIED,
    CARRIERS,
    ENTRY,
    Item,
    Shapes,
    answer_uuid,
    blocks_of,
    carried,
    chain_fields,
    expand,
    filled,
    fold,
    known_chain,
    late_answers,
    owed_calls,
    project,
    result_only,
    unfold,
    without_late,
)
from journal.adapters.repaired import Repaired
from journal.errors import (
    CorruptJournal,
    CountMismatch,
    JournalBusy,
    JournalError,
    JournalIOError,
    SessionExists,
    SessionNotFound,
)
from journal.escape import escape
from journal.model import Event, Session
from journal.owners import owner_is_dead

__all__ = [
    "ENTRY",
    "JournalSessionStore",
    "Repaired",
    "SessionKeyMismatch",
    "arepair",
    "entries_of",
    "journal_session_id",
    "owed_calls",
    "project",
    "repair",
]

log = logging.getLogger(__name__)

SUMMARY = "claude.summary"  # keyed state: the SDK's folded session summary (main transcripts)
PREFIX = "claude/"
META_PROJECT, META_SESSION, META_SUBPATH, META_TRANSCRIPT = (
    "claude.project_key", "claude.session_id", "claude.subpath", "claude.transcript",
)  # fmt: skip
MAX_KEY = 256
# Compare-and-append rounds before an append gives up deriving and stores the entries alone.
MAX_ROUNDS = 64
# Claude stop reasons that end a model message; "tool_use" and "pause_turn" do not end a turn.
_ENDS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "refusal": "stop"}
_INTERRUPT_MARK = "[Request interrupted by user"


# -- keys ------------------------------------------------------------------------------------------


def _plain(part: str, *, slash: bool) -> bool:
    return bool(part) and all("!" <= c <= "~" and c != "#" and (slash or c != "/") for c in part)


def journal_session_id(key: SessionKey | SessionListSubkeysKey) -> str:
    """The journal session that holds a store key: readable when it can be, else hashed.

    Readable ids have no ``#`` and their first two parts no ``/``, hashed ones start with
    ``claude/#``: two different keys never share a session."""
    project, session = key["project_key"], key["session_id"]
    subpath = cast("str | None", dict(key).get("subpath")) or None
    readable = PREFIX + project + "/" + session + ("/" + subpath if subpath else "")
    if (
        _plain(project, slash=False)
        and _plain(session, slash=False)
        and (subpath is None or _plain(subpath, slash=True))
        and len(readable) <= MAX_KEY
    ):
        return readable
    digest = hashlib.sha256(json.dumps([project, session, subpath]).encode("utf-8", "surrogatepass")).hexdigest()
    return PREFIX + "#" + digest


def _meta(key: SessionKey) -> dict[str, Any]:
    meta = {META_PROJECT: key["project_key"], META_SESSION: key["session_id"]}
    subpath = key.get("subpath") or None
    if subpath is None:
        meta[META_TRANSCRIPT] = "main"
    else:
        meta[META_TRANSCRIPT], meta[META_SUBPATH] = "subagent", subpath
    return meta


def _meta_of(session: Session) -> dict[str, Any]:
    return session.meta or {}


def _parts(key: SessionKey | dict[str, Any]) -> tuple[Any, Any, Any]:
    return key["project_key"], key["session_id"], key.get("subpath") or None


class SessionKeyMismatch(JournalError):
    """The journal session a store key maps to holds another key's transcript (or is not a
    Claude transcript at all): nothing is read from it or written to it for this key.

    ``session_id``: the journal session; ``stored``: the key parts its meta records
    (``None`` for a session the store did not create); ``wanted``: the key asked for."""

    def __init__(self, session_id: str, stored: tuple[Any, Any, Any] | None, wanted: tuple[Any, Any, Any]) -> None:
        super().__init__(session_id, stored, wanted)
        self.session_id, self.stored, self.wanted = session_id, stored, wanted

    def message(self) -> str:
        held = "no Claude store key" if self.stored is None else f"the key {self.stored!r}"
        return escape(
            f"the journal session {self.session_id!r} holds {held}, not {self.wanted!r}: "
            "it was made by something other than this store; give the key another project_key or move that session"
        )[:1000]


def _check_owner(sid: str, session: Session, key: SessionKey) -> None:
    """Refuse a session made for another key: ids are injective by construction, and this
    compares the original key kept in the meta, so a session made by hand under a readable id
    is never mistaken for the key's."""
    meta = _meta_of(session)
    stored = (meta.get(META_PROJECT), meta.get(META_SESSION), meta.get(META_SUBPATH)) if META_SESSION in meta else None
    if stored != _parts(key):
        raise SessionKeyMismatch(sid, stored, _parts(key))


def _entry_key(entry: Any) -> str | None:
    """The idempotency key of an entry: its uuid, or a digest of it when the uuid is not a
    string the journal takes as a key (too long, not text)."""
    if not isinstance(entry, dict) or "uuid" not in entry or entry["uuid"] is None:
        return None
    value = entry["uuid"]
    if isinstance(value, str) and 1 <= len(value) <= MAX_KEY:
        return value
    text = json.dumps(value, sort_keys=True, default=repr)
    return "uuid#" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# -- what the log says so far ----------------------------------------------------------------------


def _stored_residue(event: Event) -> Any:
    """The residue an event stores as it is stored (whole or as changes), or ``None``."""
    found = carried(event)
    if found is None and event.type == ENTRY:
        found = event.data.get("e")
    return found


def _chain_of(event: Event) -> dict[str, Any]:
    """``chain_fields`` of the entry a whole or old-format ``x.claude.entry`` stores, as far as
    its data alone says (a value an old-format hole takes from a typed event is left out)."""
    data = event.data
    fields = chain_fields(data.get("entry"))
    for path, *_ in data.get("holes") or ():
        fields.pop(path[0], None)
    return fields


@dataclass
class _Tracker:
    """One journal session as the derivation needs it, folded from its log incrementally.

    The log is the truth: this is a cache of it, valid for a count of events (``seen``) and for
    one incarnation of the session (``created_ms``: a purged and recreated session starts over)."""

    created_ms: int
    seen: int = 0
    keys: set[str] = field(default_factory=set)  # entry keys stored
    calls: dict[str, str | None] = field(default_factory=dict)  # call id -> tool name, every call requested or answered
    answered: set[str] = field(default_factory=set)
    turn: int = 0  # the last turn number used
    open: bool = False
    owed: list[str] = field(default_factory=list)  # calls of the open turn still without a result
    prev: dict[str, Any] = field(default_factory=dict)  # chain_fields of the last entry, as far as known
    shapes: Shapes = field(default_factory=Shapes)  # the latest residue of each shape

    def fold(self, event: Event) -> None:
        self.seen = event.seq + 1
        data = event.data
        if event.key is not None:
            self.keys.add(event.key)  # an entry's uuid, on its x. event or on the typed one carrying it
        stored = _stored_residue(event)
        if stored is not None:
            residue = expand(stored, event.seq, self.shapes.by_seq)
            if residue is None:  # a change of a residue this cache lost: unknown, never a base
                self.prev = {}
            else:
                self.prev = known_chain(residue, event.key, self.prev)
                self.shapes.note(event.seq, residue)
        elif event.type == ENTRY:
            self.prev = _chain_of(event)
        if event.type == "turn_start":
            self.open, self.owed = True, []
            if isinstance(data.get("turn"), int):
                self.turn = max(self.turn, data["turn"])
        elif event.type == "turn_end":
            self.open, self.owed = False, []
        elif event.type == "assistant_message":
            for call in data.get("tool_calls") or ():
                self.calls.setdefault(call["id"], call.get("name"))
                if self.open and call["id"] not in self.answered:
                    self.owed.append(call["id"])
        elif event.type == "tool_call":
            self.calls.setdefault(data["id"], data.get("name"))
        elif event.type == "tool_result":
            self.calls.setdefault(data["tool_call_id"], data.get("name"))
            self.answered.add(data["tool_call_id"])
            if data["tool_call_id"] in self.owed:
                self.owed.remove(data["tool_call_id"])


@dataclass
class _Plan:
    """A batch to append: the entries' items with the typed events derived from them."""

    items: list[Item] = field(default_factory=list)
    derived: int = 0  # how many of the items are typed events
    fresh: list[Any] = field(default_factory=list)  # entries not stored before (for the summary)
    orphans: list[str] = field(default_factory=list)  # calls still owed when a new prompt came


def _text(blocks: list[Any], kind: str = "text") -> str:
    field_ = "thinking" if kind == "thinking" else "text"
    parts = [
        b[field_] for b in blocks if isinstance(b, dict) and b.get("type") == kind and isinstance(b.get(field_), str)
    ]
    return "\n\n".join(p for p in parts if p)


def _result_content(block: dict[str, Any]) -> Any:
    content = block.get("content")
    if content is None:
        return ""
    return content if isinstance(content, (str, list, dict)) else json.dumps(content)


class _Planner:
    """Derives the typed events of a batch of entries from the tracker's state, without
    changing it (the tracker follows only what was written)."""

    def __init__(self, session_id: str, tracker: _Tracker) -> None:
        self.session_id = session_id
        self.t = tracker
        self.keys: set[str] = set()
        self.calls: dict[str, str | None] = {}
        self.turn, self.open, self.owed = tracker.turn, tracker.open, list(tracker.owed)
        self.answered: set[str] = set()
        self.unsure = False
        self.prev: dict[str, Any] = dict(tracker.prev)  # the entry before the next one, as far as known
        self.shapes = tracker.shapes.copy()
        # The seq the next item is written at, while it is known: a duplicate is not written, and
        # a result G5 may skip makes the rest of the batch's seqs unknown (no residue is then
        # written as a change of another, nor kept as a base).
        self.seq: int | None = tracker.seen
        self.plan = _Plan()

    def add(self, entry: Any) -> None:
        key = _entry_key(entry)
        at = len(self.plan.items)
        self.plan.items.append((ENTRY, {"entry": entry}, key))
        if key is not None:
            if key in self.t.keys or key in self.keys:
                return  # a duplicate: the unique index skips it, and it derives nothing again
            self.keys.add(key)
        self.plan.fresh.append(entry)
        self.unsure = False
        start = self.seq
        if isinstance(entry, dict) and entry.get("type") == "user":
            self._user(entry, key)
        elif isinstance(entry, dict) and entry.get("type") == "assistant":
            self._assistant(entry, key)
        prev, self.prev = self.prev, chain_fields(entry)
        if key is not None and isinstance(entry, dict):
            self._fold(entry, key, at, prev, start)
        # else no uuid (a mode or summary line): kept whole, as the SDK's rule keeps it
        if start is not None and self.seq is not None:
            self.seq = start + len(self.plan.items) - at

    def _fold(self, entry: dict[str, Any], key: str, at: int, prev: dict[str, Any], start: int | None) -> None:
        """Store the entry (``plan.items[at]``, to be written at ``start`` if known) once: carried
        by its typed event, or as an x. event of its own, minus what the log holds (``fold``)."""
        derived = self.plan.items[at + 1 :]
        carrier = None if self.unsure else next((n for n, d in enumerate(derived) if d[0] in CARRIERS), None)
        if carrier is None:
            # No typed event that is sure to be written (G5 may skip a result for a call already
            # answered): the entry stays an x. event of its own, minus what repeats.
            residue = fold(entry, [], None, key, prev)
            self.plan.items[at] = (ENTRY, {"e": self._stored(residue, start)}, key)
            return
        # One row for the item: the typed event carries the entry and its key. Each derived item
        # is written right after the other, in order: the batch is appended at the count the plan
        # was made at, and none of them can be skipped.
        type_, data, _ = derived[carrier]
        residue = fold(entry, derived, carrier, key, prev)
        seq = None if start is None else start + carrier
        data["metadata"] = {**data.get("metadata", {}), CARRIED: self._stored(residue, seq)}
        derived[carrier] = (type_, data, key)
        self.plan.items[at:] = derived

    def _stored(self, residue: dict[str, Any], seq: int | None) -> Any:
        """The residue as stored at ``seq``: as a change of the latest of its shape when the seq
        is known (and it is then the latest of its shape)."""
        if seq is None:
            return residue
        stored = self.shapes.stored(seq, residue)
        self.shapes.note(seq, residue)
        return stored

    def _derive(self, type_: str, data: dict[str, Any]) -> None:
        self.plan.items.append((type_, data, None))
        self.plan.derived += 1

    def _known(self, call_id: str) -> bool:
        return call_id in self.t.calls or call_id in self.calls

    def _meta(self, entry: dict[str, Any], key: str | None) -> dict[str, Any]:
        # The entry's uuid is the key of the event that carries it (``Event.key``): not repeated.
        meta: dict[str, Any] = {}
        message = entry.get("message")
        if isinstance(message, dict) and isinstance(message.get("id"), str):
            meta["claude_message_id"] = message["id"]
        return meta

    def _user(self, entry: dict[str, Any], key: str | None) -> None:
        blocks = blocks_of(entry.get("message"))
        for block in blocks:
            if not (isinstance(block, dict) and block.get("type") == "tool_result"):
                continue
            call_id = block.get("tool_use_id")
            # A result for a call this session never requested (its tool_use was in another
            # transcript, or in a batch stored without derivation) is left out: the typed log
            # would hold an answer to nothing. The entry itself is stored all the same.
            if not isinstance(call_id, str) or not call_id or not self._known(call_id):
                continue
            if key == answer_uuid(self.session_id, call_id):
                continue  # our own repair: the journal's synthetic result is its typed twin
            data: dict[str, Any] = {"tool_call_id": call_id, "content": _result_content(block)}
            name = self.calls.get(call_id, self.t.calls.get(call_id))
            if name:
                data["name"] = name
            if isinstance(block.get("is_error"), bool):
                data["is_error"] = block["is_error"]
            data["metadata"] = self._meta(entry, key)
            if call_id in self.t.answered or call_id in self.answered:
                self.unsure = True  # G5 may store it as late evidence, or not at all
                self.seq = None
            self.answered.add(call_id)
            self._derive("tool_result", data)
            if call_id in self.owed:
                self.owed.remove(call_id)
        text = _text(blocks)
        if not text:
            return
        if self.open and self.owed and not entry.get("isMeta") and not text.startswith(_INTERRUPT_MARK):
            self.plan.orphans.extend(c for c in self.owed if c not in self.plan.orphans)
        if self.open and not self.owed and not entry.get("isMeta") and not text.startswith(_INTERRUPT_MARK):
            # A new prompt: the turn before it is over (Claude writes no end marker of its own
            # when the user interrupts a turn that owed nothing).
            self._end_turn()
        self._derive("user_message", {"content": text, "metadata": self._meta(entry, key)})

    def _assistant(self, entry: dict[str, Any], key: str | None) -> None:
        message: dict[str, Any] = entry["message"] if isinstance(entry.get("message"), dict) else {}
        blocks = blocks_of(message)
        calls: list[dict[str, Any]] = []
        for block in blocks:
            if not (isinstance(block, dict) and block.get("type") == "tool_use"):
                continue  # server tools (server_tool_use) run at the provider: no client call
            call_id, name = block.get("id"), block.get("name")
            if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name):
                continue
            # A call id seen before would be a second request and a second dispatch, which the
            # journal refuses (AlreadyDispatched): the first one stands.
            if self._known(call_id) or any(c["id"] == call_id for c in calls):
                continue
            arguments = block.get("input")
            calls.append({"id": call_id, "name": name, "arguments": arguments if arguments is not None else {}})
        text, reasoning = _text(blocks), _text(blocks, "thinking")
        if not (calls or text or reasoning):
            return
        if calls and not self.open:
            self.turn += 1
            self.open, self.owed = True, []
            self._derive("turn_start", {"turn": self.turn})
        data: dict[str, Any] = {"content": text}
        stop = message.get("stop_reason")
        if calls:
            data["tool_calls"], data["stop_reason"] = calls, "tool_use"
        elif entry.get("isApiErrorMessage") is True:
            data["stop_reason"], data["error_message"] = "error", text or "API error"
        elif stop in _ENDS:
            data["stop_reason"] = _ENDS[stop]
        if reasoning:
            data["reasoning"] = reasoning
        usage = message.get("usage")
        if isinstance(usage, dict):
            mapped = {
                name: usage[src]
                for name, src in (
                    ("input", "input_tokens"),
                    ("output", "output_tokens"),
                    ("cache_read", "cache_read_input_tokens"),
                )
                if isinstance(usage.get(src), int) and not isinstance(usage.get(src), bool)
            }
            if mapped:
                data["usage"] = mapped
        meta = self._meta(entry, key)
        if isinstance(message.get("model"), str):
            meta["model"] = message["model"]
        data["metadata"] = meta
        self._derive("assistant_message", data)
        if calls:
            for call in calls:
                self.calls[call["id"]] = call["name"]
                self.owed.append(call["id"])
                # Recorded as dispatched: Claude Code runs a requested tool on its own, and the
                # mirror sees the request only after that may have begun (no barrier, see above).
                self._derive("tool_call", {"id": call["id"], "name": call["name"]})
            return
        ends = stop in _ENDS or (stop is None and bool(text)) or entry.get("isApiErrorMessage") is True
        if self.open and not self.owed and ends:
            self._end_turn()

    def _end_turn(self) -> None:
        self._derive("turn_end", {"turn": self.turn, "steps": 0, "reason": "complete"})
        self.open, self.owed = False, []


# -- the framework's view ----------------------------------------------------------------------------


def entries_of(j: journal.Journal, session_id: str, loose: list[int] | None = None) -> list[Any]:
    """The entries a journal session holds, each rebuilt whole, in append order: what ``load``
    returns before projecting recovery's answers (a journal fork of a transcript reads the same).

    An entry is read from the typed event that carries it, or from its ``x.claude.entry`` event
    (its own residue; whole; or, as the previous format stored it, with ``holes``). ``loose``,
    when given, gets the places of the entries read from their own event (no typed event carries
    them: a result the typed log holds as late, say)."""
    # The events an entry is read from, or takes a value from (a result or a prompt of its batch):
    # the turn and dispatch events are neither.
    events = j.events(session_id, types=[ENTRY, *CARRIERS])
    by_seq = {e.seq: e for e in events}
    residues: dict[int, dict[str, Any]] = {}
    out: list[Any] = []
    for event in events:
        stored = _stored_residue(event)
        if stored is None and event.type != ENTRY:
            continue
        if event.type == ENTRY and loose is not None:
            loose.append(len(out))
        if stored is None:
            out.append(filled(event, by_seq) if "holes" in event.data else event.data["entry"])
            continue
        residue = expand(stored, event.seq, residues)
        if residue is None:
            raise CorruptJournal(
                escape(f"session {session_id!r}")[:300],
                f"its {event.type} at seq {event.seq} holds no Claude entry it can be read from",
            )
        residues[event.seq] = residue
        out.append(unfold(residue, event, by_seq, out[-1] if out else None))
    return out


# -- the store -------------------------------------------------------------------------------------


class JournalSessionStore(SessionStore):
    """The Claude Agent SDK's ``SessionStore`` on a journal file (see the module's docstring).

    ``path_or_journal``: a path (opened with ``options``, closed by ``close()``) or an open
    ``journal.Journal`` (shared; the caller closes it). One store may serve many sessions and
    be used from any event loop; several processes may share the file."""

    def __init__(self, path_or_journal: str | os.PathLike[str] | journal.Journal, **options: Any) -> None:
        refuse_async_journal(path_or_journal)
        if isinstance(path_or_journal, journal.Journal):
            if options:
                raise TypeError("options apply when the store opens the journal itself, not to an open Journal")
            self._journal, self._owned = path_or_journal, False
        else:
            self._journal, self._owned = journal.open(path_or_journal, **options), True
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._trackers: dict[str, _Tracker] = {}

    @property
    def journal(self) -> journal.Journal:
        return self._journal

    def close(self) -> None:
        """Close the journal if this store opened it."""
        if self._owned:
            self._journal.close()

    def __enter__(self) -> JournalSessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> JournalSessionStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    # -- the protocol (each runs the journal's calls in a worker thread) ---------------------------

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Store a batch of entries (one transaction), with the typed events they imply."""
        await asyncio.to_thread(self.append_sync, key, list(entries))

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """The entries of a key, deep-equal and in order; ``None`` if none was ever stored."""
        return await asyncio.to_thread(self.load_sync, key)

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The project's main transcripts, with their last write time (epoch ms)."""
        return await asyncio.to_thread(self.list_sessions_sync, project_key)

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The SDK's summaries of the project's main transcripts, kept by ``append``."""
        return await asyncio.to_thread(self.list_session_summaries_sync, project_key)

    async def delete(self, key: SessionKey) -> None:
        """Erase a transcript (a main key: with its subagent transcripts) by purging it."""
        await asyncio.to_thread(self.delete_sync, key)

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The subpaths stored under a session."""
        return await asyncio.to_thread(self.list_subkeys_sync, key)

    # -- the same, synchronous (the async methods' bodies; for callers without an event loop) ----

    def append_sync(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        if not entries:
            return
        sid = journal_session_id(key)
        with self._lock(sid):
            if self._append_derived(sid, key, entries):
                return
            # The entries alone, without a plan: the unique index of keys still stores each uuid
            # once. The summary folds the whole batch here (a duplicate folds again, as in the
            # SDK's own in-memory store).
            self._trackers.pop(sid, None)
            self._ensure(sid, key)
            state = self._summary(sid, key, entries) if not key.get("subpath") else None
            self._journal.append_many(sid, [(ENTRY, {"entry": e}, _entry_key(e)) for e in entries], state=state)

    def _append_derived(self, sid: str, key: SessionKey, entries: list[SessionStoreEntry]) -> bool:
        """Append the entries with their typed events, planned from the log as of the count
        they are appended at; ``False`` when they must be stored alone."""
        for _ in range(MAX_ROUNDS):
            tracker = self._tracker(sid, key)
            planner = _Planner(sid, tracker)
            for entry in entries:
                planner.add(entry)
            plan = planner.plan
            if not plan.fresh:
                return True  # every entry is stored already
            state = self._summary(sid, key, plan.fresh) if not key.get("subpath") else None
            try:
                # owned: a turn these entries open is this process's, so a load after it died
                # recovers it (``_recover_dead``) while another process's recovery leaves it be.
                written = self._journal.append_many(
                    sid, plan.items, expected_count=tracker.seen, state=state, owned=True
                )
            except (CountMismatch, SessionNotFound) as exc:
                # Another writer (or a purge) came first: read what it did, plan again.
                log.debug("claude adapter: %s moved under the plan (%s): planning again", sid, type(exc).__name__)
                continue
            except (JournalIOError, JournalBusy):
                raise  # not a refusal: the batch may be in the file (its outcome says); never store it again
            except JournalError as exc:
                if plan.derived == 0:
                    raise  # the entries themselves are refused (too big, say): the SDK must hear it
                # A derived event was refused after all: never let that cost the entries.
                log.warning("claude adapter: typed events of a batch refused (%s); storing the entries alone", exc)
                return False
            log.debug("claude adapter: %s: %d entries appended at %d", sid, len(plan.fresh), tracker.seen)
            if plan.orphans:
                # Claude went on while calls of a crashed turn had no result: a resume without
                # repair. The journal still owes them; the operator must hear which call to check.
                log.warning(
                    "claude adapter: %s: a new prompt while %s had no result (a crash?): run "
                    "journal.adapters.claude.repair(store, key) before resuming a session",
                    escape(sid),
                    escape(", ".join(plan.orphans))[:500],
                )
            self._follow(tracker, written)
            return True
        log.warning("claude adapter: %s kept changing under %d plans; storing the entries alone", sid, MAX_ROUNDS)
        return False

    def load_sync(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """The entries, with each call a recovery answered shown answered (see ``project``)."""
        sid = journal_session_id(key)
        loose: list[int] = []
        try:
            _check_owner(sid, self._journal.session(sid), key)
            self._recover_dead(sid)
            entries = entries_of(self._journal, sid, loose)
        except SessionNotFound:
            return None
        if not entries:
            return None
        answering = {i: answers for i in loose if (answers := result_only(entries[i]))}
        results = self._results(sid, [*owed_calls(entries), *(c for calls in answering.values() for c in calls)])
        late = late_answers(sid, entries, answering, results)
        if late:  # a real result after recovery answered the call: the typed log's late evidence
            entries = without_late(sid, entries, late, answering)
        return cast("list[SessionStoreEntry]", project(sid, entries, results))

    def _recover_dead(self, sid: str) -> None:
        """Recover the session's open turn when the process that drove it is gone (a crash), so a
        resume from this load -- with a new prompt or without, repaired or not -- shows each call
        it owes answered (MAY have run) instead of an orphan ``tool_use``. A live process's turn,
        another host's, or one with no recorded owner is left alone (``repair`` answers it)."""
        if self._journal.readonly:
            return
        open_turn = self._journal.turn_state(sid)
        if open_turn is not None and owner_is_dead(open_turn.owner):
            self._journal.recover(sid)

    def _results(self, sid: str, calls: list[str]) -> dict[str, Event]:
        """The typed results of these calls (read only when some call is owed: a transcript
        without orphan calls costs its entries' read alone)."""
        if not calls:
            return {}
        wanted = set(calls)
        try:
            found = self._journal.events(sid, types=["tool_result"])
        except SessionNotFound:
            return {}
        return {e.data["tool_call_id"]: e for e in found if e.data["tool_call_id"] in wanted}

    def list_sessions_sync(self, project_key: str) -> list[SessionStoreListEntry]:
        return [
            {"session_id": _meta_of(s)[META_SESSION], "mtime": s.last_ms}
            for s in self._journal.sessions(meta={META_PROJECT: project_key, META_TRANSCRIPT: "main"}, prefix=PREFIX)
            if s.count
        ]

    def list_session_summaries_sync(self, project_key: str) -> list[SessionSummaryEntry]:
        out: list[SessionSummaryEntry] = []
        for s in self._journal.sessions(meta={META_PROJECT: project_key, META_TRANSCRIPT: "main"}, prefix=PREFIX):
            try:
                summary = self._journal.state(s.id, keys=[SUMMARY]).get(SUMMARY)
            except SessionNotFound:
                continue  # purged meanwhile
            if s.count and isinstance(summary, dict):
                # The summary is written in the transaction of the session's last events, so
                # its write time is the session's last activity: the clock list_sessions shows.
                out.append({"session_id": _meta_of(s)[META_SESSION], "mtime": s.last_ms, "data": summary["data"]})
        return out

    def delete_sync(self, key: SessionKey) -> None:
        j, own = self._journal, journal_session_id(key)
        try:
            _check_owner(own, j.session(own), key)  # never erase a session this key does not own
        except SessionNotFound:
            pass
        if key.get("subpath"):
            doomed = [own]
        else:
            found = j.sessions(meta={META_PROJECT: key["project_key"], META_SESSION: key["session_id"]}, prefix=PREFIX)
            subs = [s.id for s in found if _meta_of(s).get(META_TRANSCRIPT) == "subagent"]
            doomed = [*subs, own]  # the main one last: a retry finds the rest
        for sid in doomed:
            with self._lock(sid):
                self._trackers.pop(sid, None)
                try:
                    # The one erasure the journal allows (G3): a whole session, in one transaction.
                    j.purge(sid, copy_forks=True)
                except SessionNotFound:
                    pass

    def list_subkeys_sync(self, key: SessionListSubkeysKey) -> list[str]:
        found = self._journal.sessions(
            meta={META_PROJECT: key["project_key"], META_SESSION: key["session_id"], META_TRANSCRIPT: "subagent"},
            prefix=PREFIX,
        )
        return [_meta_of(s)[META_SUBPATH] for s in found if s.count]

    # -- helpers -----------------------------------------------------------------------------------

    def _lock(self, sid: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(sid, threading.Lock())

    def _ensure(self, sid: str, key: SessionKey) -> None:
        try:
            self._journal.create_session(sid, meta=_meta(key))
        except SessionExists:
            _check_owner(sid, self._journal.session(sid), key)

    def _tracker(self, sid: str, key: SessionKey) -> _Tracker:
        """The session's tracker, brought up to the log's end (the session made if missing)."""
        j = self._journal
        try:
            info = j.session(sid)
        except SessionNotFound:
            self._ensure(sid, key)
            info = j.session(sid)
        tracker = self._trackers.get(sid)
        if tracker is None or tracker.created_ms != info.created_ms or info.count < tracker.seen:
            _check_owner(sid, info, key)
            tracker = self._trackers[sid] = _Tracker(info.created_ms)
        if info.count > tracker.seen:
            for event in j.events(sid, since=tracker.seen):
                tracker.fold(event)
        return tracker

    def _follow(self, tracker: _Tracker, written: list[Event]) -> None:
        """Fold what a batch wrote (it was appended at ``tracker.seen``: nothing between)."""
        for event in written:
            if not event.existing:
                tracker.fold(event)

    def _summary(self, sid: str, key: SessionKey, fresh: list[Any]) -> dict[str, Any] | None:
        """The summary's new value, or ``None`` when the batch leaves it as it was (keyed state
        keeps every version: writing an unchanged one would grow the file at every append)."""
        # Read here, written in the batch's transaction; the batch's expected_count makes the
        # read-fold-write one compare-and-set (the SDK asks stores to serialise it).
        prev = self._journal.state(sid, keys=[SUMMARY]).get(SUMMARY)
        folded = fold_session_summary(cast("SessionSummaryEntry", prev) if isinstance(prev, dict) else None, key, fresh)
        value = {"session_id": folded["session_id"], "mtime": 0, "data": folded["data"]}
        return None if value == prev else {SUMMARY: value}


# -- repair: the one recovery, for a store key ----------------------------------------------------------


def repair(store: JournalSessionStore, key: SessionKey, *, force: bool = False) -> Repaired:
    """After a crash, before resuming the session: run the journal's one recovery for the key's
    session, so every call the crash left without a result gets a synthetic one (it MAY have
    run: the SDK mirrors entries after Claude Code ran them) and the open turn ends
    ``interrupted``. A main transcript's key covers its subagents' transcripts too (a crash
    inside a subagent's tool leaves both open), as ``delete`` does.

    Idempotent, and only needed once by whoever comes first: ``journal recover`` from a shell,
    ``Journal.recover()`` or the async face's do the same, and ``load`` shows what any of them
    wrote in Claude's shape (``project``), so a resume sends no orphan ``tool_use`` and nothing
    re-runs the tool. ``added`` is therefore empty; ``unanswered`` names calls the transcript
    shows without an answer that the journal holds no result for (entries stored without their
    typed events). The journal cannot see Claude's process: call it when none drives the
    session; a turn held by a live journal owner is left alone (``live_owner``) unless
    ``force``. ``key`` is the SDK's ``SessionKey`` (see the module's docstring)."""
    sid, j = journal_session_id(key), store.journal
    try:
        _check_owner(sid, j.session(sid), key)
        (result,) = j.recover(sid, force=force)
    except SessionNotFound:
        return Repaired(sid)
    if result.live_owner is not None:
        return Repaired(sid, live_owner=result.live_owner)
    recovered, unanswered = list(result.appended), owed_calls(store.load_sync(key) or [])
    live_owner = None
    if not key.get("subpath"):
        for subpath in store.list_subkeys_sync({"project_key": key["project_key"], "session_id": key["session_id"]}):
            sub = repair(store, {**key, "subpath": subpath}, force=force)
            recovered.extend(sub.recovered)
            unanswered.extend(sub.unanswered)
            live_owner = live_owner or sub.live_owner
    return Repaired(sid, recovered=tuple(recovered), unanswered=tuple(unanswered), live_owner=live_owner)


async def arepair(store: JournalSessionStore, key: SessionKey, *, force: bool = False) -> Repaired:
    """``repair``, awaitable: the journal's calls run in a worker thread (the loop never waits)."""
    return await asyncio.to_thread(repair, store, key, force=force)
