"""The transcript part: a session's messages, its provider view, compaction.

The folding itself is pure (``journal.pure.view``); this part reads the log and appends the
replacing event of a compaction.

The last messages of a long session (``tail=N``) are read from the end of the log. The schema
keeps, for each compaction, the transcript's length just before and after it (the
``compactions`` table, which this part owns): the newest surface events after the last
compaction are the transcript's end; the positions before them map back through each
compaction in turn to the compaction events and to the plain appends between compactions,
which are then read by their rank in their run, from its nearer end. The cost follows the
messages read and the compactions in the session, not the log's length.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from journal import lineage
from journal import log as _log
from journal.bulk import paused_collector
from journal.codec import check_int
from journal.errors import InvalidArgument, InvalidRange, UnansweredCalls
from journal.log import Log
from journal.model import SURFACE_TYPES, Event
from journal.preview import CHARS_MAX, previews_at_txn
from journal.pure.view import (
    Compaction,
    Message,
    ProviderView,
    exchange_start,
    fold,
    messages_of,
    provider_tail,
    provider_view,
)
from journal.store import Database, Statements, Store

_SUMMARY_TYPES = ("user_message", "system_message", "assistant_message")
_SURFACE = " AND type IN ({})".format(", ".join(f"'{type_}'" for type_ in sorted(SURFACE_TYPES)))
_SPAN = "FROM events WHERE session_id = ? AND seq >= ? AND seq < ?"
_MARKS = (
    "SELECT seq, kind, first, last, before, after FROM compactions "
    "WHERE session_id = ? AND seq >= ? AND seq < ? ORDER BY seq"
)
_COUNT = f"SELECT count(*) {_SPAN}{_SURFACE}"
# The reads of the tail, of whole events (``data``) or of where they stand only (``NULL``: a cut
# read then reads the events it found through the store's ``sql.previews_at``, cut in SQL).
_READ_UP = "SELECT seq, type, {data}, time_ms " + f"{_SPAN}{_SURFACE} ORDER BY seq LIMIT ? OFFSET ?"
_READ_DOWN = "SELECT seq, type, {data}, time_ms " + f"{_SPAN}{_SURFACE} ORDER BY seq DESC LIMIT ? OFFSET ?"
_READ_ONE = "SELECT seq, type, {data}, time_ms FROM events WHERE session_id = ? AND seq = ?"


def statement_shapes(sql: Statements) -> list[str]:
    """One statement of each shape this module builds at run time (``tests/test_statements.py``
    prepares them on both backends): the tail's reads, of whole events and of where they stand."""
    return [read.format(data=data) for read in (_READ_UP, _READ_DOWN, _READ_ONE) for data in ("data", "NULL")]


