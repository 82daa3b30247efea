"""LangGraph on the journal: ``JournalSaver``, a ``BaseCheckpointSaver``, and ``repair``.

Plug it in with one line::

    graph = builder.compile(checkpointer=JournalSaver("agent.db"))
    graph.invoke(inputs, {"configurable": {"thread_id": "t1"}}, durability="sync")

**How a thread is stored.** A thread is a journal session (a thread id that is a valid session id
is kept; any other becomes ``lg~`` + its SHA-256; the original is in the session's meta,
``{"adapter": "langgraph", "thread_id": ...}``). In one transaction per ``put``:

- the checkpoint record — id, ts, channel versions, versions seen, metadata, parent id, namespace,
  everything but the channel values — as an ``x.langgraph.checkpoint`` event keyed by
  namespace and checkpoint id (a retried put writes nothing);
- each channel value whose version changed, serialized by the saver's ``serde``, as keyed state
  under ``lg.v:[namespace, channel, version]``. A channel that did not change is not copied: the
  state grows with what changed. The messages channel, which LangGraph hands over whole at each
  step, is stored as its delta (``langgraph_delta``): the new messages' bytes after the version
  this saver stored or read last, with the chain of versions it extends (a message's bytes
  once a base-``FANOUT`` digit of its version's place in the lineage; a full copy only when a
  message was replaced, removed or changed in place), so a thread's bytes grow with its messages
  (times that small log: a chat of 300-byte messages adds 11–14 KB a turn, all told, at turn 150
  as at turn 550, where a full copy every 32 versions grew from 14 to 41 KB), and every
  checkpoint — history, forks, pruned ones — reads back exactly. (Another process deleting and
  re-creating a thread this saver is still writing is not supported.)
- in the root namespace, the typed events derived from the new messages of the ``messages``
  channel: a ``HumanMessage`` is a ``user_message``; an ``AIMessage`` with tool calls opens a turn
  if none is open, and is an ``assistant_message`` with its ``tool_calls`` followed by one
  ``tool_call`` (a dispatch) per call; a ``ToolMessage`` is a ``tool_result`` (first write wins,
  G5); an ``AIMessage`` without tool calls is an ``assistant_message`` and ends the open turn
  (in a subgraph: unless a subgraph running beside it still owes a call its model asked last;
  a subgraph's calls and answers note its namespace and the root checkpoint it ran from).
  Every derived event is keyed (by message id or call id), so a put seen twice adds nothing.

``put_writes`` stores each write as an ``x.langgraph.write`` event keyed by (namespace, checkpoint
id, task id, index): two processes writing the same task store it once. Special writes (errors,
interrupts, resumes) replace an earlier one, as in LangGraph's SQLite saver. A ``ToolMessage``
written to the root ``messages`` channel is a ``tool_result`` at once, in the same transaction.

**What it guarantees.** Durability: every put and write is one transaction, durable when it
returns (G1, G2). The dispatch barrier (G6) holds under ``durability="sync"``: LangGraph then
commits the checkpoint that holds the ``AIMessage`` with tool calls before the tool node runs, and
that checkpoint's transaction holds the ``tool_call`` events. So after a crash ``scan()`` names
every call that may have run.

**One recovery.** Whichever recovery runs — ``journal recover`` from a shell, ``j.recover()``,
the async face's, or ``repair`` — the thread's *head* (its newest checkpoint, what the next run
builds on) is read with what the journal knows projected into it (``langgraph_projection``): an
``AIMessage`` whose calls have no ``ToolMessage`` gets, right after it, the ``ToolMessage`` a task
stored before the crash or else the journal's result ("MAY have run"), in the channel values
themselves (LangGraph drops pending writes when new input arrives), and the pending tool node's
task reads as finished, going back to the node that asked. So ``get_state`` right after
``journal recover`` shows the call answered, ``graph.invoke(None)`` goes on to the model without
running the tool again, and ``graph.invoke(new input)`` hands the model an answered transcript.
Older checkpoints read as stored, but for one a run built on (the parent of a checkpoint put
after that read): it reads as it was shown, and so does its child, which names the answered
list's version (a new input's first checkpoint, say: a fork from it hands the model no
unanswered call). With nothing run first, the head's read itself recovers the
thread's turn when the process that drove it is gone (the saver records its process as the turn's
owner; a live one's turn, or another host's, is left alone): ``graph.invoke(None)`` or a new input
right after a crash is answered the same way, never a second run of the tool.
``repair(graph, config)`` runs the recovery and stores that
projected head as a real checkpoint, through the graph (``update_state`` as its ``ToolNode``, so
the graph's own edges say what runs next); it is idempotent and builds on exactly the head it read.

**Durability modes.** ``"sync"``: the barrier above; a kill anywhere in a tool step is answered
and never re-run. ``"async"``: LangGraph stores checkpoints while the next step runs, so a tool
may start before the journal has heard of its call: a call the journal knows is answered as
above; one it never heard of is not (the head then reads as an earlier step, and LangGraph asks
the model again or runs the tool node again). What is handed to the model is valid either way:
the head's channel values never hold an unanswered call the journal can answer, nor an answer
without its call. ``"exit"``: only the last checkpoint of a run is written; a crash loses the
run, and the previous head stands.

**PostgreSQL.** ``JournalSaver("postgresql://user@host/db")`` opens the journal on a server (the
same guarantees, DESIGN §16); or pass an open ``journal.Journal`` to share it with the rest of
the application (``JournalSaver(j)``; the saver then leaves it open).

**Stops that are not a finish.** A tool task that raised (``handle_tool_errors=False``), or that
paused at ``interrupt()`` and was resumed (``Command(resume=...)``) by a process that then died,
reads after recovery as finished with the journal's answers: its stored error, interrupt and
resume writes no longer send LangGraph to run it again, and it goes back to the node that asked
for the calls (the model's node, found from the checkpoint whose step added the ``AIMessage``,
however many nodes ran between them: a human review, say). Tools run through ``Send`` (one task
per call: the prebuilt agent's ``version="v2"``) have each task shown finished with its call's
answer. A pause whose process ended normally is not a crash: reads leave it open for the resume
(a resume ``Command(resume=...)`` stored after the last interrupt says the run went on, so a
death inside the resumed tool is recovered as any crash; a second ``interrupt()`` in the resumed
tool is a pause again; under ``"async"`` an interrupt stored before its checkpoint is found).

**What it cannot.** A tool node that interrupts (``interrupt()`` for human approval) has its calls
recorded as dispatched: recovering such a thread while it waits (``journal recover``, ``repair``)
reports them as "may have run" and the resume then finds the task finished (the tool does not
run) — recover only a thread whose run died. LangGraph stores a resume in the background while
the resumed node runs (and one given by interrupt id only when the node ends): a process killed
in the resumed tool before that write is stored leaves the thread reading as still paused, and a
second resume runs the tool again. A node between the model and the tools that raised reads,
after recovery, as the tool task (its calls answered "MAY have run", the tools not run). Without
the graph (a read after ``journal recover``), the projected tool task goes back to the node that
asked for the calls; ``repair`` follows the graph's own edges. An answer of your own given after a
crash (``update_state(..., as_node="tools")`` with a ``ToolMessage``) takes the place of the one
the read showed (the journal's, "MAY have run") in the checkpoint it makes, so the model gets one;
the journal's result stays the call's result in the typed log (first write wins, G5), and yours
is kept there as ``tool_result_late``.
A subgraph's messages are typed events too (each once: the root's copy of a message a subgraph
returned is the same event), so a tool node inside a subgraph has the same barrier, and its head in
its namespace reads with recovery's answers as the root's does: ``invoke(None)`` after any recovery
goes on in the subgraph without running the tool again. LangGraph's root holds a subgraph's
messages only once it returns; the root's head reads with the exchange of a subgraph that died
under it (recovery answered a call in it, or no live run goes on) after its own messages, each
subgraph's in turn (when its messages go on from the root's, as a node sharing its ``messages``
does; a node function that passes the subgraph a part of them, or keeps some of its messages
to itself, is shown them too), so a new input, or a run from the root head's own config
(LangGraph replays the subgraph from its start, from those messages), hands the model the call
answered; a subgraph inside a subgraph the same way, through its parent. Two subgraphs side by
side share the thread's one journal turn: the model of one answering (no calls) leaves it open
while the other's latest calls are owed (its tool may still run: a kill there is recovered as any),
and the last to answer ends it, or else the root's checkpoint once they returned, when its
messages owe no call (one a review dropped is not there). A parent's copy of messages its
subgraphs derived (a middle subgraph's, the root's) adds nothing to the typed log. A tool task that
finished and wrote state of its own besides its answers (``Command(update=...)``) reads as run too:
that state is the head's null writes, which LangGraph applies before the next step (every run from
the head, a replay included; ``get_state`` shows them) and ``repair`` hands over with the answers
(its ``goto`` too: the node it names runs next, beside the one that asked; messages of its own
after its answer too). That needs the node that asked to be known (the node that ran in the step
that asked, or of several, a ``goto``'s node beside the model, the one whose task wrote the call's
message); when the records do not tell, the task is left for LangGraph to apply (``invoke(None)``
does; a replay from the head's own config runs it again), as a ``Command(graph=Command.PARENT)``
from a subgraph's tool is. A subgraph's channels
are stored whole each time it runs (a new namespace: no delta), so an agent run as a subgraph grows
with the square of its thread.
Messages replaced or removed in LangGraph's state (same id, ``RemoveMessage``) keep their first
form in the journal's transcript. ``prune`` and ``delete_for_runs`` hide checkpoints with an
``x.langgraph.delete`` event (the journal is append-only, G3): their bytes stay until
``delete_thread``, which purges the whole session. A DeltaChannel (beta) history crossing a
hidden checkpoint reads as starting empty there, as LangGraph warns for any pruning saver.
``copy_thread`` is ``fork``: O(1) in the thread's events, plus a copy of one state row per key —
here one per stored channel version.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import builtins  # the saver has a `list` method (LangGraph's API): the annotations after it say builtins.list
import hashlib
import json
import logging
import random
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from os import PathLike
from typing import Any

import attrs

from journal.adapters import refuse_async_journal, require

require("langgraph.checkpoint.base", "langgraph")

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.constants import START
from langgraph.types import Command
from typing_extensions import Self  # (3.10: typing.Self is 3.11+; langchain-core brings it)

import journal
from journal.adapters import langgraph_delta as delta
from journal.adapters import langgraph_projection as projection
from journal.adapters.repaired import Repaired
from journal.errors import ToolNodeNotFound
from journal.owners import owner_is_dead

__all__ = ["JournalSaver", "Repaired", "ToolNodeNotFound", "arepair", "repair", "session_id_for"]

log = logging.getLogger(__name__)

# The pending write of a node that called ``interrupt()`` (a special write of LangGraph's, as
# ``WRITES_IDX_MAP`` names it; its constant is private in LangGraph 1.x).
INTERRUPT = "__interrupt__"
RESUME = "__resume__"  # a resume: Command(resume=...)'s (null task), or a task's own list of them
assert INTERRUPT in WRITES_IDX_MAP and RESUME in WRITES_IDX_MAP
CHECKPOINT = "x.langgraph.checkpoint"
WRITE = "x.langgraph.write"
SAVED_ID = "journal-saved:"  # the id a read gives an answer a task stored without one (see _project)
NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"  # where LangGraph stores a resume no task took yet
TASKS = "__pregel_tasks"  # the channel of the Send packets the next step runs, a task each
DELETE = "x.langgraph.delete"
META_ADAPTER = "langgraph"
_HASHED = "lg~"
_SESSION_ID = re.compile(r"[\x21-\x7e]{1,256}")
_MAX_KEY = 256
_SURFACE = ["user_message", "system_message", "assistant_message", "tool_result"]
_TURN_KEY = "lg.turn"  # {"turn": n, "steps": k}: the number of the last turn opened here
# A derived event that would break the batch (a dispatch the log already holds without our key,
# content the codec refuses): the checkpoint is then stored alone, and the mirror skipped.
_MIRROR_ERRORS = (journal.InvalidEvent, journal.AlreadyDispatched, journal.NoOpenTurn, journal.ResultExists)


# -- names ----------------------------------------------------------------------------------------


def session_id_for(thread_id: object) -> str:
    """The journal session of a LangGraph thread: the thread id itself when it is a valid session
    id (1-256 printable ASCII, no spaces) not starting with ``lg~``, else ``lg~`` + its SHA-256."""
    text = str(thread_id)
    if _SESSION_ID.fullmatch(text) and not text.startswith(_HASHED):
        return text
    return _HASHED + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _key(prefix: str, *parts: object) -> str:
    """An idempotency or state key naming ``parts`` unambiguously; hashed when too long."""
    text = f"{prefix}:{json.dumps(parts, ensure_ascii=True, separators=(',', ':'))}"
    if len(text) <= _MAX_KEY:
        return text
    return f"{prefix}#{hashlib.sha256(text.encode()).hexdigest()}"


def _value_key(ns: str, channel: str, version: object) -> str:
    return _key("lg.v", ns, channel, str(version))


# -- encodings ------------------------------------------------------------------------------------


def _pack(typed: tuple[str, bytes]) -> bytes:
    """A serde ``(type, bytes)`` pair as one state value: the type, a NUL, the bytes."""
    return typed[0].encode() + b"\0" + bytes(typed[1])


def _unpack(blob: bytes) -> tuple[str, bytes]:
    kind, _, data = bytes(blob).partition(b"\0")
    return kind.decode(), data


def _b64(typed: tuple[str, bytes]) -> list[str]:
    return [typed[0], base64.b64encode(bytes(typed[1])).decode("ascii")]


def _unb64(pair: list[str]) -> tuple[str, bytes]:
    return pair[0], base64.b64decode(pair[1])


def _is_json(value: Any) -> bool:
    """Whether ``value`` is stored as plain JSON and read back equal (else it goes through serde)."""
    try:
        return bool(json.loads(json.dumps(value, allow_nan=False)) == value)
    except (TypeError, ValueError, RecursionError):
        return False


def _content(value: Any) -> Any:
    """Message content as the journal takes it: a string, or JSON content blocks."""
    return value if isinstance(value, str) or _is_json(value) else str(value)


# -- the typed events derived from messages ---------------------------------------------------------


@attrs.define
class _Turn:
    """Where the thread's journal turn stands while a batch of messages is derived."""

    open: bool
    number: int
    steps: int
    # Where the batch's messages come from: a subgraph's namespace and the root checkpoint it ran
    # from (``parents[""]``), kept on the calls it asks (``_ASKED``); ``None``: the root's own.
    asked: dict[str, str] | None = None
    # The open turn's calls a task running beside this batch's asked and still owes: a model's
    # answer without calls here does not end the turn over them (``_owed_beside``).
    owed: set[str] = attrs.field(factory=set)


