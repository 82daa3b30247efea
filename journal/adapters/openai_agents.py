"""openai-agents on the journal: a ``Session``, ``RunHooks`` and a crash ``repair``.

Plug it in with one line::

    session = JournalSession("user-42", "agent.db")         # instead of SQLiteSession(...)
    result = await journal_run(agent, "pay the invoice", session=session)

or, with ``Runner.run`` itself, ``Runner.run(agent, text, session=session,
hooks=session.run_hooks())``. After a restart, call ``await repair(session)`` before the next run
(``journal_run`` does it for a session left with an open turn).

What is stored. Every item the runner saves is an ``x.openai_agents.item`` event holding the item
verbatim (``get_items`` gives it back deep-equal, ids kept). In the same transaction the adapter
appends the typed events it can derive: a user (or system/developer) message becomes a
``user_message`` (``system_message``); a run of assistant output items -- messages, reasoning and
``function_call`` items -- becomes one ``assistant_message`` whose ``tool_calls`` are the calls
(without calls, each message its own ``assistant_message``); a
``function_call_output`` becomes the call's ``tool_result`` (the first one wins, G5; a different
one for the same call is kept as ``tool_result_late``). Other item kinds (hosted tools, computer,
shell, MCP) are stored verbatim only. ``pop_item`` appends an ``x.openai_agents.pop`` marker and,
when the popped item's derived message is the transcript's last, ``retract``s it: nothing is
deleted. ``clear_session`` appends an ``x.openai_agents.clear`` marker after which ``get_items``
is empty; the log, its turns and the messages view keep what came before (the journal's promise is
that no evidence is deleted). To erase a conversation for real, ``purge()`` erases the session.

What the hooks add (``JournalRunHooks``). A turn per run (opened when the agent starts, closed
once the run's last items are saved), a step per model call, the model's answer with its tool
calls as soon as it arrives (before any tool runs), and for each function tool the **dispatch**:
a ``tool_call`` event committed and synced *before* the tool body runs (G6). If that write fails
the hook raises and the SDK does not run the tool. The tool's output is recorded as its
``tool_result`` when the tool returns, before the runner saves it to the session.

What it costs. The step and turn events ride on the writes a run makes anyway: a step opens in
the transaction of the answer that asks for tools (or of the items of a plain answer), closes in
the transaction of the items the runner saves after the tools, and the turn ends in the
transaction of the run's last items. Nothing is written on the way to the model, so a crash
during a model call leaves an open turn whose steps are closed, which recovery closes as
interrupted. A one-tool step (input, model asks for a tool, tool, answer) is seven commits: the
input, ``turn_start``, step and answer, dispatch, result, the step's items with ``step_end``,
the answer with ``turn_end``. Those bookkeeping writes are compare-and-append on the session's
count, which stands in for the turn API's check of the handle's attempt (see
``JournalRunHooks._fenced``); the dispatch keeps the turn API's own check.

Durability. ``durability="full"`` (the default) makes each of those commits survive a power cut.
``durability="normal"`` is the setting to choose for agents that can accept losing, on a power
cut (not on a crash or ``kill -9``: those lose nothing), the commits since the last synced one.
The dispatch is synced in both modes, and syncing it syncs the log before it, so the answer that
asked for the call is never lost while its dispatch is kept; a power cut can take a tool's
result, the items saved after it, a plain answer and the turn's end, and recovery then says the
call MAY have run -- never that it did not.

What ``repair`` does after a crash. It runs the journal's recovery for the session (a synthetic
``tool_result`` for every call the interrupted turn owes: "MAY have run" for a dispatched one,
"did not run" for one never dispatched; then ``turn_end(interrupted)``), and then makes the
session's own items consistent, in the framework's shape: each ``function_call`` item without a
``function_call_output`` gets one carrying the journal's result, and the calls of an interrupted
turn that the runner never saved (it saves a call together with its output, after the tool ran)
are added as a ``function_call`` item plus its output. The next run therefore sends no orphan
call (no provider 400) and the model is told that the call may have run, so the tool is not
simply run again.

What it cannot do, honestly:

- The barrier covers function tools: hosted tools run at the provider and other local tool
  families get no ``tool_call_id`` in ``on_tool_start``.
- Without the hooks there are no turns and no dispatches: the session alone is durable storage
  with typed events, and ``scan`` cannot see a tool that was running when the process died.
- Tool call ids must be unique within a session (the providers' are): the journal keeps one result
  per call id, and a reused id is refused at dispatch rather than run twice.
- A ``function_call`` the journal never answered (a call waiting for a human approval, an item
  added by hand) is left alone by ``repair`` and listed in ``Repaired.unanswered``.
- ``pop_item`` writes its marker and its ``retract`` in two transactions (the engine's
  ``retract`` is a call of its own); a crash between them leaves the item popped for the
  framework and still visible in the messages view.
- Output the SDK converts differently from its own ``ItemHelpers.tool_call_output_item`` (an
  error replaced by a guardrail, say) reaches the journal twice: the hooks' result wins and the
  session's copy is kept as ``tool_result_late``.
- ``repair`` adds the call items of an interrupted answer, not its text or reasoning items
  (the journal's ``assistant_message`` keeps them); the runner saves the user's input before the
  agent starts, so the input's ``user_message`` precedes the run's ``turn_start``.
- Opening a ``JournalSession`` from a path opens the file at once, on the calling thread (as
  ``SQLiteSession`` does); its methods then never wait on the disk on the event loop.
- ``Runner.run_streamed`` calls the same session methods and hooks, but only ``Runner.run`` is
  tested here. Streamed chunks are not saved (no ``provider_started`` phase is recorded).
- A run whose turn was closed under it (another process's ``recover(force=True)``) learns it at
  its next write: after the model call that follows, not before it; the dispatch refuses the
  tool in any case (``LeaseLost``). Its items are still saved, then ``LeaseLost`` is raised.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from journal.adapters import require

require("agents", "openai-agents")

from agents import Agent, RunHooks, Runner
from agents.items import ItemHelpers, ModelResponse, TResponseInputItem
from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
from agents.result import RunResult
from openai.types.responses import ResponseFunctionToolCall

import journal
from journal.aio import AsyncJournal
from journal.errors import (
    CountMismatch,
    InvalidArgument,
    JournalError,
    LeaseLost,
    SessionExists,
    SessionNotFound,
    TurnHeld,
    UnknownToolCall,
)
from journal.model import Event

__all__ = ["JournalRunHooks", "JournalSession", "Repaired", "journal_run", "journal_session_id", "repair"]

FRAMEWORK = "openai-agents"
ITEM = "x.openai_agents.item"
POP = "x.openai_agents.pop"
CLEAR = "x.openai_agents.clear"
_MARKERS = [ITEM, POP, CLEAR]
_REPAIR = "repair"  # the ``source`` of the items repair() adds: their typed events exist already
_VALID_ID = re.compile(r"[\x21-\x7e]{1,256}")
_CAS_TRIES = 100  # compare-and-append retries before giving up (each loses only to a real write)


def journal_session_id(session_id: str) -> str:
    """The journal's id for an openai-agents session id: the same id when it is one the journal
    accepts (1-256 printable ASCII characters without spaces), else a stable
    ``openai-agents-<sha256>`` name. The original is kept in the session's meta."""
    if not isinstance(session_id, str):
        raise InvalidArgument("session_id", f"must be a string, not {type(session_id).__name__}")
    if _VALID_ID.fullmatch(session_id):
        return session_id
    digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{FRAMEWORK}-{digest[:40]}"


