"""Google ADK on the journal: a ``BaseSessionService``, a ``BasePlugin`` and a crash ``repair``.

Plug it in with two lines::

    service = JournalSessionService("agent.db")          # instead of DatabaseSessionService(...)
    app = App(name="shop", root_agent=agent, plugins=[JournalPlugin(service)])
    runner = Runner(app=app, session_service=service)

``"agent.db"`` may be a PostgreSQL DSN (``"postgresql://..."``), or pass an open
``journal.Journal`` / ``journal.aio.AsyncJournal`` to share one among services.

What is stored. Each ADK session is a journal session (``journal_session_id(app_name, user_id,
session_id)``; the three names are kept in its meta). Every event ``append_event`` receives is an
``x.adk.event`` event holding ``event.model_dump_json()`` verbatim (``get_session`` gives it back
equal, ids and timestamps kept). In the same transaction the adapter appends the typed events it
can derive (``adk_events.derive``): a user's text is a ``user_message``; a model event is an
``assistant_message`` whose ``tool_calls`` are its function calls; each function response is the
call's ``tool_result`` (the first one wins, G5; a different one is kept as ``tool_result_late``).
State follows ADK's scopes: session keys are the session's keyed state, written in the event's
transaction; ``app:`` keys are kept in one journal session per app and ``user:`` keys in one per
(app, user), so an app's users and a user's sessions share them; ``temp:`` keys are never stored
(ADK's base class applies them to the live session object only). ``delete_session`` purges the
session: its whole log is erased (a user deleting a conversation).

One recovery; the session is a projection. The typed log is the truth: ``get_session`` shows
what any recovery wrote -- ``journal recover`` from a shell, ``j.recover()``,
``repair`` -- in ADK's shape and place: a function-response event right after each function call
the journal answered and no stored event answers, carrying the journal's result (the real one,
or "MAY have run ... verify before retrying" / "did not run"). ADK drops a call without a
response from the next model request (the model would ask for it again) and a resumable app's
``run_async(invocation_id=...)`` re-runs it; answered, the call is neither dropped nor re-run.
``get_session`` also runs that recovery itself when the session's turn was left open by a process
that no longer runs (recovery leaves a live process's turn alone), so the next run alone repairs.

What the plugin adds (``JournalPlugin``). A turn per invocation (``before_run_callback`` opens it,
``after_run_callback`` closes it), a step per model answer (riding on the answer's own
transaction), and for each tool the **dispatch**: ``before_tool_callback`` commits and syncs a
``tool_call`` event *before* the tool runs (G6). If that write fails, the callback raises and
ADK does not run the tool. A call the journal already dispatched (a resumed invocation re-running
a call) is not run again: the callback answers it with the journal's result. The tool's output is
its ``tool_result`` as soon as it returns (``after_tool_callback``; an error through
``on_tool_error_callback``), before ADK appends its function-response event. A call id is one
call in a session: a model's call whose id the session holds already (some models number their
calls afresh in every response: ``call_0``) is given a new one (``call_`` and a UUID's hex) as
the response comes in (``after_model_callback``), so it runs and is answered as a call of its
own, and the model is handed it back under that id.

Durability. ``durability="full"`` (the default) makes each commit survive a power cut;
``"normal"`` survives a crash or ``kill -9`` and may lose the last commits on a power cut. The
dispatch is synced in both modes.

After a crash. Nothing to do: the next ``runner.run_async`` (with a new message or a resumable
app's ``invocation_id``) reads the session through ``get_session``, which recovers a dead run's
turn first. ``repair(service, app_name=..., user_id=..., session_id=...)`` (or ``await
arepair(...)``) runs the same recovery explicitly and returns a ``Repaired``
(``journal.adapters.repaired``): what recovery appended, the calls still unanswered, or the live
process that holds the turn (then nothing is done unless ``force=True``).

What it cannot do, honestly:

- ``app:`` and ``user:`` deltas live in other journal sessions, so they are written in a second
  transaction after the event's (the journal has no write spanning sessions); a crash between
  the two keeps the event, its verbatim ``state_delta`` and its session keys, and loses those
  scoped keys. ``create_session`` is likewise two transactions (the session, then its state).
- ``get_session`` reads every stored event of the session and filters ``num_recent_events`` and
  ``after_timestamp`` after the projection (a projected answer counts as an event), so a read
  costs the session's length, not the filter's.
- The barrier covers the tools ADK calls through ``before_tool_callback``; without the plugin the
  service alone is durable storage with typed events, and ``scan`` cannot see a running tool. A
  sub-agent run as a tool (``AgentTool``) is one call of the outer session, dispatched before it
  runs; the plugin ADK hands to its inner runner (whose session is kept elsewhere, not in a
  journal) records nothing there, so a kill inside it answers the ``AgentTool`` call "MAY have
  run". Likewise the plugin records only runs whose sessions a ``JournalSessionService`` keeps.
- A function call no journal result answers (a long-running tool, a call awaiting a human) is left
  as ADK stored it and listed in ``Repaired.unanswered``; a long-running tool's empty return is
  no answer (its answer is the one the app appends later).
- A tool behind ADK's confirmation gate (``require_confirmation``) is not dispatched while the gate
  answers it, and ADK's request to the human and the human's reply are no tool call of the typed
  log; the gate's placeholder reply ("requires confirmation") is no answer (such a call is listed
  in ``Repaired.unanswered`` while it waits). A call a human confirms is dispatched by the later
  invocation that runs it, before it runs: a kill inside it is answered "MAY have run", shown
  after the human's confirmation, where the tool's own answer would be. A crash while the
  confirmation is pending answers the waiting call "did not run" (its turn was interrupted); the
  confirmation that follows then gets that answer, not a run, and the model may ask again.
- Output that ADK turns into a function response differently from the tool's return value (an
  after-tool callback replacing it) reaches the journal twice: the plugin's result wins and the
  event's copy is kept as ``tool_result_late``.
- One ``JournalSessionService`` drives one invocation of a session at a time (as ADK's runner
  does): recovery closes a turn this process opened only when no run of this service holds it.
  So give the runner and the plugin the same service object: with two (over one journal), a read
  through the runner's during a run the plugin's records closes that run's turn as a crash.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import uuid
from collections.abc import Sequence
from typing import Any

from journal.adapters import require

require("google.adk", "adk")

from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event as AdkEvent
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from pydantic_core import to_jsonable_python

import journal
from journal.adapters.adk_events import (
    ADK_CREATED,
    ADK_EVENT,
    Typed,
    as_response,
    call_ids,
    derive,
    native,
    project,
    restore,
    unanswered,
)
from journal.adapters.calls import Calls as _Calls
from journal.adapters.calls import Direct as _Direct
from journal.adapters.calls import drive as _drive
from journal.adapters.repaired import Repaired
from journal.aio import AsyncJournal
from journal.errors import (
    AlreadyDispatched,
    CountMismatch,
    InvalidArgument,
    JournalError,
    LeaseLost,
    OpenTurnError,
    ResultExists,
    SessionExists,
    SessionNotFound,
    TurnHeld,
    WrongLoop,
)
from journal.model import Event
from journal.owners import held_elsewhere

__all__ = [
    "ADK_CREATED",
    "ADK_EVENT",
    "JournalPlugin",
    "JournalSessionService",
    "Repaired",
    "arepair",
    "journal_session_id",
    "repair",
]

FRAMEWORK = "adk"
_CAS_TRIES = 100  # compare-and-append retries (each loses only to a real write)
_REV = "adk.rev"  # keyed state: the session's revision {seq of its last ADK event, time, id}
_KEY = "adk.s:"  # keyed state: a session-scoped ADK state key (hashed when too long)
_HASHED_KEY = "adk.s#"
_MAX_KEY = 256
_MAY_HAVE_RUN = (
    "This tool call was dispatched before an interruption and its outcome is not recorded: it MAY have run. "
    "Verify before retrying."
)


def journal_session_id(app_name: str, user_id: str, session_id: str) -> str:
    """The journal's id for an ADK session: ``adk-`` and a digest of (app, user, session), so two
    apps or users never share a log; the three names are kept in the session's meta."""
    return "adk-" + _digest("session", app_name, user_id, session_id)