# The metadata key of a subgraph's call: the namespace that asked and the root checkpoint it ran from.
_ASKED = "langgraph"


def _derive(
    messages: Sequence[Any], start: int, turn: _Turn, held: frozenset[int] = frozenset()
) -> list[tuple[str, dict[str, Any], str | None]]:
    """The typed events for ``messages[start:]`` (pure): each keyed by message or call id so a
    message derived twice is written once; the places in ``held`` (derived before) are passed
    over, their turn bookkeeping with them. ``turn`` is advanced in place."""
    items: list[tuple[str, dict[str, Any], str | None]] = []
    for index in range(start, len(messages)):
        if index in held:
            continue
        message = messages[index]
        kind = getattr(message, "type", None)
        ident = _ident(message, index)
        key = _key("lg.m", ident)
        if kind == "human":
            items.append(("user_message", {"content": _content(message.content)}, key))
        elif kind == "system":
            items.append(("system_message", {"content": _content(message.content)}, key))
        elif kind == "tool":
            items.append(("tool_result", _result(message), key))
            turn.owed.discard(str(message.tool_call_id))
        elif kind in ("ai", "AIMessageChunk"):
            calls = [
                {"id": c["id"], "name": c["name"], "arguments": c.get("args", {})}
                for c in getattr(message, "tool_calls", None) or []
                if c.get("id")
            ]
            data: dict[str, Any] = {
                "content": _content(message.content),
                "stop_reason": "tool_use" if calls else "stop",
            }
            usage = getattr(message, "usage_metadata", None)
            if usage:
                data["usage"] = {"input": usage.get("input_tokens", 0), "output": usage.get("output_tokens", 0)}
            if turn.asked is not None:
                data["metadata"] = {_ASKED: turn.asked}  # where it was asked (``_owed_beside``)
            if calls:
                if not turn.open:
                    turn.open, turn.number, turn.steps = True, turn.number + 1, 0
                    items.append(("turn_start", {"turn": turn.number}, _key("lg.ts", ident)))
                turn.steps += 1
                items.append(("assistant_message", {**data, "tool_calls": calls}, key))
                items.extend(("tool_call", call, _key("lg.d", call["id"])) for call in calls)
            else:
                items.append(("assistant_message", data, key))
                if turn.open and not turn.owed:
                    turn.steps += 1
                    end = {"turn": turn.number, "steps": turn.steps, "reason": "complete"}
                    items.append(("turn_end", end, _key("lg.te", ident)))
                    turn.open = False
    return items