class Transcript:
    """``messages``, ``provider_view`` and ``compact``."""

    def __init__(self, store: Store, log: Log) -> None:
        self._store = store
        self._log = log

    def messages(
        self, session_id: str, *, provider: bool = False, tail: int | None = None, chars: int | None = None
    ) -> list[Message]:
        """The transcript a model should see: surface events folded, compactions applied.

        With ``tail=N`` (an int >= 0), only its last N messages (none for 0): the same messages
        as ``messages(session_id)[-N:]``, read from the end of the log. With ``provider=True``,
        the messages of ``provider_view`` (with ``tail``, of ``provider_view(..., tail=N)``); a
        call among them still without a result raises ``UnansweredCalls`` rather than being left
        out or invented.

        With ``chars=C`` (with ``tail`` only: what a viewer shows), each message is read cut in
        the database as ``previews`` cuts an event: every string, and every object's or array's
        JSON text, to its first C characters (a ``journal.preview.Clipped`` when cut), its first
        ``FIELDS_MAX`` fields. Nothing of an event beyond that reaches Python."""
        n = _check_tail(tail)
        cut = _check_chars(chars, n)
        if provider:
            view = self.provider_view(session_id, tail=n, chars=cut)
            if view.missing:
                raise UnansweredCalls(session_id, tuple(m.tool_call_id for m in view.missing))
            return view.messages
        if n is None:
            with self._store.read() as db:
                events = lineage.read_events_txn(db, session_id)
            with paused_collector():  # journal.bulk
                return fold(events)
        with self._store.read() as db:
            return _tail_txn(db, session_id, n, cut)

    def provider_view(self, session_id: str, *, tail: int | None = None, chars: int | None = None) -> ProviderView:
        """The transcript shaped for a provider request: each assistant's results right after it
        in call order, aborted and errored answers left out, and ``missing`` naming every call
        still without a result (run recovery first; nothing is invented).

        With ``tail=N`` (an int >= 0), ``provider_view(session_id).tail(N)``: its last N messages,
        and of ``missing`` only the calls of the assistant messages among them. With ``chars=C``
        (with ``tail`` only), each message is read cut in SQL, as ``messages(..., chars=C)`` says
        (calls pair with results by their ids' first C characters)."""
        n = _check_tail(tail)
        cut = _check_chars(chars, n)
        if n is None:
            with self._store.read() as db:
                events = lineage.read_events_txn(db, session_id)
            with paused_collector():  # journal.bulk
                return provider_view(events)
        with self._store.read() as db:
            # Each round reads twice as many of the transcript's last messages, until what they
            # shape into is long enough (results of earlier assistants, left-out answers drop).
            wanted = n
            while True:
                last = _tail_txn(db, session_id, wanted, cut)
                view = provider_tail(last, n, whole=len(last) < wanted)
                if view is not None:
                    return view
                wanted *= 2

    def compact(
        self, /, session_id: str, start: int, stop: int, summary: Any, *, type: str = "user_message", **fields: Any
    ) -> Event:
        """Replace the messages at positions ``start..stop`` (inclusive) of the current
        transcript with ``summary``, by appending one event; the log keeps everything."""
        if type not in _SUMMARY_TYPES:
            raise InvalidArgument("type", f"a summary is one of {_SUMMARY_TYPES}, not {type!r}")
        time_ms = _log.now_ms()
        with self._store.write("append", sessions=(session_id,)) as db:
            count = (
                _End(db, session_id).length()
                if places_compactions(db)
                else len(fold(lineage.read_events_txn(db, session_id)))
            )
            valid = all(isinstance(x, int) and not isinstance(x, bool) for x in (start, stop))
            if not valid or not 0 <= start <= stop < count:
                raise InvalidRange(start, stop, count)
            data = {"content": summary, **fields, "surface_op": ["replace", start, stop]}
            return self._log.append_txn(db, session_id, type, data, time_ms)

    def retract(self, session_id: str, *, reason: str | None = None) -> Message | None:
        """Take the transcript's last message back, without deleting anything: appends a
        ``retract`` event naming it, which the messages view, its tail and the provider view
        honour (and ``journal show`` marks). Returns the message taken back, or ``None`` (and
        writes nothing) when the transcript is empty.

        A call and its result go together: when the last message is a tool result whose call an
        assistant message in the transcript made, that assistant message goes too, with every
        message after it (each its own ``retract`` event, newest first, in this one
        transaction); so the provider view never owes a call whose result was taken back (the
        first result written stays the call's result, G5: nobody could answer it again). An
        assistant message whose calls have no result yet goes alone: a result written later
        answers a call no message in the transcript made, and the provider view leaves it out.
        The log keeps every event, so recovery still answers a dispatched call it owes."""
        if reason is not None and not isinstance(reason, str):
            raise InvalidArgument("reason", f"must be a string, not {type(reason).__name__}")
        time_ms = _log.now_ms()
        with self._store.write("retract", sessions=(session_id,)) as db:
            wanted = 4
            while True:
                last = _tail_txn(db, session_id, wanted)
                start = exchange_start(last, whole=len(last) < wanted)
                if start is not None:
                    break
                wanted *= 4
            if not last:
                return None
            for message in reversed(last[start:]):
                data: dict[str, Any] = {"seq": message.seq}
                if reason is not None:
                    data["reason"] = reason
                self._log.append_txn(db, session_id, "retract", data, time_ms)
        return last[-1]

    def forget_txn(self, db: Database, session_id: str) -> None:
        """Delete the session's compaction rows (purge)."""
        db.execute("DELETE FROM compactions WHERE session_id = ?", (session_id,))