def _app_holder(app_name: str) -> str:
    return "adk-app-" + _digest("app", app_name)


def _user_holder(app_name: str, user_id: str) -> str:
    return "adk-user-" + _digest("user", app_name, user_id)


def _digest(*parts: str) -> str:
    text = json.dumps(parts, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _state_key(key: str) -> str:
    """The keyed-state key of an ADK state key (the value keeps the original key)."""
    plain = _KEY + key
    if len(plain) <= _MAX_KEY and "\x00" not in key:
        return plain
    return _HASHED_KEY + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _scoped(values: dict[str, Any]) -> dict[str, Any]:
    """Keyed state of ADK state ``values``: each stored as ``[key, value]``."""
    return {_state_key(k): [k, v] for k, v in values.items()}


def _unscoped(stored: dict[str, Any]) -> dict[str, Any]:
    """The ADK state in a journal session's keyed state (written by ``_scoped``)."""
    out: dict[str, Any] = {}
    for key, value in stored.items():
        if (key.startswith(_KEY) or key.startswith(_HASHED_KEY)) and isinstance(value, list) and len(value) == 2:
            out[value[0]] = value[1]
    return out


def _marker(rev: dict[str, Any] | None) -> str:
    """The storage revision a ``Session`` carries (``_storage_update_marker``)."""
    rev = rev or {}
    return f"{rev.get('seq', -1)}@{rev.get('time', 0.0)!r}"


def _check_name(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgument(name, f"must be a non-empty string, not {value!r}"[:200])
    return value


def _session_name(session_id: object) -> str:
    """An ADK session id as the in-memory and SQLite services normalise it (stripped)."""
    if not isinstance(session_id, str):
        raise InvalidArgument("session_id", f"must be a string, not {type(session_id).__name__}")
    stripped = session_id.strip()
    if not stripped:
        raise InvalidArgument("session_id", "must not be empty")
    return stripped


# -- the journal, sync or async -------------------------------------------------------------------


# -- the session service ---------------------------------------------------------------------------


class JournalSessionService(BaseSessionService):
    """An ADK ``BaseSessionService`` kept in a journal (see the module's docstring).

    ``journal_or_path``: a path or a PostgreSQL DSN (opened here with ``durability`` and closed
    by ``close()``), or an open ``journal.Journal`` / ``journal.aio.AsyncJournal`` (the caller
    closes it). Errors are ADK's: ``AlreadyExistsError``, ``SessionNotFoundError``,
    ``StaleSessionError`` (as ``DatabaseSessionService`` raises them); bad input is refused with
    ``InvalidArgument`` before anything is written."""

    def __init__(
        self,
        journal_or_path: str | os.PathLike[str] | journal.Journal | AsyncJournal,
        *,
        durability: str = "full",
    ) -> None:
        if isinstance(journal_or_path, (journal.Journal, AsyncJournal)):
            self._owned: journal.Journal | None = None
            target = journal_or_path
        else:
            target = self._owned = journal.open(journal_or_path, durability=durability)
        self._call = _Calls(target)
        self._live: dict[str, Any] = {}  # journal session id -> the open turn of a run of this service
        self._answered: set[tuple[str, str]] = set()  # calls the plugin answered from the journal
        self._gated: set[tuple[str, str]] = set()  # calls ADK's confirmation gate answers instead of the tool
        self._holders: set[str] = set()  # scope holders known to exist

    @property
    def journal(self) -> journal.Journal | AsyncJournal:
        return self._call.target

    async def close(self) -> None:
        """Close the journal if this service opened it (from a path)."""
        if self._owned is not None:
            self._owned.close()

    def __repr__(self) -> str:
        return f"<JournalSessionService in {self.journal!r}>"

    # -- BaseSessionService ------------------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        _check_name("app_name", app_name)
        _check_name("user_id", user_id)
        name = _session_name(session_id) if session_id is not None and session_id.strip() else platform_uuid.new_uuid()
        deltas = _session_util.extract_json_safe_state_delta(state or {})
        jid = journal_session_id(app_name, user_id, name)
        now = platform_time.get_time()
        meta = {"framework": FRAMEWORK, "kind": "session", "app_name": app_name, "user_id": user_id, "session_id": name}
        try:
            await self._call("create_session", jid, meta=meta)
        except SessionExists:
            raise AlreadyExistsError(f"Session with id {name} already exists.") from None
        rev = {"seq": -1, "time": now, "id": None}
        created = {"app_name": app_name, "user_id": user_id, "session_id": name}
        values = {_REV: rev, **_scoped(deltas["session"])}
        await self._call("append_many", jid, [(ADK_CREATED, created)], state=values)
        await self._write_scopes(app_name, user_id, deltas)
        merged = await self._merged(jid, app_name, user_id, deltas["session"])
        session = Session(id=name, app_name=app_name, user_id=user_id, state=merged, events=[], last_update_time=now)
        session._storage_update_marker = _marker(rev)
        return session

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        name = _session_name(session_id)
        jid = journal_session_id(app_name, user_id, name)
        try:
            stored = await self._call("state", jid)
        except SessionNotFound:
            return None
        if jid not in self._live:
            await self._recover(self._call, jid, force=False)  # a dead run's turn: the one recovery
        events = await self._shown(self._call, jid)
        if config is not None:
            events = _filtered(events, config)
        rev = stored.get(_REV)
        merged = await self._merged(jid, app_name, user_id, _unscoped(stored))
        session = Session(
            id=name,
            app_name=app_name,
            user_id=user_id,
            state=merged,
            events=events,
            last_update_time=(rev or {}).get("time", 0.0),
        )
        session._storage_update_marker = _marker(rev)
        return session

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        meta: dict[str, Any] = {"framework": FRAMEWORK, "kind": "session", "app_name": app_name}
        if user_id is not None:
            meta["user_id"] = user_id
        found = await self._call("sessions", meta=meta)
        app_state = await self._holder_state(_app_holder(app_name))
        users: dict[str, dict[str, Any]] = {}
        out: list[Session] = []
        for row in found:
            info = row.meta or {}
            uid, name = info.get("user_id"), info.get("session_id")
            if info.get("app_name") != app_name or not isinstance(uid, str) or not isinstance(name, str):
                continue
            if uid not in users:
                users[uid] = await self._holder_state(_user_holder(app_name, uid))
            try:
                stored = await self._call("state", row.id)
            except SessionNotFound:  # purged meanwhile
                continue
            state = _merge(app_state, users[uid], _unscoped(stored))
            rev = stored.get(_REV) or {}
            session = Session(
                id=name, app_name=app_name, user_id=uid, state=state, events=[], last_update_time=rev.get("time", 0.0)
            )
            session._storage_update_marker = _marker(rev)
            out.append(session)
        out.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=out)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        jid = journal_session_id(app_name, user_id, _session_name(session_id))
        try:
            await self._call("purge", jid)
        except SessionNotFound:
            pass
        self._live.pop(jid, None)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await self._holder_state(_user_holder(app_name, user_id))

    async def append_event(self, session: Session, event: AdkEvent) -> AdkEvent:
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        jid = journal_session_id(session.app_name, session.user_id, session.id)
        delta = event.actions.state_delta if event.actions and event.actions.state_delta else {}
        deltas = _session_util.extract_json_safe_state_delta(delta)
        payload: list[Typed] = [(ADK_EVENT, native(event), _event_key(event.id)), *derive(event)]
        rev = await self._append(jid, session, event, payload, _scoped(deltas["session"]))
        await self._write_scopes(session.app_name, session.user_id, deltas)
        session.last_update_time = event.timestamp
        session._storage_update_marker = _marker(rev)
        return self._commit_event_to_session(session, event)

    # -- writing -----------------------------------------------------------------------------------

    async def _append(
        self, jid: str, session: Session, event: AdkEvent, payload: list[Typed], values: dict[str, Any]
    ) -> dict[str, Any]:
        """Append the event's batch (with the run's step bookkeeping around it) and the session's
        new revision, in one transaction fenced by the session's count (compare-and-append): the
        stale check and the turn's check hold for the write."""
        for _ in range(_CAS_TRIES):
            try:
                count = await self._call("count", jid)
                stored = (await self._call("state", jid, keys=[_REV])).get(_REV)
            except SessionNotFound:
                raise SessionNotFoundError(f"Session {session.id} not found.") from None
            _check_fresh(session, stored)
            pre, post = await self._bookkeeping(jid, event)
            rev = {"seq": count + len(pre), "time": event.timestamp, "id": event.id}
            try:
                written = await self._call(
                    "append_many", jid, [*pre, *payload, *post], expected_count=count, state={_REV: rev, **values}
                )
            except CountMismatch:
                continue  # someone wrote meanwhile (a dispatch, a result, another writer): look again
            except SessionNotFound:
                raise SessionNotFoundError(f"Session {session.id} not found.") from None
            mine = written[len(pre)]
            if mine.existing and mine.data != payload[0][1]:
                raise AlreadyExistsError(f"Event with id {event.id} already exists in session {session.id}.")
            return rev
        raise CountMismatch(jid, -1, -1)  # pragma: no cover - a writer that never pauses

    async def _bookkeeping(self, jid: str, event: AdkEvent) -> tuple[list[Typed], list[Typed]]:
        """The step events a run's turn writes around ``event``: a model answer opens a step
        (closing one left open), a plain answer or the calls' responses close it."""
        turn = self._live.get(jid)
        if turn is None:
            # No run of this service's: an event of a run about to start (ADK stores its new
            # message before the plugin opens the turn). A turn another live process drives
            # refuses it here, before it is written inside that run's turn (the run then met a
            # stale session and died, its turn closed as a crash's).
            held = await self._call("turn_state", jid)
            if held is not None and held.submission_id is None and held_elsewhere(held.owner):
                raise TurnHeld(jid, held.start_seq, str(held.owner), "another process is running this session")
            return [], []
        row = await self._call("turn_state", jid)
        if row is None or row.start_seq != turn.start_seq or row.attempt != turn.attempt:
            raise LeaseLost(jid, turn.attempt, "the turn of this run was closed (recovered?)")
        number, is_open = row.steps, row.step_open
        pre: list[Typed] = []
        post: list[Typed] = []
        answers = bool(event.get_function_calls()) or any(d["type"] == "assistant_message" for d in _kinds(event))
        if event.author != "user" and answers:
            if is_open:
                pre.append(("step_end", {"turn": turn.turn, "step": number, "outcome": "ok"}, None))
            number += 1
            pre.append(("step_start", {"turn": turn.turn, "step": number}, None))
            is_open = True
            if not event.get_function_calls():
                post.append(("step_end", {"turn": turn.turn, "step": number, "outcome": "ok"}, None))
        elif is_open and event.get_function_responses():
            post.append(("step_end", {"turn": turn.turn, "step": number, "outcome": "ok"}, None))
        return pre, post

    async def _write_scopes(self, app_name: str, user_id: str, deltas: dict[str, dict[str, Any]]) -> None:
        """The ``app:`` and ``user:`` deltas, each in its scope's journal session."""
        for holder, values, meta in (
            (_app_holder(app_name), deltas["app"], {"framework": FRAMEWORK, "kind": "app", "app_name": app_name}),
            (
                _user_holder(app_name, user_id),
                deltas["user"],
                {"framework": FRAMEWORK, "kind": "user", "app_name": app_name, "user_id": user_id},
            ),
        ):
            if not values:
                continue
            if holder not in self._holders:
                try:
                    await self._call("create_session", holder, meta=meta)
                except SessionExists:
                    pass
                self._holders.add(holder)
            await self._call("set_state", holder, _scoped(values))

    # -- reading -----------------------------------------------------------------------------------

    async def _holder_state(self, holder: str) -> dict[str, Any]:
        try:
            return _unscoped(await self._call("state", holder))
        except SessionNotFound:
            return {}

    async def _merged(self, jid: str, app_name: str, user_id: str, own: dict[str, Any]) -> dict[str, Any]:
        app_state = await self._holder_state(_app_holder(app_name))
        user_state = await self._holder_state(_user_holder(app_name, user_id))
        return _merge(app_state, user_state, own)

    async def _shown(self, call: _Calls, jid: str) -> list[AdkEvent]:
        """The session's ADK events, with the journal's answers projected (``adk_events.project``)."""
        marks = await call("events", jid, types=[ADK_EVENT])
        events = [restore(e.data) for e in marks]
        owed = unanswered(events)
        if not owed:
            return events
        first = min(m.seq for m, e in zip(marks, events, strict=True) if owed.intersection(call_ids(e)))
        return project(events, await _results(call, jid, owed, first))

    # -- the run's turn (JournalPlugin) ----------------------------------------------------------

    async def _open_turn(self, session: Session) -> None:
        jid = journal_session_id(session.app_name, session.user_id, session.id)
        if jid in self._live:  # an earlier run of this service ended without closing its turn
            self._live.pop(jid)
            await self._recover(self._call, jid, force=False)
        try:
            turn = await self._call("turn_start", jid)
        except SessionNotFound:
            raise SessionNotFoundError(f"Session {session.id} not found.") from None
        except OpenTurnError:
            # A dead run's turn the runner's get_session could not recover (it raced another
            # reader): recover it now and show its answers to this run's model.
            done = await self._recover(self._call, jid, force=False)
            if done.live_owner is not None:
                held = await self._call("turn_state", jid)
                start = held.start_seq if held is not None else -1
                raise TurnHeld(jid, start, done.live_owner, "another process is running this session") from None
            turn = await self._call("turn_start", jid)
            shown = await self._shown(self._call, jid)
            session.events[:] = _match(session.events, shown)
        self._live[jid] = turn

    async def _close_turn(self, session: Session) -> None:
        jid = journal_session_id(session.app_name, session.user_id, session.id)
        turn = self._live.pop(jid, None)
        if turn is None:
            return
        for _ in range(_CAS_TRIES):
            count = await self._call("count", jid)
            row = await self._call("turn_state", jid)
            if row is None or row.start_seq != turn.start_seq or row.attempt != turn.attempt:
                return  # closed by a recovery meanwhile: nothing of ours to close
            batch: list[Typed] = []
            if row.step_open:
                batch.append(("step_end", {"turn": turn.turn, "step": row.steps, "outcome": "ok"}, None))
            batch.append(("turn_end", {"turn": turn.turn, "steps": row.steps, "reason": "complete"}, None))
            try:
                await self._call("append_many", jid, batch, expected_count=count)
                return
            except CountMismatch:
                continue

    async def _abandon_turn(self, session: Session) -> None:
        """The run raised: close its turn honestly (the journal's recovery answers its calls)."""
        jid = journal_session_id(session.app_name, session.user_id, session.id)
        if self._live.pop(jid, None) is not None:
            try:
                await self._recover(self._call, jid, force=False)
            except JournalError:
                pass  # the run's own error says more; the next get_session recovers

    async def _dispatch(self, tool: Any, args: dict[str, Any], context: Any) -> dict[str, Any] | None:
        """Commit the call's dispatch before the tool runs; ``None`` lets it run. A call the
        journal dispatched or answered before is not run again: its answer is returned. A call
        ADK's confirmation gate answers instead of running the tool (awaiting a human, or
        rejected) is not dispatched; one a human confirmed is dispatched by the later
        invocation that runs it."""
        session, call_id = context.session, context.function_call_id
        jid = journal_session_id(session.app_name, session.user_id, session.id)
        turn = self._live.get(jid)
        if turn is None or not isinstance(call_id, str):
            return None
        confirmation = getattr(context, "tool_confirmation", None)
        check = getattr(tool, "check_require_confirmation", None)
        if check is not None and await check(args, context) is True:
            if confirmation is None or not confirmation.confirmed:
                self._gated.add((jid, call_id))  # the gate answers: the tool does not run now
                return None
        try:
            await self._call("dispatch", jid, call_id, turn=turn)
        except (AlreadyDispatched, ResultExists):
            self._answered.add((jid, call_id))
            found = await _results(self._call, jid, {call_id}, 0)
            if call_id in found:
                return as_response(found[call_id].data.get("content"))
            return {"result": _MAY_HAVE_RUN}
        return None

    async def _put_result(self, session: Session, call_id: str | None, name: str, result: Any, *, error: bool) -> None:
        jid = journal_session_id(session.app_name, session.user_id, session.id)
        if jid not in self._live or not isinstance(call_id, str):
            return
        if (jid, call_id) in self._answered:
            self._answered.discard((jid, call_id))
            return
        if (jid, call_id) in self._gated:  # the gate's reply: a rejection reaches the log with ADK's event
            self._gated.discard((jid, call_id))
            return
        content = to_jsonable_python(as_response(result), fallback=str)
        await self._call("put_result", jid, call_id, content, name=name, is_error=error)

    async def _recover(self, call: _Calls, jid: str, *, force: bool) -> Repaired:
        """The journal's recovery for the session, when its turn is open."""
        try:
            open_turn = await call("turn_state", jid)
        except SessionNotFound:
            return Repaired(jid)
        if open_turn is None:
            return Repaired(jid)
        recovered: tuple[Event, ...] = ()
        for result in await call("recover", jid, force=force):
            if result.live_owner is not None:
                return Repaired(jid, live_owner=result.live_owner)
            recovered += tuple(result.appended)
        return Repaired(jid, recovered)


def fresh_call_ids(response: Any, events: Sequence[AdkEvent]) -> None:
    """Rename, in place, each function call of ``response`` whose id ``events`` (the session's)
    or an earlier call of the response holds already (``JournalPlugin.after_model_callback``)."""
    content = getattr(response, "content", None)
    calls = [p.function_call for p in (content.parts or []) if p.function_call is not None] if content else []
    if not any(isinstance(c.id, str) for c in calls):
        return
    seen = {c.id for event in events for c in event.get_function_calls()}
    for call in calls:
        if isinstance(call.id, str):
            if call.id in seen:
                # Not ADK's own ``adk-`` kind: ADK strips those from what it sends the model, and a
                # model that names its calls (an OpenAI-compatible one) is handed them back by id.
                call.id = f"call_{uuid.uuid4().hex}"
            seen.add(call.id)


def _event_key(event_id: str) -> str:
    key = "adk:" + event_id
    if len(key) <= _MAX_KEY and "\x00" not in event_id:
        return key
    return "adk#" + hashlib.sha256(event_id.encode("utf-8", "surrogatepass")).hexdigest()


def _kinds(event: AdkEvent) -> list[dict[str, Any]]:
    return [{"type": kind} for kind, _data, _key in derive(event)]


def _check_fresh(session: Session, stored: dict[str, Any] | None) -> None:
    """``StaleSessionError`` when the session object is older than what is stored (as
    ``DatabaseSessionService`` decides: by the revision marker, else by time and last event)."""
    marker = _marker(stored)
    if session._storage_update_marker is not None:
        if session._storage_update_marker != marker:
            raise StaleSessionError(
                "The session has been modified in storage since it was loaded. "
                "Please reload the session before appending more events."
            )
        return
    stored = stored or {}
    if stored.get("time", 0.0) > session.last_update_time:
        own = [e.id for e in session.events if not e.id.startswith("journal-")]
        if (own[-1] if own else None) != stored.get("id"):
            raise StaleSessionError(
                "The session has been modified in storage since it was loaded. "
                "Please reload the session before appending more events."
            )


def _merge(app_state: dict[str, Any], user_state: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    merged = dict(own)
    for key, value in app_state.items():
        merged[State.APP_PREFIX + key] = value
    for key, value in user_state.items():
        merged[State.USER_PREFIX + key] = value
    return merged


def _filtered(events: list[AdkEvent], config: GetSessionConfig) -> list[AdkEvent]:
    """``num_recent_events`` and ``after_timestamp`` as the in-memory service applies them."""
    if config.num_recent_events is not None:
        events = [] if config.num_recent_events == 0 else events[-config.num_recent_events :]
    if config.after_timestamp is not None:
        events = [e for e in events if e.timestamp >= config.after_timestamp]
    return events


def _match(held: list[AdkEvent], shown: list[AdkEvent]) -> list[AdkEvent]:
    """The live session's events with the projected answers ``shown`` holds inserted in place."""
    projected = {i: e for i, e in enumerate(shown) if e.id.startswith("journal-")}
    if not projected:
        return list(held)
    ids = {e.id for e in held}
    out: list[AdkEvent] = []
    for index, event in enumerate(shown):
        if index in projected and event.id not in ids:
            out.append(event)
        elif event.id in ids:
            out.extend(h for h in held if h.id == event.id)
    out.extend(h for h in held if h.id not in {e.id for e in shown})
    return out


async def _results(call: _Calls, jid: str, owed: set[str], since: int) -> dict[str, Event]:
    """The journal's ``tool_result`` for each call of ``owed`` that has one."""
    found: dict[str, Event] = {}
    for event in await call("events", jid, since=since, types=["tool_result"]):
        call_id = event.data.get("tool_call_id")
        if call_id in owed and call_id not in found:
            found[call_id] = event
    return found


# -- the plugin ------------------------------------------------------------------------------------


class JournalPlugin(BasePlugin):
    """The ADK plugin that records each invocation's turn, steps, dispatches (committed and
    synced before the tool runs: G6) and results in ``service``'s journal."""

    def __init__(self, service: JournalSessionService, *, name: str = "journal") -> None:
        super().__init__(name)
        self.service = service

    def _ours(self, invocation_context: Any) -> bool:
        """Whether the invocation keeps its session in a journal (this plugin's service, or
        another ``JournalSessionService`` over the same journal). ADK hands the plugin to a
        sub-agent's own runner too (``AgentTool``, ``include_plugins=True``), whose session lives
        elsewhere (in memory): the journal records the ``AgentTool`` call itself, dispatched in
        the outer session, and leaves the inner run alone."""
        return isinstance(getattr(invocation_context, "session_service", None), JournalSessionService)

    def _tool_ours(self, tool_context: Any) -> bool:
        return self._ours(getattr(tool_context, "_invocation_context", None))

    async def before_run_callback(self, *, invocation_context: Any) -> None:
        if self._ours(invocation_context):
            await self.service._open_turn(invocation_context.session)

    async def after_model_callback(self, *, callback_context: Any, llm_response: Any) -> None:
        """Give a function call whose id the session holds already a new id (``call_`` and a
        UUID's hex; not ADK's ``adk-`` kind, which ADK strips from what the model is sent), before
        the model's event is stored or its tools run: the journal keeps one call per id in a session, and
        some models number their calls afresh in every response (``call_0``): the call was
        answered with the earlier call's result and never ran. Changed in place (a value
        returned here would pass over the agent's own callbacks); the model is shown its calls
        under the ids the session holds, so a renamed call and its response stay one pair."""
        invocation: Any = getattr(callback_context, "_invocation_context", None)
        if self._ours(invocation):
            fresh_call_ids(llm_response, invocation.session.events)

    async def before_tool_callback(self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any) -> Any:
        if not self._tool_ours(tool_context):
            return None
        return await self.service._dispatch(tool, tool_args, tool_context)

    async def after_tool_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any, result: Any
    ) -> None:
        if not self._tool_ours(tool_context):
            return
        if (getattr(tool, "is_long_running", False) or getattr(tool, "_defers_response", False)) and not result:
            # No answer yet (ADK builds no function response either): it comes later, from the
            # app, and is the call's result then. Until it does, the call is owed.
            return
        await self.service._put_result(
            tool_context.session, tool_context.function_call_id, tool.name, result, error=False
        )

    async def on_tool_error_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any, error: Exception
    ) -> None:
        if isinstance(error, asyncio.CancelledError) or not self._tool_ours(tool_context):
            return None  # a cancelled call may have run part way: recovery says so
        text = {"error": f"{type(error).__name__}: {error}"}
        await self.service._put_result(tool_context.session, tool_context.function_call_id, tool.name, text, error=True)
        return None

    async def after_run_callback(self, *, invocation_context: Any) -> None:
        if self._ours(invocation_context):
            await self.service._close_turn(invocation_context.session)

    async def on_run_error_callback(self, *, invocation_context: Any, error: Exception) -> None:
        if self._ours(invocation_context):
            await self.service._abandon_turn(invocation_context.session)