def _owed_beside(j: journal.Journal, session_id: str, start_seq: int, asked: dict[str, str]) -> set[str]:
    """The calls of the turn open since ``start_seq`` that a subgraph running beside the one
    ``asked`` names asked (another namespace run from the same root checkpoint: a parallel
    branch, or a subgraph its tool runs) in its latest model message, when they have no result
    yet. A model's answer without calls in one subgraph does not end the turn over them: their
    tool may still run, and a kill in it must find the turn open (recovery answers only an
    interrupted turn's calls). Calls asked in this namespace, in an earlier step of the root, or
    by a subgraph whose model has answered since, still end with the answer (a review may have
    dropped them: a turn is not held open over them)."""
    latest: dict[str, set[str]] = {}  # each namespace beside: the calls of its latest model message
    for event in j.events(session_id, since=start_seq, types=["assistant_message"]):
        where = (event.data.get("metadata") or {}).get(_ASKED)
        if isinstance(where, dict) and where.get("from") == asked["from"] and where.get("ns") != asked["ns"]:
            calls = event.data.get("tool_calls") or ()
            latest[str(where.get("ns"))] = {str(c.get("id")) for c in calls if isinstance(c, dict)}
    beside = set().union(*latest.values())
    return beside - set(_journal_results(j, session_id, beside))


def _settled(messages: Sequence[Any]) -> bool:
    """Whether a root checkpoint's messages owe no call: none unanswered (a call a review took
    out is no longer there), and the last is no tool's answer (the model reads it next)."""
    return bool(messages) and getattr(messages[-1], "type", None) != "tool" and not projection.unanswered(messages)


def _ends(message: Any) -> bool:
    """Whether a message is a model's answer without calls (what ends an open turn)."""
    return getattr(message, "type", None) in ("ai", "AIMessageChunk") and not getattr(message, "tool_calls", None)


def _ident(message: Any, index: int) -> str:
    """A message's id, or for one without an id its position in the list."""
    mid = getattr(message, "id", None)
    return str(mid) if mid else f"#{index}"


def _result(message: Any) -> dict[str, Any]:
    """A ``ToolMessage`` as a ``tool_result``; a repair's message carries the journal's metadata
    so that it reads as the same result as the synthetic one (G5 writes nothing twice)."""
    data: dict[str, Any] = {"tool_call_id": message.tool_call_id, "content": _content(message.content)}
    if message.name:
        data["name"] = message.name
    if getattr(message, "status", None) == "error":
        data["is_error"] = True
    extra = (getattr(message, "response_metadata", None) or {}).get("journal")
    if isinstance(extra, dict):
        data["metadata"] = extra
    return data