# -- deriving typed events from items (pure) -----------------------------------------------------


def _get(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def _is_assistant_side(item: Any) -> bool:
    """Items the model produced: they group into one assistant message."""
    kind = _get(item, "type")
    if kind in ("function_call", "reasoning"):
        return True
    return _get(item, "role") == "assistant" and kind in (None, "message")


def _text(content: Any) -> Any:
    """A message's content as the journal shows it: a string as is, text parts joined, anything
    else (images, files) kept as the list of parts."""
    if isinstance(content, str) or not isinstance(content, list):
        return content
    texts = []
    for part in content:
        text = part.get("text", part.get("refusal")) if isinstance(part, dict) else None
        if not isinstance(text, str):
            return content
        texts.append(text)
    return "".join(texts)


def _arguments(raw: Any) -> Any:
    """A call's arguments: the decoded JSON the model sent, or the raw string if it is not JSON."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _calls_key(call_id: str) -> str:
    """The idempotency key of the assistant message that requested ``call_id`` first: the hooks
    and the session derive the same message, and the journal keeps the first one written."""
    key = f"oa-calls:{call_id}"
    return (
        key if len(key) <= 256 else "oa-calls:" + hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()
    )


def _assistant(group: Sequence[Any], *, keep_items: bool = False) -> list[tuple[str, dict[str, Any], str | None]]:
    """The typed events of a run of assistant-side items: one message with the calls, or one
    message per text message when there are none. Items the journal could not type (a call
    without an id or name, a repeated call id, content that is not content) stay verbatim only."""
    calls: dict[str, Any] = {}
    for item in group:
        call_id, name = _get(item, "call_id"), _get(item, "name")
        if (
            _get(item, "type") == "function_call"
            and isinstance(call_id, str)
            and call_id
            and isinstance(name, str)
            and name
        ):
            calls.setdefault(call_id, item)
    texts = [
        _text(_get(i, "content"))
        for i in group
        if _get(i, "type") not in ("function_call", "reasoning") and _is_content(_get(i, "content"))
    ]
    if not calls:
        return [("assistant_message", {"content": t, "stop_reason": "stop"}, None) for t in texts]
    content: Any = "".join(texts) if all(isinstance(t, str) for t in texts) else texts
    data: dict[str, Any] = {
        "content": content,
        "tool_calls": [
            {"id": call_id, "name": _get(c, "name"), "arguments": _arguments(_get(c, "arguments"))}
            for call_id, c in calls.items()
        ],
        "stop_reason": "tool_use",
    }
    if keep_items:  # what repair() needs to rebuild the call items the runner never saved
        data["metadata"] = {"openai_agents": {"items": list(group)}}
    return [("assistant_message", data, _calls_key(next(iter(calls))))]


def _typed(item: dict[str, Any]) -> list[tuple[str, dict[str, Any], str | None]]:
    """The typed events of one item that is not assistant-side."""
    kind, role, call_id = item.get("type"), item.get("role"), item.get("call_id")
    if kind == "function_call_output" and isinstance(call_id, str) and call_id and _is_content(item.get("output")):
        return [("tool_result", {"tool_call_id": call_id, "content": item["output"]}, None)]
    if kind in (None, "message") and _is_content(item.get("content")):
        if role == "user":
            return [("user_message", {"content": _text(item["content"])}, None)]
        if role in ("system", "developer"):
            return [("system_message", {"content": _text(item["content"])}, None)]
    return []


def _is_content(value: Any) -> bool:
    """Whether the journal takes ``value`` as a message's content (text or JSON blocks)."""
    return isinstance(value, (str, list, dict))


def _derive(items: Sequence[Any]) -> list[tuple[str, dict[str, Any], str | None]]:
    """The batch ``add_items`` appends: each item verbatim, each followed by the typed events it
    completes (a group of assistant-side items by its one message, after its last item)."""
    batch: list[tuple[str, dict[str, Any], str | None]] = []
    group: list[Any] = []
    for item in items:
        if isinstance(item, dict) and _is_assistant_side(item):
            group.append(item)
            batch.append((ITEM, {"item": item}, None))
            continue
        if group:
            batch.extend(_assistant(group))
            group = []
        batch.append((ITEM, {"item": item}, None))
        if isinstance(item, dict):
            batch.extend(_typed(item))
    if group:
        batch.extend(_assistant(group))
    return batch


def _fold(events: Iterable[Event]) -> list[Event]:
    """The item events ``get_items`` shows, from events in seq order (items, pops, clears)."""
    shown: dict[int, Event] = {}
    for event in events:
        if event.type == CLEAR:
            shown.clear()
        elif event.type == POP:
            shown.pop(event.data["seq"], None)
        else:
            shown[event.seq] = event
    return list(shown.values())


def _fold_back(newest: Sequence[Event], limit: int) -> tuple[list[Event], bool]:
    """The last ``limit`` shown item events, from events newest first; and whether that answer is
    complete (a clear or ``limit`` items were reached, so older events cannot change it)."""
    popped: set[int] = set()
    out: list[Event] = []
    for event in newest:
        if event.type == CLEAR:
            return out[::-1], True
        if event.type == POP:
            popped.add(event.data["seq"])
        elif event.seq not in popped:
            out.append(event)
            if len(out) == limit:
                return out[::-1], True
    return out[::-1], False


# -- the journal, sync or async -------------------------------------------------------------------


class _Calls:
    """Calls a journal method without blocking the loop: an ``AsyncJournal``'s twin is awaited,
    a sync ``Journal``'s method runs in a worker thread (a ``Journal`` may be shared by threads)."""

    def __init__(self, target: journal.Journal | AsyncJournal) -> None:
        self.target = target
        self._async = isinstance(target, AsyncJournal)

    async def __call__(self, name: str, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self.target, name)
        if self._async:
            return await method(*args, **kwargs)
        return await asyncio.to_thread(functools.partial(method, *args, **kwargs))


# -- the session ---------------------------------------------------------------------------------


class JournalSession:
    """An openai-agents ``Session`` kept in a journal (see the module's docstring).

    ``path_or_journal``: a path (the journal is opened here, with ``durability``, and closed by
    ``close()``), or an open ``journal.Journal`` or ``journal.aio.AsyncJournal`` (the caller
    closes it). ``journal_id`` is the journal's session id (``journal_session_id(session_id)`` by
    default). Methods are coroutines that never wait on the disk on the event loop.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        path_or_journal: str | os.PathLike[str] | journal.Journal | AsyncJournal,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        durability: str = "full",
        journal_id: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.journal_id = journal_session_id(session_id) if journal_id is None else journal_id
        self.session_settings = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        )
        if isinstance(path_or_journal, (journal.Journal, AsyncJournal)):
            self._owned: journal.Journal | None = None
            target = path_or_journal
        else:
            target = self._owned = journal.open(path_or_journal, durability=durability)
        self._call = _Calls(target)
        self._created = False
        self._hooks: JournalRunHooks | None = None

    @property
    def journal(self) -> journal.Journal | AsyncJournal:
        return self._call.target

    def run_hooks(self) -> JournalRunHooks:
        """The ``RunHooks`` that record turns, answers and dispatches for this session."""
        return JournalRunHooks(self)

    async def _ensure(self) -> None:
        """Create the journal session on the first write (as ``SQLiteSession`` does)."""
        if self._created:
            return
        try:
            await self._call(
                "create_session", self.journal_id, meta={"framework": FRAMEWORK, "session_id": self.session_id}
            )
        except SessionExists:
            pass
        self._created = True

    # -- the Session protocol ----------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first: the last ``limit`` of them (``session_settings.limit``
        when not given; all for ``None`` or a negative limit, none for 0)."""
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted == 0:
            return []
        try:
            shown = await self._shown(None if wanted is None or wanted < 0 else wanted)
        except SessionNotFound:
            return []
        return [event.data["item"] for event in shown]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items and their typed events in one transaction (durable on return)."""
        if not items:
            return
        await self._ensure()
        batch = _derive(list(items))
        hooks = self._hooks
        if hooks is None or hooks._turn is None:
            await self._call("append_many", self.journal_id, batch)
            return
        # Inside the hooks' turn: the step's bookkeeping goes in the same transaction -- the
        # step these items complete is closed with them, and the run's last items end the turn.
        ending = hooks.ending
        try:
            await hooks._fenced(batch, close=True, ends=ending)
        except LeaseLost:
            await self._call("append_many", self.journal_id, batch)  # the items are kept all the same
            raise
        finally:
            if ending:
                hooks._forget()

    async def pop_item(self) -> TResponseInputItem | None:
        """Take the last item back and return it (``None`` when there is none). Nothing is deleted:
        a pop marker hides it from ``get_items``; its derived message is retracted when it is the
        transcript's last. Two pops racing take two different items (compare-and-append)."""
        for _ in range(_CAS_TRIES):
            try:
                count = await self._call("count", self.journal_id)
            except SessionNotFound:
                return None
            last = await self._shown(1)
            if not last:
                return None
            try:
                await self._call("append", self.journal_id, POP, {"seq": last[0].seq}, expected_count=count)
            except CountMismatch:
                continue  # someone appended meanwhile: look again
            await self._retract_derived(last[0].seq)
            return last[0].data["item"]
        raise CountMismatch(self.journal_id, count, -1)  # pragma: no cover - a writer that never pauses

    async def clear_session(self) -> None:
        """Make the session empty for the framework: a clear marker, after which ``get_items``
        returns only later items. The log keeps everything (``purge()`` erases it)."""
        try:
            await self._call("append", self.journal_id, CLEAR, {})
        except SessionNotFound:
            pass

    # -- beyond the protocol -------------------------------------------------------------------------

    async def purge(self) -> None:
        """Erase the session and its whole log (a user deleting the conversation)."""
        try:
            await self._call("purge", self.journal_id)
        except SessionNotFound:
            pass
        self._created = False

    def close(self) -> None:
        """Close the journal if this session opened it (from a path)."""
        if self._owned is not None:
            self._owned.close()

    def __repr__(self) -> str:
        return f"<JournalSession {self.session_id!r} in {self.journal!r}>"

    # -- reading -----------------------------------------------------------------------------------

    async def _shown(self, limit: int | None) -> list[Event]:
        """The item events ``get_items`` shows, oldest first; the last ``limit`` of them.

        Read through the journal's index of app events: all of them since the last clear, or,
        with a limit, a window of the newest markers that grows until it holds the answer (pops
        between the items make a window of ``limit`` events too small)."""
        if limit is None:
            cleared = await self._call("events", self.journal_id, types=[CLEAR], newest_first=True, limit=1)
            since = cleared[0].seq + 1 if cleared else 0
            return _fold(await self._call("events", self.journal_id, since=since, types=_MARKERS))
        window = limit + 8
        while True:
            newest = await self._call("events", self.journal_id, types=_MARKERS, newest_first=True, limit=window)
            shown, complete = _fold_back(newest, limit)
            if complete or len(newest) < window:
                return shown
            window *= 4

    async def _retract_derived(self, item_seq: int) -> None:
        """Retract the message derived from the popped item (appended right after it) if it is
        the transcript's last; otherwise the messages view keeps it (it may answer a call)."""
        last = await self._call("messages", self.journal_id, tail=1)
        if last and last[0].seq == item_seq + 1:
            await self._call("retract", self.journal_id, reason="openai-agents pop_item")


# -- the hooks -----------------------------------------------------------------------------------


_Typed = tuple[str, dict[str, Any], str | None]


@attrs.frozen
class _Steps:
    """Where the hooks' turn stands in the log (what the turn journal's row says), and the model
    answer whose step is not written yet."""

    steps: int = 0  # steps the log holds for the turn
    open: bool = False  # the last of them has no step_end yet
    unsaved: bool = False  # a plain answer arrived; its step is written with the items saved next


class JournalRunHooks(RunHooks[Any]):
    """``RunHooks`` that record a run in the session's journal: its turn, a step per model call,
    the model's answer with its tool calls, the dispatch of each function tool (committed and
    synced before the tool runs: G6) and the tool's result.

    The bookkeeping rides on the writes a step needs anyway, so a one-tool step costs seven
    commits (the input, ``turn_start``, step and answer, dispatch, result, the step's items with
    ``step_end``, the final items with their step and ``turn_end``): see ``_fenced``.

    One instance follows one run at a time of its session. Subclasses that override a hook call
    ``super()``'s. ``finish()`` closes the turn if the run ended without saving its last items
    (``journal_run`` calls it)."""

    def __init__(self, session: JournalSession) -> None:
        self.session = session
        self._turn: Any = None  # the open turn's handle (a Turn or an AsyncTurn)
        self._steps = _Steps()
        self._count: int | None = None  # the session's event count after the hooks' last write
        self._mine: set[int] = set()  # seqs the hooks wrote past ``_count`` (parallel tools)
        self._running = 0  # tools dispatched that have not returned
        self._handoff = False
        self.ending = False  # the agent produced its final output; its items are saved next
        session._hooks = self

    @property
    def _call(self) -> _Calls:
        return self.session._call

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        if self._turn is not None:
            if self._handoff:  # the same run goes on with another agent: the same turn
                self._handoff = False
                return
            if self.ending:
                await self.finish()
            else:  # a run of these hooks ended without closing its turn (it raised)
                await repair(self.session)
        await self.session._ensure()
        turn = await self._call("turn_start", self.session.journal_id)
        self._turn, self._steps, self._running, self.ending = turn, _Steps(), 0, False
        self._count, self._mine = turn.start_seq + 1, set()

    async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
        self._handoff = True

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: str | None, input_items: list[Any]) -> None:
        # Nothing to write on the way to the model in a plain loop: the previous step was closed
        # with its items, and this one is written with the answer. A crash during the call
        # leaves an open turn whose steps are all closed: recovery closes it as interrupted.
        if self._turn is not None and (self._steps.open or self._steps.unsaved):
            await self._fenced([], close=True)  # a step that saved no items: closed now, as it was

    async def on_llm_end(self, context: Any, agent: Any, response: ModelResponse) -> None:
        if self._turn is None:
            return
        items = response.to_input_items()
        if not any(_get(i, "type") == "function_call" for i in items):
            # A plain answer is recorded from the session's items, with them (and its step).
            self._steps = attrs.evolve(self._steps, unsaved=True)
            return
        group = [i for i in items if isinstance(i, dict) and _is_assistant_side(i)]
        ((kind, data, key),) = _assistant(group, keep_items=True)
        usage = response.usage
        cached = getattr(usage.input_tokens_details, "cached_tokens", None) or 0
        data["usage"] = {"input": usage.input_tokens, "output": usage.output_tokens, "cache_read": cached}
        # The step opens with the answer that asks for the calls, in one transaction, before
        # any tool runs (each tool's dispatch is its own synced commit after this one).
        await self._fenced([(kind, data, key)], opens=True)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        call_id = getattr(context, "tool_call_id", None)
        if self._turn is None or not isinstance(call_id, str):
            return
        try:
            done = await self._call("dispatch", self.session.journal_id, call_id, turn=self._turn)
        except UnknownToolCall:
            # The answer was not seen here (a run resumed after an approval): record the call
            # first; a raise in this hook would keep the tool from running.
            item = _call_item(context)
            ((kind, data, key),) = _assistant([item], keep_items=True)
            self._note(await self._call("append", self.session.journal_id, kind, data, key=key))
            done = await self._call("dispatch", self.session.journal_id, call_id, turn=self._turn)
        self._running += 1
        self._note(done.event)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        call_id = getattr(context, "tool_call_id", None)
        if self._turn is None or not isinstance(call_id, str):
            return
        self._running = max(0, self._running - 1)
        outcome = await self._call("put_result", self.session.journal_id, call_id, _output(context, tool, result))
        self._note(outcome.event, outcome.late)

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        self.ending = True  # the runner saves the final items next; add_items ends the turn

    async def finish(self) -> None:
        """Close the run's turn (its open step first), if it is still open: one transaction."""
        if self._turn is None or self._turn.closed:
            self._forget()
            return
        try:
            await self._fenced([], ends=True)
        finally:
            self._forget()

    def _forget(self) -> None:
        """The turn is closed (by these hooks or by recovery): the handle is no longer the run's."""
        self._turn, self.ending, self._handoff = None, False, False
        self._steps, self._count, self._mine, self._running = _Steps(), None, set(), 0

    # -- writing inside the turn -----------------------------------------------------------------

    def _note(self, *events: Event | None) -> None:
        """Count the hooks' own unconditional writes (dispatches, results): ``_count`` moves over
        seqs the hooks wrote, contiguously, and stops at any seq another writer took."""
        if self._count is None:
            return
        self._mine.update(e.seq for e in events if e is not None and not e.existing)
        while self._count in self._mine:
            self._mine.discard(self._count)
            self._count += 1

    async def _fenced(
        self, payload: list[_Typed], *, opens: bool = False, close: bool = False, ends: bool = False
    ) -> list[Event]:
        """Append ``payload`` with the turn's bookkeeping around it, in one transaction fenced by
        the session's event count (compare-and-append).

        ``opens``: the payload is a model answer that opens the next step. Otherwise the payload
        is items saved by the runner: a plain answer's step opens before them; ``close`` closes
        the open step after them (unless a tool still runs), ``ends`` closes it and the turn.

        Why the count is the fence: the turn API checks, in each of its transactions, that the
        handle's attempt still holds the open turn. Here the hooks know the count after their
        own last write; if the session still holds exactly that many events, no one wrote since
        (a recovery closing the turn writes its ``turn_end``), so the turn is as the hooks left
        it. When the count differs (or is unknown), the turn's row is read -- its attempt, that
        it is the session's open turn, its steps -- and the write retried against the count
        read before it; ``LeaseLost`` when the turn is no longer this attempt's. The dispatch,
        which guards a tool's side effect, keeps the turn API's own check."""
        turn, sid = self._turn, self.session.journal_id
        count, steps = self._count, self._steps
        for _ in range(_CAS_TRIES):
            if count is None:
                count, steps = await self._verify(steps)
            batch, after = _bookkeep(
                turn.turn, steps, payload, opens=opens, close=close and not self._running, ends=ends
            )
            if not batch:
                return []
            try:
                events = await self._call("append_many", sid, batch, expected_count=count)
            except CountMismatch:
                count = None  # someone else wrote: read the turn and try again
                continue
            self._steps, self._mine = after, set()
            self._count = count + sum(not e.existing for e in events)
            if ends:
                getattr(turn, "handle", turn).mark_closed()
            return events
        raise CountMismatch(sid, count if count is not None else -1, -1)  # pragma: no cover

    async def _verify(self, steps: _Steps) -> tuple[int, _Steps]:
        """The session's count, then its open turn's row: the turn must still be this attempt's.
        Read in that order, a write conditional on the count also proves the row unchanged."""
        turn, sid = self._turn, self.session.journal_id
        count = await self._call("count", sid)
        row = await self._call("turn_state", sid)
        if row is None or row.start_seq != turn.start_seq or row.attempt != turn.attempt:
            held = (
                "the turn was closed"
                if row is None or row.start_seq != turn.start_seq
                else f"attempt {row.attempt} holds it"
            )
            raise LeaseLost(sid, turn.attempt, held)
        return count, attrs.evolve(steps, steps=row.steps, open=row.step_open)