# -- repair ----------------------------------------------------------------------------------------


def repair(
    service: JournalSessionService, *, app_name: str, user_id: str, session_id: str, force: bool = False
) -> Repaired:
    """After a crash: run the journal's one recovery for the ADK session (a synthetic result for
    each call its interrupted turn owes, then ``turn_end(interrupted)``), so that
    ``get_session`` shows each of those calls answered right after it. Idempotent, and the same
    whichever recovery ran first (then it appends nothing). A turn another live process drives
    is left alone (``Repaired.live_owner``) unless ``force=True``. ``Repaired.unanswered``: the
    calls the session shows without an answer (a long-running tool, a call awaiting a human).
    Synchronous: a service on an ``AsyncJournal`` is refused with ``WrongLoop``."""
    target = service.journal
    if isinstance(target, AsyncJournal):
        raise WrongLoop("repair", "synchronous code: repair a service on an AsyncJournal with await arepair(...)")
    jid = journal_session_id(app_name, user_id, _session_name(session_id))
    return _drive(_repair(_Direct(target), service, jid, force=force))


async def arepair(
    service: JournalSessionService, *, app_name: str, user_id: str, session_id: str, force: bool = False
) -> Repaired:
    """``repair``'s awaitable twin (a sync ``Journal``'s calls run in a worker thread)."""
    jid = journal_session_id(app_name, user_id, _session_name(session_id))
    return await _repair(service._call, service, jid, force=force)


async def _repair(call: _Calls, service: JournalSessionService, jid: str, *, force: bool) -> Repaired:
    if jid in service._live and not force:
        return Repaired(jid, live_owner="this process (a run of this service holds the turn)")
    done = await service._recover(call, jid, force=force)
    if done.live_owner is not None:
        return done
    if done.recovered:
        service._live.pop(jid, None)
    try:
        shown = await service._shown(call, jid)
    except SessionNotFound:
        return done
    return Repaired(jid, done.recovered, (), tuple(sorted(unanswered(shown))))
