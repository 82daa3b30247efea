"""pydantic-ai on the journal: a durability capability, a ``ConversationStore`` and a crash ``repair``.

Plug it in with one line::

    jagent = JournalAgent(agent, "agent.db")               # any pydantic_ai.Agent
    result = await jagent.run("pay the invoice", session_id="user-42")
    result = jagent.run_sync("and the next one", session_id="user-42")

``"agent.db"`` may be a PostgreSQL DSN (``"postgresql://..."``), or pass an open ``journal.Journal``
or ``journal.aio.AsyncJournal`` to share one among agents. The results are pydantic-ai's own
``AgentRunResult`` objects; ``run``/``run_sync`` take the agent's own keyword arguments.

Built on pydantic-ai's own extension points. ``JournalDurability`` subclasses
``BaseDurabilityCapability``, as pydantic-ai's DBOS, Temporal and Prefect integrations do (one
durability engine per agent: pydantic-ai refuses it beside ``DBOSDurability``). The journal is not
a replaying workflow engine -- nothing is ever executed twice -- so the capability never enters a
durable container: model calls and tools run in the run's own task, and the capability records
them through its hooks (``wrap_run``, ``wrap_model_request``, ``wrap_tool_execute``).
``JournalConversationStore`` is a ``ConversationStore`` whose history is read from the journal;
``JournalAgent`` repairs, loads the conversation from it and runs the agent with the capability
added to the run (or the one the agent was built with).

What is stored. Each ``ModelMessage`` is an ``x.pydantic_ai.message`` event holding the message as
pydantic-ai serializes it (``ModelMessagesTypeAdapter``, fields at their default left out only when
the message still loads back equal: it round-trips deep-equal). In the same transaction, the typed
events it holds: a request's system prompts, user prompts and tool returns become
``system_message``, ``user_message`` and ``tool_result``; a response becomes one
``assistant_message`` with its ``tool_calls`` (``pydantic_ai_messages``). Every event is keyed by
the message's index among the session's stored messages, so storing a message twice (the
capability during the run, a ``ConversationStore.save`` after it) writes it once.

What the capability adds, per run: a turn (``turn_start`` through the turn API, so scan and
recover see it open and whose it is; ``turn_end`` when the run returns) and a step per model
request. A request that carries a new prompt is committed before the model is called; **a
response that asks for tools is committed before any of them runs**; each tool call is
**dispatched** -- a ``tool_call`` event committed and synced -- before the tool body runs (G6),
and its return is recorded as its ``tool_result`` when the tool returns. A request of tool returns
alone (durable already as those results) and a response without tool calls are written with the
run's next commit, at the latest its ``turn_end``. A one-tool run (prompt, a call, the answer) is
six commits: ``turn_start``, the prompt, the response, the dispatch, the result, then the tool
returns with the answer and ``turn_end``. The dispatch hook is ``wrap_tool_execute``, which
pydantic-ai runs for every tool it executes -- function tools, MCP server tools, dynamic toolsets
(not output tools, which are not executed) -- but only function tools are tested here.

One recovery; the history is a projection. The typed log is the truth: the history handed to
pydantic-ai is the stored messages and, right after a response whose calls no stored message
answers, a ``ModelRequest`` of ``ToolReturnPart``s carrying the journal's result for each -- the
tool's own, or what recovery wrote ("MAY have run ... verify before retrying" for a call
dispatched without a result, "did not run" for one never dispatched) -- whichever recovery ran
(``journal recover`` from a shell, ``j.recover()``, ``repair``), however often;
then what pydantic-ai itself makes of a history before a run (``repair_messages`` leaving the last
response alone: adjacent requests merged), so the run's own clean-up changes nothing. The next run
stores the projected request before its own messages.

Durability. ``durability="full"`` (the default) makes each commit survive a power cut;
``"normal"`` a process crash (a power cut may take the latest commits). The dispatch is synced in
both modes, so a power cut never takes the record of a call whose tool then ran.

After a crash. ``JournalAgent.run`` calls ``arepair`` first: the interrupted run's calls are
answered honestly (none runs again) and its turn closed as interrupted. The run then goes on from
that history: the model is never asked again for a response the journal recorded (it is in the
history) and no pending call is handed back to run again. With a new prompt the model sees the
interrupted calls answered, then the prompt, in one request: the interrupted run is **not**
continued to its own answer first; ``run(None, session_id=...)`` continues it (the model answers
the results). A plain ``agent.run`` with the capability on a session a crash left open is refused
with ``OpenTurnError`` naming ``repair`` before the model is asked: pydantic-ai would answer an
orphaned call itself ("interrupted before a result was produced"), and a history ending in a
pending call makes ``run(None)`` run it again.

What it cannot do, honestly:

- The history comes from the journal: ``run`` refuses ``message_history``/``conversation``, and the
  capability refuses a run given any other history (``InvalidArgument``) before its turn opens.
- A crash after a response without tool calls and before the run's end loses that response (it
  caused nothing): the next run asks the model again. A crash before a request of tool returns was
  written loses nothing (the projection rebuilds it from the results).
- A call left without any result in a closed turn (awaiting an approval) is listed in
  ``Repaired.unanswered``; if it is not the last response's, pydantic-ai's own history clean-up
  answers it ("interrupted before a result was produced") -- the journal does not.
- An outer capability's ``RetryModelRequest`` that drops a response after this capability stored
  it leaves the stored response in the journal's history.
- ``JournalConversationStore`` never branches or forks (the journal's conversations only grow;
  fork the journal session with ``Journal.fork``): ``branch``/``fork`` raise. Its entry ids are the
  messages' places in the history; a record's ``usage`` and deferred requests are not kept (a new
  ``RunUsage`` on each load); ``scope`` is refused.
- Streaming (``run_stream``, ``iter``) goes through the same hooks but only ``run``/``run_sync``
  are tested; a run's events are not stored.
- Tool call ids are unique within a session: a model that gives a call an id the session
  already holds (some number their calls afresh in every response) has the call renamed with a
  new id of pydantic-ai's kind as the response comes in, before anything stores or runs it (the
  model is shown it under that id). A run fed a history holding one id twice by other means is
  refused at dispatch (``AlreadyDispatched``) rather than answered with the other call's result.
  The ids looked at are the run's messages (``ctx.messages``): a history processor that trims
  older messages away hides their ids from the rename, and such a reuse is refused as above.
- A tool returning ``ToolReturn`` is recorded as its ``return_value`` (what the model is shown as
  the call's answer); its ``content``, which pydantic-ai hands the model as a user prompt of its
  own, is stored with the next model request: a crash before that request loses it (the restart
  shows the call answered, without that prompt).
- A tool whose body raises ``ApprovalRequired`` was dispatched before it asked (the dispatch is
  committed before any body runs): the run given the approval refuses to run it again
  (``ApprovedAfterDispatch``, nothing run), since what the body did before it asked is unknown.
  Declare such a tool ``requires_approval=True``: pydantic-ai then asks before the call is
  dispatched, and the approved run dispatches and runs it once.
- ``run_sync`` (and ``repair``) on an ``AsyncJournal`` is refused with ``WrongLoop``.
- Two runs of one session must not overlap (in one process, recovery cannot tell a live run of
  its own from a dead one). A process keeps what it has read of each session (events never
  change); a session purged and re-created by another process is not noticed by that cache.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import hashlib
import os
import re
import weakref
from collections.abc import Sequence
from typing import Any

import attrs

from journal.adapters import require

require("pydantic_ai", "pydantic-ai")

from pydantic_ai import Agent
from pydantic_ai._utils import generate_tool_call_id
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.durable_exec import (
    BaseDurabilityCapability,
    CallableOperationBackend,
    DurabilityEngineSpec,
    JournalOperationNamer,
    RoleBasedOperationConfig,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, ToolReturn, ToolReturnPart, repair_messages
from pydantic_ai.run import AgentRunResult

import journal
from journal.adapters.calls import Calls as _Calls
from journal.adapters.calls import Direct as _Direct
from journal.adapters.calls import drive as _drive
from journal.adapters.pydantic_ai_messages import MESSAGE, Fold, History, Typed, derive, result_data
from journal.adapters.repaired import Repaired
from journal.aio import AsyncJournal
from journal.errors import (
    AlreadyDispatched,
    ApprovedAfterDispatch,
    CountMismatch,
    InvalidArgument,
    JournalError,
    LeaseLost,
    OpenTurnError,
    SessionExists,
    SessionNotFound,
    TurnHeld,
    WrongLoop,
)
from journal.model import Event

__all__ = [
    "MESSAGE",
    "JournalAgent",
    "JournalConversationStore",
    "JournalDurability",
    "Repaired",
    "arepair",
    "journal_session_id",
    "repair",
]

FRAMEWORK = "pydantic-ai"
_HASHED = f"{FRAMEWORK}-"
_VALID_ID = re.compile(r"[\x21-\x7e]{1,256}")
_CAS_TRIES = 100
_REPAIR_FIRST = (
    "a run of this session did not finish (a crash?): repair(jagent, session_id) or await arepair(...) answers "
    "its calls and closes it honestly (JournalAgent.run does it before each run); unless another process runs it"
)


def journal_session_id(session_id: str) -> str:
    """The journal's id for a pydantic-ai conversation id: the same id when the journal accepts it
    (1-256 printable ASCII characters without spaces) and it does not start with the reserved
    ``pydantic-ai-``, else a stable ``pydantic-ai-<sha256>`` name. The original is in the meta."""
    if not isinstance(session_id, str):
        raise InvalidArgument("session_id", f"must be a string, not {type(session_id).__name__}")
    if _VALID_ID.fullmatch(session_id) and not session_id.startswith(_HASHED):
        return session_id
    digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{_HASHED}{digest[:40]}"


# -- the journal, sync or async -------------------------------------------------------------------


def _target(journal_or_path: Any, durability: str) -> tuple[journal.Journal | AsyncJournal, journal.Journal | None]:
    """The journal to use and, when it was opened here from a path or DSN, the one to close."""
    if isinstance(journal_or_path, (journal.Journal, AsyncJournal)):
        return journal_or_path, None
    if not isinstance(journal_or_path, (str, os.PathLike)):
        raise InvalidArgument(
            "journal_or_path",
            f"must be a path, a PostgreSQL DSN, a journal.Journal or a journal.aio.AsyncJournal, "
            f"not {type(journal_or_path).__name__}",
        )
    opened = journal.open(journal_or_path, durability=durability)
    return opened, opened


# -- reading the session ---------------------------------------------------------------------------


# What each journal's sessions hold, as read so far in this process (events never change, so a
# read parses only the events after the last one it saw).
_FOLDS: weakref.WeakKeyDictionary[Any, dict[str, Fold]] = weakref.WeakKeyDictionary()


async def _history(call: _Calls, sid: str) -> History:
    """The session's history (``pydantic_ai_messages.project``); empty for an unknown session."""
    folds = _FOLDS.setdefault(call.target, {})
    fold = folds.get(sid) or Fold()
    try:
        events = await call("events", sid, since=fold.next_seq, types=[MESSAGE, "tool_result"])
    except SessionNotFound:
        folds.pop(sid, None)
        return History(())
    folds[sid] = fold.feed(events)
    return fold.history()


