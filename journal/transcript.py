"""The transcript part: a session's messages, its provider view, compaction.

The folding itself is pure (``journal.pure.view``); this part reads the log and appends the
replacing event of a compaction.
"""

from __future__ import annotations

from typing import Any

from journal import log as _log
from journal.errors import InvalidArgument, InvalidRange, UnansweredCalls
from journal.log import Log
from journal.model import Event
from journal.pure.view import Message, ProviderView, fold, provider_view
from journal.store import Store

_SUMMARY_TYPES = ("user_message", "system_message", "assistant_message")


class Transcript:
    """``messages``, ``provider_view`` and ``compact``."""

    def __init__(self, store: Store, log: Log) -> None:
        self._store = store
        self._log = log

    def messages(self, session_id: str, *, provider: bool = False) -> list[Message]:
        """The transcript a model should see: surface events folded, compactions applied.

        With ``provider=True``, the messages of ``provider_view``; a call still without a result
        raises ``UnansweredCalls`` rather than being left out or invented."""
        if not provider:
            return fold(self._log.events(session_id))
        view = self.provider_view(session_id)
        if view.missing:
            raise UnansweredCalls(session_id, tuple(m.tool_call_id for m in view.missing))
        return view.messages

    def provider_view(self, session_id: str) -> ProviderView:
        """The transcript shaped for a provider request: each assistant's results right after it
        in call order, aborted and errored answers left out, and ``missing`` naming every call
        still without a result (run recovery first; nothing is invented)."""
        return provider_view(self._log.events(session_id))

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