def _bookkeep(
    turn: int, steps: _Steps, payload: list[_Typed], *, opens: bool, close: bool, ends: bool
) -> tuple[list[_Typed], _Steps]:
    """The batch that writes ``payload`` inside the turn and the steps after it (pure)."""
    number, is_open = steps.steps, steps.open
    batch: list[_Typed] = []

    def step_start() -> None:
        nonlocal number, is_open
        number, is_open = number + 1, True
        batch.append(("step_start", {"turn": turn, "step": number}, None))

    def step_end() -> None:
        nonlocal is_open
        is_open = False
        batch.append(("step_end", {"turn": turn, "step": number, "outcome": "ok"}, None))

    if opens:
        if is_open:  # a step that saved nothing ends where the next answer begins
            step_end()
        step_start()
        batch.extend(payload)
        return batch, _Steps(number, True)
    if steps.unsaved and not is_open and (payload or close or ends):
        step_start()
    batch.extend(payload)
    if is_open and (close or ends):
        step_end()
    if ends:
        batch.append(("turn_end", {"turn": turn, "steps": number, "reason": "complete"}, None))
    return batch, _Steps(number, is_open, steps.unsaved and not batch)


def _call_item(context: Any) -> dict[str, Any]:
    """The ``function_call`` item of the call a ``ToolContext`` describes."""
    call = getattr(context, "tool_call", None)
    if isinstance(call, ResponseFunctionToolCall):
        return call.model_dump(exclude_unset=True)
    return {
        "type": "function_call",
        "call_id": context.tool_call_id,
        "name": context.tool_name,
        "arguments": context.tool_arguments,
    }