def _forget(call: _Calls, sid: str) -> None:
    """Drop what was read of a session (it was purged)."""
    _FOLDS.get(call.target, {}).pop(sid, None)


async def _ensure(call: _Calls, sid: str, conversation_id: str) -> None:
    """Create the journal session on first use; refuse one that holds another conversation."""
    meta = {"framework": FRAMEWORK, "session_id": conversation_id}
    try:
        await call("create_session", sid, meta=meta)
    except SessionExists:
        found = (await call("session", sid)).meta or {}
        other = found.get("session_id")
        if found.get("framework") == FRAMEWORK and other != conversation_id:
            raise InvalidArgument(
                "session_id",
                f"{conversation_id[:80]!r} maps to journal session {sid!r}, which holds the pydantic-ai "
                f"conversation {str(other)[:80]!r}",
            ) from None


# -- the capability ----------------------------------------------------------------------------------


class _InlineBackend(CallableOperationBackend[None]):
    """The durable-operation backend: the journal does not replay, so an operation runs in line.
    (The capability never enters a durable container, so pydantic-ai does not route through it.)"""

    async def execute(self, *, operation_id: Any, name: str, body: Any, cache_key: Any, config: Any) -> object:
        return await body()  # pragma: no cover - not reached outside a durable container


@attrs.define
class _Run:
    """One run's place in its session: its turn and steps, and how much of its history is stored."""

    sid: str
    turn: Any  # a Turn or an AsyncTurn
    count: int  # the session's event count after the run's last write
    pending: tuple[ModelMessage, ...]  # projected answers the run started from, not stored yet
    index: int  # the index the next stored message gets
    upto: int  # messages of the run's history before this one are stored (or were handed to it)
    steps: int = 0
    step_open: bool = False
    batch: list[Typed] = attrs.Factory(list)  # written with the run's next commit


