"""The transcript part: a session's messages, its provider view, compaction.

The folding itself is pure (``journal.pure.view``); this part reads the log and appends the
replacing event of a compaction.

The last messages of a long session (``tail=N``) are read from the end of the log. The newest
surface events give them when no compaction is among them (``appended_tail``). Otherwise where a
replace stands depends on the transcript's length before it, which only the whole log tells (the
file stores no such length): the log is then read as an outline (``fold_outline``). SQLite walks
it twice, once to find the events that may replace, which alone are decoded, and once to count
the plain appends between them; then only the appends that end up in the tail are read.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from journal import log as _log
from journal.codec import check_int
from journal.errors import InvalidArgument, InvalidRange, UnansweredCalls
from journal.log import Log
from journal.model import SURFACE_TYPES, Event
from journal.pure.view import (
    Message,
    ProviderView,
    appended_tail,
    fold,
    fold_outline,
    messages_of,
    provider_tail,
    provider_view,
)
from journal.store import Database, Store

_SUMMARY_TYPES = ("user_message", "system_message", "assistant_message")
_SURFACE = tuple(sorted(SURFACE_TYPES))
# How much deeper than the tail the second read from the end goes: enough to settle a compaction
# among the last messages whose range ends within the transcript's first 250 or so positions.
_DEEPER = 256
_SEQ_END = 2**63 - 1  # past every seq: the bound of a session's own, open-ended segment
_SPAN = "FROM events WHERE session_id = ? AND seq >= ? AND seq < ?"
_RUN = "{} AND type IN ({})".format(_SPAN, ", ".join(f"'{type_}'" for type_ in _SURFACE))
# The codec writes data as compact JSON with its keys as they are (never escaped), so an event
# whose text does not hold the name cannot carry an op. Those that do are decoded and judged by
# fold's own rule (the name may sit deeper in the data, or in a bookkeeping event's); leaving
# the type out of this test makes the pass cheaper.
_MAY_REPLACE = f"SELECT seq, type, data, time_ms {_SPAN} AND instr(data, '\"surface_op\"') ORDER BY seq"
_COUNT = f"SELECT count(*) {_RUN}"
_READ_UP = f"SELECT seq, type, data, time_ms {_RUN} ORDER BY seq LIMIT ? OFFSET ?"
_READ_DOWN = f"SELECT seq, type, data, time_ms {_RUN} ORDER BY seq DESC LIMIT ? OFFSET ?"


class Transcript:
    """``messages``, ``provider_view`` and ``compact``."""

    def __init__(self, store: Store, log: Log) -> None:
        self._store = store
        self._log = log

    def messages(self, session_id: str, *, provider: bool = False, tail: int | None = None) -> list[Message]:
        """The transcript a model should see: surface events folded, compactions applied.

        With ``tail=N`` (an int >= 0), only its last N messages (none for 0): the same messages
        as ``messages(session_id)[-N:]``, read from the end of the log. With ``provider=True``,
        the messages of ``provider_view`` (with ``tail``, of ``provider_view(..., tail=N)``); a
        call among them still without a result raises ``UnansweredCalls`` rather than being left
        out or invented."""
        n = _check_tail(tail)
        if provider:
            view = self.provider_view(session_id, tail=n)
            if view.missing:
                raise UnansweredCalls(session_id, tuple(m.tool_call_id for m in view.missing))
            return view.messages
        if n is None:
            return fold(self._log.events(session_id))
        with self._store.read() as db:
            return _End(db, session_id).last(n)

    def provider_view(self, session_id: str, *, tail: int | None = None) -> ProviderView:
        """The transcript shaped for a provider request: each assistant's results right after it
        in call order, aborted and errored answers left out, and ``missing`` naming every call
        still without a result (run recovery first; nothing is invented).

        With ``tail=N`` (an int >= 0), ``provider_view(session_id).tail(N)``: its last N messages,
        and of ``missing`` only the calls of the assistant messages among them."""
        n = _check_tail(tail)
        if n is None:
            return provider_view(self._log.events(session_id))
        with self._store.read() as db:
            end = _End(db, session_id)
            # Each round reads twice as many of the transcript's last messages, until what they
            # shape into is long enough (results of earlier assistants, left-out answers drop).
            wanted = n
            while True:
                last = end.last(wanted)
                view = provider_tail(last, n, whole=len(last) < wanted)
                if view is not None:
                    return view
                wanted *= 2

    def compact(
        self, session_id: str, start: int, stop: int, summary: Any, *, type: str = "user_message", **fields: Any
    ) -> Event:
        """Replace the messages at positions ``start..stop`` (inclusive) of the current
        transcript with ``summary``, by appending one event; the log keeps everything."""
        if type not in _SUMMARY_TYPES:
            raise InvalidArgument("type", f"a summary is one of {_SUMMARY_TYPES}, not {type!r}")
        time_ms = _log.now_ms()
        with self._store.write("append") as db:
            count = len(fold(_log.read_events_txn(db, session_id)))
            valid = all(isinstance(x, int) and not isinstance(x, bool) for x in (start, stop))
            if not valid or not 0 <= start <= stop < count:
                raise InvalidRange(start, stop, count)
            data = {"content": summary, **fields, "surface_op": ["replace", start, stop]}
            return self._log.append_txn(db, session_id, type, data, time_ms)


def _check_tail(tail: object) -> int | None:
    """``tail`` if it is ``None`` or an int >= 0; else ``InvalidArgument``, before any read."""
    return None if tail is None else check_int("tail", tail)


class _Run(NamedTuple):
    """The ``size`` surface events of ``owner`` with ``lo <= seq < hi``, which only append,
    numbered from ``first``."""

    first: int
    owner: str
    lo: int
    hi: int
    size: int


class _End:
    """A session's transcript read from its end, inside the caller's read snapshot."""

    def __init__(self, db: Database, session_id: str) -> None:
        self._db = db
        self._session_id = session_id
        self._folded: list[Event | int] | None = None  # the outline folded, once it was needed
        self._runs: list[_Run] = []

    def last(self, n: int) -> list[Message]:
        """The transcript's last ``n`` messages (all of them if it has fewer)."""
        if self._folded is None:
            # The newest n surface events give it unless a compaction is among them; a deeper
            # read settles one of early positions (it needs that many messages before it).
            for depth in (n, n + _DEEPER):
                rows = _log.read_rows_back_txn(self._db, self._session_id, depth, types=_SURFACE)
                whole = len(rows) < depth
                appended = appended_tail([self._event(row) for row in rows], n, whole=whole)
                if appended is not None:
                    return appended
            self._folded = fold_outline(self._outline())
        return messages_of(self._read(self._folded[max(len(self._folded) - n, 0) :]))

    def _outline(self) -> Iterator[Event | range]:
        """The log in seq order, each run of plain appends as a ``range`` of numbers: only the
        events that may replace are decoded; the appends between them are counted."""
        for owner, lo, hi in reversed(_log.chain_txn(self._db, self._session_id)):
            start, end = lo, int(min(hi, _SEQ_END))
            for row in list(self._db.execute(_MAY_REPLACE, (owner, lo, end))):
                yield from self._run(owner, start, row[0])
                yield self._event(row)
                start = row[0] + 1
            yield from self._run(owner, start, end)

    def _run(self, owner: str, lo: int, hi: int) -> Iterator[range]:
        """The numbers of the surface events of ``owner`` in ``lo <= seq < hi``, if any."""
        size = self._db.value(_COUNT, (owner, lo, hi)) if lo < hi else 0
        if size:
            first = self._runs[-1].first + self._runs[-1].size if self._runs else 0
            self._runs.append(_Run(first, owner, lo, hi, size))
            yield range(first, first + size)

    def _read(self, items: list[Event | int]) -> list[Event]:
        """The events ``items`` stand for, reading the numbered ones."""
        firsts = [run.first for run in self._runs]
        found: dict[int, Event] = {}
        for stretch in self._stretches(item for item in items if isinstance(item, int)):
            run = self._runs[bisect_right(firsts, stretch[0]) - 1]
            found.update(zip(stretch, self._read_run(run, stretch[0] - run.first, len(stretch)), strict=True))
        return [found[item] if isinstance(item, int) else item for item in items]

    def _stretches(self, numbers: Iterable[int]) -> Iterator[list[int]]:
        """``numbers`` cut into stretches of consecutive numbers of one run: one query each."""
        starts = {run.first for run in self._runs}
        stretch: list[int] = []
        for number in numbers:
            if stretch and (number != stretch[-1] + 1 or number in starts):
                yield stretch
                stretch = []
            stretch.append(number)
        if stretch:
            yield stretch

    def _read_run(self, run: _Run, skip: int, size: int) -> list[Event]:
        """``size`` events of a run, after its first ``skip``."""
        after = run.size - skip - size
        if skip <= after:
            rows = list(self._db.execute(_READ_UP, (run.owner, run.lo, run.hi, size, skip)))
        else:
            rows = list(self._db.execute(_READ_DOWN, (run.owner, run.lo, run.hi, size, after)))[::-1]
        return [self._event(row) for row in rows]

    def _event(self, row: tuple[int, str, str, int]) -> Event:
        seq, type_, text, time_ms = row
        return Event(self._session_id, seq, type_, json.loads(text), time_ms)