def _check_tail(tail: object) -> int | None:
    """``tail`` if it is ``None`` or an int >= 0; else ``InvalidArgument``, before any read."""
    return None if tail is None else check_int("tail", tail)


def _check_chars(chars: object, tail: int | None) -> int | None:
    """``chars`` if it is ``None`` or an int from 0 to ``CHARS_MAX`` given with ``tail``; else
    ``InvalidArgument``, before any read."""
    if chars is None:
        return None
    if tail is None:
        raise InvalidArgument("chars", "a cut read is of the transcript's last messages: give tail= too")
    return check_int("chars", chars, maximum=CHARS_MAX)


def places_compactions(db: Database) -> bool:
    """Whether the file places its compactions (a read-only open of an older one does not)."""
    return bool(db.value(db.sql.places_compactions))


def _tail_txn(db: Database, session_id: str, n: int, chars: int | None = None) -> list[Message]:
    if places_compactions(db):
        return _End(db, session_id, chars=chars).last(n)
    # An older file read-only (no compactions placed): folded from its whole log, never cut.
    messages = fold(lineage.read_events_txn(db, session_id))
    return messages[max(len(messages) - n, 0) :]


class _Slice(NamedTuple):
    """Messages ``lo..hi-1`` (by rank) of the plain appends before compaction ``level`` (after
    the one before it), to stand at ``dest`` onwards in the tail."""

    level: int
    lo: int
    hi: int
    dest: int