class JournalDurability(BaseDurabilityCapability[Any]):
    """A pydantic-ai durability capability that records each run in the journal (see the module's
    docstring): add it to an agent (``Agent(..., capabilities=[JournalDurability(j)])``) or let
    ``JournalAgent`` add it to each run. The run's ``conversation_id`` names the journal session
    (``journal_session_id``); its history must come from the journal (``JournalConversationStore``).
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="journal",
        durable_unit_noun="step",
        durable_container_noun="turn",
        wrapped_toolset_kinds=frozenset(),  # tools are recorded by wrap_tool_execute, every kind alike
    )

    def __init__(
        self,
        journal_or_path: str | os.PathLike[str] | journal.Journal | AsyncJournal,
        *,
        durability: str = "full",
        name: str = "journal",
    ) -> None:
        super().__init__(name=name)
        target, self._owned = _target(journal_or_path, durability)
        self._call = _Calls(target)
        self._backend = _InlineBackend(
            namer=JournalOperationNamer(name),
            config=RoleBasedOperationConfig(model=None, event=None, capability=None, tool=None),
        )
        self._run: _Run | None = None

    @property
    def journal(self) -> journal.Journal | AsyncJournal:
        return self._call.target

    @property
    def in_durable_context(self) -> bool:
        return False  # nothing is replayed: model calls and tools run in the run's own task

    def get_durable_operation_backend(self) -> _InlineBackend:
        return self._backend

    async def for_run(self, ctx: Any) -> JournalDurability:
        run = copy.copy(self)  # per-run state on the run's own copy (pydantic-ai's advice)
        run._run = None
        return run

    def close(self) -> None:
        """Close the journal if this capability opened it (from a path)."""
        if self._owned is not None:
            self._owned.close()

    # -- the hooks ------------------------------------------------------------------------------

    async def wrap_run(self, ctx: Any, *, handler: Any) -> AgentRunResult[Any]:
        conversation_id = ctx.conversation_id
        sid = journal_session_id(conversation_id)
        try:
            held = await self._call("turn_state", sid)
        except SessionNotFound:
            held = None
        if held is not None:  # a crash left a turn open: its calls must be answered first
            raise OpenTurnError(held.start_seq, _REPAIR_FIRST)
        history = await _history(self._call, sid)
        if list(ctx.messages) != list(history.messages):
            raise InvalidArgument(
                "message_history",
                f"the run was not given the journal's history of conversation {conversation_id[:80]!r} "
                f"({len(history.messages)} messages): load it from the journal "
                "(JournalAgent, JournalConversationStore)",
            )
        await _ensure(self._call, sid, conversation_id)
        try:
            turn = await self._call("turn_start", sid)
        except OpenTurnError as exc:
            raise OpenTurnError(exc.seq, _REPAIR_FIRST) from exc
        self._run = _Run(sid, turn, turn.start_seq + 1, history.projected, history.stored, len(history.messages))
        result: AgentRunResult[Any] = await handler()
        run = self._run
        batch, _ = self._messages(result.all_messages())
        run.batch.extend(batch)
        if run.step_open:
            run.batch.append(("step_end", {"turn": turn.turn, "step": run.steps, "outcome": "ok"}, None))
        run.batch.append(("turn_end", {"turn": turn.turn, "steps": run.steps, "reason": "complete"}, None))
        await self._flush()
        getattr(turn, "handle", turn).mark_closed()
        self._run = None
        return result

    async def wrap_model_request(self, ctx: Any, *, request_context: Any, handler: Any) -> Any:
        run = self._run
        if run is None:  # pragma: no cover - a model request outside a run
            return await handler(request_context)
        number = run.turn.turn
        if run.step_open:  # the previous step's tools have returned: their answers are in this request
            run.batch.append(("step_end", {"turn": number, "step": run.steps, "outcome": "ok"}, None))
        run.batch.append(("step_start", {"turn": number, "step": run.steps + 1}, None))
        batch, urgent = self._messages(ctx.messages)
        run.batch.extend(batch)
        run.steps, run.step_open = run.steps + 1, True
        if urgent:  # a new prompt: durable before the model is asked
            await self._flush()
        response = _fresh_call_ids(await handler(request_context), ctx.messages)
        # Stamped with the marks pydantic-ai puts on it when it enters the history (next, as the
        # history's next message: ``upto`` counts it stored). A response that asks for tools is
        # committed before any of them runs (each dispatch is its own synced commit after it);
        # one that does not is committed with the run's end (or the next write).
        run.batch.extend(derive(run.index, _stamped(ctx, request_context, response)))
        run.index, run.upto = run.index + 1, len(ctx.messages) + 1
        if response.tool_calls:
            await self._flush()
        return response

    async def wrap_tool_execute(self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any) -> Any:
        run = self._run
        if run is None:  # pragma: no cover - a tool outside a run
            return await handler(args)
        await self._flush()  # (nothing is pending here: the response that asked was committed)
        try:
            dispatched = await self._call("dispatch", run.sid, call.tool_call_id, turn=run.turn)
        except AlreadyDispatched as exc:
            if getattr(ctx, "tool_call_approved", False):
                # The body raised ApprovalRequired after an earlier run dispatched it: the journal
                # cannot tell what that body did before it asked, so it does not run it again.
                raise ApprovedAfterDispatch(exc.session_id, exc.call_id, exc.seq, call.tool_name) from exc
            raise
        self._note(dispatched.event)
        result = await handler(args)
        # The return the model is shown, as pydantic-ai builds it: a ``ToolReturn``'s
        # ``return_value`` (its ``content`` goes to the model as a user prompt of its own, its
        # ``metadata`` to the app), so the stored message later derives the same result (G5).
        value = result.return_value if isinstance(result, ToolReturn) else result
        part = ToolReturnPart(tool_name=call.tool_name, content=value, tool_call_id=call.tool_call_id)
        data = result_data(part)
        outcome = await self._call(
            "put_result", run.sid, call.tool_call_id, data["content"], name=data.get("name"), is_error=False
        )
        self._note(outcome.event, outcome.late)
        return result

    # -- writing inside the turn ------------------------------------------------------------------

    def _messages(self, messages: Sequence[ModelMessage]) -> tuple[list[Typed], bool]:
        """The batch storing the run's messages not stored yet: first the projected answers the
        run started from, verbatim (their typed events are what they were projected from), then
        the run's new messages with their typed events; and whether any of them holds more than
        tool returns (those are durable already, as the tools' ``tool_result`` events)."""
        run = self._run
        assert run is not None
        batch: list[Typed] = []
        for message in run.pending:
            batch.extend(derive(run.index, message, typed=False))
            run.index += 1
        run.pending = ()
        urgent = False
        for message in messages[run.upto :]:
            batch.extend(derive(run.index, message))
            run.index += 1
            urgent = urgent or not all(isinstance(p, ToolReturnPart) for p in message.parts)
        run.upto = max(run.upto, len(messages))
        return batch, urgent

    async def _flush(self) -> None:
        """Write what the run holds back, in one transaction (see ``_fenced``)."""
        run = self._run
        assert run is not None
        if run.batch:
            batch, run.batch = run.batch, []
            await self._fenced(batch)

    def _note(self, *events: Event | None) -> None:
        run = self._run
        if run is None:
            return
        for event in events:
            if event is not None and not event.existing:
                run.count = max(run.count, event.seq + 1)

    async def _fenced(self, batch: list[Typed]) -> list[Event]:
        """Append ``batch`` in one transaction, conditional on the session's count after the run's
        last write (compare-and-append). When another writer wrote since, the turn's row is read:
        if the turn is still this run's the write is retried, else ``LeaseLost`` (a recovery closed
        it under the run) and nothing is written. The dispatch keeps the turn API's own check."""
        run = self._run
        assert run is not None
        count = run.count
        for _ in range(_CAS_TRIES):
            try:
                events: list[Event] = await self._call("append_many", run.sid, batch, expected_count=count)
            except CountMismatch:
                count = await self._call("count", run.sid)
                row = await self._call("turn_state", run.sid)
                if row is None or row.start_seq != run.turn.start_seq or row.attempt != run.turn.attempt:
                    raise LeaseLost(run.sid, run.turn.attempt, "the turn was closed") from None
                continue
            run.count = count
            self._note(*events)
            return events
        raise CountMismatch(run.sid, count, -1)  # pragma: no cover - a writer that never pauses


def _fresh_call_ids(response: ModelResponse, history: Sequence[ModelMessage]) -> ModelResponse:
    """``response`` with a new id (pydantic-ai's own kind) for each tool call whose id the
    session's history, or an earlier call of the response, already holds: the journal keeps one
    call per id in a session (a second would be answered with the first one's result, or
    refused), and some models number their calls afresh in every response (``call_0``). The
    model is shown its calls under the ids the history holds, so a renamed call and its return
    stay one pair. A response whose ids are all new is returned as it is."""
    calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
    if not calls:
        return response
    seen = {
        p.tool_call_id for m in history if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, ToolCallPart)
    }
    parts, changed = [], False
    for part in response.parts:
        if isinstance(part, ToolCallPart):
            if part.tool_call_id in seen:
                part, changed = dataclasses.replace(part, tool_call_id=generate_tool_call_id()), True
            seen.add(part.tool_call_id)
        parts.append(part)
    return dataclasses.replace(response, parts=parts) if changed else response