def _output(context: Any, tool: Any, result: object) -> Any:
    """The tool's output as the runner will save it in the ``function_call_output`` item, so the
    session's copy of the result is the same result (G5) rather than a late one."""
    call = getattr(context, "tool_call", None)
    if not isinstance(call, ResponseFunctionToolCall):
        call = ResponseFunctionToolCall(**_call_item(context))
    try:
        item = ItemHelpers.tool_call_output_item(
            call,
            result,
            output_json_schema=getattr(tool, "output_json_schema", None),
            output_type_adapter=getattr(tool, "_output_type_adapter", None),
        )
        return item["output"]
    except Exception:  # noqa: BLE001 - the runner reports its own conversion error; keep the text
        return str(result)


# -- repair --------------------------------------------------------------------------------------


@attrs.frozen
class Repaired:
    """What ``repair`` did to one session.

    ``recovered``: the events the journal's recovery appended (synthetic results, turn end);
    ``added``: the items appended to the session (calls the runner never saved and outputs for
    calls without one); ``unanswered``: ids of ``function_call`` items still without output
    because the journal holds no result for them (a call awaiting approval); ``live_owner``: set
    when another live process drives the session's turn, and then nothing was done."""

    session_id: str
    recovered: tuple[Event, ...] = ()
    added: tuple[dict[str, Any], ...] = ()
    unanswered: tuple[str, ...] = ()
    live_owner: str | None = None


