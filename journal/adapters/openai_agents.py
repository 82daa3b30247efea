"""openai-agents on the journal: a ``Session``, ``RunHooks`` and a crash ``repair``.

Plug it in with one line::

    session = JournalSession("user-42", "agent.db")         # instead of SQLiteSession(...)
    result = await journal_run(agent, "pay the invoice", session=session)

or, with ``Runner.run`` itself, ``Runner.run(agent, text, session=session,
hooks=session.run_hooks())``. ``"agent.db"`` may be a PostgreSQL DSN (``"postgresql://..."``), or
pass an open ``journal.Journal`` / ``journal.aio.AsyncJournal`` to share one among sessions.

What is stored: each item once. Every item the runner saves comes back from ``get_items``
deep-equal (ids, key order and JSON types kept), and each is stored in (or beside) the typed
event the journal derives from it, in the same transaction, so no message body is stored twice
(``journal.adapters.openai_fold`` defines the format): a user (or system/developer) message is a
``user_message`` (``system_message``) whose ``metadata["openai_items"]`` holds the item minus
what the event holds; a run of assistant output items -- messages, reasoning and
``function_call`` items -- is one ``assistant_message`` whose ``tool_calls`` are the calls (without
calls, each message its own ``assistant_message``), carrying them; a ``function_call_output`` is
the call's ``tool_result`` (the first one wins, G5; another output for the same call is the
``tool_result_late`` that carries it). Items whose typed events the hooks wrote before the runner
saved them (the answer with its calls, each call's result) are an ``x.openai_agents.ref`` naming
those events. Other item kinds (hosted tools, computer, shell, MCP), and an item whose typed event
the journal already holds out of sight (an item added a second time), are an
``x.openai_agents.item`` holding the item whole -- as every item was before; files of that
format read as they did. ``get_items`` is one read of the session's item and typed events since
its last clear (no bookkeeping events), plus the clear marker's. ``pop_item`` appends an
``x.openai_agents.pop`` marker and, when the popped item's typed message is the transcript's
last, ``retract``s it: nothing is deleted. ``clear_session`` appends an ``x.openai_agents.clear``
marker after which ``get_items`` is empty; the log, its turns and the messages view keep what came
before (the journal's promise is that no evidence is deleted). To erase a conversation for real,
``purge()`` erases the session.

One recovery; the items are a projection. The typed log is the truth: ``get_items`` shows what
any recovery wrote -- ``journal recover`` from a shell, ``j.recover()``, the
async face, ``repair`` -- in the framework's shape and place: a ``function_call_output`` carrying
the journal's result (the real one, or "MAY have run ... verify before retrying" / "did not run")
right after each call it answers, and the ``function_call`` item of a call the runner never saved
(it saves a call with its output, after the tool ran) with its output where the model's answer
asked for it, before the next input. The next run therefore sends no orphan call (no provider
400) and is told the call may have run, so the tool is not simply run again -- whichever recovery
ran first, however often (``openai_items`` explains how a read stays as cheap as before).

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

After a crash. ``journal_run`` calls ``arepair`` before every run. A plain ``Runner.run`` (with
the hooks or without) needs nothing first when the process that drove the open turn is gone:
``get_items`` recovers that turn before it reads, so the items handed to the model show each
call answered. A turn whose owner may still be alive (another host's, or this process's own
earlier run) is not recovered by a read: a run with the hooks is then refused at its start with
``OpenTurnError`` naming ``repair`` -- call ``repair(session)`` (sync) or ``await
arepair(session)``, or have any other recovery run (``journal recover``). ``repair`` runs the
journal's recovery for the session and returns a ``Repaired``
(``journal.adapters.repaired``): what recovery appended, the calls still unanswered, or the live
process that holds the turn (then nothing is done unless ``force=True``).

What it cannot do, honestly:

- The barrier covers function tools: hosted tools run at the provider and other local tool
  families get no ``tool_call_id`` in ``on_tool_start``.
- Without the hooks there are no turns and no dispatches: the session alone is durable storage
  with typed events, and ``scan`` cannot see a tool that was running when the process died.
- Tool call ids must be unique within a session (the providers' are): the journal keeps one result
  per call id, and a reused id is refused at dispatch rather than run twice.
- A ``function_call`` the journal never answered (a call waiting for a human approval, an item
  added by hand) is left alone and listed in ``Repaired.unanswered``. A run paused for an
  approval leaves its turn open (``journal_run`` closes it); the resumed run goes on in it, with
  the same hooks or new ones (they take it over to run an approved call), but a resume that runs
  no tool (every call rejected) with new hooks is refused naming ``repair``: resume with the hooks
  that paused, or through ``journal_run``. Another process takes the paused turn over only once
  the pausing one is gone (``TurnHeld`` while it may still run): a server whose workers resume
  each other's runs should pause through ``journal_run``, which closes the paused turn.
- Approvals and crashes, three cases recovery cannot tell apart from what it reads: a run paused
  by ``Runner.run`` with the hooks whose process then died reads as a crash before the tools (a
  recovery that runs before the resume, ``journal_run``'s own repair included, answers its
  waiting calls "did not run"; the approved resume is then refused with the hooks, and without
  them the tool runs and its real result is kept after that answer as late evidence; new hooks
  on a resume that nothing recovered first take the turn over); a ``RunState`` saved before a
  crash is stale (its approved calls run again when it is resumed: with the hooks the dispatch
  is refused, as the call was dispatched; without them it pays again): after a crash start a new
  run on the session, whose items show the call answered; and a call a human rejected, in a run
  killed before the SDK saved the rejection, stays unanswered (``Repaired.unanswered`` names
  it).
- ``pop_item`` writes its marker and its ``retract`` in two transactions (the engine's
  ``retract`` is a call of its own); a crash between them leaves the item popped for the
  framework and still visible in the messages view. Popping a projected item hides it from the
  items; the typed result stays in the log and the messages view. Popping a function call's
  output retracts, in the messages and provider views, the whole exchange it ends (the model's
  message with its calls and their outputs: the engine's ``retract`` never leaves a call there
  without its answer), while ``get_items`` hides that one item: the SDK then sends the call
  without an output, which a provider refuses, so pop the exchange's items down to its call.
- Output the SDK converts differently from its own ``ItemHelpers.tool_call_output_item`` (an
  error replaced by a guardrail, say) reaches the journal twice: the hooks' result wins and the
  session's copy is kept as ``tool_result_late``.
- The projection of an interrupted answer holds its call items, not its text or reasoning items
  (the journal's ``assistant_message`` keeps the text); the runner saves the user's input before
  the agent starts, so the input's ``user_message`` precedes the run's ``turn_start``, and a run
  refused for a crash has saved its input (the retried run saves it again).
- Opening a ``JournalSession`` from a path opens the file at once, on the calling thread (as
  ``SQLiteSession`` does); its methods then never wait on the disk on the event loop.
- ``Runner.run_streamed`` calls the same session methods and hooks, but only ``Runner.run`` is
  tested here. Streamed chunks are not saved (no ``provider_started`` phase is recorded).
- A tool that returns after its run's turn was closed under it (the run raised while the tool
  went on in the background, and ``journal_run`` repaired the turn: the call MAY have run) has
  its real result kept as ``tool_result_late``, beside that answer (G5).
- A run whose turn was closed under it (another process's ``recover(force=True)``) learns it at
  its next write: after the model call that follows, not before it; the dispatch refuses the
  tool in any case (``LeaseLost``). ``add_items`` then writes nothing and raises ``LeaseLost`` (an
  error never stands for a committed write); the run's answers, dispatches and results are in
  the log already.
- One ``JournalRunHooks`` follows one run at a time, and two runs of one session in one process
  must not overlap: recovery closes a turn this process opened (it cannot tell a live run of its
  own from a dead one), so a second run's repair would close the first run's turn.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Awaitable, Callable, Sequence
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
from journal.adapters.calls import Calls as _Calls
from journal.adapters.calls import Direct as _Direct
from journal.adapters.calls import drive as _drive
from journal.adapters.openai_fold import ref_sources
from journal.adapters.openai_items import (
    CLEAR,
    ITEM,
    POP,
    READ,
    REF,
    ROWS,
    Known,
    NeedKnown,
    Shown,
    Typed,
    assistant,
    cut_tail,
    get,
    is_assistant_side,
    plan,
    pop_data,
    project,
    shown_items,
    tail_claims,
)
from journal.adapters.repaired import Repaired
from journal.aio import AsyncJournal
from journal.errors import (
    AnsweredBeforeApproval,
    CountMismatch,
    InvalidArgument,
    JournalError,
    LeaseLost,
    OpenTurnError,
    ResultExists,
    SessionExists,
    SessionNotFound,
    TurnHeld,
    UnknownToolCall,
    WrongLoop,
)
from journal.model import Event
from journal.owners import owner_is_dead

__all__ = [
    "CLEAR",
    "ITEM",
    "POP",
    "REF",
    "JournalRunHooks",
    "JournalSession",
    "Repaired",
    "arepair",
    "journal_run",
    "journal_session_id",
    "repair",
]

FRAMEWORK = "openai-agents"
_HASHED = f"{FRAMEWORK}-"  # the prefix of hashed ids: reserved, so an id given with it is hashed too
_VALID_ID = re.compile(r"[\x21-\x7e]{1,256}")
_CAS_TRIES = 100  # compare-and-append retries before giving up (each loses only to a real write)


def journal_session_id(session_id: str) -> str:
    """The journal's id for an openai-agents session id: the same id when it is one the journal
    accepts (1-256 printable ASCII characters without spaces) and does not start with the
    reserved ``openai-agents-``, else a stable ``openai-agents-<sha256>`` name -- so two
    different ids never share a journal session. The original is kept in the session's meta."""
    if not isinstance(session_id, str):
        raise InvalidArgument("session_id", f"must be a string, not {type(session_id).__name__}")
    if _VALID_ID.fullmatch(session_id) and not session_id.startswith(_HASHED):
        return session_id
    digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{_HASHED}{digest[:40]}"