def _stamped(ctx: Any, request_context: Any, response: ModelResponse) -> ModelResponse:
    """The response as it enters the history: run and conversation ids and the serving model's id
    filled in where unset (what ``ModelRequestNode`` does after this hook returns)."""
    model = getattr(request_context, "model", None)
    return dataclasses.replace(
        response,
        run_id=response.run_id or ctx.run_id,
        conversation_id=response.conversation_id or ctx.conversation_id,
        model_id=response.model_id or getattr(request_context, "model_id", None) or getattr(model, "model_id", None),
    )


# -- the conversation store ---------------------------------------------------------------------------


class JournalConversationStore(ConversationStore):
    """A pydantic-ai ``ConversationStore`` whose conversations are journal sessions: ``load`` gives
    the session's history (the projection of its typed log), ``save`` stores the messages the
    journal does not hold yet (verbatim and typed, one transaction). The record's ``revision`` is
    the session's event count; saving messages the journal already holds is a no-op, not a
    conflict (the capability stored them during the run)."""

    def __init__(
        self,
        journal_or_path: str | os.PathLike[str] | journal.Journal | AsyncJournal,
        *,
        durability: str = "full",
    ) -> None:
        target, self._owned = _target(journal_or_path, durability)
        self._call = _Calls(target)

    @property
    def journal(self) -> journal.Journal | AsyncJournal:
        return self._call.target

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()

    async def history(self, conversation_id: str) -> History:
        """The conversation's history as the journal projects it, with the calls it leaves open."""
        return await _history(self._call, journal_session_id(conversation_id))

    async def save(
        self, conversation: Conversation | AgentRunResult[Any], *, scope: str | None = None
    ) -> list[ConversationEntry]:
        """``ConversationStore.save``; a conversation the journal already holds as it is (a run the
        capability recorded) is a no-op that advances the conversation's revision."""
        held = conversation.conversation if isinstance(conversation, AgentRunResult) else conversation
        sid = journal_session_id(held.conversation_id)
        try:
            count = await self._call("count", sid)
        except SessionNotFound:
            return await super().save(conversation, scope=scope)
        shown = list((await _history(self._call, sid)).messages)
        if scope is None and held.messages and shown == repair_messages(held.messages, repair_last_response=False):
            held.revision = str(count)
            held.new_message_index = len(held.messages)
            return []
        return await super().save(conversation, scope=scope)

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        sid = journal_session_id(conversation_id)
        try:
            count = await self._call("count", sid)
        except SessionNotFound:
            return None
        history = await _history(self._call, sid)
        head = str(len(history.messages) - 1) if history.messages else None
        return ConversationRecord(conversation_id=conversation_id, head_id=head, revision=str(count))

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        if scope is not None:
            raise InvalidArgument("scope", "the journal's conversation store does not keep scopes")
        sessions = await self._call("sessions", meta={"framework": FRAMEWORK})
        records = []
        for session in reversed(sessions):  # newest first
            conversation_id = (session.meta or {}).get("session_id", session.id)
            record = await self.read_record(conversation_id)
            if record is not None:
                records.append(record)
        return records[:limit] if limit is not None else records

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        conversation_id = record.conversation_id
        sid = journal_session_id(conversation_id)
        if record.forked_from is not None or record.branches:
            raise InvalidArgument("record", "the journal's conversations only grow: fork with Journal.fork")
        if expected_revision is None:
            try:
                await self._call("count", sid)
                raise ConversationConflict(conversation_id)
            except SessionNotFound:
                pass
        await _ensure(self._call, sid, conversation_id)
        count = await self._call("count", sid)
        history = await _history(self._call, sid)
        start = 0 if not new_entries or new_entries[0].parent_id is None else _position(new_entries[0].parent_id) + 1
        if new_entries and record.head_id != new_entries[-1].id:
            raise InvalidArgument("record", "the journal's conversations only grow: branch is not supported")
        if (expected_revision is not None and expected_revision != str(count)) or start != len(history.messages):
            raise ConversationConflict(conversation_id)
        # The projected answers the history showed first (verbatim), then the new messages.
        batch: list[Typed] = []
        index = history.stored
        for message in [*history.projected, *(entry.message for entry in new_entries)]:
            batch.extend(derive(index, message, typed=index >= history.stored + len(history.projected)))
            index += 1
        try:
            await self._call("append_many", sid, batch, expected_count=count)
        except CountMismatch:
            raise ConversationConflict(conversation_id) from None

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        sid = journal_session_id(conversation_id)
        try:
            count = await self._call("count", sid)
        except SessionNotFound:
            raise ConversationConflict(conversation_id) from None
        if str(count) != expected_revision:
            raise ConversationConflict(conversation_id)
        await self._call("purge", sid)
        _forget(self._call, sid)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        raise KeyError(entry_id)  # entries are read by history (read_history), never one by one

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        raise NotImplementedError  # pragma: no cover - _history_of is overridden below

    async def _history_of(
        self, record: ConversationRecord, *, limit: int | None = None, up_to: str | None = None
    ) -> list[ConversationEntry] | None:
        """The history, or its part up to the entry ``up_to`` (``KeyError`` if there is none), or
        its last ``limit`` entries of that. Never ``None``: the history only grows, one read."""
        history = await _history(self._call, journal_session_id(record.conversation_id))
        entries = [
            ConversationEntry(id=str(i), parent_id=None if i == 0 else str(i - 1), message=message)
            for i, message in enumerate(history.messages)
        ]
        if up_to is not None:
            end = _position(up_to)
            if not 0 <= end < len(entries):
                raise KeyError(up_to)
            entries = entries[: end + 1]
        return entries[-limit:] if limit else ([] if limit == 0 else entries)