def _listed(value: Any) -> list[Any]:
    """One write to the messages channel as a list (a message or a list of them)."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _tool_messages(value: Any) -> list[Any]:
    """The ``ToolMessage``s of one write to the messages channel (a message or a list of them)."""
    return [v for v in _listed(value) if getattr(v, "type", None) == "tool" and getattr(v, "tool_call_id", None)]


class _History:
    """A thread's checkpoint events, newest first, read lazily in growing pages through the
    index of app events (finding the latest is one index seek), with the seq of each one seen."""

    def __init__(self, j: journal.Journal, session_id: str) -> None:
        self._journal, self._session_id = j, session_id
        self._events: list[journal.Event] = []
        self._seqs: dict[tuple[str, str], int] = {}
        self._limit, self._done = 16, False

    def _more(self) -> bool:
        if self._done:
            return False
        page = self._journal.events(self._session_id, types=[CHECKPOINT], newest_first=True, limit=self._limit)
        # Older than the last one seen: an append meanwhile shifts the page, never repeats one.
        new = [e for e in page if e.seq < self._events[-1].seq] if self._events else page
        self._events.extend(new)
        for event in new:
            self._seqs.setdefault((event.data["ns"], event.data["id"]), event.seq)
        self._done, self._limit = len(page) < self._limit, self._limit * 8
        return bool(new)

    def __iter__(self) -> Iterator[journal.Event]:
        index = 0
        while index < len(self._events) or self._more():
            yield self._events[index]
            index += 1

    def writes_since(self, event: journal.Event) -> int:
        """Where the pending writes of checkpoint ``event`` start: at its grandparent's record.

        A checkpoint's writes come from the tasks that run from it, and LangGraph stores them
        after that checkpoint's parent: with ``durability="sync"`` it commits each checkpoint
        before the next step runs, and only the input checkpoint's own put can come after its
        writes. Under ``"async"`` the puts lag behind the steps: a step's writes were seen
        stored before the records of its checkpoint and of that one's parent, so the read starts
        a generation earlier (a lag of more would not be found). Without those: from the start."""
        seq, where = event.seq, (event.data["ns"], event.data.get("parent_id"))
        for _generation in range(2):
            if where[1] is None:
                return 0
            while where not in self._seqs and self._more():
                pass
            if where not in self._seqs:
                return 0
            seq = min(seq, self._seqs[where])
            record = next(e for e in self._events if e.seq == self._seqs[where])
            where = (where[0], record.data.get("parent_id"))
        return seq


# -- the saver ------------------------------------------------------------------------------------


class JournalSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer that keeps each thread as a journal session (see the module doc).

    ``path_or_journal``: a file (opened here, closed by ``close()``) or an open ``journal.Journal``
    (left open). ``durability``: the journal's, for a file opened here. ``messages_channel``: the
    channel whose messages become typed events (``None``: no typed events). The async methods
    run the sync ones in a worker thread: an event loop never waits on an fsync.
    """

    def __init__(
        self,
        path_or_journal: str | PathLike[str] | journal.Journal,
        *,
        serde: SerializerProtocol | None = None,
        durability: str = "full",
        messages_channel: str | None = "messages",
    ) -> None:
        super().__init__(serde=serde)
        refuse_async_journal(path_or_journal)
        if isinstance(path_or_journal, journal.Journal):
            self.journal, self._owned = path_or_journal, False
        else:
            self.journal, self._owned = journal.open(path_or_journal, durability=durability), True
        self.messages_channel = messages_channel
        self._known: set[str] = set()
        # The last version of each thread's messages list this saver stored or read, by
        # (session, namespace, channel): the base its next version is stored as a delta of.
        self._lists: dict[tuple[str, str, str], delta.Stored] = {}
        # The channel versions a read made when it showed the tool tasks run in a checkpoint
        # (``_fold``), by (session, namespace, checkpoint id): stored with the child checkpoint
        # that still names them.
        self._folded: dict[tuple[str, str, str], dict[str, str]] = {}
        # The threads whose subgraphs' messages this saver derived (``_held_after``).
        self._nested: set[str] = set()
        self._warned: set[str] = set()  # channels of messages named in a warning (``_warn_elsewhere``)

    def close(self) -> None:
        """Close the journal if this saver opened it."""
        if self._owned:
            self.journal.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get_next_version(self, current: str | int | None, channel: None = None) -> str:
        """Versions with a random tail, as LangGraph's own savers make them: two branches of one
        thread never give one channel the same version, so a state key names one value."""
        number = 0 if current is None else current if isinstance(current, int) else int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- threads ---------------------------------------------------------------------------------

    def _ensure(self, session_id: str, thread_id: str) -> None:
        """Create the thread's session on its first write (another process may race: fine)."""
        if session_id in self._known:
            return
        try:
            self.journal.create_session(session_id, meta={"adapter": META_ADAPTER, "thread_id": thread_id})
        except journal.SessionExists:
            pass
        self._known.add(session_id)

    def _append(self, session_id: str, thread_id: str, items: list[Any], state: dict[str, Any]) -> list[journal.Event]:
        # owned: a turn this put opens is driven by this process, so a read after it died knows
        # a crash left it (``_recover_dead``) and recovery leaves it alone while it lives.
        self._ensure(session_id, thread_id)
        try:
            return self.journal.append_many(session_id, items, state=state or None, owned=True)
        except journal.SessionNotFound:  # deleted by another saver since: a new thread
            self._known.discard(session_id)
            self._ensure(session_id, thread_id)
            return self.journal.append_many(session_id, items, state=state or None, owned=True)

    def _recover_dead(self, session_id: str) -> None:
        """Recover the thread's open turn when the process that drove it is gone (a crash), before
        its head is read: the read — and so ``invoke(None)`` or a new input — then shows each call
        it dispatched answered (MAY have run) instead of running the tool again or handing the
        model an unanswered call. A turn of a live process, or of another host, is left alone;
        a turn with no recorded owner (an older saver's) too: ``repair`` or ``journal recover``
        answer it. So is a run that paused itself at an ``interrupt()`` (its head checkpoint
        holds the interrupt): it waits for a human and ran nothing when its process went."""
        if self.journal.readonly:
            return
        try:
            open_turn = self.journal.turn_state(session_id)
        except journal.SessionNotFound:
            return
        if open_turn is None or not owner_is_dead(open_turn.owner):
            return
        if not self._paused(session_id):
            self.journal.recover(session_id)

    def _paused(self, session_id: str) -> bool:
        """Whether the thread's head checkpoint has a pending ``interrupt()`` write: the graph
        stopped there on purpose (``Command(resume=...)`` continues it)."""
        history = _History(self.journal, session_id)
        head = self._head(session_id, history)
        if head is None:
            return False
        # From where the head's writes may start (under "async" an interrupt can be stored
        # before the head's own record).
        writes = self.journal.events(session_id, since=history.writes_since(head), types=[WRITE])
        at_head = [w.data for w in writes if w.data.get("ns") == "" and w.data.get("checkpoint_id") == head.data["id"]]
        # ``Command(resume=...)`` stores its resume under the null task as the next run starts:
        # one stored after the last interrupt means that run went on (a process that died then
        # died inside the resumed node, not at the pause). A task's own resume write is no sign:
        # a task that pauses again stores it beside its new interrupt.
        marks = [
            d["channel"]
            for d in at_head
            if d["channel"] == INTERRUPT or (d["channel"] == RESUME and d["task_id"] == NULL_TASK_ID)
        ]
        return bool(marks) and marks[-1] == INTERRUPT

    def _threads(self) -> Iterator[tuple[str, str]]:
        """Every LangGraph thread of the file, as ``(thread id, session id)``."""
        after = None
        while True:
            page = self.journal.sessions(limit=500, after=after, meta={"adapter": META_ADAPTER})
            for session in page:
                yield str((session.meta or {}).get("thread_id", session.id)), session.id
            if len(page) < 500:
                return
            after = page[-1]

    # -- reads -----------------------------------------------------------------------------------

    def _hidden(self, session_id: str) -> set[tuple[str, str]]:
        """The checkpoints ``prune`` and ``delete_for_runs`` took away, as ``(namespace, id)``."""
        return {(ns, cid) for e in self.journal.events(session_id, types=[DELETE]) for ns, cid in e.data["checkpoints"]}

    def _writes(self, session_id: str, since: int) -> dict[tuple[str, str], list[tuple[str, str, Any]]]:
        """Pending writes stored after seq ``since``, by ``(namespace, checkpoint id)``, each
        list in ``writes_sort_key`` order; of two special writes of a task the later wins."""
        chosen: dict[tuple[str, str], dict[tuple[str, int], dict[str, Any]]] = {}
        for event in self.journal.events(session_id, since=since, types=[WRITE]):
            d = event.data
            chosen.setdefault((d["ns"], d["checkpoint_id"]), {})[(d["task_id"], d["idx"])] = d
        return {
            where: [
                (d["task_id"], d["channel"], self.serde.loads_typed(_unb64(d["value"])))
                for d in sorted(found.values(), key=lambda d: (d["task_path"], d["task_id"], d["idx"]))
            ]
            for where, found in chosen.items()
        }

    def _decoded(self, data: dict[str, Any], field: str) -> Any:
        """A field of a checkpoint record: plain JSON, or serde's bytes when it was not JSON."""
        if field in data:
            return data[field]
        return self.serde.loads_typed(_unb64(data[field + "_typed"]))

    def _tuple(
        self,
        thread_id: str,
        session_id: str,
        event: journal.Event,
        writes: list[tuple[str, str, Any]],
        history: _History | None = None,
    ) -> tuple[CheckpointTuple, builtins.list[Any]]:
        """The stored checkpoint and the messages projected into it: for the thread's head
        (``history`` given: the newest root checkpoint), what recovery wrote (``_project``)."""
        data = event.data
        ns = data["ns"]
        checkpoint = dict(self._decoded(data, "checkpoint"))
        keys = {
            _value_key(ns, channel, version): channel for channel, version in checkpoint["channel_versions"].items()
        }
        stored = self.journal.state(session_id, keys=list(keys)) if keys else {}
        values = {}
        for key, blob in stored.items():
            kind, payload = _unpack(blob)
            version = str(checkpoint["channel_versions"][keys[key]])
            read: delta.Stored | None = None
            if kind == delta.KIND:
                read = self._rebuilt(session_id, ns, keys[key], version, payload)
                kind, payload = delta.SERDE, delta.array(read.count, read.body)
            if kind != "empty":
                values[keys[key]] = self.serde.loads_typed((kind, payload))
            if history is not None and keys[key] == self.messages_channel:
                # The head's list as read: the base the next version is stored as a delta of.
                remembered = read if read is not None else delta.whole(version, kind, payload)
                if remembered is not None:
                    self._lists[(session_id, ns, keys[key])] = remembered
        checkpoint["channel_values"] = values
        parent = data.get("parent_id")
        added: builtins.list[Any] = []
        if history is not None:
            writes, added = self._project(session_id, history, event, checkpoint, writes)
            self._lift(thread_id, session_id, history, event, checkpoint)
        found = CheckpointTuple(
            config=_config(thread_id, ns, checkpoint["id"]),
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=self._decoded(data, "metadata"),
            parent_config=_config(thread_id, ns, parent) if parent else None,
            pending_writes=writes,
        )
        return found, added

    def _lift(
        self, thread_id: str, session_id: str, history: _History, event: journal.Event, checkpoint: dict[str, Any]
    ) -> None:
        """The exchange of a subgraph that ran from this head (the root's, or a subgraph's: the
        namespace one level below) and died under it (a tool inside it killed: its head in its
        namespace reads with the journal's answers; or no live run goes on), shown in this
        head's messages too, after them, each subgraph's in turn: LangGraph's parent holds a
        subgraph's messages only once it returns, so a new input or a replay of the root would
        hand the model the thread without the call and its answer, and a model asking again
        would pay again. The subgraph's head is read the same way (``_tuple``), so the exchange
        of a subgraph inside it comes up through it. Only a subgraph whose messages go on from
        its parent's (the same messages, by id: a subgraph node sharing the ``messages``) is
        shown so; ``invoke(None)`` resumes it and its return replaces the same messages
        (``add_messages`` matches ids)."""
        channel = self.messages_channel
        if channel is None or not isinstance(messages := checkpoint["channel_values"].get(channel), builtins.list):
            return
        root, here = messages, event.data["ns"]
        below = f"{here}|" if here else ""  # the prefix of a namespace one level below this one
        live: bool | None = None  # whether a live process drives the thread's turn
        heads: dict[str, journal.Event] = {}  # each subgraph namespace's newest checkpoint since
        hidden: set[tuple[str, str]] | None = None
        for newer in history:
            if newer.seq <= event.seq:
                break
            ns = newer.data["ns"]
            if ns.startswith(below) and ns != here and "|" not in ns[len(below) :] and ns not in heads:
                hidden = self._hidden(session_id) if hidden is None else hidden
                if (ns, newer.data["id"]) not in hidden:
                    heads[ns] = newer
        for ns, head in heads.items():
            if self._decoded(head.data, "metadata").get("parents", {}).get(here) != checkpoint["id"]:
                continue
            writes = self._writes(session_id, history.writes_since(head)).get((ns, head.data["id"]), [])
            shown, added = self._tuple(thread_id, session_id, head, writes, history)
            if not added:  # nothing recovery answered in it: lifted only when no live run goes on
                if live is None:
                    live = self.journal.turn_state(session_id) is not None
                if live:
                    continue
            inner = shown.checkpoint["channel_values"].get(channel)
            ids = [getattr(m, "id", None) for m in root]
            if not isinstance(inner, builtins.list) or None in ids:
                continue
            if [getattr(m, "id", None) for m in inner[: len(root)]] != ids:
                continue  # not the root's messages gone on: a subgraph of a state of its own
            known = {getattr(m, "id", None) for m in messages}
            lifted = inner[len(root) :]
            if any(getattr(m, "id", None) is None for m in lifted):
                continue  # a message without an id would be a second copy once the subgraph returns
            messages = [*messages, *(m for m in lifted if m.id not in known)]
        if len(messages) > len(root):
            checkpoint["channel_values"][channel] = messages
            self._made(session_id, here, checkpoint, [channel])  # as ``_project`` does: a child names it

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (its ``checkpoint_id``), or the thread's latest in
        the namespace: the newest ``x.langgraph.checkpoint`` event, read newest first. The
        thread's head shows what recovery wrote (``_project``)."""
        return self._get(config)[0]

    def _get(self, config: RunnableConfig) -> tuple[CheckpointTuple | None, builtins.list[Any]]:
        configurable = config["configurable"]
        thread_id, ns = str(configurable["thread_id"]), configurable.get("checkpoint_ns", "")
        wanted = get_checkpoint_id(config)
        session_id = session_id_for(thread_id)
        if ns == "":
            # Any read of the thread, of its head or of a checkpoint named by id (a run from the
            # head's own config), recovers a dead process's turn first, as ``list`` does.
            self._recover_dead(session_id)
        try:
            hidden = self._hidden(session_id)
            history = _History(self.journal, session_id)
            head = True  # no newer checkpoint of the namespace seen yet
            folded: set[tuple[str, str]] = set()  # checkpoints a child was built on folded
            for event in history:
                found = (event.data["ns"], event.data["id"])
                if found[0] == ns and found not in hidden and (wanted is None or found[1] == wanted):
                    writes = self._writes(session_id, history.writes_since(event)).get(found, [])
                    shown = head or found in folded
                    return self._tuple(thread_id, session_id, event, writes, history if shown else None)
                head = head and (found[0] != ns or found in hidden)
                if event.data.get("folded_parent") and event.data.get("parent_id"):
                    folded.add((found[0], event.data["parent_id"]))
        except journal.SessionNotFound:
            pass
        return None, []

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of the thread of ``config`` (of its namespace if it names
        one, of one checkpoint if it names one) or of every thread; ``filter`` keeps those whose
        metadata has these entries, ``before`` those older than its checkpoint id."""
        configurable = (config or {}).get("configurable", {})
        threads = (
            [(str(configurable["thread_id"]), session_id_for(configurable["thread_id"]))]
            if "thread_id" in configurable
            else list(self._threads())
        )
        before_id = get_checkpoint_id(before) if before else None
        left = limit
        for thread_id, session_id in threads:
            if left is not None and left <= 0:
                return
            self._recover_dead(session_id)  # the head is read as get_tuple reads it
            history = _History(self.journal, session_id)
            try:
                chosen = self._select(session_id, history, configurable, filter or {}, before_id, left)
            except journal.SessionNotFound:
                continue
            if not chosen:
                continue
            writes = self._writes(session_id, min(history.writes_since(e) for e in chosen))
            heads = {ns: self._head(session_id, history, ns) for ns in {e.data["ns"] for e in chosen}}
            folded = set()  # checkpoints a child was built on folded: the children are newer
            for e in history:
                if e.data.get("folded_parent"):
                    folded.add((e.data["ns"], e.data["parent_id"]))
                if e is chosen[-1]:
                    break
            for event in chosen:
                found = writes.get((event.data["ns"], event.data["id"]), [])
                shown = event is heads[event.data["ns"]] or (event.data["ns"], event.data["id"]) in folded
                yield self._tuple(thread_id, session_id, event, found, history if shown else None)[0]
            if left is not None:
                left -= len(chosen)

    def _rebuilt(self, session_id: str, ns: str, channel: str, version: str, row: bytes) -> delta.Stored:
        """A list stored as a delta (``langgraph_delta``) read back from its chain: one more
        state read, of the chain's rows."""
        chain, count, tail, place = delta.read_delta(row)
        keys = [_value_key(ns, channel, earlier) for earlier in chain]
        rows = self.journal.state(session_id, keys=keys)
        tails = [delta.read_delta(_unpack(rows[key])[1])[2] for key in keys[1:]]
        return delta.remembered(version, count, chain, _unpack(rows[keys[0]])[1], [*tails, tail], place)

    def _head(self, session_id: str, history: _History, ns: str = "") -> journal.Event | None:
        """The thread's head in a namespace (the root's by default): its newest checkpoint there
        not hidden, the one a run (of the graph, or of the subgraph) builds on."""
        hidden = self._hidden(session_id)
        return next((e for e in history if e.data["ns"] == ns and (ns, e.data["id"]) not in hidden), None)

    def _project(
        self,
        session_id: str,
        history: _History,
        event: journal.Event,
        checkpoint: dict[str, Any],
        writes: builtins.list[tuple[str, str, Any]],
    ) -> tuple[builtins.list[tuple[str, str, Any]], builtins.list[Any]]:
        """Show in the head checkpoint what recovery wrote (``langgraph_projection``): the answers
        of its unanswered tool calls in the messages channel, and the pending tool node's task as
        finished. Changes ``checkpoint`` in place; returns the pending writes to show and the
        answers added."""
        channel = self.messages_channel
        values = checkpoint["channel_values"]
        messages = values.get(channel) if channel is not None else None
        if not isinstance(messages, builtins.list):
            return writes, []
        owed = projection.unanswered(messages)
        if not owed:
            return writes, []
        saved = {m.tool_call_id: m for _task, ch, value in writes if ch == channel for m in _tool_messages(value)}
        for message in saved.values():
            if getattr(message, "id", None) is None:
                # An answer a task stored without an id gets one here, a function of its call:
                # every copy of it a read shows (in the values, in the pending writes, in the root
                # that a subgraph's exchange is lifted into, in the subgraph's own return) is then
                # the same message to ``add_messages``, never a second answer with a fresh id.
                message.id = SAVED_ID + str(message.tool_call_id)
        results = _journal_results(self.journal, session_id, set(owed) - set(saved))
        answered = projection.answer(messages, saved, results)
        if answered is None:
            return writes, []
        values[channel], added = answered
        assert channel is not None
        # The answered list under a version of its own: a child checkpoint that does not write
        # the channel (a new input's, LangGraph's first of a run) names it, and stores it (``put``),
        # so that checkpoint reads back answered too, not as the stored list before recovery.
        self._made(session_id, event.data["ns"], checkpoint, [channel])
        metadata = self._decoded(event.data, "metadata")
        step = int(metadata.get("step", -1)) + 1
        # The tasks that run the answered calls next: one per ``Send`` of a call (a prebuilt
        # agent's tool node, one task per call), else the one tool node the edges trigger.
        tasks = _sent_tasks(checkpoint, step, added)
        node = None
        if not tasks:
            nodes = projection.pending_nodes(checkpoint, values)
            task_id = _task_id(checkpoint, nodes[0], step) if len(nodes) == 1 else None
            tasks = [] if task_id is None else [(task_id, added)]
            node = nodes[0] if tasks else None
        # The tool tasks read as run in the head itself (``_fold``): one that finished (its answers
        # are the writes it stored) and one that stopped without finishing -- it raised (its error
        # write), or paused at ``interrupt()`` and was resumed, or recovered, after it -- alike:
        # their writes and a resume waiting for them go, and no path, a replay from the head's own
        # config included, runs the tool again; what a finished one wrote besides its answers
        # (a state update, a ``goto``) stays, as the head's null writes. When the records do not
        # tell which node asked, a finished task's writes are left for LangGraph to apply, and a
        # stopped task shows the journal's answers as its pending writes.
        asked = next(i for i, m in enumerate(messages) if owed[0] in {c.get("id") for c in _calls_of(m)})
        asker = getattr(messages[asked], "id", None)
        back_to = self._asker(session_id, history, event, asked, asker) if tasks else None
        ran = {task_id for task_id, _answers in tasks}
        if back_to is not None:
            # A finished task's writes of its own (a ``Command(update=..., goto=...)``: state
            # besides its answers, a node to go to besides the one that asked) are LangGraph's
            # null writes of the folded head, applied, as LangGraph applies those, before the
            # next step (by every run from it, a replay included) and in ``get_state``: the state
            # the tool made holds, and no run pays for it again.
            own = [
                (NULL_TASK_ID, w[1], w[2])
                for w in writes
                if w[0] in ran and w[1] not in (channel, *WRITES_IDX_MAP, projection.BRANCH + back_to)
            ]
            # Of its messages, those besides the answers the read placed (a note after its answer):
            # after them, in the order it wrote them.
            shown = {m.tool_call_id for m in added}
            for task_id, ch, value in writes:
                if task_id in ran and ch == channel:
                    rest = [
                        m
                        for m in _listed(value)
                        if not (getattr(m, "type", None) == "tool" and getattr(m, "tool_call_id", None) in shown)
                    ]
                    if rest:
                        own.append((NULL_TASK_ID, channel, rest))
            writes = [w for w in writes if w[0] not in ran and not (w[0] == NULL_TASK_ID and w[1] == RESUME)]
            packets = enumerate(checkpoint["channel_values"].get(TASKS) or ())
            sent = {i for i, p in packets if _task_id(checkpoint, getattr(p, "node", ""), step, push=i) in ran}
            self._fold(session_id, event.data["ns"], checkpoint, node, sent, back_to)
            return [*writes, *own], added
        finished = {w[0] for w in writes if w[1] not in WRITES_IDX_MAP}
        tasks = [(task_id, answers) for task_id, answers in tasks if task_id not in finished]
        stopped = {task_id for task_id, _answers in tasks}
        writes = [w for w in writes if w[0] not in stopped and not (w[0] == NULL_TASK_ID and w[1] == RESUME)]
        for task_id, answers in tasks:
            writes = [*writes, *projection.projected_writes(task_id, channel, answers, back_to)]
        return writes, added

    def _fold(
        self, session_id: str, ns: str, checkpoint: dict[str, Any], node: str | None, sent: set[int], back_to: str
    ) -> None:
        """Show the tool tasks as run in ``checkpoint`` itself (their answers are in the messages
        already): the tool ``node`` has seen its trigger, the ``Send`` packets at the
        places ``sent`` are consumed, and the edge back to the node that asked holds a value. So
        the head reads as the step after the tools (``next`` is the asking node) with no pending
        task, and a run from it -- ``invoke(None)``, a new input, or the head's own config, which
        LangGraph replays (it runs a pending task again, whatever its stored writes) -- goes on at
        that node. The versions made are a function of the checkpoint (every read shows the same),
        above all of its own, and kept for ``put`` of the child that still names them."""
        values = checkpoint["channel_values"]
        seen = {name: dict(channels) for name, channels in checkpoint.get("versions_seen", {}).items()}
        if node is not None:
            trigger = projection.BRANCH + node
            seen.setdefault(node, {})[trigger] = checkpoint["channel_versions"][trigger]
        checkpoint["versions_seen"] = seen
        changed = []
        if sent:
            left = [p for i, p in enumerate(values.get(TASKS) or ()) if i not in sent]
            values.pop(TASKS, None)
            if left:
                values[TASKS] = left
            changed.append(TASKS)
        edge = projection.BRANCH + back_to
        values[edge] = None
        changed.append(edge)
        self._made(session_id, ns, checkpoint, changed)
        if checkpoint.get("updated_channels"):  # the channels whose nodes LangGraph considers next
            checkpoint["updated_channels"] = sorted({*checkpoint["updated_channels"], *changed})

    def _made(self, session_id: str, ns: str, checkpoint: dict[str, Any], channels: builtins.list[str]) -> None:
        """Give ``channels`` (whose values a read changed in ``checkpoint``) new versions, each
        a function of the checkpoint and the channel (every read shows the same), above all of
        its own, and keep them for ``put`` of the child that still names them."""
        versions = dict(checkpoint["channel_versions"])
        top = max((int(str(v).split(".")[0]) for v in versions.values()), default=0)
        new = self._folded.setdefault((session_id, ns, str(checkpoint["id"])), {})
        for channel in channels:
            digest = hashlib.sha256(f"{checkpoint['id']}\x00{channel}".encode()).hexdigest()
            versions[channel] = new[channel] = f"{top + 1:032}.{int(digest[:13], 16):016}"
        checkpoint["channel_versions"] = versions

    def _asker(
        self, session_id: str, history: _History, event: journal.Event, index: int, message_id: str | None
    ) -> str | None:
        """The node that asked for the calls of the ``AIMessage`` (``message_id``) at ``index``
        of the messages: the one that ran in the step whose checkpoint first holds it (its
        parent's record counts fewer messages), however many nodes ran after it (a human review
        between the model and the tools); of several nodes that ran in that step (a ``goto`` of
        an earlier tool's beside the model), the one whose task wrote the message. ``None`` when
        the records do not tell."""
        record = event
        while (parent_id := record.data.get("parent_id")) is not None:
            ns = record.data["ns"]
            parent = next((e for e in history if e.data["ns"] == ns and e.data["id"] == parent_id), None)
            if parent is None:
                return None
            if (parent.data.get("messages_mirrored") or [0])[0] <= index:
                before = self._decoded(parent.data, "checkpoint")
                ran = projection.ran_nodes(self._decoded(record.data, "checkpoint"), before)
                if len(ran) < 2 or message_id is None:
                    return ran[0] if len(ran) == 1 else None
                step = int(self._decoded(parent.data, "metadata").get("step", -1)) + 1
                writes = self._writes(session_id, history.writes_since(parent)).get((ns, parent_id), [])
                wrote = {
                    task
                    for task, channel, value in writes
                    if channel == self.messages_channel
                    and any(getattr(m, "id", None) == message_id for m in _listed(value))
                }
                askers = [node for node in ran if _task_id(before, node, step) in wrote]
                return askers[0] if len(askers) == 1 else None
            record = parent
        return None

    def _select(
        self,
        session_id: str,
        history: _History,
        configurable: dict[str, Any],
        filter: dict[str, Any],
        before_id: str | None,
        limit: int | None,
    ) -> builtins.list[journal.Event]:
        hidden = self._hidden(session_id)
        chosen: builtins.list[journal.Event] = []
        for event in history:
            ns, cid = event.data["ns"], event.data["id"]
            if (ns, cid) in hidden:
                continue
            if "checkpoint_ns" in configurable and ns != configurable["checkpoint_ns"]:
                continue
            if configurable.get("checkpoint_id") and cid != configurable["checkpoint_id"]:
                continue
            if before_id is not None and not cid < before_id:
                continue
            if filter:
                metadata = self._decoded(event.data, "metadata")
                if not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
            chosen.append(event)
            if limit is not None and len(chosen) >= limit:
                break
        return chosen

    # -- writes ----------------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint in one transaction: its record as an event, the channels whose
        version changed as keyed state, and (root namespace) the typed events of new messages."""
        configurable = config["configurable"]
        thread_id, ns = str(configurable["thread_id"]), configurable.get("checkpoint_ns", "")
        parent = configurable.get("checkpoint_id")
        session_id = session_id_for(thread_id)
        self._ensure(session_id, thread_id)
        record = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        data: dict[str, Any] = {"ns": ns, "id": checkpoint["id"], "parent_id": parent}
        data.update(self._field("checkpoint", record))
        data.update(self._field("metadata", get_serializable_checkpoint_metadata(config, metadata)))
        values = checkpoint["channel_values"]
        channel = self.messages_channel
        if channel is not None and channel not in checkpoint["channel_versions"] and values:
            self._warn_elsewhere(values)
        if channel is not None and isinstance(values.get(channel), builtins.list):
            kept = projection.superseded(values[channel])
            if kept is not None:  # an answer given after the one a read showed: it replaces it
                values = {**values, channel: kept}
        state: dict[str, Any] = {}
        lists: dict[tuple[str, str, str], delta.Stored | None] = {}
        for channel, version in new_versions.items():
            if channel not in values:
                continue
            typed = self.serde.dumps_typed(values[channel])
            row = None
            if channel == self.messages_channel and type(values[channel]) is builtins.list:
                where = (session_id, ns, channel)
                row, lists[where] = delta.extend(self._lists.get(where), str(version), typed[0], bytes(typed[1]))
            state[_value_key(ns, channel, version)] = _pack((delta.KIND, row) if row is not None else typed)
        folded = self._folded.get((session_id, ns, str(parent)))
        if folded is not None:
            data["folded_parent"] = True  # the parent reads folded at every read (``_get``, ``list``)
        for channel, version in (folded or {}).items():
            # A version a read made (``_made``) that this child still names: stored with it.
            named = checkpoint["channel_versions"].get(channel) == version
            if named and channel not in new_versions and channel in values:
                state[_value_key(ns, channel, version)] = _pack(self.serde.dumps_typed(values[channel]))
        native = (CHECKPOINT, data, _key("lg.c", ns, checkpoint["id"]))
        origin = metadata.get("parents", {}).get("") if ns else None
        asked = {"ns": ns, "from": str(origin)} if origin else None
        derived, turn_state = self._mirror(session_id, ns, parent, values, new_versions, data, asked)
        try:
            self._append(session_id, thread_id, [native, *derived], {**state, **turn_state})
        except _MIRROR_ERRORS as exc:
            if not derived:
                raise
            log.warning("journal: the typed events of checkpoint %s were not written: %s", checkpoint["id"], exc)
            data.pop("messages_mirrored", None)
            self._append(session_id, thread_id, [native], state)
        for where, stored in lists.items():  # only once stored: a delta names versions that exist
            if stored is None:
                self._lists.pop(where, None)
            else:
                self._lists[where] = stored
        return _config(thread_id, ns, checkpoint["id"])

    def _warn_elsewhere(self, values: dict[str, Any]) -> None:
        """Warn once when the graph keeps its messages in another channel than the one named:
        they get no typed events, so no dispatch barrier and no recovery is shown."""
        for name, value in values.items():
            if name in self._warned or not isinstance(value, builtins.list) or not value:
                continue
            if all(getattr(m, "type", None) in ("human", "ai", "tool", "system", "AIMessageChunk") for m in value):
                self._warned.add(name)
                log.warning(
                    "journal: the graph keeps its messages in channel %r, not %r: its tool calls get no "
                    "dispatch barrier and no recovery; pass JournalSaver(..., messages_channel=%r)",
                    name,
                    self.messages_channel,
                    name,
                )

    def _field(self, name: str, value: Any) -> dict[str, Any]:
        """``{name: value}`` when the value is plain JSON (readable in ``journal show``), else
        ``{name_typed: [serde type, base64]}``."""
        return {name: value} if _is_json(value) else {f"{name}_typed": _b64(self.serde.dumps_typed(value))}

    def _mirror(
        self,
        session_id: str,
        ns: str,
        parent: str | None,
        values: dict[str, Any],
        new_versions: ChannelVersions,
        data: dict[str, Any],
        asked: dict[str, str] | None = None,
    ) -> tuple[builtins.list[Any], dict[str, Any]]:
        """The typed events of the messages this checkpoint adds (those after the prefix the
        journal holds, ``_mirrored``), and the turn counter's new state. Each record notes how
        many messages its checkpoint holds, all of them derived by then, for its child's put."""
        channel = self.messages_channel
        messages = values.get(channel) if channel is not None else None
        if not isinstance(messages, list):
            return [], {}
        if messages:
            data["messages_mirrored"] = [len(messages), _ident(messages[-1], len(messages) - 1)]
        if channel not in new_versions:
            return [], {}
        start = self._mirrored(session_id, ns, parent, messages)
        if ns != "":
            self._nested.add(session_id)
        nested = session_id in self._nested
        if start >= len(messages):
            if ns == "" and nested and _settled(messages):
                return self._end_held(session_id, messages), {}
            return [], {}
        open_turn = self.journal.turn_state(session_id)
        counter = self.journal.state(session_id, keys=[_TURN_KEY]).get(_TURN_KEY) or {"turn": 0, "steps": 0}
        if open_turn is not None:
            steps = counter["steps"] if counter["turn"] == open_turn.turn else open_turn.steps
            turn = _Turn(True, open_turn.turn or counter["turn"], steps, asked)
            if asked is not None and any(_ends(m) for m in messages[start:]):
                turn.owed = _owed_beside(self.journal, session_id, open_turn.start_seq, asked)
        else:
            turn = _Turn(False, counter["turn"], 0, asked)
        before = (turn.open, turn.number, turn.steps)
        # A parent's copy of what its subgraphs derived (a middle subgraph's, the root's): those
        # messages are the journal's already, and their turn's start and end with them; derived
        # again, a call's turn_start would open a turn that its answer's (stored) end never closes.
        held = self._held(session_id, messages, start) if nested else frozenset()
        items = _derive(messages, start, turn, held)
        opened = any(kind == "turn_start" for kind, _data, _key in items)
        if ns == "" and nested and turn.open and not opened and _settled(messages):
            items.extend(self._end_held(session_id, messages))
            turn.open = False
        changed = before != (turn.open, turn.number, turn.steps)
        return items, ({_TURN_KEY: {"turn": turn.number, "steps": turn.steps}} if changed else {})

    def _held(self, session_id: str, messages: builtins.list[Any], start: int) -> frozenset[int]:
        """The places in ``messages[start:]`` of the messages the journal holds already (by their
        keys, among its newest typed messages)."""
        wanted = {_key("lg.m", _ident(m, i)): i for i, m in enumerate(messages[start:], start)}
        recent = self.journal.events(session_id, types=_SURFACE, newest_first=True, limit=256)
        return frozenset(wanted[e.key] for e in recent if e.key in wanted)

    def _end_held(self, session_id: str, messages: builtins.list[Any]) -> builtins.list[Any]:
        """At a root checkpoint, every subgraph of the step has returned: when the root's
        messages owe no call (``_settled``), the turns subgraphs left open end (one a subgraph's
        answer left open while a subgraph beside it owed calls, ``_owed_beside``, and that one
        then dropped them; two side by side may each have opened one), innermost first, each
        ``turn_end`` keyed by the root's last message and the turn."""
        ident = _ident(messages[-1], len(messages) - 1)
        ends: builtins.list[Any] = []
        for start in reversed(self.journal.open_turns(session_id)):
            row = self.journal.turn_state(session_id, start.seq)
            end = {"turn": start.data.get("turn"), "steps": row.steps if row is not None else 0, "reason": "complete"}
            ends.append(("turn_end", end, _key("lg.te", ident, str(start.seq))))
        return ends

    def _mirrored(self, session_id: str, ns: str, parent: str | None, messages: builtins.list[Any]) -> int:
        """How many of ``messages`` (a prefix) the journal holds already: as the parent
        checkpoint's record says (one index seek), else up to the newest one the journal holds
        (a branch, a fork, a parent further back), found by the keys of the latest messages."""
        if parent is not None:
            for event in self.journal.events(session_id, types=[CHECKPOINT], newest_first=True, limit=16):
                if event.data["ns"] == ns and event.data["id"] == parent:
                    if "messages_mirrored" not in event.data:
                        if ns == "":
                            return 0  # the parent had no messages
                        break  # a subgraph's input: the messages it was given may be held already
                    count: int
                    count, last = event.data["messages_mirrored"]
                    if 0 < count <= len(messages) and _ident(messages[count - 1], count - 1) == last:
                        return self._held_after(session_id, ns, messages, count)
                    break
        found = self._held(session_id, messages, 0)
        return max(found) + 1 if found else 0

    def _held_after(self, session_id: str, ns: str, messages: builtins.list[Any], count: int) -> int:
        """``count``, or past it when a subgraph (a namespace of the thread below this one) has
        derived later messages of the list already, as it does for the messages it returns: up
        to the newest message the journal holds (by its key; read only once this saver derived a
        subgraph's messages for the thread)."""
        if ns != "" or count >= len(messages) or session_id not in self._nested:
            return count
        newest = self.journal.events(session_id, types=_SURFACE, newest_first=True, limit=1)
        later = {_key("lg.m", _ident(m, i)): i for i, m in enumerate(messages[count:], count)}
        return later[newest[0].key] + 1 if newest and newest[0].key in later else count

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes, each once per (checkpoint, task, index) through append keys; a
        ``ToolMessage`` written to the root messages channel is a ``tool_result`` at once."""
        configurable = config["configurable"]
        thread_id, ns = str(configurable["thread_id"]), configurable.get("checkpoint_ns", "")
        checkpoint_id = str(configurable["checkpoint_id"])
        session_id = session_id_for(thread_id)
        special = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        items: builtins.list[Any] = []
        derived: builtins.list[Any] = []
        for index, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, index)
            data = {
                "ns": ns,
                "checkpoint_id": checkpoint_id,
                "task_id": task_id,
                "task_path": task_path,
                "idx": idx,
                "channel": channel,
                "value": _b64(self.serde.dumps_typed(value)),
            }
            # Special writes replace an earlier one (the reader keeps the last): no key.
            items.append((WRITE, data, None if special else _key("lg.w", ns, checkpoint_id, task_id, idx)))
            if channel == self.messages_channel:
                for message in _tool_messages(value):
                    mid = getattr(message, "id", None)
                    derived.append(("tool_result", _result(message), _key("lg.m", mid) if mid else None))
        try:
            self._append(session_id, thread_id, items + derived, {})
        except _MIRROR_ERRORS as exc:
            if not derived:
                raise
            log.warning("journal: the tool results of task %s were not written as typed events: %s", task_id, exc)
            self._append(session_id, thread_id, items, {})

    def delete_thread(self, thread_id: str) -> None:
        """Erase the thread: ``purge`` of its session (a copy keeps its own copy of the events)."""
        session_id = session_id_for(thread_id)
        self._known.discard(session_id)
        for where in [w for w in self._lists if w[0] == session_id]:
            del self._lists[where]
        try:
            self.journal.purge(session_id, copy_forks=True)
        except journal.SessionNotFound:
            pass

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """The target thread as a ``fork`` of the source's session: it reads the source's events
        through it (O(1) in their number) and gets a copy of the keyed state.

        A turn a dead process of this host left open in the source is recovered first, as a read
        of its head would be (the copy's head then holds the calls answered). A source with a turn
        still open (a run in flight, another host's, or an older saver's without owner) is
        forked before that turn — a fork never inherits half a turn (G11) — and the LangGraph
        events after it are copied, without their typed events. A missing source copies nothing;
        an existing target raises ``SessionExists``."""
        source, target = session_id_for(source_thread_id), session_id_for(target_thread_id)
        meta = {"adapter": META_ADAPTER, "thread_id": str(target_thread_id)}
        # A turn its dead process left open is recovered first, as a read of the source would: the
        # copy then holds the calls answered, instead of a head whose calls it would run again.
        self._recover_dead(source)
        try:
            self.journal.fork(source, id=target, meta=meta)
        except journal.SessionNotFound:
            return
        except journal.OpenTurnError as exc:
            if exc.seq > 0:
                self.journal.fork(source, at=exc.seq - 1, id=target, meta=meta)
            else:
                self.journal.create_session(target, meta=meta)
            later = self.journal.events(source, since=exc.seq, types=[CHECKPOINT, WRITE, DELETE])
            have = set(self.journal.state(target))
            state = {k: v for k, v in self.journal.state(source).items() if k not in have}
            self.journal.append_many(target, [(e.type, e.data, e.key) for e in later], state=state or None)
        self._known.add(target)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Hide every checkpoint whose metadata names one of ``run_ids`` (and with it its
        writes), in every thread: an ``x.langgraph.delete`` event each. Reads every thread's
        checkpoint records, as LangGraph's SQLite saver reads its whole table."""
        runs = set(run_ids)
        if not runs:
            return
        for _thread_id, session_id in list(self._threads()):
            hidden = self._hidden(session_id)
            gone = [
                [e.data["ns"], e.data["id"]]
                for e in self.journal.events(session_id, types=[CHECKPOINT])
                if (e.data["ns"], e.data["id"]) not in hidden
                and self._decoded(e.data, "metadata").get("run_id") in runs
            ]
            if gone:
                self.journal.append(session_id, DELETE, {"checkpoints": gone, "reason": "delete_for_runs"})

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: hide all but each namespace's latest checkpoint (an
        ``x.langgraph.delete`` event; the bytes stay, G3). ``delete``: ``delete_thread``."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f'strategy must be "keep_latest" or "delete", not {strategy!r}')
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            session_id = session_id_for(thread_id)
            try:
                hidden = self._hidden(session_id)
                events = list(_History(self.journal, session_id))
            except journal.SessionNotFound:
                continue
            kept: set[str] = set()
            gone = []
            for event in events:
                ns, cid = event.data["ns"], event.data["id"]
                if (ns, cid) in hidden:
                    continue
                if ns in kept:
                    gone.append([ns, cid])
                kept.add(ns)
            if gone:
                self.journal.append(session_id, DELETE, {"checkpoints": gone, "reason": "prune"})

    # -- the async twins: the sync calls in a worker thread -----------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy))


