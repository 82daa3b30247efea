"""``Repaired``: what an adapter's ``repair`` did, one shape for every adapter (DESIGN §14).

Every adapter module offers ``repair(<what the user holds>, *, force=False) -> Repaired`` and its
awaitable twin ``arepair(...)``, with the same meaning: run the journal's one recovery for the
framework's session (idempotent: appends nothing when another recovery got there first), then make
sure the framework's next step builds on an answered transcript. Because every read the adapter
serves already *projects* what recovery wrote into the framework's shape, ``repair`` is needed
only where the framework builds its next step on something other than those reads (LangGraph's
stored checkpoint); it is always safe to call, and the adapters' run helpers always call it.
"""

from __future__ import annotations

from typing import Any

import attrs

from journal.model import Event


@attrs.frozen
class Repaired:
    """What one ``repair`` call did to one session.

    ``session_id``: the journal session repaired. ``recovered``: the events the journal's recovery
    appended during this call (synthetic results, ``turn_end {reason: interrupted}``); empty when
    the log was already honest (another recovery ran first, or there was no crash). ``added``: the
    framework-shaped objects this call stored so the framework's own state carries the answers
    (LangGraph ``ToolMessage``s; empty where reads project them). ``unanswered``: ids of calls the
    framework shows without an answer that the journal holds no result for (a call awaiting a
    human approval). ``live_owner``: set when another live process drives the session's turn;
    then nothing was done (pass ``force=True`` to take it)."""

    session_id: str
    recovered: tuple[Event, ...] = ()
    added: tuple[Any, ...] = ()
    unanswered: tuple[str, ...] = ()
    live_owner: str | None = None