def _position(entry_id: str) -> int:
    try:
        return int(entry_id)
    except ValueError:
        raise InvalidArgument("entry_id", f"{entry_id[:80]!r} is not an entry of the journal's store") from None


# -- the one-line entry -------------------------------------------------------------------------------


class JournalAgent:
    """A pydantic-ai ``Agent`` whose sessions are kept in a journal (see the module's docstring).

    ``journal_or_path``: a path or a PostgreSQL DSN (opened here with ``durability``, closed by
    ``close()``), or an open ``journal.Journal`` / ``journal.aio.AsyncJournal`` (the caller closes
    it). ``run``/``run_sync`` take the agent's own keyword arguments, except ``message_history``
    and ``conversation`` (the history is the journal's)."""

    def __init__(
        self,
        agent: Agent[Any, Any],
        journal_or_path: str | os.PathLike[str] | journal.Journal | AsyncJournal,
        *,
        durability: str = "full",
    ) -> None:
        if not isinstance(agent, Agent):
            raise InvalidArgument("agent", f"must be a pydantic_ai.Agent, not {type(agent).__name__}")
        self.agent = agent
        target, self._owned = _target(journal_or_path, durability)
        self._call = _Calls(target)
        self.store = JournalConversationStore(target)
        found = JournalDurability.from_agent(agent)
        self._on_agent = found is not None
        self.capability = found if found is not None else JournalDurability(target)

    @property
    def journal(self) -> journal.Journal | AsyncJournal:
        return self._call.target

    async def run(self, user_prompt: Any = None, *, session_id: str, **kwargs: Any) -> AgentRunResult[Any]:
        """Run the agent on the session: ``arepair`` first (nothing to do without a crash), the
        history from the journal, the run recorded by the capability. ``user_prompt=None``
        continues an interrupted run to its answer. If the run raises, its turn is closed by
        ``arepair`` (its calls answered as recovery says) and the error re-raised."""
        sid = journal_session_id(session_id)
        for name in ("message_history", "conversation"):
            if name in kwargs:
                raise InvalidArgument(name, "the history comes from the journal: pass session_id only")
        await _ensure(self._call, sid, session_id)
        done = await _repair(self._call, sid, force=False, report=False)
        if done.live_owner is not None:
            held = await self._call("turn_state", sid)
            raise TurnHeld(sid, held.start_seq if held is not None else -1, done.live_owner, "another run holds it")
        conversation = await self.store.load(session_id) or Conversation(conversation_id=session_id)
        if not self._on_agent:
            kwargs["capabilities"] = [*kwargs.get("capabilities", ()), self.capability]
        try:
            return await self.agent.run(user_prompt, conversation=conversation, **kwargs)
        except Exception:
            try:
                await _repair(self._call, sid, force=False, report=False)
            except JournalError:
                pass  # the run's own error says more; the next run's repair closes the turn
            raise

    def run_sync(self, user_prompt: Any = None, *, session_id: str, **kwargs: Any) -> AgentRunResult[Any]:
        """``run``, synchronously (in a new event loop: not from inside a running one)."""
        if isinstance(self.journal, AsyncJournal):
            raise WrongLoop("run_sync", "an AsyncJournal's writes belong to its loop: await run(...) there")
        return asyncio.run(self.run(user_prompt, session_id=session_id, **kwargs))

    async def history(self, session_id: str) -> list[ModelMessage]:
        """The session's history, as the next run is handed it."""
        return list((await _history(self._call, journal_session_id(session_id))).messages)

    def close(self) -> None:
        """Close the journal if this agent opened it (from a path)."""
        if self._owned is not None:
            self._owned.close()

    def __repr__(self) -> str:
        return f"<JournalAgent {self.agent.name!r} in {self.journal!r}>"