def _task_id(checkpoint: dict[str, Any], node: str, step: int, push: int | None = None) -> str | None:
    """The id LangGraph gives the task of ``node`` run from ``checkpoint`` at ``step`` (its
    pending writes are matched by it), computed as LangGraph's ``prepare_next_tasks`` does: the
    node's edge-triggered task, or (``push``) the one its ``Send`` at that index makes."""
    try:
        from langgraph.pregel._algo import _uuid5_str, _xxhash_str
    except ImportError:  # another LangGraph: then no task is shown finished (new input still works)
        return None
    func = _xxhash_str if checkpoint.get("v", 1) > 1 else _uuid5_str
    namespace = binascii.unhexlify(str(checkpoint["id"]).replace("-", ""))
    if push is not None:
        return func(namespace, node, str(step), node, "__pregel_push", str(push))
    return func(namespace, node, str(step), node, "__pregel_pull", f"branch:to:{node}")


def _calls_of(message: Any) -> builtins.list[dict[str, Any]]:
    """The tool calls of an ``AIMessage`` (none for any other message)."""
    calls = getattr(message, "tool_calls", None) if getattr(message, "type", None) in ("ai", "AIMessageChunk") else None
    return [c for c in calls or () if isinstance(c, dict)]


def _sent_tasks(checkpoint: dict[str, Any], step: int, answers: Sequence[Any]) -> builtins.list[tuple[str, list[Any]]]:
    """The tasks ``Send`` packets of ``checkpoint`` start, each with the answer to the tool call
    it carries (a ``ToolCallWithContext``, or the call itself), for the calls ``answers`` answer."""
    by_call = {getattr(m, "tool_call_id", None): m for m in answers}
    out: builtins.list[tuple[str, list[Any]]] = []
    for index, packet in enumerate(checkpoint["channel_values"].get(TASKS) or ()):
        arg, node = getattr(packet, "arg", None), getattr(packet, "node", None)
        call = arg.get("tool_call") if isinstance(arg, dict) and "tool_call" in arg else arg
        call_id = call.get("id") if isinstance(call, dict) else None
        if isinstance(node, str) and call_id in by_call:
            task_id = _task_id(checkpoint, node, step, push=index)
            if task_id is not None:
                out.append((task_id, [by_call[call_id]]))
    return out


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}