async def repair(session: JournalSession, *, force: bool = False) -> Repaired:
    """After a crash: recover the session in the journal, then give each call it answered a
    ``function_call_output`` item (and its ``function_call`` item when the runner never saved it).

    Idempotent: a second call adds nothing. A turn another live process still drives is left
    alone (``Repaired.live_owner``) unless ``force=True``."""
    call, sid = session._call, session.journal_id
    try:
        results = await call("recover", sid, force=force)
    except SessionNotFound:
        return Repaired(sid)
    recovered: tuple[Event, ...] = ()
    for result in results:
        if result.live_owner is not None:
            return Repaired(sid, live_owner=result.live_owner)
        recovered += tuple(result.appended)
    if session._hooks is not None and recovered:
        session._hooks._forget()
    for _ in range(_CAS_TRIES):
        count = await call("count", sid)
        shown = [e.data["item"] for e in await session._shown(None)]
        cleared = await call("events", sid, types=[CLEAR], newest_first=True, limit=1)
        since = cleared[0].seq + 1 if cleared else 0
        facts = await call(
            "events", sid, since=since, types=["turn_start", "turn_end", "assistant_message", "tool_result"]
        )
        added, unanswered = _native_repairs(shown, facts)
        if not added:
            return Repaired(sid, recovered, (), unanswered)
        try:
            await call(
                "append_many",
                sid,
                [(ITEM, {"item": item, "source": _REPAIR}, None) for item in added],
                expected_count=count,
            )
        except CountMismatch:
            continue  # another writer (or repairer) appended: plan again from what is there now
        return Repaired(sid, recovered, tuple(added), unanswered)
    raise CountMismatch(sid, count, -1)  # pragma: no cover - a writer that never pauses