class _End:
    """A session's transcript read from its end, inside the caller's read snapshot.

    With ``chars``, the reads find where the messages stand (seqs, no ``data``), then read just
    those events cut to ``chars`` characters in SQL (``journal.preview.previews_at_txn``)."""

    def __init__(self, db: Database, session_id: str, *, chars: int | None = None) -> None:
        self._db = db
        self._session_id = session_id
        self._chars = chars
        data = "data" if chars is None else "NULL"
        self._up, self._down, self._one = (sql.format(data=data) for sql in (_READ_UP, _READ_DOWN, _READ_ONE))
        self._chain = lineage.chain_txn(db, session_id)
        self._marks = [
            Compaction(*row)
            for piece in lineage.spans(self._chain, newest_first=False)
            for row in db.execute(_MARKS, piece)
        ]

    def length(self) -> int:
        """How many messages the transcript holds."""
        top = self._marks[-1] if self._marks else None
        since = 0 if top is None else top.seq + 1
        counted: int = sum(
            self._db.value(_COUNT, piece) for piece in lineage.spans(self._chain, since, newest_first=False)
        )
        return counted + (0 if top is None else top.after)

    def last(self, n: int) -> list[Message]:
        """The transcript's last ``n`` messages (all of them if it has fewer)."""
        top = self._marks[-1].seq if self._marks else -1
        newest = self._newest(top + 1, n)
        if len(newest) == n or not self._marks:
            return self._messages(newest)
        # The rest are the last positions of the transcript as the newest compaction left it.
        level = len(self._marks) - 1
        size = self._marks[level].after
        wanted = min(n - len(newest), size)
        slots: list[Event | None] = [None] * wanted
        pending = [(0, size - wanted, size)]  # (dest, lo, hi): positions of the transcript after `level`
        slices: list[_Slice] = []
        while pending:
            pending = self._map(level, pending, slots, slices)
            level -= 1
        for piece in slices:
            slots[piece.dest : piece.dest + piece.hi - piece.lo] = self._rank(piece.level, piece.lo, piece.hi)
        events = [event for event in slots if event is not None]
        assert len(events) == wanted
        return self._messages(events + newest)

    def _messages(self, events: list[Event]) -> list[Message]:
        """The messages of ``events`` in their order; a cut read reads their data now, cut."""
        if self._chars is None:
            return messages_of(events)
        seqs: dict[str, list[int]] = {}
        for event in events:
            seqs.setdefault(lineage.owner_of(self._chain, event.seq), []).append(event.seq)
        cut = {
            p.seq: p.event()
            for owner, wanted in seqs.items()
            for p in previews_at_txn(self._db, self._session_id, owner, wanted, self._chars)
        }
        return messages_of(cut[event.seq] for event in events)

    def _map(
        self, level: int, ranges: list[tuple[int, int, int]], slots: list[Event | None], slices: list[_Slice]
    ) -> list[tuple[int, int, int]]:
        """Map ranges of positions just after compaction ``level`` to positions before it: those
        of its own event fill their slot, those among the appends since the compaction before
        become slices, and the rest are returned as positions after that one."""
        mark = self._marks[level]
        base = self._marks[level - 1].after if level else 0
        earlier: list[tuple[int, int, int]] = []
        for dest, lo, hi in ranges:
            if mark.kind == "retract":  # the last message went: the others stand where they stood
                earlier_spans = [(dest, lo, min(hi, mark.after))]
                self._split(level, earlier_spans, base, earlier, slices)
                continue
            if mark.first >= mark.before:  # it appended: before it stand the same positions
                at, shift = mark.before, 0
            else:  # it stands at `first`; after it come those past what it removed
                at, shift = mark.first, min(mark.last, mark.before - 1) - mark.first
            spans = [(dest, lo, min(hi, at))]
            if lo <= at < hi:
                row = self._db.one(self._one, (lineage.owner_of(self._chain, mark.seq), mark.seq))
                assert row is not None  # the compaction's own event: in the log it marks
                slots[dest + at - lo] = self._event(row)
            if hi > at + 1:
                first = max(lo, at + 1)
                spans.append((dest + first - lo, first + shift, hi + shift))
            self._split(level, spans, base, earlier, slices)
        return earlier

    @staticmethod
    def _split(
        level: int,
        spans: list[tuple[int, int, int]],
        base: int,
        earlier: list[tuple[int, int, int]],
        slices: list[_Slice],
    ) -> None:
        """Positions before compaction ``level``: those under ``base`` stand where the one
        before it left them (``earlier``), the rest are its run of appends (``slices``)."""
        for d, a, b in spans:
            if a < min(b, base):
                earlier.append((d, a, min(b, base)))
            if b > max(a, base):
                start = max(a, base)
                slices.append(_Slice(level, start - base, b - base, d + start - a))

    def _rank(self, level: int, lo: int, hi: int) -> list[Event]:
        """The plain appends ``lo..hi-1``, by rank, between compaction ``level - 1`` and
        ``level``, read from the nearer end of their run."""
        mark = self._marks[level]
        since = self._marks[level - 1].seq + 1 if level else 0
        size = mark.before - (self._marks[level - 1].after if level else 0)
        pieces = lineage.spans(self._chain, since, mark.seq, newest_first=False)
        if len(pieces) > 1:  # the run crosses a fork point: find the piece that holds it
            out: list[Event] = []
            for piece in pieces:
                count = self._db.value(_COUNT, piece)
                if lo < count and hi > 0:
                    out.extend(self._rank_in(piece, max(lo, 0), min(hi, count), count))
                lo, hi = lo - count, hi - count
            return out
        return self._rank_in(pieces[0], lo, hi, size) if pieces else []

    def _rank_in(self, piece: tuple[str, int, int], lo: int, hi: int, size: int) -> list[Event]:
        if lo <= size - hi:
            rows = list(self._db.execute(self._up, (*piece, hi - lo, lo)))
        else:
            rows = list(self._db.execute(self._down, (*piece, hi - lo, size - hi)))[::-1]
        return [self._event(row) for row in rows]

    def _newest(self, since: int, n: int) -> list[Event]:
        """The newest ``n`` surface events with ``seq >= since``, oldest first."""
        rows: list[tuple[int, str, str, int]] = []
        for piece in reversed(lineage.spans(self._chain, since, newest_first=False)):
            if len(rows) >= n:
                break
            rows.extend(self._db.execute(self._down, (*piece, n - len(rows), 0)))
        return [self._event(row) for row in reversed(rows)]

    def _event(self, row: tuple[int, str, str, int]) -> Event:
        seq, type_, text, time_ms = row
        return Event(self._session_id, seq, type_, {} if text is None else json.loads(text), time_ms)