# -- repair after a crash ---------------------------------------------------------------------------


def repair(graph: Any, config: RunnableConfig, *, force: bool = False, tools_node: str | None = None) -> Repaired:
    """Make a thread whose run died answered, in LangGraph's own state (one shape: ``Repaired``).

    Runs the journal's one recovery for the thread (``recover(session_id, force=force)``: a
    dispatched call without a result gets a synthetic result saying it MAY have run, the open
    turn ends ``interrupted``; nothing when another recovery got there first, or when a live
    owner holds the turn: then ``live_owner`` is set and nothing is done). Then it reads the
    thread's head exactly as the next run will (the read already shows those answers) and, when
    that read added answers, stores them as a real checkpoint on that very head, as the graph's
    tool node — so every later read, fork or time travel holds them, and ``invoke(None)`` goes on
    at the node the graph's edges name. Idempotent; call it only for a thread whose run is not
    going on. The tool node is the graph's ``ToolNode``; ``tools_node`` names it only when the
    graph has several (``ToolNodeNotFound`` lists them)."""
    saver = _saver_of(graph)
    configurable = config.get("configurable") if isinstance(config, dict) else None
    if not isinstance(configurable, dict) or configurable.get("thread_id") in (None, ""):
        raise journal.InvalidArgument("config", 'must name the thread: {"configurable": {"thread_id": ...}}')
    thread_id = str(configurable["thread_id"])
    session_id = session_id_for(thread_id)
    where: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    channel = saver.messages_channel or "messages"
    if tools_node is not None and tools_node not in graph.nodes:
        raise ToolNodeNotFound(tuple(sorted(graph.nodes)), (), named=tools_node)
    head, added = saver._get(where)
    if head is not None and (added or _owed(head, channel)):
        _tool_node(graph, head, tools_node)  # a graph whose tool node is unclear is refused before any write
    try:
        (result,) = saver.journal.recover(session_id, force=force)
    except journal.SessionNotFound:
        return Repaired(session_id)
    if result.live_owner is not None:
        return Repaired(session_id, live_owner=result.live_owner)
    head, added = saver._get(where)  # exactly what the next run reads, recovery's answers projected
    if head is None:
        return Repaired(session_id, result.appended)
    unanswered = _owed(head, channel)
    if not added:
        # What is still unanswered has no result in the journal (a call awaiting a human, or one
        # it never heard of under durability="async"): shown as it is, never invented here.
        return Repaired(session_id, result.appended, unanswered=unanswered)
    if head.checkpoint["channel_values"].get(START) is not None:
        # A new input waits (the head is its first checkpoint): stored as the tool node, the
        # answers would send the graph back to the model and drop it. The input's step builds
        # on this very read, answers included, and stores them.
        return Repaired(session_id, result.appended, added=tuple(added), unanswered=unanswered)
    # Built on that very head (its config names it): the checkpoint the next step builds on
    # holds the answers, whatever the pending writes say. An answer that is the tool node's own
    # stored write is in the head's values already (or applied by LangGraph from its pending
    # writes): handed over again it would be a second ToolMessage for the call when it has no id
    # (add_messages matches ids). The journal's answers have theirs: handed over, they replace.
    stored = {
        m.tool_call_id for _task, ch, value in head.pending_writes or [] if ch == channel for m in _tool_messages(value)
    }
    fresh = [m for m in added if m.tool_call_id not in stored and str(m.id).startswith(projection.ANSWER_ID)]
    # The head's null writes (a finished tool's state of its own, as the read shows it; a
    # ``Command(update=...)`` given at a resume) are applied by a run, not by ``update_state``:
    # handed over with the answers, each as written, they are in the checkpoint made.
    null = [(ch, value) for task, ch, value in head.pending_writes or [] if task == NULL_TASK_ID and ch != RESUME]
    goto = [ch[len(projection.BRANCH) :] for ch, _value in null if ch.startswith(projection.BRANCH)]
    state = [(ch, value) for ch, value in null if not ch.startswith(projection.BRANCH)]
    update: Any = Command(update=[*state, (channel, fresh)], goto=goto) if null else {channel: fresh}
    graph.update_state(head.config, update, as_node=_tool_node(graph, head, tools_node))
    return Repaired(session_id, result.appended, added=tuple(added), unanswered=unanswered)