# -- the journal, sync or async -------------------------------------------------------------------


# -- the session ---------------------------------------------------------------------------------


class JournalSession:
    """An openai-agents ``Session`` kept in a journal (see the module's docstring).

    ``path_or_journal``: a path or a PostgreSQL DSN (the journal is opened here, with
    ``durability``, and closed by ``close()``), or an open ``journal.Journal`` or
    ``journal.aio.AsyncJournal`` (the caller closes it; share one among many sessions).
    ``journal_id`` is the journal's session id (``journal_session_id(session_id)`` by default).
    Methods are coroutines that never wait on the disk on the event loop.
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
        self._known: Known | None = None  # what the whole log holds, when a plan needs it
        self._read: _Read | None = None  # the rows read so far (the log is append-only)

    @property
    def journal(self) -> journal.Journal | AsyncJournal:
        return self._call.target

    def run_hooks(self) -> JournalRunHooks:
        """The ``RunHooks`` that record turns, answers and dispatches for this session."""
        return JournalRunHooks(self)

    async def _ensure(self) -> None:
        """Create the journal session on the first write (as ``SQLiteSession`` does). A journal
        session that already holds another openai-agents session (a ``journal_id`` given twice)
        is refused: two conversations never share one log."""
        if self._created:
            return
        meta = {"framework": FRAMEWORK, "session_id": self.session_id}
        try:
            await self._call("create_session", self.journal_id, meta=meta)
        except SessionExists:
            found = (await self._call("session", self.journal_id)).meta or {}
            other = found.get("session_id")
            if found.get("framework") == FRAMEWORK and other != self.session_id:
                shown = other[:80] if isinstance(other, str) else other
                raise InvalidArgument(
                    "session_id",
                    f"{self.session_id!r} maps to journal session {self.journal_id!r}, which holds the openai-agents "
                    f"session {shown!r}: give each its own journal_id",
                ) from None
        self._created = True

    # -- the Session protocol ----------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first: the last ``limit`` of them (``session_settings.limit``
        when not given; all for ``None`` or a negative limit, none for 0). What recovery wrote
        that the items lack is shown in their shape and place (see ``openai_items.project``)."""
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted == 0:
            return []
        try:
            await self._recover_dead()
            if wanted is None or wanted < 0:  # every item: the common read, kept as cheap as a fold
                return await self._call.run(self._all_items)
            view = await self._view(wanted)
        except SessionNotFound:
            return []
        return [shown.item for shown in view]

    async def _recover_dead(self) -> None:
        """Recover the session's open turn when the process that drove it is gone (a crash), so
        the items read next — by any run, with the hooks or without — show each call it dispatched
        answered (MAY have run) instead of hiding it. A live process's turn, another host's, or
        one with no recorded owner is left alone (``repair`` answers it); so is the session while
        a run of its own hooks goes on."""
        hooks = self._hooks
        if hooks is not None and hooks._turn is not None:
            return
        open_turn = await self._call("turn_state", self.journal_id)
        if open_turn is not None and owner_is_dead(open_turn.owner) and not self.journal.readonly:
            await self._call("recover", self.journal_id)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items, each stored once with its typed events, in one transaction (durable
        on return), after the projections of the log's tail that the items would otherwise bury
        (see ``openai_items``): what ``get_items`` showed before stays shown, in its place."""
        if not items:
            return
        await self._ensure()
        items = list(items)
        hooks = self._hooks
        if hooks is None or hooks._turn is None:
            await self._append_items(items)
            return
        # Inside the hooks' turn: the step's bookkeeping goes in the same transaction -- the
        # step these items complete is closed with them, and the run's last items end the turn.
        ending = hooks.ending
        try:
            await hooks._fenced(lambda call: self._plan(items, call), close=True, ends=ending)
        # LeaseLost: the turn is no longer this run's, and nothing of these items was written
        # (an error never stands for a committed write: a caller may retry). What the run did is
        # in the log already: its answers and dispatches, and its results (as tool_result_late
        # evidence beside the recovery's answer).
        finally:
            if ending:
                hooks._forget()

    async def pop_item(self) -> TResponseInputItem | None:
        """Take the last item back and return it (``None`` when there is none). Nothing is deleted:
        a pop marker hides it from ``get_items``; its derived message is retracted when it is the
        transcript's last. Two pops racing take two different items (compare-and-append). The
        last item is the one ``get_items`` shows last: a dead process's turn is recovered first,
        as that read recovers it."""
        for _ in range(_CAS_TRIES):
            try:
                await self._recover_dead()
                count = await self._call("count", self.journal_id)
            except SessionNotFound:
                return None
            last = await self._view(1)
            if not last:
                return None
            (shown,) = last
            try:
                await self._call("append", self.journal_id, POP, pop_data(shown.key), expected_count=count)
            except CountMismatch:
                continue  # someone appended meanwhile: look again
            if shown.at is None:  # an item the runner saved: its typed event holds it (or follows it)
                await self._retract_derived(shown.typed)
            item: TResponseInputItem = shown.item  # the stored item, as the runner gave it
            return item
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
        self._read = self._known = None

    def close(self) -> None:
        """Close the journal if this session opened it (from a path)."""
        if self._owned is not None:
            self._owned.close()

    def __repr__(self) -> str:
        return f"<JournalSession {self.session_id!r} in {self.journal!r}>"

    # -- reading -----------------------------------------------------------------------------------

    async def _view(self, limit: int | None, call: _Calls | None = None) -> list[Shown]:
        """What ``get_items`` shows, oldest first; the last ``limit`` of it.

        The log's tail, then the rows since the last clear that store items (``ROWS``: no
        bookkeeping but the pops); or, with a limit, a window of the newest ``READ`` events (the
        rows, the clears, the turns' starts and ends) that grows until it holds the answer (pops
        between the items make a window of ``limit`` events too small; a reference names an event
        before it; the tail may reach back to an interrupted turn's start)."""
        call = call or self._call
        sid = self.journal_id
        if limit is None:
            tail, count, near = await self._tail(call)
            since, rows = await self._since_clear(call, count)
            return project(rows, tail, since=since, sources=near)
        window = limit + 16
        while True:
            newest = await call("events", sid, types=READ, newest_first=True, limit=window)
            clears = [e.seq for e in newest if e.type == CLEAR]
            since = clears[0] + 1 if clears else 0
            events = [e for e in reversed(newest) if e.seq >= since]
            whole = bool(clears) or len(newest) < window  # everything since the last clear
            tail, complete = cut_tail(events[::-1])
            if whole:
                return project(events, tail, since=since)[-limit:]
            by_seq = {e.seq: e for e in events}
            low = events[0].seq
            for event in events:  # a reference whose event was not read: below what is certain
                if event.type == REF and not ref_sources([event]) <= by_seq.keys():
                    low = max(low, event.seq + 1)
            if complete and (not tail or tail[0].seq >= low):
                view = project([e for e in events if e.seq >= low], tail, since=since, sources=by_seq)
                # Items stored before the window may still stand among what it shows (a projection
                # stored later stands at its ``at``): only what stands inside the window is certain.
                if sum(1 for shown in view if shown.pos[0] >= low) >= limit:
                    return view[-limit:]
            window *= 4

    async def _all_items(self, call: _Calls) -> list[Any]:
        """Every item ``get_items`` shows (one thread hop: see ``_Calls.run``): three indexed
        reads, the log's tail, the last clear and the rows since then."""
        tail, count, near = await self._tail(call)
        since, rows = await self._since_clear(call, count)
        return shown_items(rows, tail, since=since, sources=near)

    async def _since_clear(self, call: _Calls, count: int) -> tuple[int, list[Event]]:
        """The seq after the session's last clear marker, and the rows since then that store
        items (``ROWS``: item rows, pops and the typed events, no other bookkeeping), as of
        ``count`` events. The log is append-only, so the rows read before are kept (``_Read``)
        and only newer ones read: one walk of the log from where the last read stopped, after a
        look-up of the session (a purged and recreated session is read again)."""
        created = (await call("session", self.journal_id)).created_ms
        read = self._read
        if read is None or read.created_ms != created or read.seen > count:
            read = _Read(created)
        if read.seen < count:
            new = await call("events", self.journal_id, since=read.seen, types=[*ROWS, CLEAR])
            read = read.extended([e for e in new if e.seq < count], count)
        self._read = read  # a new object each time: a read running beside this one sees a whole one
        return read.since, [e for e in read.rows if e.seq >= read.since]

    async def _tail(self, call: _Calls) -> tuple[list[Event], int, dict[int, Event]]:
        """The log's tail (``openai_items.cut_tail``), in seq order, the session's count, and the
        events the tail's references name (by seq), read from the end of the log: a few events
        in a run without a crash."""
        window = 16
        while True:
            newest = await call("events", self.journal_id, newest_first=True, limit=window)
            tail, complete = cut_tail(newest)
            count = newest[0].seq + 1 if newest else 0
            low = newest[-1].seq if newest else 0
            if len(newest) < window or (complete and all(seq >= low for seq in ref_sources(tail))):
                return tail, count, {e.seq: e for e in newest}
            window *= 4

    async def _plan(self, items: Sequence[Any], call: _Calls) -> tuple[list[Typed], int]:
        """The batch that adds ``items`` (each stored once: ``openai_items.Planner``), after the
        projections of the tail they would bury, and the count it was planned at. Without a
        crash the tail owes nothing, and the hooks' answer and results are in it (one short read)."""
        tail, count, sources = await self._tail(call)
        try:
            batch = plan(items, tail)
        except NeedKnown:
            batch = plan(items, tail, await self._known_at(call, count))
        called = {get(i, "call_id") for i in items if get(i, "type") == "function_call"}
        answered = {get(i, "call_id") for i in items if get(i, "type") == "function_call_output"}
        if not tail_claims(tail, called=called, answered=answered, sources=sources):
            return batch, count
        since, rows = await self._since_clear(call, count)
        view = project(rows, tail, since=since, called=called, answered=answered, sources=sources)
        kept: list[Typed] = [(ITEM, {"item": s.item, "at": s.at}, None) for s in view if not s.stored]
        return kept + batch, count

    async def _known_at(self, call: _Calls, count: int) -> Known:
        """What the whole log holds (``openai_items.Known``) as of ``count`` events: folded
        from the log once, then from where it was left (a purged and recreated session over)."""
        created = (await call("session", self.journal_id)).created_ms
        known = self._known
        if known is None or known.created_ms != created or known.seen > count:
            known = Known(created)
        if known.seen < count:
            known.fold(await call("events", self.journal_id, since=known.seen), count)
        self._known = known
        return known

    async def _append_items(self, items: Sequence[Any]) -> None:
        """Append ``items`` (``_plan``), compare-and-append on the count they were planned at (a
        writer in between makes it plan again); one thread hop."""

        async def append(call: _Calls) -> None:
            for _ in range(_CAS_TRIES):
                batch, count = await self._plan(items, call)
                try:
                    await call("append_many", self.journal_id, batch, expected_count=count)
                    return
                except CountMismatch:
                    continue
            raise CountMismatch(self.journal_id, count, -1)  # pragma: no cover - a writer that never pauses

        await self._call.run(append)

    async def _retract_derived(self, typed_seq: int | None) -> None:
        """Retract the typed message a popped item is stored in (or was derived next to, in the
        previous format) if it is the transcript's last; otherwise the messages view keeps it (it
        may answer a call)."""
        if typed_seq is None:
            return
        last = await self._call("messages", self.journal_id, tail=1)
        if last and last[0].seq == typed_seq:
            await self._call("retract", self.journal_id, reason="openai-agents pop_item")


@attrs.frozen
class _Read:
    """The rows of one incarnation of a session (``created_ms``) read so far: those of its first
    ``seen`` events, since its last clear (``since``)."""

    created_ms: int
    seen: int = 0
    since: int = 0
    rows: tuple[Event, ...] = ()

    def extended(self, new: Sequence[Event], seen: int) -> _Read:
        clears = [e.seq for e in new if e.type == CLEAR]
        since = clears[-1] + 1 if clears else self.since
        kept = tuple(e for e in (*self.rows, *new) if e.seq >= since and e.type != CLEAR)
        return _Read(self.created_ms, seen, since, kept)


# -- the hooks -----------------------------------------------------------------------------------


_REPAIR_FIRST = (
    "a run of this session did not finish (a crash?): repair(session) or await arepair(session) answers its "
    "calls and closes it honestly (journal_run does it before each run); unless another process is running it"
)


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
        # The calls these hooks dispatched that have not returned: a result that comes back
        # after their turn was closed under them (a repair once the run raised while a tool went
        # on in the background) is still the call's real result, kept as evidence (G5).
        self._out: set[str] = set()
        self._handoff = False
        self.ending = False  # the agent produced its final output; its items are saved next
        session._hooks = self

    @property
    def _call(self) -> _Calls:
        return self.session._call

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        if self._turn is not None:
            handoff, self._handoff = self._handoff, False
            if handoff and not self._running:  # the same run goes on with another agent (or a
                return  # resumed run's approved tools ran in its turn): the same turn
            if self.ending:
                await self.finish()
            else:  # a run of these hooks ended without closing its turn
                open_turn = await self._call("turn_state", self.session.journal_id)
                if open_turn is not None and open_turn.start_seq == self._turn.start_seq and self._running:
                    # It ended inside a tool (it raised, was cancelled, timed out): the runner
                    # read the session's items already, and a repair now would come too late
                    # for them (the model would see neither the call nor its answer, and pay
                    # again), so the run is refused, as with fresh hooks, before the model is asked.
                    raise OpenTurnError(open_turn.start_seq, _REPAIR_FIRST)
                # Otherwise nothing ran unanswered (it paused for a human's approval, or raised
                # outside the tools): its turn is closed as the journal's recovery says.
                await _repair(self._call, self.session, force=False, report=False)
        await self._start_turn()

    async def _start_turn(self) -> None:
        await self.session._ensure()
        try:
            turn = await self._call("turn_start", self.session.journal_id)
        except OpenTurnError as exc:
            # A run that did not finish (a crash) left its turn open. The runner has already
            # read the session's items for the model: repairing here would be too late for them.
            raise OpenTurnError(exc.seq, _REPAIR_FIRST) from exc
        self._turn, self._steps, self._running, self.ending = turn, _Steps(), 0, False
        self._count, self._mine = turn.start_seq + 1, set()

    async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
        self._handoff = True

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: str | None, input_items: list[Any]) -> None:
        # Nothing to write on the way to the model in a plain loop: the previous step was closed
        # with its items, and this one is written with the answer. A crash during the call
        # leaves an open turn whose steps are all closed: recovery closes it as interrupted.
        self._handoff = False  # the agent runs: an approved call's handover (on_tool_start) is over
        if self._turn is not None and (self._steps.open or self._steps.unsaved):
            await self._fenced([], close=True)  # a step that saved no items: closed now, as it was

    async def on_llm_end(self, context: Any, agent: Any, response: ModelResponse) -> None:
        if self._turn is None:
            return
        items = response.to_input_items()
        if not any(get(i, "type") == "function_call" for i in items):
            # A plain answer is recorded from the session's items, with them (and its step).
            self._steps = attrs.evolve(self._steps, unsaved=True)
            return
        group = [i for i in items if isinstance(i, dict) and is_assistant_side(i)]
        ((kind, data, key),) = assistant(group, keep_items=True)
        usage = response.usage
        cached = getattr(usage.input_tokens_details, "cached_tokens", None) or 0
        data["usage"] = {"input": usage.input_tokens, "output": usage.output_tokens, "cache_read": cached}
        # The step opens with the answer that asks for the calls, in one transaction, before
        # any tool runs (each tool's dispatch is its own synced commit after this one).
        await self._fenced([(kind, data, key)], opens=True)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        call_id = getattr(context, "tool_call_id", None)
        if not isinstance(call_id, str):
            return
        if self._turn is None:
            # A run resumed after a human approved a call runs that tool before the agent
            # starts: the run's turn opens here, so the dispatch is committed before the tool
            # runs (the journal dispatches the earlier turn's call in this one).
            try:
                await self._start_turn()
            except OpenTurnError:
                if not _approved(context, tool, call_id):
                    raise
                # The run that paused for this approval (other hooks: a plain ``Runner.run``
                # gets new ones each time) left its turn open: this run goes on in it, taken
                # over (``TurnHeld`` if another live process drives it).
                self._turn = await self._call("take_over", self.session.journal_id)
                self._steps, self._running, self.ending = _Steps(), 0, False
                self._count, self._mine = None, set()  # unknown: the next write reads the turn first
            self._handoff = True  # on_agent_start goes on in this turn
        elif _approved(context, tool, call_id):
            # The same, with the hooks of the run that paused for the approval: its turn is
            # still open, and the resumed run goes on in it (on_llm_start, once the agent has
            # started, ends this; a run that raised does not go on so).
            self._handoff = True
        try:
            done = await self._call("dispatch", self.session.journal_id, call_id, turn=self._turn)
        except ResultExists as exc:
            if _approved(context, tool, call_id):
                raise AnsweredBeforeApproval(exc.session_id, exc.call_id) from None
            raise
        except UnknownToolCall:
            # The answer was not seen here (a run resumed after an approval): record the call
            # first; a raise in this hook would keep the tool from running.
            item = _call_item(context)
            ((kind, data, key),) = assistant([item], keep_items=True)
            self._note(await self._call("append", self.session.journal_id, kind, data, key=key))
            done = await self._call("dispatch", self.session.journal_id, call_id, turn=self._turn)
        self._running += 1
        self._out.add(call_id)
        self._note(done.event)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        call_id = getattr(context, "tool_call_id", None)
        if not isinstance(call_id, str) or (self._turn is None and call_id not in self._out):
            return
        self._out.discard(call_id)
        closed = self._turn is None  # closed under the tool (its answer: MAY have run): kept late
        if not closed:
            self._running = max(0, self._running - 1)
        outcome = await self._call("put_result", self.session.journal_id, call_id, _output(context, tool, result))
        if not closed:
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
        self,
        payload: list[Typed] | Callable[[_Calls], Awaitable[tuple[list[Typed], int]]],
        *,
        opens: bool = False,
        close: bool = False,
        ends: bool = False,
    ) -> list[Event]:
        """Append ``payload`` with the turn's bookkeeping around it, in one transaction fenced by
        the session's event count (compare-and-append). ``payload`` may be a planner that reads
        the log and returns the rows and the count it read them at (``JournalSession._plan``):
        rows planned at another count than the fence's are planned again.

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
            if callable(payload):
                rows, planned_at = await payload(self._call)
                if planned_at != count:
                    count = None  # the log moved since the hooks' last write: read the turn again
                    continue
            else:
                rows = payload
            batch, after = _bookkeep(turn.turn, steps, rows, opens=opens, close=close and not self._running, ends=ends)
            if not batch:
                return []
            try:
                events: list[Event] = await self._call("append_many", sid, batch, expected_count=count)
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
    turn: int, steps: _Steps, payload: list[Typed], *, opens: bool, close: bool, ends: bool
) -> tuple[list[Typed], _Steps]:
    """The batch that writes ``payload`` inside the turn and the steps after it (pure)."""
    number, is_open = steps.steps, steps.open
    batch: list[Typed] = []

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


def _approved(context: Any, tool: Any, call_id: str) -> bool:
    """Whether a human approved this call (a run resumed from a paused ``RunState``)."""
    check = getattr(context, "is_tool_approved", None)
    try:
        return callable(check) and check(getattr(tool, "name", ""), call_id) is True
    except Exception:  # pragma: no cover - an SDK whose approvals read otherwise: not approved
        return False


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
    except Exception:
        return str(result)


# -- repair --------------------------------------------------------------------------------------


def repair(session: JournalSession, *, force: bool = False) -> Repaired:
    """After a crash: run the journal's one recovery for the session (``recover``: a synthetic
    result for each call its interrupted turn owes, then ``turn_end(interrupted)``), so that the
    session's items show every call it answered (``get_items`` projects it) and the next run pays
    nothing twice. Idempotent, and the same whichever recovery ran first (``journal recover``,
    ``j.recover()``): then it appends nothing. (``reconcile()`` writes nothing for a session
    that queued no submission, as an adapter's: after it, this repairs as after nothing.)

    A turn another live process still drives is left alone (``Repaired.live_owner``) unless
    ``force=True``. ``Repaired.added`` is empty (reads project; nothing is copied);
    ``Repaired.unanswered`` lists the calls the items show that the journal holds no result for
    (a call awaiting a human approval). Synchronous: on a sync ``Journal`` it blocks the calling
    thread (inside a coroutine prefer ``await arepair(session)``); a session on an
    ``AsyncJournal`` is refused with ``WrongLoop`` (its writes belong to its event loop)."""
    target = session.journal
    if isinstance(target, AsyncJournal):
        raise WrongLoop("repair", "synchronous code: repair a session on an AsyncJournal with await arepair(session)")
    return _drive(_repair(_Direct(target), session, force=force))


async def arepair(session: JournalSession, *, force: bool = False) -> Repaired:
    """``repair``'s awaitable twin: the same recovery and answer, never waiting on the disk on
    the event loop (a sync ``Journal``'s calls run in a worker thread)."""
    return await _repair(session._call, session, force=force)


async def _repair(call: _Calls, session: JournalSession, *, force: bool, report: bool = True) -> Repaired:
    """``repair`` over ``call`` (direct or off the loop); ``report=False`` skips the read of the
    session's items that ``Repaired.unanswered`` needs (the run helpers read them next anyway)."""
    sid = session.journal_id
    try:
        open_turn = await call("turn_state", sid)
    except SessionNotFound:
        return Repaired(sid)
    recovered: tuple[Event, ...] = ()
    if open_turn is not None:  # recovery closes open turns; with none there is nothing to recover
        for result in await call("recover", sid, force=force):
            if result.live_owner is not None:
                return Repaired(sid, live_owner=result.live_owner)
            recovered += tuple(result.appended)
        hooks = session._hooks
        if hooks is not None and hooks._turn is not None and recovered:
            hooks._forget()  # the hooks' turn was the session's open one: it is closed now
    if not report:
        return Repaired(sid, recovered)
    view = await session._view(None, call)
    answered = {get(s.item, "call_id") for s in view if get(s.item, "type") == "function_call_output"}
    unanswered = tuple(
        get(s.item, "call_id")
        for s in view
        if get(s.item, "type") == "function_call" and get(s.item, "call_id") not in answered
    )
    return Repaired(sid, recovered, (), unanswered)


# -- one run -------------------------------------------------------------------------------------


async def journal_run(
    agent: Agent[Any],
    input: str | list[TResponseInputItem],
    *,
    session: JournalSession,
    hooks: JournalRunHooks | None = None,
    **kwargs: Any,
) -> RunResult:
    """``Runner.run`` with the session and its hooks, after ``arepair`` and closing the run's turn
    however it ends.

    Before the run the session is repaired (nothing to do without a crash: one read);
    ``TurnHeld`` if another live process drives its turn. If the run raises, its turn is closed
    by ``arepair`` (its calls answered as the journal's recovery says) and the error re-raised."""
    hooks = hooks if hooks is not None else (session._hooks or session.run_hooks())
    done = await _repair(session._call, session, force=False, report=False)
    if done.live_owner is not None:
        held = await session._call("turn_state", session.journal_id)
        raise TurnHeld(
            session.journal_id,
            held.start_seq if held is not None else -1,
            done.live_owner,
            "another process is running this session",
        )
    try:
        result = await Runner.run(agent, input, session=session, hooks=hooks, **kwargs)
    except Exception:
        try:
            await _repair(session._call, session, force=False, report=False)
        except JournalError:
            pass  # the run's own error says more; the next run's repair closes the turn
        raise
    await hooks.finish()
    return result