@attrs.define
class _Call:
    item: dict[str, Any]
    reason: str | None = None  # how the turn that requested it ended
    answered: bool = False
    content: Any = None


def _native_repairs(shown: Sequence[Any], facts: Sequence[Event]) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """The items that make the session agree with the journal (pure): an output for each shown
    call the journal answered, and call plus output for the calls of an interrupted turn the
    session never got. Also the shown calls left without an answer."""
    calls: dict[str, _Call] = {}
    in_turn: list[str] | None = None
    for event in facts:
        if event.type == "turn_start":
            in_turn = []
        elif event.type == "turn_end":
            for call_id in in_turn or ():
                calls[call_id].reason = event.data.get("reason")
            in_turn = None
        elif event.type == "assistant_message":
            originals = {
                _get(i, "call_id"): i
                for i in (event.data.get("metadata") or {}).get("openai_agents", {}).get("items", ())
            }
            for tool_call in event.data.get("tool_calls") or ():
                call_id = tool_call.get("id")
                if call_id in calls:
                    continue
                calls[call_id] = _Call(originals.get(call_id) or _function_call(tool_call))
                if in_turn is not None:
                    in_turn.append(call_id)
        elif event.type == "tool_result":
            known = calls.get(event.data["tool_call_id"])
            if known is not None and not known.answered:  # the first result is the result (G5)
                known.answered, known.content = True, event.data.get("content")
    saved = {_get(i, "call_id") for i in shown if _get(i, "type") == "function_call"}
    outputs = {_get(i, "call_id") for i in shown if _get(i, "type") == "function_call_output"}
    new_calls, new_outputs = [], []
    for call_id, known in calls.items():
        if not known.answered or call_id in outputs:
            continue
        if call_id in saved:
            new_outputs.append(_function_call_output(call_id, known.content))
        elif known.reason == "interrupted":
            new_calls.append(known.item)
            new_outputs.append(_function_call_output(call_id, known.content))
    answered = {_get(i, "call_id") for i in new_outputs}
    unanswered = tuple(
        _get(i, "call_id")
        for i in shown
        if _get(i, "type") == "function_call" and _get(i, "call_id") not in outputs | answered
    )
    return new_calls + new_outputs, unanswered