def _owed(head: CheckpointTuple, channel: str) -> tuple[str, ...]:
    messages = head.checkpoint["channel_values"].get(channel)
    return tuple(projection.unanswered(messages)) if isinstance(messages, list) else ()


async def arepair(
    graph: Any, config: RunnableConfig, *, force: bool = False, tools_node: str | None = None
) -> Repaired:
    """``repair``'s awaitable twin: the same work in a worker thread (the loop never waits on the file)."""
    return await asyncio.to_thread(lambda: repair(graph, config, force=force, tools_node=tools_node))


def _saver_of(graph: Any) -> JournalSaver:
    saver = getattr(graph, "checkpointer", None)
    if not isinstance(saver, JournalSaver):
        raise journal.InvalidArgument(
            "graph", f"must be compiled with a JournalSaver checkpointer, not {type(saver).__name__}"
        )
    return saver


def _tool_node(graph: Any, head: CheckpointTuple, named: str | None) -> str:
    """The graph's tool node: ``named`` (checked), else its one ``ToolNode``, else the one of
    several (or of none) that the head runs next."""
    from langgraph.prebuilt import ToolNode

    nodes = dict(graph.nodes)
    if named is not None:
        if named not in nodes:
            raise ToolNodeNotFound(tuple(sorted(nodes)), (), named=named)
        return named
    tools: list[str] = sorted(n for n, spec in nodes.items() if isinstance(getattr(spec, "bound", None), ToolNode))
    if len(tools) == 1:
        return tools[0]
    values = head.checkpoint["channel_values"]
    pending = projection.pending_nodes(head.checkpoint, values) + projection.folded_nodes(head.checkpoint, values)
    chosen = [n for n in pending if n in tools] if tools else pending
    if len(chosen) == 1:
        return chosen[0]
    raise ToolNodeNotFound(tuple(sorted(nodes)), tuple(tools or pending))


def _journal_results(j: journal.Journal, session_id: str, call_ids: set[str]) -> dict[str, dict[str, Any]]:
    """The stored ``tool_result`` of each of ``call_ids``, read from the end of the log (the
    calls are the thread's latest)."""
    if not call_ids:
        return {}
    found: dict[str, dict[str, Any]] = {}
    for event in j.events(session_id, types=["tool_result"], newest_first=True, limit=max(64, 4 * len(call_ids))):
        call_id = event.data.get("tool_call_id")
        if call_id in call_ids and call_id not in found:
            found[call_id] = event.data
    return found