# -- repair -------------------------------------------------------------------------------------------


def _calls_of(holder: Any) -> _Calls:
    if isinstance(holder, (JournalAgent, JournalConversationStore, JournalDurability)):
        return holder._call
    raise InvalidArgument(
        "jagent_or_store",
        f"must be a JournalAgent, JournalConversationStore or JournalDurability, not {type(holder).__name__}",
    )


def repair(jagent_or_store: Any, session_id: str, *, force: bool = False) -> Repaired:
    """After a crash: run the journal's one recovery for the session (a synthetic result for each
    call its interrupted turn owes -- "MAY have run" if dispatched, "did not run" if not -- then
    ``turn_end(interrupted)``), so the history the next run is handed shows every call answered
    right after it. Idempotent, and the same whichever recovery ran first (``journal recover``,
    ``j.recover()``): then it appends nothing. (``reconcile()`` writes nothing for a session
    that queued no submission, as an adapter's: after it, this repairs as after nothing.)

    A turn another live process drives is left alone (``Repaired.live_owner``) unless
    ``force=True``. ``Repaired.added`` is empty (the history is a projection: nothing is copied);
    ``Repaired.unanswered`` lists calls the history shows without an answer. Synchronous: on an
    ``AsyncJournal`` it is refused with ``WrongLoop`` (use ``await arepair(...)``)."""
    call = _calls_of(jagent_or_store)
    sid = journal_session_id(session_id)
    if isinstance(call.target, AsyncJournal):
        raise WrongLoop("repair", "synchronous code: repair a session on an AsyncJournal with await arepair(...)")
    return _drive(_repair(_Direct(call.target), sid, force=force))


async def arepair(jagent_or_store: Any, session_id: str, *, force: bool = False) -> Repaired:
    """``repair``'s awaitable twin (never waits on the disk on the event loop)."""
    return await _repair(_calls_of(jagent_or_store), journal_session_id(session_id), force=force)


async def _repair(call: _Calls, sid: str, *, force: bool, report: bool = True) -> Repaired:
    try:
        open_turn = await call("turn_state", sid)
    except SessionNotFound:
        return Repaired(sid)
    recovered: tuple[Event, ...] = ()
    if open_turn is not None:
        for result in await call("recover", sid, force=force):
            if result.live_owner is not None:
                return Repaired(sid, live_owner=result.live_owner)
            recovered += tuple(result.appended)
    if not report:
        return Repaired(sid, recovered)
    history = await _history(call, sid)
    return Repaired(sid, recovered, (), history.unanswered)