def _function_call(tool_call: dict[str, Any]) -> dict[str, Any]:
    arguments = tool_call.get("arguments")
    text = (
        arguments
        if isinstance(arguments, str)
        else json.dumps(arguments if arguments is not None else {}, separators=(",", ":"))
    )
    return {"type": "function_call", "call_id": tool_call["id"], "name": tool_call.get("name"), "arguments": text}


def _function_call_output(call_id: str, content: Any) -> dict[str, Any]:
    output = content if isinstance(content, (str, list)) else json.dumps(content)
    return {"type": "function_call_output", "call_id": call_id, "output": output}


# -- one run -------------------------------------------------------------------------------------


async def journal_run(
    agent: Agent[Any],
    input: str | list[TResponseInputItem],
    *,
    session: JournalSession,
    hooks: JournalRunHooks | None = None,
    **kwargs: Any,
) -> RunResult:
    """``Runner.run`` with the session and its hooks, closing the run's turn however it ends.

    Before the run, a turn the session left open (a crash) is repaired -- ``TurnHeld`` if
    another live process drives it. If the run raises, the turn is closed by ``repair`` (its
    calls answered as the journal's recovery says) and the error re-raised."""
    hooks = hooks if hooks is not None else (session._hooks or session.run_hooks())
    try:
        open_turn = await session._call("turn_state", session.journal_id)
    except SessionNotFound:
        open_turn = None
    if open_turn is not None and hooks._turn is None:
        done = await repair(session)
        if done.live_owner is not None:
            raise TurnHeld(
                session.journal_id, open_turn.start_seq, done.live_owner, "another process is running this session"
            )
    try:
        result = await Runner.run(agent, input, session=session, hooks=hooks, **kwargs)
    except Exception:
        try:
            await repair(session)
        except JournalError:
            pass  # the run's own error says more; recovery at the next start closes the turn
        raise
    await hooks.finish()
    return result
